package bus

import (
	"context"
	"errors"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// HandlerFunc serves one request. req is the whole request body (reassembled
// if it came in chunks); ctx carries the requester's deadline and trace
// context. A returned error goes back to the requester with its Triton kind
// and message (tritonerr.From).
type HandlerFunc func(ctx context.Context, req []byte) (proto.Message, error)

// Handle serves requests on subject, as a member of queue when queue is not
// empty (each request then reaches one member). Each request runs in its own
// goroutine; a request whose deadline has passed is refused without running
// h, and a panic in h becomes an INTERNAL error reply. Its subscription
// holds fewer requests waiting for a reader than HandleBody's (it is for
// control and admin subjects: controlChanLen).
func (c *Conn) Handle(subject, queue string, h HandlerFunc) (*Subscription, error) {
	return c.handle(subject, queue, func(ctx context.Context, b Body) (proto.Message, error) { return h(ctx, b.Data) }, true, controlChanLen)
}

// HandleBody is Handle for a handler that takes the request message of a
// requester in this process as it is (Local), without its encoding.
func (c *Conn) HandleBody(subject, queue string, h BodyFunc) (*Subscription, error) {
	return c.handle(subject, queue, h, false, handleChanLen)
}

// handle subscribes readers with a channel of chanLen requests.
func (c *Conn) handle(subject, queue string, h BodyFunc, bytes bool, chanLen int) (*Subscription, error) {
	if err := c.listenCancels(); err != nil {
		return nil, tritonerr.Unavailablef("bus: cannot subscribe to %s: %v", CancelSubject, err)
	}
	s := &Subscription{}
	c.registerLocal(s, subject, queue, h, bytes)
	if err := c.subscribeReaders(s, subject, queue, newReaders(c, s, h, chanLen)); err != nil {
		s.stopLocal()
		return nil, err
	}
	return s, nil
}

func (c *Conn) serve(s *Subscription, m *nats.Msg, h BodyFunc) {
	defer s.inflight.Done()
	d, timed, key := unwrap(m)
	if timed && !time.Now().Before(d) {
		c.respondError(m.Reply, tritonerr.Unavailablef("request to %s timed out before it was handled", target(m.Subject)))
		return
	}
	rc := newRequestCtx(c.traceContext(m), d, timed)
	defer rc.cancel(nil)
	tracked := c.trackCancel(m.Reply, key, rc)
	if tracked {
		defer c.untrack(m.Reply)
	}
	var ctx context.Context = rc

	data, ackTo, in, ok := c.receiveRequest(ctx, m)
	if !ok {
		return
	}
	if ackTo != "" {
		defer c.unregister(ackTo)
	}

	if m.Header[HeaderStream] != nil && m.Reply != "" {
		w, release := c.openStream(m, ackTo, in)
		defer release()
		resp, err := c.invokeBody(context.WithValue(ctx, streamKey{}, w), m.Subject, h, Body{Data: data})
		c.endStream(ctx, w, resp, err)
		return
	}
	resp, err := c.invokeBody(ctx, m.Subject, h, Body{Data: data})
	if m.Reply == "" {
		return
	}
	if err != nil {
		var te *tritonerr.Error
		if !errors.As(err, &te) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
			err = transferError(err, m.Subject)
		}
		c.respondError(m.Reply, err)
		return
	}
	var body [][]byte
	if resp != nil {
		if body, err = c.opts.codec.Marshal(resp); err != nil {
			c.respondError(m.Reply, tritonerr.Internalf("bus: cannot encode reply from %s: %v", target(m.Subject), err))
			return
		}
	}
	if err := c.respondPayload(ctx, m.Reply, newPayload(body...), ackTo, in); err != nil {
		c.opts.log.Debug("bus: reply not delivered", "subject", m.Subject, "error", err)
	}
}

