package bus

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// In-process transport. Services that share a process (the standalone
// server) can share a Local: every Conn made WithLocal(l) registers there
// the queue-group handlers it serves, and a Request from any Conn of l to
// a subject with such a handler calls it in this process, handing the
// request message over as a Go value (Body.Message) and taking the
// handler's reply message back the same way: no NATS, no encoding. A
// Stream (or StreamQueued) to such a subject is served in-process too
// (localstream.go). Anything else (delegated requests, broadcasts, a
// subject nobody in the process serves, a handler draining) goes over NATS
// as before, so the services still meet only through the bus.
//
// Only queue-group handlers are called in-process: a request to a queue
// group reaches exactly one member, and one in this process is as good as
// any (it is preferred, as NATS prefers the members near the requester).
// The semantics are the wire's: the handler runs under the requester's
// deadline and trace context (carried by the global propagator, as in
// headers), never under its other ctx values; the requester's
// cancellation cancels the handler's ctx; a panic is
// an INTERNAL error; errors come back as *tritonerr.Error with their kind
// and message alone; a requester whose ctx ends gets the same error as
// over NATS. The handler runs on the requester's goroutine (Nereid's
// handlers return once their ctx ends, as the executor's does), which
// saves the hand-offs a NATS round trip costs.
//
// Ownership: Request hands req itself to the handler, which may keep it,
// and what it references, after it returns (a request still executing when
// its requester gave up): the caller must neither modify req nor reuse the
// memory its fields reference once it has passed it to Request. The
// handler's reply message is moved into resp (a shallow copy of the same
// type; the handler must not touch it after returning it), so resp may
// reference memory the handler's request referenced, such as an identity
// model's output slicing its input.

// Local is the registry of the in-process handlers of one process's
// services. The zero value is not usable; see NewLocal.
type Local struct {
	mu       sync.RWMutex
	handlers map[string][]*localHandler // by subject
	next     atomic.Uint64              // round robin among a subject's handlers

	delivered atomic.Uint64
}

// localHandler is one Handle or HandleBody registration in a Local.
type localHandler struct {
	c      *Conn
	s      *Subscription
	h      BodyFunc
	bytes  bool // a HandlerFunc: it takes the encoded request
	closed bool // guarded by Local.mu
}

// NewLocal returns an empty registry, to be shared WithLocal by the Conns
// of one process's services.
func NewLocal() *Local { return &Local{handlers: map[string][]*localHandler{}} }

// WithLocal makes the Conn register its queue-group handlers in l and
// call those of l's other Conns in-process (see Local).
func WithLocal(l *Local) Option { return func(o *options) { o.local = l } }

// Delivered counts the requests handed to a handler in this process.
func (l *Local) Delivered() uint64 { return l.delivered.Load() }

// add registers a handler of s for subject; the returned func removes it.
func (l *Local) add(subject string, e *localHandler) (remove func()) {
	l.mu.Lock()
	l.handlers[subject] = append(l.handlers[subject], e)
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			e.closed = true
			hs := l.handlers[subject]
			for i, x := range hs {
				if x == e {
					hs = append(hs[:i:i], hs[i+1:]...)
					break
				}
			}
			if len(hs) == 0 {
				delete(l.handlers, subject)
			} else {
				l.handlers[subject] = hs
			}
		})
	}
}

// take picks a live handler of subject and counts the request in its
// Subscription's handlers in flight (so that Drain waits for it), or
// returns nil.
func (l *Local) take(subject string) *localHandler {
	l.mu.RLock()
	defer l.mu.RUnlock()
	hs := l.handlers[subject]
	n := len(hs)
	if n == 0 {
		return nil
	}
	start := 0
	if n > 1 {
		start = int(l.next.Add(1) % uint64(n))
	}
	for i := range n {
		e := hs[(start+i)%n]
		if e.closed {
			continue
		}
		if e.c.closed() {
			continue
		}
		e.s.inflight.Add(1)
		return e
	}
	return nil
}

// Encodes reports whether every Request of c goes out encoded: c has no
// Local, whose handlers are handed the request message itself. Then a
// request message is no longer read once Request returns.
func (c *Conn) Encodes() bool { return c.opts.local == nil }

