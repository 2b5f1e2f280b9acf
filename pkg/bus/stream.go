package bus

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Streamed replies: a request may be answered by any number of messages
// (a decoupled model's responses). The requester asks for a stream with
// HeaderStream (its window); the responder's handler finds a StreamWriter
// in its ctx (StreamOf) and sends through it; what the handler returns is
// the stream's last message. Credit-based flow control bounds the messages
// in flight, so a slow consumer slows the handler instead of growing
// buffers anywhere. See doc.go for the wire format.

// Header names of streamed replies.
const (
	// HeaderStream on a request asks for a streamed reply and gives the
	// requester's window (messages it accepts beyond those it has
	// consumed). On a reply it is the stream's opening message, whose reply
	// subject is the responder's private subject for credits.
	HeaderStream = "Nereid-Stream"
	// HeaderSeq numbers the messages of a stream from 0.
	HeaderSeq = "Nereid-Seq"
	// HeaderEnd marks the last message of a stream.
	HeaderEnd = "Nereid-End"
	// HeaderBatch on a stream message: it carries that many items, each a
	// 4-byte little-endian length and the item's bytes.
	HeaderBatch = "Nereid-Batch"
	// HeaderCredit, from the requester to the responder's private subject,
	// counts the stream messages consumed so far.
	HeaderCredit = "Nereid-Credit"
	// HeaderAsk on a request: the requester answers HeaderAsk on a stream
	// message with credit as soon as it consumes that message. On a stream
	// message: the responder holds what it sends next until that credit.
	HeaderAsk = "Nereid-Ask"
)

// streamAskLow is how many messages a responder keeps in flight before it
// gathers what it sends next into one batch, when the requester answers
// HeaderAsk: a producer faster than its consumer then sends a few large
// batches, each released by the credit for the one before, instead of one
// message per item.
const streamAskLow = 2

// answerAsk is whether requesters say they answer HeaderAsk; tests turn it
// off to act as a requester that does not (whose responders batch only
// while the window is full).
var answerAsk = true

// streamOpen is the value of HeaderStream on the opening message.
const streamOpen = "open"

// DefaultStreamWindow is the window a requester gives when it does not
// choose one.
const DefaultStreamWindow = 64

// StreamPing is how often a requester tells the responder it is still there
// (a credit message), which also finds out when the responder is gone.
const StreamPing = time.Second

// StreamItem is one message of a streamed reply: a body or an error, the
// last one Final. A Final item with neither is the end alone.
type StreamItem struct {
	Data  []byte
	Err   *tritonerr.Error
	Final bool
}

// Stream is the requester's side of a streamed reply. One goroutine
// receives from it; Close releases it.
type Stream struct {
	c       *Conn
	ctx     context.Context
	subject string
	reply   string
	in      *inbox
	window  int
	first   *nats.Msg    // a message the request leg already received
	batch   []StreamItem // the rest of a batch being read
	queued  bool         // no idle timeout before the stream opens (StreamQueued)

	mu       sync.Mutex
	peer     string // the responder's private subject, once opened
	consumed int
	granted  int // consumed count last sent as credit
	ended    bool
	closed   bool

	stop   chan struct{} // closed by Close; never reassigned, as ping reads it unlocked
	pinger sync.WaitGroup

	// An in-process stream (localstream.go) has only these.
	local       *localStream
	cancelLocal context.CancelFunc
}

// Stream sends req on subject asking for a streamed reply and returns the
// stream; window bounds the messages in flight (0: DefaultStreamWindow).
// ctx's deadline, if any, bounds the whole stream; cancelling ctx (or
// Close before the end) cancels the responder's handler.
func (c *Conn) Stream(ctx context.Context, subject string, req proto.Message, window int) (*Stream, error) {
	return c.stream(ctx, subject, req, window, false)
}

// StreamQueued is Stream for a request that may wait in a queue before
// anyone opens its stream (the sequence router holds a request until its
// sequence's turn): no idle timeout applies until the stream opens, so
// ctx alone bounds that wait. Once open, the pings find a responder that
// went away as for Stream.
func (c *Conn) StreamQueued(ctx context.Context, subject string, req proto.Message, window int) (*Stream, error) {
	return c.stream(ctx, subject, req, window, true)
}

