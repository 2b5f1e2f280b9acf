package bus

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Request sends req on subject and decodes the reply into resp (which may be
// nil when the reply is of no interest). ctx's deadline and trace context go
// with the request. Every failure is a *tritonerr.Error: the responder's own
// error with its kind and message; UNAVAILABLE when nothing serves the
// subject, when the deadline passes or the responder goes away; CANCELLED
// when ctx is cancelled.
func (c *Conn) Request(ctx context.Context, subject string, req, resp proto.Message) error {
	if c.opts.local != nil && !c.closed() {
		if e := c.opts.local.take(subject); e != nil {
			_, err := c.requestLocal(ctx, e, subject, req, nil, resp)
			return err
		}
	}
	var body payload
	fb := frames.Get().(*frameBuf)
	if err := c.marshal(req, &body, fb); err != nil {
		frames.Put(fb)
		return tritonerr.Internalf("bus: cannot encode request to %s: %v", target(subject), err)
	}
	out, err := c.request(ctx, subject, &body)
	// The request is published (NATS copied it) or abandoned: the lent
	// buffer, which body may be, goes back.
	body.framed = nil
	frames.Put(fb)
	if err != nil {
		return err
	}
	if resp != nil {
		if err := c.opts.codec.Unmarshal(out, resp); err != nil {
			return tritonerr.Internalf("bus: cannot decode reply from %s: %v", target(subject), err)
		}
	}
	return nil
}

// marshal encodes req, framed (room for the envelope in front) when the
// codec can, into fb when it fits.
func (c *Conn) marshal(req proto.Message, p *payload, fb *frameBuf) error {
	if fm, ok := c.opts.codec.(FramedMarshaler); ok {
		b, err := fm.MarshalFramed(req, envelopeLen, fb[:0])
		if err != nil {
			return err
		}
		if b != nil {
			p.framed, p.n = b, len(b)-envelopeLen
			return nil
		}
	}
	parts, err := c.opts.codec.Marshal(req)
	if err != nil {
		return err
	}
	*p = payload{parts: parts}
	for _, b := range parts {
		p.n += len(b)
	}
	return nil
}

// RequestBytes is Request for callers that encode and decode themselves.
func (c *Conn) RequestBytes(ctx context.Context, subject string, body []byte) ([]byte, error) {
	if c.opts.local != nil && !c.closed() {
		if e := c.opts.local.take(subject); e != nil {
			return c.requestLocal(ctx, e, subject, nil, body, nil)
		}
	}
	return c.request(ctx, subject, newPayload(body))
}

func (c *Conn) request(ctx context.Context, subject string, body *payload) ([]byte, error) {
	if c.opts.roundTrip != nil {
		start := time.Now()
		defer func() { c.opts.roundTrip(subject, time.Since(start)) }()
	}
	if err := ctx.Err(); err != nil {
		return nil, transferError(err, subject)
	}
	if err := c.awaitLink(ctx, subject); err != nil {
		return nil, err
	}
	reply, in := c.registerRequest(subject)
	defer c.unregister(reply)

	d, timed := ctx.Deadline()
	var hdr nats.Header
	// Nothing to carry without a span or baggage (the propagators of
	// OpenTelemetry write nothing then): spare the headers' allocations.
	if trace.SpanContextFromContext(ctx).IsValid() || baggage.FromContext(ctx).Len() > 0 {
		hdr = make(nats.Header, 3)
		otel.GetTextMapPropagator().Inject(ctx, HeaderCarrier(hdr))
	}
	if len(hdr) == 0 && c.fits(body.Len()+envelopeLen, nil) {
		// The deadline and the cancellation key alone: in an envelope
		// rather than headers (envelope.go).
		if !timed {
			d = time.Time{}
		}
		if err := c.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: enveloped(d, in.key, body)}); err != nil {
			return nil, transferError(err, subject)
		}
		out, err := c.awaitReply(ctx, in, subject, nil, false)
		return out, c.sendCancel(ctx, reply, in.key, err)
	}
	if hdr == nil {
		hdr = make(nats.Header, 3)
	}
	if timed {
		setDeadline(hdr, d)
	}
	setCancelKey(hdr, in.key)

	if c.fits(body.Len(), hdr) {
		if err := c.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Header: hdr, Data: body.bytes()}); err != nil {
			return nil, transferError(err, subject)
		}
		out, err := c.awaitReply(ctx, in, subject, nil, false)
		return out, c.sendCancel(ctx, reply, in.key, err)
	}
	final, streamed, err := c.sendRequest(ctx, in, subject, reply, hdr, body)
	if err != nil {
		return nil, c.sendCancel(ctx, reply, in.key, transferError(err, subject))
	}
	out, err := c.awaitReply(ctx, in, subject, final, streamed)
	return out, c.sendCancel(ctx, reply, in.key, err)
}

