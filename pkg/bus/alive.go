package bus

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Liveness of requests in flight. A request reaches one responder (a member
// of a queue group, or whoever a delegating handler passed it to), and
// nothing on the reply path says who that is: when the responder dies (kill
// -9) or is cut off from NATS (a partition), its requester would wait for
// its deadline. So a requester that has heard nothing on a request's reply
// subject for a while asks, on AliveSubject, who still holds it: the body
// lists the requests in question by id (ProbeID, a digest of the reply
// subject: every role listens there, and a reply subject is known only to
// its requester and its responder). Every Conn that
// handles requests listens there, and the one holding such a request (a
// handler running or queued, a delegated request not yet answered, a
// request held explicitly) answers at once with an empty message carrying
// HeaderAlive on the request's reply subject. A request whose probes go
// unanswered fails with UNAVAILABLE: its responder was lost, and the
// request may or may not have run.
//
// Nothing of this happens on the fast path: requests are swept once per
// interval by one goroutine per Conn, and only those silent for a whole
// interval are probed, all in one message. Any message on the reply subject
// (a reply, a chunk, a stream message, an answer to a probe) counts as word
// from the responder.
//
// A probe travels behind whatever the responder's connection has still to
// read: a responder taking in several large uploads reads it seconds late,
// and its answer would come too late although it is alive. So a responder
// also speaks unasked: the same sweep, on the responder's side, sends the
// answer of a probe on the reply subject of every request it has held for a
// whole interval (heartbeats cost nothing on the fast path either: requests
// end within an interval). Likewise the requester's own connection may be
// congested (large replies ahead of the answer, or a process so loaded that
// its reply subscription lags): a sweep that finds the reply subscription
// with messages not yet dispatched, or the round trip to the NATS server
// begun at the previous sweep not yet back, does not count silence. Loss
// is declared only on a connection that is keeping up.

// HeaderAlive marks a responder's answer to a liveness probe, sent to the
// request's reply subject; the requester counts it and drops it.
const HeaderAlive = "Nereid-Alive"

// DefaultLiveness is the sweep interval of requests in flight: a request
// silent for one to two intervals is probed, and fails when it stays silent
// for aliveProbes intervals more (three to four intervals in all).
const DefaultLiveness = time.Second

// aliveProbes is how many probes go unanswered before a request fails.
const aliveProbes = 2

// WithLiveness sets the sweep interval of requests in flight (default
// DefaultLiveness); zero or less turns the probes off, so that a request
// waits for its deadline whatever happens to its responder.
func WithLiveness(d time.Duration) Option { return func(o *options) { o.liveness = d } }

// errResponderLost ends a request nobody admits to holding any more.
var errResponderLost = errors.New("bus: the responder holding the request was lost")

// responderLostMessage says who was lost, in the words of the connection
// loss message (transferError).
func responderLostMessage(subject string) string {
	who := "responder"
	switch {
	case strings.HasPrefix(subject, inferPrefix):
		who = "executor"
	case strings.HasPrefix(subject, seqPrefix):
		who = "sequence router or executor"
	}
	return "request to " + target(subject) + " failed: the " + who + " handling it was lost while it was in flight " +
		lostMarker + "; the request may or may not have run"
}

const lostMarker = "(it stopped answering liveness probes)"

// IsResponderLost reports whether err is the UNAVAILABLE error of a request
// whose responder stopped answering its liveness probes: the request may or
// may not have run. The gateway gives a sequence request failed so a
// router takeover's chance to say that it was not run.
func IsResponderLost(err error) bool {
	var te *tritonerr.Error
	return errors.As(err, &te) && te.Kind == tritonerr.Unavailable && strings.Contains(te.Msg, lostMarker)
}

// sweep probes the requests silent for a whole interval and fails those
// whose probes went unanswered, until the Conn closes.
func (c *Conn) sweep() {
	t := time.NewTicker(c.opts.liveness)
	defer t.Stop()
	var (
		boxes []*inbox
		probe []string
		hb    heartbeats
		rtt   roundTrip
	)
	// A round trip still out when the Conn closes ends with it; Close
	// waits for it (bg).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		if !c.Connected() {
			// Nothing can be heard without a connection; its loss fails
			// the requests on it already (link.go).
			continue
		}
		hb.beat(c)
		boxes = boxes[:0]
		c.mu.Lock()
		for _, b := range c.inboxes {
			if b.watched {
				boxes = append(boxes, b)
			}
		}
		c.mu.Unlock()
		if len(boxes) == 0 {
			continue
		}
		keepingUp := rtt.back() && !c.replyBacklog()
		probe = probe[:0]
		for i, b := range boxes {
			switch b.quiet(keepingUp) {
			case quietHeard:
			case quietProbe:
				probe = append(probe, boxes[i].name)
			case quietLost:
				b.fail()
			}
		}
		clear(boxes)
		c.sendProbes(probe)
		if len(probe) > 0 {
			rtt.start(ctx, &c.bg, c.nc, c.opts.idleTimeout)
		}
	}
}