func (c *Conn) stream(ctx context.Context, subject string, req proto.Message, window int, queued bool) (*Stream, error) {
	if window <= 0 {
		window = DefaultStreamWindow
	}
	if c.opts.local != nil && !c.closed() {
		if e := c.opts.local.take(subject); e != nil {
			return c.streamLocal(ctx, e, subject, req, window)
		}
	}
	parts, err := c.opts.codec.Marshal(req)
	if err != nil {
		return nil, tritonerr.Internalf("bus: cannot encode request to %s: %v", target(subject), err)
	}
	if err := ctx.Err(); err != nil {
		return nil, transferError(err, subject)
	}
	reply, in := c.registerRequest(subject)
	s := &Stream{c: c, ctx: ctx, subject: subject, reply: reply, in: in, window: window, queued: queued, stop: make(chan struct{})}
	hdr := make(nats.Header, 4)
	hdr[HeaderStream] = []string{strconv.Itoa(window)}
	if answerAsk {
		hdr[HeaderAsk] = []string{"1"}
	}
	if d, ok := ctx.Deadline(); ok {
		setDeadline(hdr, d)
	}
	setCancelKey(hdr, in.key)
	otel.GetTextMapPropagator().Inject(ctx, HeaderCarrier(hdr))
	body := newPayload(parts...)
	if c.fits(body.Len(), hdr) {
		err = c.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Header: hdr, Data: body.bytes()})
	} else {
		s.first, _, err = c.sendRequest(ctx, in, subject, reply, hdr, body)
	}
	if err != nil {
		c.unregister(reply)
		return nil, c.sendCancel(ctx, reply, in.key, transferError(err, subject))
	}
	s.pinger.Go(s.ping)
	return s, nil
}

// Recv returns the next item. After the Final item, or an error, the stream
// is over. Errors are *tritonerr.Error: the responder's error when its
// handler failed before streaming anything (a refusal), UNAVAILABLE when the
// responder went away or the deadline passed, CANCELLED when ctx was; an
// error the responder sent as an item is the item's Err, not Recv's error.
func (s *Stream) Recv() (StreamItem, error) {
	if s.local != nil {
		return s.recvLocal()
	}
	for {
		s.mu.Lock()
		ended, peer := s.ended, s.peer
		s.mu.Unlock()
		if ended {
			return StreamItem{}, tritonerr.Internalf("bus: stream from %s already ended", target(s.subject))
		}
		if len(s.batch) > 0 {
			item := s.batch[0]
			s.batch[0] = StreamItem{}
			s.batch = s.batch[1:]
			return item, nil
		}
		m := s.first
		s.first = nil
		if m == nil {
			// Until the responder opens the stream only the idle timeout
			// can tell that the request reached nobody alive; after, the
			// pings do.
			idle := time.Duration(0)
			if peer == "" && !s.queued {
				idle = s.c.opts.idleTimeout
			}
			var err error
			if m, err = s.in.next(s.ctx, idle); err != nil {
				return StreamItem{}, s.fail(s.transferError(err))
			}
		}
		switch {
		case isNoResponders(m):
			if peer == "" {
				return StreamItem{}, s.fail(tritonerr.Unavailablef("%s", noRespondersMessage(s.subject)))
			}
			return StreamItem{}, s.fail(s.transferError(errPeerGone))
		case m.Header[HeaderAbort] != nil:
			return StreamItem{}, s.fail(s.transferError(errAborted))
		case get(m.Header, HeaderStream) == streamOpen:
			s.mu.Lock()
			s.peer = m.Reply
			s.mu.Unlock()
			continue
		case m.Header[HeaderAck] != nil || m.Header[HeaderContinue] != nil:
			continue // a late acknowledgement of our own request chunks
		case m.Header[HeaderSeq] == nil:
			// A plain reply: the responder refused the request before
			// streaming (an error), or does not stream.
			if e := remoteError(m.Header); e != nil {
				return StreamItem{}, s.fail(e)
			}
			s.end()
			return StreamItem{Data: m.Data, Final: true}, nil
		}
		seq, err := strconv.Atoi(get(m.Header, HeaderSeq))
		s.mu.Lock()
		want := s.consumed
		s.mu.Unlock()
		if err != nil || seq != want {
			return StreamItem{}, s.fail(tritonerr.Internalf("bus: stream from %s: expected message %d, got %q", target(s.subject), want, get(m.Header, HeaderSeq)))
		}
		item := StreamItem{Data: m.Data, Err: remoteError(m.Header), Final: m.Header[HeaderEnd] != nil}
		if item.Final {
			s.end()
			return item, nil
		}
		if m.Header[HeaderBatch] != nil {
			items, err := splitBatch(m)
			if err != nil {
				return StreamItem{}, s.fail(tritonerr.Internalf("bus: stream from %s: %v", target(s.subject), err))
			}
			item, s.batch = items[0], items[1:]
		}
		s.consume(m.Header[HeaderAsk] != nil)
		return item, nil
	}
}

