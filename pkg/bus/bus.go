package bus

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/pkg/routines"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Conn carries protobuf requests, replies and events over one NATS
// connection. It owns one wildcard reply subscription ("<inbox>.*") through
// which every reply, chunk acknowledgement and continuation chunk addressed
// to it arrives, each routed by its last token. A Conn is safe for concurrent
// use; create one per NATS connection and share it.
type Conn struct {
	nc     *nats.Conn
	opts   options
	prefix string // "<inbox>." ; "<class>.<nonce>.<n>" completes it
	mux    *nats.Subscription
	done   chan struct{}
	close  sync.Once

	mu      sync.Mutex
	inboxes map[string]*inbox
	seq     atomic.Uint64

	cancels cancels       // handlers in flight, for requesters' cancellations
	workers routines.Pool // goroutines serving handled requests

	link *link // the connection's state (link.go)

	// bg holds followLink (link.go) and sweep (alive.go): both return
	// when done closes, and Close waits for them.
	bg sync.WaitGroup
}

type options struct {
	maxMessageSize int64
	pendingMsgs    int
	pendingBytes   int
	windowBytes    int
	chunkSize      int
	idleTimeout    time.Duration
	reconnectWait  time.Duration
	liveness       time.Duration
	log            *slog.Logger
	codec          Codec
	local          *Local
	roundTrip      func(subject string, d time.Duration)
}

// Option adjusts a Conn.
type Option func(*options)

// WithMaxMessageSize bounds the total size of a chunked request or reply
// this Conn will reassemble (default 2 GiB). The declared size is checked
// before anything is allocated.
func WithMaxMessageSize(n int64) Option { return func(o *options) { o.maxMessageSize = n } }

// WithPendingLimits sets the NATS pending limits of every subscription the
// Conn makes (default: unlimited messages, 1 GiB). NATS's default of 64 MB
// drops large replies as a slow consumer under concurrency. A negative value
// means unlimited.
func WithPendingLimits(msgs, bytes int) Option {
	return func(o *options) { o.pendingMsgs, o.pendingBytes = msgs, bytes }
}

// WithWindow sets how many bytes of one chunked transfer may be in flight,
// sent but not acknowledged (default 8 MiB; at least two chunks).
func WithWindow(bytes int) Option { return func(o *options) { o.windowBytes = bytes } }

// WithChunkSize caps the chunk size below what the server's max payload
// allows; tests use it to exercise chunking cheaply.
func WithChunkSize(n int) Option { return func(o *options) { o.chunkSize = n } }

// WithIdleTimeout sets how long either side of a chunked transfer waits for
// the next chunk or acknowledgement before giving up (default 15 s), which
// bounds abandoned transfers that carry no deadline.
func WithIdleTimeout(d time.Duration) Option { return func(o *options) { o.idleTimeout = d } }

// WithRoundTrip has observe called with the subject and duration of every
// request's round trip (Request and RequestBytes, failures included), for
// the services' metrics (SubjectKind names its family).
func WithRoundTrip(observe func(subject string, d time.Duration)) Option {
	return func(o *options) { o.roundTrip = observe }
}

// WithLogger sets where handler panics and dropped transfers are logged
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// New starts the reply subscription on nc. The caller keeps ownership of nc.
func New(nc *nats.Conn, opts ...Option) (*Conn, error) {
	if nc == nil {
		return nil, errors.New("bus: nil NATS connection")
	}
	o := options{
		maxMessageSize: 2 << 30,
		pendingMsgs:    -1,
		pendingBytes:   1 << 30,
		windowBytes:    8 << 20,
		idleTimeout:    15 * time.Second,
		reconnectWait:  DefaultReconnectWait,
		liveness:       DefaultLiveness,
		log:            slog.Default(),
		codec:          protoCodec{},
	}
	for _, f := range opts {
		f(&o)
	}
	if !nc.HeadersSupported() {
		return nil, errors.New("bus: the NATS server does not support headers")
	}
	c := &Conn{
		nc:      nc,
		opts:    o,
		prefix:  nc.NewInbox() + ".",
		done:    make(chan struct{}),
		inboxes: make(map[string]*inbox),
	}
	sub, err := nc.Subscribe(c.prefix+">", c.dispatch)
	if err != nil {
		return nil, err
	}
	if err := c.setLimits(sub); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	c.mux = sub
	// Requests in flight must not outlive the subscription their replies
	// arrive on, whether Close, Drain or a closed NATS connection ended it.
	onClosed(sub, c.shutdown)
	// Nor the connection they were sent on (link.go).
	events := nc.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	c.link = newLink(nc.IsConnected())
	c.bg.Go(func() { c.followLink(events) })
	if o.liveness > 0 {
		c.bg.Go(c.sweep)
	}
	return c, nil
}

