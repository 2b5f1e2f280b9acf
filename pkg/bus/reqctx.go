package bus

import (
	"context"
	"sync"
	"time"
)

// requestCtx is the context a handler of a request from NATS runs in: the
// requester's trace context (parent, for values only), its deadline, and
// its cancellation with a cause (errRequesterCancelled). It behaves as the
// context.WithDeadline under a context.WithCancelCause it replaces, in one
// allocation instead of nine: its Done channel is made when first asked
// for, and the deadline's timer armed only then, since a request answered
// at once is never waited on; Err still reports the deadline once passed.
type requestCtx struct {
	parent   context.Context
	deadline time.Time
	timed    bool // deadline is set

	lazyDone
	cause error
	timer *time.Timer
	// causeCtx, once cancelled with a cause, is a context.WithCancelCause
	// cancelled with it, which context.Cause finds (Value).
	causeCtx context.Context
}

// lazyDone is the ending that requestCtx and Bounded share: a Done
// channel made only when first asked for, the error, and the functions
// AfterFunc registered. mu guards them and the embedding context's own
// state.
type lazyDone struct {
	mu    sync.Mutex
	done  chan struct{} // made when first asked for
	err   error
	after []*afterFunc // AfterFunc's registrations not yet run
}

// afterFunc is one AfterFunc registration.
type afterFunc struct{ f func() }

// afterFuncLocked is context.AfterFunc's contract for a context whose
// ending is l, armed by the caller: f runs on a goroutine of its own once
// the context ends (at once if it has), unless stop comes first. mu held.
func (l *lazyDone) afterFuncLocked(f func()) (stop func() bool) {
	if l.err != nil {
		go f()
		return func() bool { return false }
	}
	a := &afterFunc{f: f}
	l.after = append(l.after, a)
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i, x := range l.after {
			if x == a {
				l.after = append(l.after[:i], l.after[i+1:]...)
				return true
			}
		}
		return false
	}
}

// finishLocked ends the context with err: Done closes, if made, and the
// registered functions start, each on its own goroutine as
// context.AfterFunc runs them. mu held.
func (l *lazyDone) finishLocked(err error) {
	l.err = err
	if l.done != nil {
		close(l.done)
	}
	for _, a := range l.after {
		go a.f()
	}
	l.after = nil
}

func newRequestCtx(parent context.Context, deadline time.Time, timed bool) *requestCtx {
	return &requestCtx{parent: parent, deadline: deadline, timed: timed}
}

func (c *requestCtx) Deadline() (time.Time, bool) { return c.deadline, c.timed }

func (c *requestCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armLocked()
	return c.done
}

func (c *requestCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expiredLocked()
	return c.err
}

// Value answers context.Cause's question (the key of the context package's
// cancelCtx) with a context cancelled with this one's cause; every other
// key is the parent's.
func (c *requestCtx) Value(key any) any {
	if key == cancelCtxKey && cancelCtxKey != nil {
		c.mu.Lock()
		cc := c.causeCtx
		c.mu.Unlock()
		if cc != nil {
			return cc.Value(key)
		}
	}
	return c.parent.Value(key)
}

// AfterFunc is context.AfterFunc for this context (the context package's
// afterFuncer): a context derived from it follows it without a goroutine
// waiting for each.
func (c *requestCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armLocked()
	return c.afterFuncLocked(f)
}

func (c *requestCtx) String() string { return "bus.requestCtx" }

// armLocked makes the Done channel, closed already when the context ended,
// and otherwise arms the deadline's timer.
func (c *requestCtx) armLocked() {
	if c.done != nil {
		return
	}
	c.expiredLocked()
	c.done = make(chan struct{})
	if c.err != nil {
		close(c.done)
		return
	}
	if c.timed {
		c.timer = time.AfterFunc(time.Until(c.deadline), c.expire)
	}
}

// expiredLocked ends the context when its deadline has passed, reporting
// whether it did.
func (c *requestCtx) expiredLocked() bool {
	if c.err != nil || !c.timed || time.Now().Before(c.deadline) {
		return false
	}
	c.endLocked(context.DeadlineExceeded, context.DeadlineExceeded)
	return true
}

func (c *requestCtx) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.endLocked(context.DeadlineExceeded, context.DeadlineExceeded)
	}
}

// cancel ends the context with context.Canceled and cause (Canceled when
// nil), unless it has ended already; it releases the deadline's timer
// either way.
func (c *requestCtx) cancel(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.err != nil {
		return
	}
	if cause == nil {
		cause = context.Canceled
	} else if cancelCtxKey != nil {
		cc, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		c.causeCtx = cc
	}
	c.endLocked(context.Canceled, cause)
}

func (c *requestCtx) endLocked(err, cause error) {
	c.cause = cause
	if c.timer != nil {
		c.timer.Stop()
	}
	c.finishLocked(err)
}

// cancelCtxKey is the key under which context.Cause looks for the
// cancellation cause of a context (the context package's own, unexported);
// nil if context.Cause no longer asks for one.
var cancelCtxKey = func() any {
	p := &keyProbe{}
	_ = context.Cause(p)
	return p.key
}()

// keyProbe is an ended context that records the key it is asked for.
type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Err() error { return context.Canceled }

func (p *keyProbe) Value(key any) any {
	p.key = key
	return nil
}