// endStream sends what the handler of a streamed request returned as the
// stream's last message: its error, its reply, or the end alone.
func (c *Conn) endStream(ctx context.Context, w *StreamWriter, resp proto.Message, err error) {
	if w.Ended() {
		return
	}
	ctx = context.WithoutCancel(ctx) // the end goes out even after a cancellation
	switch {
	case err != nil && w.refuse():
		// Nothing streamed yet: a refusal, the error reply of any request.
		if w.local != nil {
			w.local.refuse(wireError(err))
			return
		}
		c.respondError(w.reply, err)
		return
	case err != nil:
		err = w.SendError(ctx, err, true)
	case resp != nil:
		err = w.Send(ctx, resp, true)
	default:
		err = w.End(ctx)
	}
	if err != nil {
		c.opts.log.Debug("bus: end of stream not delivered", "subject", w.subject, "error", err)
	}
}

// invokeBody runs h, turning a panic into an INTERNAL error so that one bad
// request cannot take the process down.
func (c *Conn) invokeBody(ctx context.Context, subject string, h BodyFunc, body Body) (resp proto.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.opts.log.Error("bus: handler panicked", "subject", subject, "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, tritonerr.Internalf("internal error: the handler for %s panicked: %v", target(subject), r)
		}
	}()
	return h(ctx, body)
}

// respond sends body to reply, in flow-controlled chunks when it does not fit
// in one message. in and ackTo are the transfer's inbox if the request came
// in chunks; otherwise one is opened for the acknowledgements.
func (c *Conn) respond(ctx context.Context, reply string, body []byte, ackTo string, in *inbox) error {
	return c.respondPayload(ctx, reply, newPayload(body), ackTo, in)
}

func (c *Conn) respondPayload(ctx context.Context, reply string, body *payload, ackTo string, in *inbox) error {
	defer c.answered(reply)
	if c.fits(body.Len(), nil) {
		return c.nc.PublishMsg(&nats.Msg{Subject: reply, Data: body.bytes()})
	}
	if in == nil {
		ackTo, in = c.register(reply)
		defer c.unregister(ackTo)
	}
	hdr := nats.Header{HeaderSize: []string{strconv.Itoa(body.Len())}, HeaderChunk: []string{"0"}}
	size, err := c.chunkSize(hdr)
	if err != nil {
		c.respondError(reply, tritonerr.Internalf("%v", err))
		return err
	}
	m, err := c.sendChunks(ctx, in, reply, ackTo, body, size, hdr, 0, 0)
	if err == nil && m != nil {
		err = errProtocol
	}
	if err != nil && !errors.Is(err, errAborted) && !errors.Is(err, errPeerGone) {
		c.abort(reply)
	}
	return err
}

func (c *Conn) respondError(reply string, err error) {
	if reply == "" {
		return
	}
	c.answered(reply)
	_ = c.nc.PublishMsg(&nats.Msg{Subject: reply, Header: errorHeader(err)})
}

// receiveRequest returns m's whole body: m.Data, or for a chunked request
// the body reassembled through a private inbox (ackTo, in: the caller
// unregisters it when done, and answers acknowledgements through it). ok is
// false when there is nothing to serve; the requester has been told why
// where it still listens.
func (c *Conn) receiveRequest(ctx context.Context, m *nats.Msg) (data []byte, ackTo string, in *inbox, ok bool) {
	if m.Header[HeaderSize] == nil {
		return m.Data, "", nil, true
	}
	if m.Reply == "" {
		return nil, "", nil, false // nobody to continue with
	}
	total, err := c.parseSize(m.Header, len(m.Data))
	if err != nil {
		c.respondError(m.Reply, tritonerr.InvalidArgf("bus: request to %s: %v", target(m.Subject), err))
		return nil, "", nil, false
	}
	buf := make([]byte, total)
	n := copy(buf, m.Data)
	ackTo, in = c.register(m.Reply)
	if n < total {
		if err := c.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{HeaderContinue: []string{ackTo}}}); err != nil {
			c.unregister(ackTo)
			return nil, "", nil, false
		}
		if err := c.collect(ctx, in, buf, n, 1); err != nil {
			switch {
			case errors.Is(err, errAborted), errors.Is(err, errPeerGone), errors.Is(err, errClosed):
				// The requester gave up; nobody waits for an answer.
			case errors.Is(err, errProtocol):
				c.respondError(m.Reply, tritonerr.InvalidArgf("%v", err))
			default:
				c.respondError(m.Reply, transferError(err, m.Subject))
			}
			c.unregister(ackTo)
			return nil, "", nil, false
		}
	}
	return buf, ackTo, in, true
}
