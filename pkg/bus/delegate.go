package bus

import (
	"context"
	"errors"
	"runtime/debug"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Delegated replies: a handler may pass a request on to another process and
// let that process answer the requester directly, saving the hop back
// through itself. The sequence router does this: the gateway's request goes
// to the router, the router hands it to an executor with the request's
// reply subject, and the executor answers the gateway.
//
// A reply subject is all a responder needs: Reply and ReplyError send a
// whole reply (chunked when large, acknowledged on the sender's own inbox)
// from any Conn, so the requester cannot tell who answered.

// DelegateFunc serves one request whose answer it may leave to someone
// else. subject is the subject it arrived on (useful with wildcards); reply is the requester's reply subject ("" when the requester wants
// no answer); data is the whole request body (reassembled if chunked); ctx
// carries the requester's deadline and trace context and ends when the
// function returns, so a function that keeps the request must copy what it
// needs (Deadline). The function answers, now or later, with Conn.Reply or
// Conn.ReplyError on any Conn, exactly once.
type DelegateFunc func(ctx context.Context, subject, reply string, data []byte)

// HandleDelegated serves requests on subject like Handle (queue group,
// deadlines, trace context, chunked requests), but leaves the answer to fn.
// fn runs on its own goroutine per request; a panic in fn is answered with
// an INTERNAL error. The Conn holds each request for its requester's
// liveness probes (alive.go) until it answers it (Reply, ReplyError) or
// releases it (Release): a request fn passes on stays held by this process
// until the process it went to has answered, so that losing that process
// leaves the decision to fn (fail the request, or run it elsewhere).
func (c *Conn) HandleDelegated(subject, queue string, fn DelegateFunc) (*Subscription, error) {
	return c.handleDelegated(subject, queue, fn, false)
}

// HandleDelegatedOrdered is HandleDelegated with fn called on the
// subscription's own goroutine, one request at a time in arrival order
// (which NATS keeps for the messages of one sender), so fn must not block.
// Chunked requests are the exception: they are reassembled and served on
// their own goroutine, out of order.
func (c *Conn) HandleDelegatedOrdered(subject, queue string, fn DelegateFunc) (*Subscription, error) {
	return c.handleDelegated(subject, queue, fn, true)
}

func (c *Conn) handleDelegated(subject, queue string, fn DelegateFunc, ordered bool) (*Subscription, error) {
	if err := c.listenCancels(); err != nil {
		return nil, tritonerr.Unavailablef("bus: cannot subscribe to %s: %v", AliveSubject, err)
	}
	s := &Subscription{}
	cb := func(m *nats.Msg) {
		s.inflight.Add(1)
		if ordered && m.Header[HeaderSize] == nil {
			c.serveDelegated(s, m, fn)
			return
		}
		c.workers.Go(func() { c.serveDelegated(s, m, fn) })
	}
	if err := c.subscribe(s, subject, queue, cb); err != nil {
		return nil, err
	}
	return s, nil
}

func (c *Conn) serveDelegated(s *Subscription, m *nats.Msg, fn DelegateFunc) {
	defer s.inflight.Done()
	ctx, cancel, key, ok := c.requestContext(m)
	if !ok {
		return
	}
	defer cancel()
	if m.Reply != "" {
		// Held, for the requester's liveness probes, until answered from
		// this Conn or released (Release): fn may keep it queued for long.
		d, _ := ctx.Deadline()
		c.hold(m.Reply, d, true, key)
	}
	data, ackTo, _, ok := c.receiveRequest(ctx, m)
	if !ok {
		c.answered(m.Reply)
		return
	}
	if ackTo != "" {
		defer c.unregister(ackTo)
	}
	defer func() {
		if r := recover(); r != nil {
			c.opts.log.Error("bus: handler panicked", "subject", m.Subject, "panic", r, "stack", string(debug.Stack()))
			c.respondError(m.Reply, tritonerr.Internalf("internal error: the handler for %s panicked: %v", target(m.Subject), r))
		}
	}()
	fn(ctx, m.Subject, m.Reply, data)
}

// Reply answers the request whose reply subject is reply with m, in chunks
// when it does not fit in one message. Any Conn may answer any request.
// ctx bounds a chunked transfer.
func (c *Conn) Reply(ctx context.Context, reply string, m proto.Message) error {
	if reply == "" {
		return nil
	}
	var body []byte
	if m != nil {
		var err error
		if body, err = proto.Marshal(m); err != nil {
			c.respondError(reply, tritonerr.Internalf("bus: cannot encode reply: %v", err))
			return tritonerr.Internalf("bus: cannot encode reply: %v", err)
		}
	}
	return c.respond(ctx, reply, body, "", nil)
}

// ReplyError answers the request whose reply subject is reply with err,
// its Triton kind and message kept (tritonerr.From).
func (c *Conn) ReplyError(reply string, err error) {
	c.respondError(reply, err)
}

// IsNoResponders reports whether err is the UNAVAILABLE error Request
// returns when nothing listens on the subject, or one a handler returned
// with NotTaken: the request reached nobody that will act on it, so sending
// it again cannot run it twice.
func IsNoResponders(err error) bool {
	var te *tritonerr.Error
	if !errors.As(err, &te) || te.Kind != tritonerr.Unavailable {
		return false
	}
	for _, p := range []string{noRespondersPrefix, noExecutorPrefix, notTakenPrefix} {
		if len(te.Msg) >= len(p) && te.Msg[:len(p)] == p {
			return true
		}
	}
	return false
}

// NotTaken is the UNAVAILABLE error of a handler that received a request
// it will not act on and has not acted on (it stopped serving the
// subject): IsNoResponders reports it, so the requester may send it again.
func NotTaken(format string, args ...any) error {
	return tritonerr.Unavailablef(notTakenPrefix+format, args...)
}

const (
	noRespondersPrefix = "no responders on "
	noExecutorPrefix   = "no executor is serving "
	notTakenPrefix     = "not taken: "
)