// InProcess reports whether a Request to subject would be served in this
// process (see Local): a handler of the Conn's Local serves it.
func (c *Conn) InProcess(subject string) bool {
	l := c.opts.local
	if l == nil {
		return false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, e := range l.handlers[subject] {
		if !e.closed && !e.c.closed() {
			return true
		}
	}
	return false
}

// localSubject reports whether subject is one a Local can serve: a
// queue-group handler on a literal subject.
func localSubject(subject, queue string) bool {
	return queue != "" && !strings.ContainsAny(subject, "*>")
}

// registerLocal adds a handler of s on subject to the Conn's Local, when
// it has one; the registration ends when s stops taking requests
// (Unsubscribe, Drain, or its NATS subscription closing).
func (c *Conn) registerLocal(s *Subscription, subject, queue string, h BodyFunc, bytes bool) {
	l := c.opts.local
	if l == nil || !localSubject(subject, queue) {
		return
	}
	s.unlocal = l.add(subject, &localHandler{c: c, s: s, h: h, bytes: bytes})
}

// closed reports whether the Conn was closed.
func (c *Conn) closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Body is a request as its handler receives it: the encoded bytes that
// arrived over NATS (Data), or the message itself when a requester in this
// process handed it over (Message; see Local for who owns it). Exactly one
// is set, except for an empty request over NATS.
type Body struct {
	Data    []byte
	Message proto.Message
}

// BodyFunc serves one request like a HandlerFunc, taking a requester's
// message as it is when the requester is in this process.
type BodyFunc func(ctx context.Context, req Body) (proto.Message, error)

// requestLocal serves a request with e, a handler in this process, on the
// caller's goroutine. req is the request message, or nil with data.
func (c *Conn) requestLocal(ctx context.Context, e *localHandler, subject string, req proto.Message, data []byte, resp proto.Message) ([]byte, error) {
	defer e.s.inflight.Done()
	c.opts.local.delivered.Add(1)
	body := Body{Message: req, Data: data}
	if req != nil && e.bytes {
		parts, err := c.opts.codec.Marshal(req)
		if err != nil {
			return nil, tritonerr.Internalf("bus: cannot encode request to %s: %v", target(subject), err)
		}
		body = Body{Data: newPayload(parts...).bytes()}
	}
	if err := ctx.Err(); err != nil {
		return nil, transferError(err, subject)
	}
	hctx, err := localContext(ctx, subject)
	if err != nil {
		return nil, err
	}
	out, err := e.c.invokeBody(hctx, subject, e.h, body)
	if cerr := ctx.Err(); cerr != nil {
		// The requester stopped waiting before the answer, as it would
		// have over NATS.
		return nil, transferError(cerr, subject)
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		// The same, its ctx's timer not yet fired: the handler's own
		// (same deadline) may have woken it first.
		return nil, transferError(context.DeadlineExceeded, subject)
	}
	if err != nil {
		var te *tritonerr.Error
		if !errors.As(err, &te) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
			err = transferError(err, subject)
		}
		return nil, wireError(err)
	}
	if resp == nil && req != nil {
		return nil, nil
	}
	if resp != nil && out != nil && reflect.TypeOf(resp) == reflect.TypeOf(out) {
		// The same message type: moved, not encoded.
		reflect.ValueOf(resp).Elem().Set(reflect.ValueOf(out).Elem())
		return nil, nil
	}
	var enc []byte
	if out != nil {
		parts, err := e.c.opts.codec.Marshal(out)
		if err != nil {
			return nil, tritonerr.Internalf("bus: cannot encode reply from %s: %v", target(subject), err)
		}
		enc = newPayload(parts...).bytes()
	}
	if resp != nil {
		if err := c.opts.codec.Unmarshal(enc, resp); err != nil {
			return nil, tritonerr.Internalf("bus: cannot decode reply from %s: %v", target(subject), err)
		}
	}
	return enc, nil
}

// localContext is the ctx a handler in this process runs in: what a
// handler of a NATS message would get, the trace context the global
// propagator carries and nothing else of ctx's values, ending when ctx
// ends (its deadline, or the requester's cancellation).
func localContext(ctx context.Context, subject string) (context.Context, error) {
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return nil, transferError(context.DeadlineExceeded, subject)
	}
	base := context.Background()
	// Nothing to carry without a span or baggage (the propagators of
	// OpenTelemetry write nothing then): spare the headers' allocations.
	if trace.SpanContextFromContext(ctx).IsValid() || baggage.FromContext(ctx).Len() > 0 {
		carrier := make(nats.Header, 2)
		otel.GetTextMapPropagator().Inject(ctx, HeaderCarrier(carrier))
		if len(carrier) > 0 {
			base = otel.GetTextMapPropagator().Extract(base, HeaderCarrier(carrier))
		}
	}
	return &handlerContext{Context: base, req: ctx}, nil
}

// handlerContext takes its values from the handler's own base and its
// deadline and end from the requester's ctx. AfterFunc lets contexts
// derived from it follow it without a goroutine each (context's
// afterFuncer).
type handlerContext struct {
	context.Context
	req context.Context
}

func (h *handlerContext) Deadline() (time.Time, bool)           { return h.req.Deadline() }
func (h *handlerContext) Done() <-chan struct{}                 { return h.req.Done() }
func (h *handlerContext) Err() error                            { return h.req.Err() }
func (h *handlerContext) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(h.req, f) }

// wireError is err as a requester over NATS receives it: its Triton kind
// and message (bounded as in a header), nothing else of it.
func wireError(err error) *tritonerr.Error {
	te := tritonerr.From(err)
	msg := te.Msg
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen] + "..."
	}
	return &tritonerr.Error{Kind: te.Kind, Msg: msg}
}