// sendRequest sends body in chunks: the first to subject (any member of a
// queue group may take it), the rest straight to the private subject the
// responder that took it names in its HeaderContinue answer.
func (c *Conn) sendRequest(ctx context.Context, in *inbox, subject, reply string, hdr nats.Header, body *payload) (final *nats.Msg, streamed bool, err error) {
	if hdr == nil {
		hdr = make(nats.Header, 2)
	}
	hdr[HeaderSize] = []string{strconv.Itoa(body.Len())}
	hdr[HeaderChunk] = []string{"0"}
	size, err := c.chunkSize(hdr)
	if err != nil {
		return nil, false, err
	}
	if err := c.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Header: hdr, Data: body.slice(0, size)}); err != nil {
		return nil, false, err
	}
	m, err := in.next(ctx, c.opts.idleTimeout)
	if err != nil {
		return nil, false, err
	}
	dest := get(m.Header, HeaderContinue)
	if dest == "" {
		return m, false, nil // refused at once (an error, or no responders)
	}
	final, err = c.sendChunks(ctx, in, dest, reply, body, size, nil, 1, 1)
	if err != nil && !errors.Is(err, errAborted) && !errors.Is(err, errPeerGone) {
		c.abort(dest)
	}
	return final, true, err
}

// awaitReply waits for the final reply, starting with m when the request
// leg already received it, and reassembles a chunked one.
func (c *Conn) awaitReply(ctx context.Context, in *inbox, subject string, m *nats.Msg, streamed bool) ([]byte, error) {
	for {
		if m == nil {
			var err error
			if m, err = in.next(ctx, 0); err != nil {
				return nil, transferError(err, subject)
			}
		}
		if len(m.Header) == 0 {
			return m.Data, nil
		}
		if isNoResponders(m) {
			if streamed {
				return nil, transferError(errPeerGone, subject)
			}
			return nil, tritonerr.Unavailablef("%s", noRespondersMessage(subject))
		}
		if e := remoteError(m.Header); e != nil {
			return nil, e
		}
		if m.Header[HeaderAbort] != nil {
			return nil, transferError(errAborted, subject)
		}
		if m.Header[HeaderSize] != nil {
			return c.receiveReply(ctx, in, subject, m)
		}
		if m.Header[HeaderAck] != nil || m.Header[HeaderContinue] != nil {
			m = nil // a late acknowledgement of our own chunks
			continue
		}
		return m.Data, nil
	}
}

// receiveReply reassembles a chunked reply whose first chunk is m into one
// buffer of the declared size.
func (c *Conn) receiveReply(ctx context.Context, in *inbox, subject string, m *nats.Msg) ([]byte, error) {
	total, err := c.parseSize(m.Header, len(m.Data))
	if err == nil && get(m.Header, HeaderChunk) != "0" {
		err = errProtocol
	}
	if err != nil {
		c.abort(m.Reply)
		return nil, tritonerr.Internalf("bus: reply from %s: %v", target(subject), err)
	}
	buf := make([]byte, total)
	n := copy(buf, m.Data)
	if m.Reply != "" {
		if err := c.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{HeaderAck: []string{"0"}}}); err != nil {
			return nil, transferError(err, subject)
		}
	}
	if err := c.collect(ctx, in, buf, n, 1); err != nil {
		if !errors.Is(err, errAborted) && !errors.Is(err, errPeerGone) {
			c.abort(m.Reply)
		}
		return nil, transferError(err, subject)
	}
	return buf, nil
}

// transferError turns what ended a request into the error its caller sees.
func transferError(err error, subject string) error {
	var te *tritonerr.Error
	switch {
	case errors.As(err, &te):
		return te
	case errors.Is(err, context.DeadlineExceeded):
		return tritonerr.Unavailablef("request to %s timed out", target(subject))
	case errors.Is(err, context.Canceled):
		return tritonerr.New(tritonerr.Cancelled, "request to %s was cancelled", target(subject))
	case errors.Is(err, errIdle):
		return tritonerr.Unavailablef("request to %s timed out: its chunked transfer stalled", target(subject))
	case errors.Is(err, errPeerGone):
		return tritonerr.Unavailablef("request to %s failed: the responder went away during a chunked transfer", target(subject))
	case errors.Is(err, errAborted):
		return tritonerr.Unavailablef("request to %s failed: the responder aborted a chunked transfer", target(subject))
	case errors.Is(err, errClosed), errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining):
		return tritonerr.Unavailablef("request to %s failed: the bus connection is closed", target(subject))
	case errors.Is(err, errResponderLost):
		return tritonerr.Unavailablef("%s", responderLostMessage(subject))
	case errors.Is(err, errLinkLost):
		return tritonerr.Unavailablef("request to %s failed: the connection to NATS was lost while it was in flight; the request may or may not have run", target(subject))
	case errors.Is(err, errProtocol):
		return tritonerr.Internalf("bus: request to %s: %v", target(subject), err)
	}
	return tritonerr.Unavailablef("request to %s failed: %v", target(subject), err)
}