// Unmarshal decodes an item's Data with the Conn's codec (which may keep
// references into data).
func (s *Stream) Unmarshal(data []byte, m proto.Message) error {
	if err := s.c.opts.codec.Unmarshal(data, m); err != nil {
		return tritonerr.Internalf("bus: cannot decode reply from %s: %v", target(s.subject), err)
	}
	return nil
}

func (s *Stream) transferError(err error) error {
	if errors.Is(err, errPeerGone) {
		return tritonerr.Unavailablef("stream from %s ended: the responder went away before its last response", target(s.subject))
	}
	if errors.Is(err, errIdle) {
		return tritonerr.Unavailablef("stream from %s failed: nobody answered within %v", target(s.subject), s.c.opts.idleTimeout)
	}
	if errors.Is(err, errAborted) {
		return tritonerr.Unavailablef("stream from %s ended: the responder gave it up before its last response", target(s.subject))
	}
	return transferError(err, s.subject)
}

// splitBatch cuts a batch message into its items.
func splitBatch(m *nats.Msg) ([]StreamItem, error) {
	n, err := strconv.Atoi(get(m.Header, HeaderBatch))
	if err != nil || n < 1 || n > len(m.Data)/4 {
		return nil, fmt.Errorf("%w: bad %s %q", errProtocol, HeaderBatch, get(m.Header, HeaderBatch))
	}
	items := make([]StreamItem, 0, n)
	b := m.Data
	for range n {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: batch of %d items cut short", errProtocol, n)
		}
		size := binary.LittleEndian.Uint32(b)
		if uint64(size) > uint64(len(b)-4) {
			return nil, fmt.Errorf("%w: batch item of %d bytes overruns the message", errProtocol, size)
		}
		items = append(items, StreamItem{Data: b[4 : 4+size : 4+size]})
		b = b[4+size:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last item of a batch", errProtocol, len(b))
	}
	return items, nil
}

// consume counts one message and grants more credit once half the window
// has been used, so credits cost one message per half window, or at once
// when the responder asked for it (it holds its next messages until then).
func (s *Stream) consume(ask bool) {
	s.mu.Lock()
	s.consumed++
	send := s.peer != "" && (ask || s.consumed-s.granted >= max(1, s.window/2))
	if send {
		s.granted = s.consumed
	}
	peer, n := s.peer, s.consumed
	s.mu.Unlock()
	if send {
		s.credit(peer, n)
	}
}

func (s *Stream) credit(peer string, n int) {
	_ = s.c.nc.PublishMsg(&nats.Msg{Subject: peer, Reply: s.reply, Header: nats.Header{HeaderCredit: []string{strconv.Itoa(n)}}})
}

// ping repeats the credit every StreamPing: the responder learns the
// requester is alive, and a responder whose connection is gone makes NATS
// answer "no responders", which Recv reports.
func (s *Stream) ping() {
	t := time.NewTicker(StreamPing)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.c.done:
			return
		case <-t.C:
		}
		s.mu.Lock()
		peer, n := s.peer, s.consumed
		s.granted = n
		s.mu.Unlock()
		if peer != "" {
			s.credit(peer, n)
		}
	}
}

// end marks the stream finished normally.
func (s *Stream) end() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	s.Close()
}

// fail ends the stream with err, telling the responder when it was
// cancelled here.
func (s *Stream) fail(err error) error {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	s.Close()
	return s.c.sendCancel(s.ctx, s.reply, s.in.key, err)
}

// Close releases the stream. Before its end, it cancels the responder's
// handler: nobody reads what it would send.
func (s *Stream) Close() {
	if s.local != nil {
		s.closeLocal()
		return
	}
	s.mu.Lock()
	ended, closed := s.ended, s.closed
	s.ended, s.closed = true, true
	s.mu.Unlock()
	if closed {
		return
	}
	close(s.stop)
	s.pinger.Wait()
	s.c.unregister(s.reply)
	if !ended {
		s.c.publishCancel(s.reply, s.in.key)
	}
}