// onClosed calls f once when sub closes for any reason.
func onClosed(sub *nats.Subscription, f func()) {
	var once sync.Once
	sub.SetClosedHandler(func(string) { once.Do(f) })
	if !sub.IsValid() {
		once.Do(f)
	}
}

func (c *Conn) shutdown() {
	c.close.Do(func() {
		close(c.done)
		c.workers.Close() // a closed Conn leaves no idle goroutine behind
	})
}

func (c *Conn) setLimits(sub *nats.Subscription) error {
	return sub.SetPendingLimits(c.opts.pendingMsgs, c.opts.pendingBytes)
}

// NATS returns the underlying connection.
func (c *Conn) NATS() *nats.Conn { return c.nc }

// Close stops the reply subscription; requests in flight fail with
// UNAVAILABLE. It neither closes the NATS connection nor stops handlers
// (Drain their Subscriptions for that).
func (c *Conn) Close() error {
	c.shutdown()
	c.bg.Wait()
	c.stopCancels()
	if err := c.mux.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrBadSubscription) && !errors.Is(err, nats.ErrConnectionClosed) {
		return err
	}
	return nil
}

// dispatch routes a message on the reply subscription to its inbox. It only
// queues, so the subscription never backs up behind a slow consumer of one
// transfer; flow control bounds what each inbox can hold. A message whose
// last token names an inbox in use but whose subject is not that inbox's
// (another class of responder, or a guessed nonce) is forged: it is
// dropped and counted.
func (c *Conn) dispatch(m *nats.Msg) {
	tok := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	c.mu.Lock()
	b := c.inboxes[tok]
	c.mu.Unlock()
	if b != nil {
		if m.Subject != b.name {
			c.forged(m)
			return
		}
		if len(m.Header) > 0 && m.Header[HeaderAlive] != nil {
			b.alive() // a responder still holds the request (alive.go)
			return
		}
		b.put(m)
		return
	}
	if m.Header[HeaderCredit] != nil && m.Reply != "" {
		// Credit for a stream this Conn no longer writes (its handler
		// ended without the end reaching the requester): tell the
		// requester, which would otherwise wait for nothing.
		c.abort(m.Reply)
	}
}

// forgedReplies counts the messages refused by dispatch, in every Conn of
// the process.
var forgedReplies atomic.Uint64

// ForgedReplies is the number of messages this process's Conns refused
// because they arrived on a subject other than the inbox they claimed: a
// reply from a role or an instance the request did not go to.
func ForgedReplies() uint64 { return forgedReplies.Load() }

func (c *Conn) forged(m *nats.Msg) {
	if n := forgedReplies.Add(1); n&(n-1) == 0 { // 1, 2, 4, ...: a flood does not flood the log
		c.opts.log.Warn("bus: refused a reply from a responder the request did not go to", "subject", m.Subject, "refused", n)
	}
}

// register opens an inbox reachable at the returned subject, private to a
// transfer with the requester whose reply subject is reply.
func (c *Conn) register(reply string) (subject string, b *inbox) {
	return c.registerInbox(false, peerClass(reply))
}

// registerRequest opens the inbox of a request to subject, swept for the
// liveness of its responder (alive.go).
func (c *Conn) registerRequest(subject string) (reply string, b *inbox) {
	return c.registerInbox(c.opts.liveness > 0, ReplyClass(subject))
}

func (c *Conn) registerInbox(watched bool, class string) (subject string, b *inbox) {
	lost, _ := c.link.state()
	b = &inbox{signal: make(chan struct{}, 1), done: c.done, lost: lost}
	// The subject in the inbox's own bytes (an inbox is never reused, so
	// they do not change), its token a part of it.
	sb := append(b.subject[:0], c.prefix...)
	sb = append(append(sb, class...), '.')
	sb = append(strconv.AppendUint(sb, rand.Uint64(), 36), '.')
	sb = strconv.AppendUint(sb, c.seq.Add(1), 36)
	if len(sb) <= len(b.subject) {
		subject = unsafe.String(unsafe.SliceData(sb), len(sb))
	} else {
		subject = string(sb) // a long custom prefix
	}
	b.name = subject
	tok := subject[strings.LastIndexByte(subject, '.')+1:]
	b.q = b.first[:0]
	if watched {
		b.watched = true
		b.heard = 1 // a fresh request counts as word at its start
	}
	b.key = rand.Uint64() | 1
	c.mu.Lock()
	c.inboxes[tok] = b
	c.mu.Unlock()
	return subject, b
}

