package bus

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Cancellation: a requester whose ctx is cancelled (not merely past its
// deadline, which the responder knows already) publishes the reply subject
// of the abandoned request and the request's cancellation key on
// CancelSubject. Every Conn that handles requests listens there and cancels
// the ctx of the handler serving that reply subject, so that work which has
// not started (a request waiting in a batcher's queue) is dropped instead of
// run for nobody. Reply subjects are unique per request, so the broadcast
// names exactly one request.
//
// The key is a random number the requester put in the request (envelope.go,
// HeaderKey) and nowhere else until it cancels: only the requester and the
// responder know it. A reply subject is no secret to the other Conns of the
// requester's role (they may read their role's inboxes), so a cancellation
// that names a request served here without its key is ignored. A process
// that serves a request it did not receive itself learns its key from the
// process that passed it on (the sequence router puts it in the batch,
// RequestKey, and forwards cancellations with it, ForwardCancel; an executor
// follows them with TrackRequestKey); one that knows no key (TrackRequest)
// follows any cancellation naming the reply subject.
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
	inflight map[string]tracked
	early    map[string]*tombstone // cancellations that overtook their request
	held     map[string]*holding   // requests held without a handler (alive.go)
	purgeAt  int                   // size of held at which expired holds are dropped
	holding  atomic.Int64          // len(held), read without the lock
}

// listenCancels subscribes to CancelSubject, and to AliveSubject for the
// liveness probes of the requests it holds, the first time the Conn
// handles requests.
func (c *Conn) listenCancels() error {
	c.cancels.once.Do(func() {
		// Under the lock: the sweep's heartbeats (alive.go) read them.
		c.cancels.mu.Lock()
		c.cancels.inflight = map[string]tracked{}
		c.cancels.early = map[string]*tombstone{}
		c.cancels.mu.Unlock()
		sub, err := c.nc.Subscribe(CancelSubject, func(m *nats.Msg) {
			reply, key := parseCancel(m.Data)
			c.cancelHandler(reply, key)
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

// TrackRequestKey is TrackRequest for a request whose cancellation key is
// known (the sequence router passes it on with the request, RequestKey): ctx
// ends only on a cancellation that carries key. Key 0 is TrackRequest.
func (c *Conn) TrackRequestKey(ctx context.Context, reply string, key uint64) (context.Context, func()) {
	if key == 0 {
		return c.TrackRequest(ctx, reply)
	}
	if err := c.listenCancels(); err != nil {
		c.opts.log.Warn("bus: cancellations not followed", "err", err)
	}
	if reply == "" || c.cancels.inflight == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	c.trackCancel(reply, key, causeFunc(cancel))
	return ctx, func() {
		c.untrack(reply)
		cancel(nil)
	}
}

// RequestKey is the cancellation key of the request whose reply subject is
// reply, when this Conn received it and holds it (HandleDelegated, until it
// is answered or released); 0 otherwise. The sequence router passes it on
// with the request to the executor that runs it.
func (c *Conn) RequestKey(reply string) uint64 { return c.heldKey(reply) }

// ForwardCancel publishes again the cancellation of the request on reply,
// with its key (RequestKey): the sequence router tells the executor running
// a request the client cancelled.
func (c *Conn) ForwardCancel(reply string, key uint64) { c.publishCancel(reply, key) }

// trackHandler registers the handler serving reply; the returned func
// unregisters it. ctx is cancelled if the requester cancels. The key is the
// one of the request when this Conn received it (HandleDelegated), none
// otherwise.
func (c *Conn) trackHandler(ctx context.Context, reply string) (context.Context, func()) {
	if reply == "" || c.cancels.inflight == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	c.trackCancel(reply, c.heldKey(reply), causeFunc(cancel))
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

// tracked is a request served here: what cancels it, and its key (0: not
// known here, any cancellation naming it is followed).
type tracked struct {
	c   canceler
	key uint64
}

// tombstone is a cancellation that overtook its request: when it came, and
// the keys it came with (0 for none).
type tombstone struct {
	at   time.Time
	keys []uint64
}

// maxTombstoneKeys bounds the keys remembered for one reply subject: a
// flood of bogus cancellations cannot grow a tombstone without end.
const maxTombstoneKeys = 4

// applies reports whether a cancellation remembered here cancels the
// request whose key is key.
func (t *tombstone) applies(key uint64) bool {
	return key == 0 || slices.Contains(t.keys, key)
}

// trackCancel registers cancel as what a cancellation of the request
// whose reply subject is reply, with key (0 for any), calls (at once when
// the cancellation overtook the request). It reports false, registering
// nothing, when the Conn does not follow cancellations or there is no
// reply subject.
func (c *Conn) trackCancel(reply string, key uint64, cancel canceler) bool {
	if reply == "" || c.cancels.inflight == nil {
		return false
	}
	cs := &c.cancels
	cs.mu.Lock()
	if len(cs.early) > 0 {
		if t, ok := cs.early[reply]; ok && t.applies(key) {
			delete(cs.early, reply)
			cancel.cancel(errRequesterCancelled)
		}
	}
	cs.inflight[reply] = tracked{c: cancel, key: key}
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

// parseCancel reads a cancellation: the reply subject, a space and the key
// in hexadecimal (key 0 when absent).
func parseCancel(data []byte) (reply string, key uint64) {
	r, k, ok := bytes.Cut(data, []byte{' '})
	if ok {
		key, _ = strconv.ParseUint(string(k), 16, 64)
	}
	return string(r), key
}

// cancelHandler cancels the handler serving reply when key is its key (or
// it has none), or remembers the cancellation for a request still to
// arrive.
func (c *Conn) cancelHandler(reply string, key uint64) {
	if reply == "" {
		return
	}
	cs := &c.cancels
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if t, ok := cs.inflight[reply]; ok {
		if t.key == 0 || t.key == key {
			t.c.cancel(errRequesterCancelled)
		}
		return
	}
	now := time.Now()
	if len(cs.early) >= 256 {
		for k, t := range cs.early {
			if now.Sub(t.at) > cancelTombstoneTTL {
				delete(cs.early, k)
			}
		}
	}
	if t, ok := cs.early[reply]; ok {
		if len(t.keys) < maxTombstoneKeys && !slices.Contains(t.keys, key) {
			t.keys = append(t.keys, key)
		}
		return
	}
	if len(cs.early) < 1<<16 { // a flood of bogus cancellations cannot grow it without end
		cs.early[reply] = &tombstone{at: now, keys: []uint64{key}}
	}
}

// cancelServed cancels the handler serving reply whatever its key: this
// Conn's own decision (a stream nobody reads any more).
func (c *Conn) cancelServed(reply string) {
	cs := &c.cancels
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if t, ok := cs.inflight[reply]; ok {
		t.c.cancel(errRequesterCancelled)
	}
}

// sendCancel tells the responders that the request waiting on reply, whose
// cancellation key is key, was cancelled, when err ended it because ctx was
// cancelled.
func (c *Conn) sendCancel(ctx context.Context, reply string, key uint64, err error) error {
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		c.publishCancel(reply, key)
	}
	return err
}

// publishCancel publishes the cancellation of the request on reply.
func (c *Conn) publishCancel(reply string, key uint64) {
	msg := make([]byte, 0, len(reply)+17)
	msg = append(append(msg, reply...), ' ')
	_ = c.nc.Publish(CancelSubject, strconv.AppendUint(msg, key, 16))
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