// StreamWriter is the responder's side of a streamed reply. Sends are
// ordered (safe for concurrent use, delivered in the order they return).
type StreamWriter struct {
	c       *Conn
	subject string // the request's subject, for messages
	reply   string
	ackTo   string
	in      *inbox
	window  int
	// low is how many messages stay in flight before sends gather into a
	// batch: streamAskLow when the requester answers HeaderAsk, else the
	// window.
	low     int
	release func()       // unregisters an inbox the writer opened (ReplyStream)
	local   *localStream // the requester is in this process (localstream.go)

	mu           sync.Mutex
	seq          int // messages sent
	acked        int // messages the requester has consumed
	pending      [][]byte
	pendingBytes int
	silent       time.Duration // waited without word from the requester
	ended        bool
	err          error
	room         chan struct{} // a message reached the inbox (capacity 1)
}

type streamKey struct{}

// StreamOf returns the StreamWriter of the request a handler serves, or
// nil when the requester did not ask for a stream.
func StreamOf(ctx context.Context) *StreamWriter {
	w, _ := ctx.Value(streamKey{}).(*StreamWriter)
	return w
}

// openStream starts the reply stream of m, using the request's private
// inbox when it came in chunks, and tells the requester where credits go.
func (c *Conn) openStream(m *nats.Msg, ackTo string, in *inbox) (w *StreamWriter, release func()) {
	window, err := strconv.Atoi(get(m.Header, HeaderStream))
	if err != nil || window < 1 {
		window = DefaultStreamWindow
	}
	release = func() {}
	if in == nil {
		ackTo, in = c.register(m.Reply)
		release = func() { c.unregister(ackTo) }
	}
	low := window
	if m.Header[HeaderAsk] != nil {
		low = min(window, streamAskLow)
	}
	w = &StreamWriter{c: c, subject: m.Subject, reply: m.Reply, ackTo: ackTo, in: in, window: window, low: low, room: make(chan struct{}, 1)}
	in.setNotify(w.credited)
	w.open()
	return w, release
}

// ReplyStream opens the streamed reply of a request that another process
// received and passed on with its reply subject (HandleDelegated): the
// sequence router hands a decoupled model's request to the executor that
// runs it, which streams the responses straight to the requester. window
// is the requester's (it travels with the delegated request); subject
// names the request in errors. The writer works as StreamOf's, except that
// nothing ends the stream for the caller: it sends the last message
// (Send or SendError with final, or End) and then Closes the writer. Use
// TrackRequest for the requester's cancellation. The requester must answer
// HeaderAsk (Stream and StreamQueued do).
func (c *Conn) ReplyStream(subject, reply string, window int) *StreamWriter {
	if window < 1 {
		window = DefaultStreamWindow
	}
	ackTo, in := c.register(reply)
	w := &StreamWriter{c: c, subject: subject, reply: reply, ackTo: ackTo, in: in, window: window, low: min(window, streamAskLow),
		room: make(chan struct{}, 1), release: func() { c.unregister(ackTo) }}
	in.setNotify(w.credited)
	w.open()
	return w
}

// Close releases a writer opened with ReplyStream; sends after it fail.
// Closing before the last message leaves the requester to find the
// responder gone.
func (w *StreamWriter) Close() {
	w.mu.Lock()
	if w.err == nil {
		w.err = tritonerr.Internalf("bus: stream to the requester of %s is closed", target(w.subject))
	}
	release := w.release
	w.release = nil
	w.mu.Unlock()
	if release != nil {
		release()
	}
}

// open tells the requester where credits go. Sent again while waiting for
// credit, it is the responder's probe: its reply subject gets NATS's "no
// responders" when the requester is gone.
func (w *StreamWriter) open() {
	_ = w.c.nc.PublishMsg(&nats.Msg{Subject: w.reply, Reply: w.ackTo, Header: nats.Header{HeaderStream: []string{streamOpen}}})
}

