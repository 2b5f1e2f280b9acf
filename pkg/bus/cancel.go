package bus

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Cancellation: a requester whose ctx is cancelled (not merely past its
// deadline, which the responder knows already) publishes the reply subject
// of the abandoned request on CancelSubject. Every Conn that handles
// requests listens there and cancels the ctx of the handler serving that
// reply subject, so that work which has not started (a request waiting in a
// batcher's queue) is dropped instead of run for nobody. Reply subjects are
// unique per request, so the broadcast names exactly one request.
//
// The cancellation and the request arrive on different subscriptions, which
// nats.go dispatches independently: a cancellation may overtake its own
// request. It is then kept for cancelTombstoneTTL and applied when the
// request arrives.

// errRequesterCancelled is the cause of a handler ctx cancelled by its
// requester.
var errRequesterCancelled = errors.New("bus: the requester cancelled the request")

// cancelTombstoneTTL is how long a cancellation that arrived before its
// request is remembered.
const cancelTombstoneTTL = 10 * time.Second

// cancels tracks the handlers in flight by reply subject.
type cancels struct {
	once sync.Once
	err  error
	sub  *nats.Subscription

	alive *nats.Subscription // liveness probes (alive.go)

	mu       sync.Mutex
	inflight map[string]canceler
	early    map[string]time.Time // cancellations that overtook their request
	held     map[string]*holding  // requests held without a handler (alive.go)
	purgeAt  int                  // size of held at which expired holds are dropped
	holding  atomic.Int64         // len(held), read without the lock
}

// listenCancels subscribes to CancelSubject, and to AliveSubject for the
// liveness probes of the requests it holds, the first time the Conn
// handles requests.
func (c *Conn) listenCancels() error {
	c.cancels.once.Do(func() {
		// Under the lock: the sweep's heartbeats (alive.go) read them.
		c.cancels.mu.Lock()
		c.cancels.inflight = map[string]canceler{}
		c.cancels.early = map[string]time.Time{}
		c.cancels.mu.Unlock()
		sub, err := c.nc.Subscribe(CancelSubject, func(m *nats.Msg) {
			c.cancelHandler(string(m.Data))
		})
		if err == nil {
			err = c.setLimits(sub)
		}
		var alive *nats.Subscription
		if err == nil {
			alive, err = c.nc.Subscribe(AliveSubject, c.answerProbes)
			if err == nil {
				err = c.setLimits(alive)
			}
		}
		c.cancels.mu.Lock()
		c.cancels.sub, c.cancels.alive, c.cancels.err = sub, alive, err
		c.cancels.mu.Unlock()
	})
	return c.cancels.err
}

// TrackRequest makes ctx end when the requester of the request whose reply
// subject is reply cancels it (or, for a stream, is found gone), as a
// handler's ctx does: for a process that answers a request it did not
// receive itself (ReplyStream, Reply). The returned func stops tracking.
func (c *Conn) TrackRequest(ctx context.Context, reply string) (context.Context, func()) {
	if err := c.listenCancels(); err != nil {
		c.opts.log.Warn("bus: cancellations not followed", "err", err)
	}
	return c.trackHandler(ctx, reply)
}

// trackHandler registers the handler serving reply; the returned func
// unregisters it. ctx is cancelled if the requester cancels.
func (c *Conn) trackHandler(ctx context.Context, reply string) (context.Context, func()) {
	if reply == "" || c.cancels.inflight == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	c.trackCancel(reply, causeFunc(cancel))
	return ctx, func() {
		c.untrack(reply)
		cancel(nil)
	}
}

// canceler ends a handler's context with a cause: a *requestCtx, or a
// context.WithCancelCause's function (causeFunc).
type canceler interface{ cancel(cause error) }

type causeFunc context.CancelCauseFunc

func (f causeFunc) cancel(cause error) { f(cause) }

// trackCancel registers cancel as what a cancellation of the request
// whose reply subject is reply calls (at once when the cancellation
// overtook the request). It reports false, registering nothing, when the
// Conn does not follow cancellations or there is no reply subject.
func (c *Conn) trackCancel(reply string, cancel canceler) bool {
	if reply == "" || c.cancels.inflight == nil {
		return false
	}
	cs := &c.cancels
	cs.mu.Lock()
	if _, ok := cs.early[reply]; ok {
		delete(cs.early, reply)
		cancel.cancel(errRequesterCancelled)
	}
	cs.inflight[reply] = cancel
	cs.mu.Unlock()
	return true
}

// untrack ends trackCancel's registration.
func (c *Conn) untrack(reply string) {
	cs := &c.cancels
	cs.mu.Lock()
	delete(cs.inflight, reply)
	cs.mu.Unlock()
}

// cancelHandler cancels the handler serving reply, or remembers the
// cancellation for a request still to arrive.
func (c *Conn) cancelHandler(reply string) {
	if reply == "" {
		return
	}
	cs := &c.cancels
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cancel, ok := cs.inflight[reply]; ok {
		cancel.cancel(errRequesterCancelled)
		return
	}
	now := time.Now()
	if len(cs.early) >= 256 {
		for k, t := range cs.early {
			if now.Sub(t) > cancelTombstoneTTL {
				delete(cs.early, k)
			}
		}
	}
	if len(cs.early) < 1<<16 { // a flood of bogus cancellations cannot grow it without end
		cs.early[reply] = now
	}
}

// sendCancel tells the responders that the request waiting on reply was
// cancelled, when err ended it because ctx was cancelled.
func (c *Conn) sendCancel(ctx context.Context, reply string, err error) error {
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		_ = c.nc.Publish(CancelSubject, []byte(reply))
	}
	return err
}

// stopCancels ends the cancellation subscription (Close).
func (c *Conn) stopCancels() {
	c.cancels.mu.Lock()
	sub, alive := c.cancels.sub, c.cancels.alive
	c.cancels.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	if alive != nil {
		_ = alive.Unsubscribe()
	}
}
