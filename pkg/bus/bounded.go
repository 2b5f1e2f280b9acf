package bus

import (
	"context"
	"sync"
	"time"
)

// Bounded is a context for a requester's requests: its parent's values,
// cancellation and deadline, or, when the parent has none, a deadline of
// its own a timeout away; Cancel ends it. It behaves as the
// context.WithTimeout (or, under a parent with a deadline, the
// context.WithCancel) it replaces, in one allocation instead of seven:
// a request's reply is awaited (inbox.next) on the parent's Done channel
// and a pooled timer rather than on a Done channel of its own, so the
// channel, the timer and the parent's hold on it are made only when
// something else asks for Done (a context derived from it, for one).
type Bounded struct {
	parent   context.Context
	deadline time.Time
	timed    bool // deadline is set: the parent's, or own
	own      bool // deadline is Bounded's own

	lazyDone
	parentEnded bool          // err is the parent's (context.Cause asks it)
	stopParent  func() bool   // ends following the parent, once done is made
	timer       *time.Timer   // the own deadline's, once done is made
	waiter      chan struct{} // the signal of the inbox awaiting a reply on c's parts
}

// Bound returns a Bounded under parent: with parent's deadline when it has
// one, else with one timeout from now.
func Bound(parent context.Context, timeout time.Duration) *Bounded {
	c := new(Bounded)
	c.Init(parent, timeout)
	return c
}

// Init makes c, a zero Bounded, what Bound returns: for a Bounded that
// lives in a larger allocation of its user's.
func (c *Bounded) Init(parent context.Context, timeout time.Duration) {
	c.parent = parent
	if d, ok := parent.Deadline(); ok {
		c.deadline, c.timed = d, true
	} else {
		c.deadline, c.timed, c.own = time.Now().Add(timeout), true, true
	}
}

func (c *Bounded) Deadline() (time.Time, bool) { return c.deadline, c.timed }

func (c *Bounded) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armLocked()
	return c.done
}

func (c *Bounded) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checkLocked()
	return c.err
}

// Value is the parent's, except that context.Cause, asking for the
// context package's cancelCtx, finds none once c ended by itself (its
// deadline, Cancel) and then reports Err, as it would of the context
// WithTimeout makes; when the parent ended first, its cause is c's.
func (c *Bounded) Value(key any) any {
	if key == cancelCtxKey && cancelCtxKey != nil {
		c.mu.Lock()
		c.checkLocked()
		byItself := c.err != nil && !c.parentEnded
		c.mu.Unlock()
		if byItself {
			return nil
		}
	}
	return c.parent.Value(key)
}

// AfterFunc is context.AfterFunc for c (the context package's
// afterFuncer): a context derived from c follows it without a goroutine.
func (c *Bounded) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armLocked()
	return c.afterFuncLocked(f)
}

func (c *Bounded) String() string { return "bus.Bounded" }

// Cancel ends c with context.Canceled, unless it has ended already, and
// lets go of the parent and the timer either way.
func (c *Bounded) Cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseLocked()
	if c.err == nil {
		c.endLocked(context.Canceled, false)
	}
}

// armLocked makes the Done channel, closed already when c has ended, and
// otherwise follows the parent and arms the own deadline's timer.
func (c *Bounded) armLocked() {
	if c.done != nil {
		return
	}
	c.checkLocked()
	c.done = make(chan struct{})
	if c.err != nil {
		close(c.done)
		return
	}
	if c.parent.Done() != nil {
		c.stopParent = context.AfterFunc(c.parent, c.fromParent)
	}
	if c.own {
		c.timer = time.AfterFunc(time.Until(c.deadline), c.expire)
	}
}

// checkLocked ends c when its own deadline has passed or its parent has
// ended, which nothing reports while no Done channel is made.
func (c *Bounded) checkLocked() {
	switch {
	case c.err != nil:
	case c.own && !time.Now().Before(c.deadline):
		c.endLocked(context.DeadlineExceeded, false)
	default:
		if err := c.parent.Err(); err != nil {
			c.endLocked(err, true)
		}
	}
}

func (c *Bounded) fromParent() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.endLocked(c.parent.Err(), true)
	}
}

func (c *Bounded) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.endLocked(context.DeadlineExceeded, false)
	}
}

func (c *Bounded) endLocked(err error, parentEnded bool) {
	c.parentEnded = parentEnded
	c.releaseLocked()
	c.finishLocked(err)
	if c.waiter != nil {
		select {
		case c.waiter <- struct{}{}:
		default:
		}
	}
}

func (c *Bounded) releaseLocked() {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.stopParent != nil {
		c.stopParent()
		c.stopParent = nil
	}
}

// await prepares a wait for a reply on c's parts instead of on Done: the
// parent's Done channel and, when the deadline is c's own, a timer for it
// (release it with releaseTimer). Cancel wakes the waiter through signal,
// the inbox's own. ok is false when c has a Done channel already, has
// ended, or another wait is under way: the waiter then waits on Done.
func (c *Bounded) await(signal chan struct{}) (parentDone <-chan struct{}, expiry *time.Timer, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checkLocked()
	if c.done != nil || c.err != nil || c.waiter != nil {
		return nil, nil, false
	}
	c.waiter = signal
	if c.own {
		expiry = acquireTimer(time.Until(c.deadline))
	}
	return c.parent.Done(), expiry, true
}

// leave ends a wait await began.
func (c *Bounded) leave(expiry *time.Timer) {
	c.mu.Lock()
	c.waiter = nil
	c.mu.Unlock()
	if expiry != nil {
		releaseTimer(expiry)
	}
}

// timers are stopped timers for awaits, so that waiting on a deadline
// costs no allocation.
var timers sync.Pool

func acquireTimer(d time.Duration) *time.Timer {
	if t, _ := timers.Get().(*time.Timer); t != nil {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

func releaseTimer(t *time.Timer) {
	if !t.Stop() {
		// Fired: with the channel of Go 1.23's timers nothing is left in
		// it after Stop; with older semantics (GODEBUG asynctimerchan=1)
		// the value is taken here, not by the timer's next user.
		select {
		case <-t.C:
		default:
		}
	}
	timers.Put(t)
}