func (c *Conn) unregister(subject string) {
	c.mu.Lock()
	delete(c.inboxes, subject[strings.LastIndexByte(subject, '.')+1:])
	c.mu.Unlock()
}

// Publish sends m on subject without waiting for anyone (heartbeats,
// solicitations). It is not chunked: m must fit in the max payload.
func (c *Conn) Publish(subject string, m proto.Message) error {
	body, err := proto.Marshal(m)
	if err != nil {
		return tritonerr.Internalf("bus: cannot encode message for %s: %v", subject, err)
	}
	if err := c.nc.Publish(subject, body); err != nil {
		return tritonerr.Unavailablef("bus: cannot publish on %s: %v", subject, err)
	}
	return nil
}

// Subscribe calls fn for each message on subject, one at a time in arrival
// order (so a withdraw heartbeat is never overtaken by an earlier one). ctx
// carries the trace context of the message, if any.
func (c *Conn) Subscribe(subject string, fn func(ctx context.Context, data []byte)) (*Subscription, error) {
	s := &Subscription{}
	err := c.subscribe(s, subject, "", func(m *nats.Msg) {
		ctx := context.Background()
		if len(m.Header) > 0 {
			ctx = otel.GetTextMapPropagator().Extract(ctx, HeaderCarrier(m.Header))
		}
		fn(ctx, m.Data)
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// subscribeReaders subscribes r's channel to subject (in queue, when not
// empty) for s, and returns once the server has the subscription. A
// channel subscription has no pending limits: what bounds it is the
// channel's length.
func (c *Conn) subscribeReaders(s *Subscription, subject, queue string, r *readers) error {
	var sub *nats.Subscription
	var err error
	if queue == "" {
		sub, err = c.nc.ChanSubscribe(subject, r.ch)
	} else {
		sub, err = c.nc.ChanQueueSubscribe(subject, queue, r.ch)
	}
	if err != nil {
		return tritonerr.Unavailablef("bus: cannot subscribe to %s: %v", subject, err)
	}
	s.reading = r
	s.init(sub)
	r.start()
	c.confirm()
	return nil
}

// subscribe registers cb on subject (in queue, when not empty) for s, with
// the pending limits large transfers need, and returns once the server has
// the subscription.
func (c *Conn) subscribe(s *Subscription, subject, queue string, cb nats.MsgHandler) error {
	var sub *nats.Subscription
	var err error
	if queue == "" {
		sub, err = c.nc.Subscribe(subject, cb)
	} else {
		sub, err = c.nc.QueueSubscribe(subject, queue, cb)
	}
	if err != nil {
		return tritonerr.Unavailablef("bus: cannot subscribe to %s: %v", subject, err)
	}
	if err := c.setLimits(sub); err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	s.init(sub)
	c.confirm()
	return nil
}

// requestContext is the context a handler of m runs in: the requester's
// trace context and deadline; key is the request's cancellation key. ok is
// false, and the requester told so, when the deadline has already passed.
func (c *Conn) requestContext(m *nats.Msg) (ctx context.Context, cancel context.CancelFunc, key uint64, ok bool) {
	ctx, cancel = c.traceContext(m), func() {}
	d, has, key := unwrap(m)
	if has {
		if !time.Now().Before(d) {
			c.respondError(m.Reply, tritonerr.Unavailablef("request to %s timed out before it was handled", target(m.Subject)))
			return nil, nil, 0, false
		}
		ctx, cancel = context.WithDeadline(ctx, d)
	}
	return ctx, cancel, key, true
}

// traceContext is Background carrying m's trace context, if any.
func (c *Conn) traceContext(m *nats.Msg) context.Context {
	if len(m.Header) == 0 {
		return context.Background()
	}
	return otel.GetTextMapPropagator().Extract(context.Background(), HeaderCarrier(m.Header))
}

// Subscription is a Handle or Subscribe registration.
type Subscription struct {
	sub      *nats.Subscription
	unlocal  func() // ends the handler's registration in a Local (local.go)
	closed   chan struct{}
	inflight sync.WaitGroup

	// A Handle subscription's requests wait in its readers' channel
	// (readers.go), which closes with the subscription: after Drain they
	// are still served, otherwise (stopped) dropped, as NATS drops what an
	// async subscription has not delivered when it closes.
	reading  *readers
	draining atomic.Bool
	stopped  atomic.Bool
}

func (s *Subscription) init(sub *nats.Subscription) {
	s.sub = sub
	s.closed = make(chan struct{})
	onClosed(sub, func() {
		s.stopLocal()
		if r := s.reading; r != nil {
			if !s.draining.Load() {
				s.stopped.Store(true)
			}
			// NATS sends nothing more on a closed subscription.
			close(r.ch)
		}
		close(s.closed)
	})
}

// Unsubscribe stops delivery at once; handlers already running finish on
// their own.
func (s *Subscription) Unsubscribe() error {
	s.stopLocal()
	s.stopped.Store(true)
	return s.sub.Unsubscribe()
}

func (s *Subscription) stopLocal() {
	if s.unlocal != nil {
		s.unlocal()
	}
}

// Drain stops taking new messages, lets those already received be handled,
// and returns once every handler has returned (graceful shutdown).
func (s *Subscription) Drain() error {
	s.stopLocal() // requests from this process go elsewhere at once
	s.draining.Store(true)
	if err := s.sub.Drain(); err != nil && !errors.Is(err, nats.ErrBadSubscription) && !errors.Is(err, nats.ErrConnectionClosed) {
		return err
	}
	// Closed once the pending messages are dispatched, or with the
	// connection; no callback runs after that, so no handler can start.
	<-s.closed
	s.inflight.Wait()
	return nil
}

// errIdle, errAborted and errPeerGone end a chunked transfer.
var (
	errIdle     = errors.New("bus: chunked transfer stalled")
	errAborted  = errors.New("bus: chunked transfer aborted by the other side")
	errPeerGone = errors.New("bus: the other side of the transfer went away")
	errClosed   = errors.New("bus: connection closed")
)

// inbox queues the messages of one request or transfer. put never blocks;
// the chunk window bounds the queue.
type inbox struct {
	mu     sync.Mutex
	q      []*nats.Msg
	first  [1]*nats.Msg // q's array until a second message queues: a request's reply
	signal chan struct{}
	done   <-chan struct{}
	lost   <-chan struct{} // the connection it was registered on dropped
	notify func()          // called after each put (a stream writer's credit hook)

	// A requester's inbox is watched for liveness (alive.go): heard
	// counts what arrived, seen and silent are the sweep's, and gone ends
	// the wait when the responder was lost.
	watched     bool
	heard, seen uint64
	silent      int
	gone        bool

	name    string    // its subject
	key     uint64    // a request's cancellation key (cancel.go)
	subject [128]byte // the bytes of its subject (registerInbox)
}

func (b *inbox) put(m *nats.Msg) {
	b.mu.Lock()
	b.q = append(b.q, m)
	b.heard++
	notify := b.notify
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
	if notify != nil {
		notify()
	}
}

// next waits for the next message, for ctx, and for at most idle when idle
// is positive.
func (b *inbox) next(ctx context.Context, idle time.Duration) (*nats.Msg, error) {
	var timeout <-chan time.Time
	// A Bounded context is awaited on its parts: its Done channel (and
	// what it takes to close it) is never made.
	var (
		bc                *Bounded
		parentDone, ended <-chan struct{}
		expiry            <-chan time.Time
	)
	if c, ok := ctx.(*Bounded); ok {
		if pd, t, ok := c.await(b.signal); ok {
			bc, parentDone = c, pd
			if t != nil {
				expiry = t.C
			}
			defer c.leave(t)
		}
	}
	if bc == nil {
		ended = ctx.Done()
	}
	for {
		b.mu.Lock()
		if len(b.q) > 0 {
			m := b.q[0]
			b.q[0] = nil
			b.q = b.q[1:]
			b.mu.Unlock()
			return m, nil
		}
		gone := b.gone
		b.mu.Unlock()
		if gone {
			return nil, errResponderLost
		}
		if bc != nil {
			if err := bc.Err(); err != nil { // Cancel signalled
				return nil, err
			}
		}
		if idle > 0 && timeout == nil {
			t := time.NewTimer(idle)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-b.signal:
		case <-ended:
			return nil, ctx.Err()
		case <-parentDone:
			bc.fromParent()
			return nil, bc.Err()
		case <-expiry:
			bc.expire()
			return nil, bc.Err()
		case <-b.done:
			return nil, errClosed
		case <-b.lost:
			return nil, errLinkLost
		case <-timeout:
			return nil, errIdle
		}
	}
}

// confirm waits until the server has processed what this connection sent,
// subscriptions included, so that a subscriber is reachable as soon as
// Handle or Subscribe returns: a request another connection sends right
// after must not find "no responders". Without a connection the
// subscription is sent on reconnect, so a failure here changes nothing.
func (c *Conn) confirm() {
	_ = c.nc.FlushTimeout(5 * time.Second)
}