// replyBacklog reports whether the reply subscription holds messages not
// yet dispatched to their inboxes: an answer may be among them.
func (c *Conn) replyBacklog() bool {
	n, _, err := c.mux.Pending()
	return err == nil && n > 0
}

// roundTrip is the sweep's measure of its own connection: a PING to the
// NATS server, begun after a sweep's probes, whose PONG comes back behind
// everything the server had queued for this connection by then. While it
// is out, the connection is not keeping up, and silence means nothing.
type roundTrip struct {
	out atomic.Bool
}

// back reports whether no round trip is out.
func (r *roundTrip) back() bool { return !r.out.Load() }

// start begins a round trip on a goroutine of wg unless one is out; a
// failed, timed-out or cancelled one counts as back (a lost connection is
// link.go's to handle).
func (r *roundTrip) start(ctx context.Context, wg *sync.WaitGroup, nc *nats.Conn, timeout time.Duration) {
	if !r.out.CompareAndSwap(false, true) {
		return
	}
	wg.Go(func() {
		defer r.out.Store(false)
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_ = nc.FlushWithContext(ctx)
	})
}

// heartbeats is the responder's side of the sweep: the requests this Conn
// held at the previous sweep and holds still are answered for unasked.
type heartbeats struct {
	prev, cur map[string]struct{}
	send      []string
}

func (h *heartbeats) beat(c *Conn) {
	if h.prev == nil {
		h.prev, h.cur = map[string]struct{}{}, map[string]struct{}{}
	}
	h.send = h.send[:0]
	now := time.Now()
	cs := &c.cancels
	cs.mu.Lock()
	for reply := range cs.inflight {
		h.note(reply)
	}
	for reply, held := range cs.held {
		if held.deadline.IsZero() || now.Before(held.deadline) {
			h.note(reply)
		}
	}
	cs.mu.Unlock()
	h.prev, h.cur = h.cur, h.prev
	clear(h.cur)
	for i, reply := range h.send {
		_ = c.nc.PublishMsg(&nats.Msg{Subject: reply, Header: nats.Header{HeaderAlive: []string{"1"}}})
		h.send[i] = ""
	}
}

// note records reply as held at this sweep, and sends it a heartbeat when
// it was held at the previous one too.
func (h *heartbeats) note(reply string) {
	h.cur[reply] = struct{}{}
	if _, ok := h.prev[reply]; ok {
		h.send = append(h.send, reply)
	}
}

type quietness int

const (
	quietHeard quietness = iota // word came since the last sweep
	quietProbe                  // silent: probe it
	quietLost                   // silent through aliveProbes probes
)

// quiet advances the inbox's count of silent sweeps; a sweep on a
// connection that is not keeping up probes again but counts nothing.
func (b *inbox) quiet(keepingUp bool) quietness {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.heard != b.seen {
		b.seen, b.silent = b.heard, 0
		return quietHeard
	}
	if !keepingUp {
		return quietProbe
	}
	b.silent++
	if b.silent > aliveProbes {
		return quietLost
	}
	return quietProbe
}