// Send sends m as the stream's next message; final makes it the last.
// It blocks while the window is full, until the requester grants credit,
// ctx ends, or the requester is found gone (then the handler's ctx is
// cancelled too).
func (w *StreamWriter) Send(ctx context.Context, m proto.Message, final bool) error {
	parts, err := w.c.opts.codec.Marshal(m)
	if err != nil {
		return tritonerr.Internalf("bus: cannot encode reply from %s: %v", target(w.subject), err)
	}
	return w.send(ctx, newPayload(parts...).bytes(), nil, final)
}

// SendEncoded is Send for a message the caller encoded itself (as the
// Conn's codec would, so that the requester decodes it alike). The
// writer keeps body until it is sent; a requester in this process (Local)
// reads body itself, so the caller must not reuse it.
func (w *StreamWriter) SendEncoded(ctx context.Context, body []byte, final bool) error {
	return w.send(ctx, body, nil, final)
}

// SendError sends err as the stream's next message (the requester sees
// it with its kind and message); final makes it the last.
func (w *StreamWriter) SendError(ctx context.Context, err error, final bool) error {
	return w.send(ctx, nil, errorHeader(err), final)
}

// End sends the end of the stream alone, unless it has ended already.
func (w *StreamWriter) End(ctx context.Context) error {
	w.mu.Lock()
	ended := w.ended
	w.mu.Unlock()
	if ended {
		return nil
	}
	return w.send(ctx, nil, nil, true)
}

// refuse ends a stream that has sent nothing, so that the handler's error
// goes out as a plain error reply; it reports false once something was sent.
func (w *StreamWriter) refuse() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seq > 0 || w.ended || w.err != nil {
		return false
	}
	w.ended = true
	return true
}

// Ended reports whether the last message has been sent.
func (w *StreamWriter) Ended() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ended
}

func (w *StreamWriter) send(ctx context.Context, body []byte, hdr nats.Header, final bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.err != nil:
		return w.err
	case w.ended:
		return tritonerr.Internalf("bus: stream to %s already ended", target(w.subject))
	}
	if err := ctx.Err(); err != nil {
		return transferError(err, w.subject)
	}
	if w.local != nil {
		return w.sendLocal(ctx, body, hdr, final)
	}
	if !w.c.fits(len(body), hdr) {
		w.err = tritonerr.Internalf("bus: a response of %d bytes from %s does not fit in one message of the bus (max payload %d bytes)", len(body), target(w.subject), w.c.nc.MaxPayload())
		return w.err
	}
	// A plain small message joins a batch while low messages are in
	// flight; errors and the end travel alone, after the batch.
	batchable := !final && hdr == nil && len(body) <= streamBatchBytes
	for {
		if err := w.takeCredits(); err != nil {
			return w.fail(err)
		}
		inFlight := w.seq - w.acked
		room, low := inFlight < w.window, inFlight < w.low
		fits := batchable && len(w.pending) < streamBatchItems && w.pendingBytes+len(body) <= streamBatchBytes
		// The end may always go out: it is small and it frees the requester.
		if len(w.pending) > 0 && (low || final || (room && !fits)) {
			if err := w.flush(); err != nil {
				return err
			}
			continue
		}
		if len(w.pending) == 0 && (low || final || (room && !batchable)) {
			return w.publish(body, hdr, final)
		}
		if fits {
			w.pending = append(w.pending, body)
			w.pendingBytes += len(body)
			return nil
		}
		if err := w.awaitRoom(ctx); err != nil {
			return w.fail(err)
		}
	}
}

// Batches: while low messages are in flight (the window when the requester
// does not answer HeaderAsk), small messages queue in one batch (at most
// streamBatchItems, streamBatchBytes) that goes out as one message when
// credit comes. A producer faster than the consumer thus sends fewer,
// larger messages, and the first responses still go out one by one at once.
const (
	streamBatchItems = 256
	streamBatchBytes = 64 << 10
)

// publish sends one stream message; w.mu is held.
func (w *StreamWriter) publish(body []byte, hdr nats.Header, final bool) error {
	if hdr == nil {
		hdr = make(nats.Header, 3)
	}
	hdr[HeaderSeq] = []string{strconv.Itoa(w.seq)}
	if !final && w.low < w.window && w.seq+1-w.acked >= w.low {
		// What follows waits for the credit this asks for.
		hdr[HeaderAsk] = []string{"1"}
	}
	if final {
		hdr[HeaderEnd] = []string{"1"}
	}
	if err := w.c.nc.PublishMsg(&nats.Msg{Subject: w.reply, Reply: w.ackTo, Header: hdr, Data: body}); err != nil {
		w.err = transferError(err, w.subject)
		return w.err
	}
	w.seq++
	w.ended = final
	return nil
}