// fail ends the wait of the request: its responder is lost.
func (b *inbox) fail() {
	b.mu.Lock()
	b.gone = true
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// alive counts an answer to a probe.
func (b *inbox) alive() {
	b.mu.Lock()
	b.heard++
	b.mu.Unlock()
}

// probeIDLen is the length of a request's id in a liveness probe.
const probeIDLen = 16

// ProbeID is what a liveness probe says of the request whose reply subject
// is reply: a digest that names it to the Conn holding it, and tells every
// other listener nothing about the subject (which only the requester and
// the responder may know: the requester accepts a reply only on it).
func ProbeID(reply string) (id [probeIDLen]byte) {
	sum := sha256.Sum256([]byte(reply))
	copy(id[:], sum[:])
	return id
}

// sendProbes publishes the ids of the requests whose reply subjects are
// replies on AliveSubject, as few messages as the max payload allows.
func (c *Conn) sendProbes(replies []string) {
	if len(replies) == 0 {
		return
	}
	limit := max(int(c.nc.MaxPayload())/2, probeIDLen)
	buf := make([]byte, 0, min(len(replies)*probeIDLen, limit))
	for _, r := range replies {
		if len(buf)+probeIDLen > limit {
			_ = c.nc.Publish(AliveSubject, buf)
			buf = make([]byte, 0, min(len(replies)*probeIDLen, limit))
		}
		id := ProbeID(r)
		buf = append(buf, id[:]...)
	}
	_ = c.nc.Publish(AliveSubject, buf)
}

// answerProbes answers, on the reply subject of each request this Conn
// holds whose id the probe lists, for that request.
func (c *Conn) answerProbes(m *nats.Msg) {
	if len(m.Data) < probeIDLen {
		return
	}
	asked := make(map[[probeIDLen]byte]struct{}, len(m.Data)/probeIDLen)
	for data := m.Data; len(data) >= probeIDLen; data = data[probeIDLen:] {
		asked[[probeIDLen]byte(data[:probeIDLen])] = struct{}{}
	}
	for _, reply := range c.heldReplies() {
		if _, ok := asked[ProbeID(reply)]; ok {
			_ = c.nc.PublishMsg(&nats.Msg{Subject: reply, Header: nats.Header{HeaderAlive: []string{"1"}}})
		}
	}
}

// heldReplies lists the reply subjects of the requests this Conn holds: a
// handler serves them, or they are held (and not past their deadline).
func (c *Conn) heldReplies() []string {
	cs := &c.cancels
	now := time.Now()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make([]string, 0, len(cs.inflight)+len(cs.held))
	for reply := range cs.inflight {
		out = append(out, reply)
	}
	for reply, h := range cs.held {
		if _, ok := cs.inflight[reply]; !ok && (h.deadline.IsZero() || now.Before(h.deadline)) {
			out = append(out, reply)
		}
	}
	return out
}

// holding is a request this Conn holds without running a handler for it.
type holding struct {
	key      uint64    // the request's cancellation key, when received here
	n        int       // Hold calls not yet released
	auto     bool      // a delegated request not yet answered
	deadline time.Time // the requester's; zero for none
}

// holds reports whether this Conn holds the request whose reply subject is
// reply: a handler serves it, or it is held.
func (c *Conn) holds(reply string) bool {
	cs := &c.cancels
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if _, ok := cs.inflight[reply]; ok {
		return true
	}
	h := cs.held[reply]
	if h == nil {
		return false
	}
	if !h.deadline.IsZero() && time.Now().After(h.deadline) {
		// Its requester gave up: nobody asks for it any more.
		delete(cs.held, reply)
		return false
	}
	return true
}

// Hold says that this process holds the request whose reply subject is
// reply (it received it through another process, as an executor running a
// batch from the sequence router does), so that the requester's liveness
// probes are answered until the returned func is called.
func (c *Conn) Hold(reply string) (release func()) {
	if reply == "" {
		return func() {}
	}
	if err := c.listenCancels(); err != nil {
		c.opts.log.Warn("bus: liveness probes not answered", "err", err)
	}
	c.hold(reply, time.Time{}, false, 0)
	var once sync.Once
	return func() { once.Do(func() { c.unhold(reply, false) }) }
}

// heldKey is the cancellation key of the request held on reply, 0 when
// none is known here.
func (c *Conn) heldKey(reply string) uint64 {
	cs := &c.cancels
	if cs.holding.Load() == 0 {
		return 0
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if h := cs.held[reply]; h != nil {
		return h.key
	}
	return 0
}

// Release ends the hold HandleDelegated took on a request this Conn passed
// on and will not answer itself: the sequence router releases a request
// once the executor it handed it to has answered it.
func (c *Conn) Release(reply string) { c.unhold(reply, true) }

// purgeEvery bounds how many holds accumulate before those past their
// deadline are dropped (a request passed on and never released).
const purgeEvery = 1024

func (c *Conn) hold(reply string, deadline time.Time, auto bool, key uint64) {
	cs := &c.cancels
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.held == nil {
		cs.held = map[string]*holding{}
	}
	h := cs.held[reply]
	if h == nil {
		if len(cs.held) >= max(cs.purgeAt, purgeEvery) {
			now := time.Now()
			for k, v := range cs.held {
				if !v.deadline.IsZero() && now.After(v.deadline) {
					delete(cs.held, k)
				}
			}
			cs.purgeAt = 2 * len(cs.held)
		}
		h = &holding{}
		cs.held[reply] = h
	}
	if auto {
		h.auto = true
	} else {
		h.n++
	}
	if key != 0 {
		h.key = key
	}
	if deadline.After(h.deadline) {
		h.deadline = deadline
	}
	cs.holding.Store(int64(len(cs.held)))
}

func (c *Conn) unhold(reply string, auto bool) {
	cs := &c.cancels
	if cs.holding.Load() == 0 {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	h := cs.held[reply]
	if h == nil {
		return
	}
	if auto {
		h.auto = false
	} else if h.n > 0 {
		h.n--
	}
	if !h.auto && h.n == 0 {
		delete(cs.held, reply)
	}
	cs.holding.Store(int64(len(cs.held)))
}

// answered ends the hold of a delegated request this Conn has answered.
func (c *Conn) answered(reply string) {
	if c.cancels.holding.Load() > 0 {
		c.unhold(reply, true)
	}
}