// flush sends the pending batch as one message: Nereid-Batch: k, the body
// k frames of a 4-byte little-endian length and the item; w.mu is held.
func (w *StreamWriter) flush() error {
	var body []byte
	if len(w.pending) == 1 {
		body = w.pending[0]
	} else {
		body = make([]byte, 0, w.pendingBytes+4*len(w.pending))
		for _, it := range w.pending {
			body = binary.LittleEndian.AppendUint32(body, uint32(len(it)))
			body = append(body, it...)
		}
	}
	hdr := make(nats.Header, 3)
	if len(w.pending) > 1 {
		hdr[HeaderBatch] = []string{strconv.Itoa(len(w.pending))}
	}
	clear(w.pending)
	w.pending, w.pendingBytes = w.pending[:0], 0
	return w.publish(body, hdr, false)
}

// fail records what ended the stream; a requester found gone cancels the
// handler too. w.mu is held.
func (w *StreamWriter) fail(err error) error {
	w.err = w.failure(err)
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		w.c.cancelServed(w.reply) // nobody reads: stop the work
	}
	return w.err
}

// credited runs when a message reaches the writer's inbox (on the Conn's
// dispatch goroutine): a credit may let the pending batch go without
// waiting for the producer's next send, and wakes a send that waits.
func (w *StreamWriter) credited() {
	w.mu.Lock()
	if w.err == nil && !w.ended && len(w.pending) > 0 {
		if err := w.takeCredits(); err != nil {
			w.fail(err)
		} else if w.seq-w.acked < w.low {
			_ = w.flush()
		}
	}
	w.mu.Unlock()
	select {
	case w.room <- struct{}{}:
	default:
	}
}

func (w *StreamWriter) failure(err error) error {
	switch {
	case errors.Is(err, errPeerGone), errors.Is(err, errAborted):
		return tritonerr.New(tritonerr.Cancelled, "stream to the requester of %s ended: the requester went away", target(w.subject))
	case errors.Is(err, errIdle):
		return tritonerr.New(tritonerr.Cancelled, "stream to the requester of %s ended: no credit within %v", target(w.subject), w.c.opts.idleTimeout)
	}
	return transferError(err, w.subject)
}

// takeCredits applies the credits that arrived; w.mu is held. A "no
// responders" status or an abort on the inbox means the requester is gone.
func (w *StreamWriter) takeCredits() error {
	for {
		m := w.in.poll()
		if m == nil {
			return nil
		}
		switch {
		case isNoResponders(m):
			return errPeerGone
		case m.Header[HeaderAbort] != nil:
			return errAborted
		case m.Header[HeaderCredit] != nil:
			n, err := strconv.Atoi(get(m.Header, HeaderCredit))
			if err != nil || n > w.seq {
				return fmt.Errorf("%w: bad credit %q", errProtocol, get(m.Header, HeaderCredit))
			}
			w.acked = max(w.acked, n)
			w.silent = 0
		}
	}
}

// awaitRoom waits, w.mu released, until a message reaches the inbox, ctx
// ends, or StreamPing passes; then it probes the requester (resending
// "open"), and gives up after the idle timeout without word from it.
func (w *StreamWriter) awaitRoom(ctx context.Context) error {
	w.mu.Unlock()
	defer w.mu.Lock()
	t := time.NewTimer(StreamPing)
	defer t.Stop()
	select {
	case <-w.room:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.c.done:
		return errClosed
	case <-w.in.lost:
		return errLinkLost
	case <-t.C:
	}
	w.mu.Lock()
	w.silent += StreamPing
	silent := w.silent
	w.mu.Unlock()
	if silent >= w.c.opts.idleTimeout {
		return errIdle
	}
	w.open()
	return nil
}

// poll returns the next queued message without waiting, or nil.
func (b *inbox) poll() *nats.Msg {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.q) == 0 {
		return nil
	}
	m := b.q[0]
	b.q[0] = nil
	b.q = b.q[1:]
	return m
}

// setNotify makes put call f after queueing each message.
func (b *inbox) setNotify(f func()) {
	b.mu.Lock()
	b.notify = f
	b.mu.Unlock()
}
