package bus

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Streamed replies in-process (Local): a Stream whose handler is in this
// process runs the handler on a pooled goroutine and passes the items
// themselves, the encoded bodies the handler sends, through a queue of at
// most the requester's window (the end may always go, as on the wire): a
// slow consumer slows the handler. The rest is the wire's: a refusal
// before streaming is Recv's error, an error item keeps its kind and
// message alone, the requester's cancellation, deadline or Close before
// the end cancels the handler's ctx, and a requester that went away makes
// the handler's sends fail. A body passed to SendEncoded is the item the
// requester reads: the handler must not reuse it.

// localStream is the queue between one handler and its requester.
type localStream struct {
	mu      sync.Mutex
	q       []StreamItem
	window  int
	refusal *tritonerr.Error // the handler's error before it streamed anything
	gone    bool             // the requester stopped reading
	ready   chan struct{}    // an item or the refusal arrived (capacity 1)
	room    chan struct{}    // an item was taken, or the requester left (capacity 1)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// put queues item, waiting while the window is full (the last item
// excepted), until ctx ends or the requester is gone.
func (ls *localStream) put(ctx context.Context, item StreamItem) error {
	for {
		ls.mu.Lock()
		if ls.gone {
			ls.mu.Unlock()
			return errPeerGone
		}
		if len(ls.q) < ls.window || item.Final {
			ls.q = append(ls.q, item)
			ls.mu.Unlock()
			signal(ls.ready)
			return nil
		}
		ls.mu.Unlock()
		select {
		case <-ls.room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// refuse ends the stream before anything was streamed.
func (ls *localStream) refuse(err *tritonerr.Error) {
	ls.mu.Lock()
	ls.refusal = err
	ls.mu.Unlock()
	signal(ls.ready)
}

// next takes the next item, or the refusal, waiting until ctx ends.
func (ls *localStream) next(ctx context.Context) (StreamItem, *tritonerr.Error, error) {
	for {
		ls.mu.Lock()
		if len(ls.q) > 0 {
			item := ls.q[0]
			ls.q[0] = StreamItem{}
			ls.q = ls.q[1:]
			ls.mu.Unlock()
			signal(ls.room)
			return item, nil, nil
		}
		refusal := ls.refusal
		ls.mu.Unlock()
		if refusal != nil {
			return StreamItem{}, refusal, nil
		}
		select {
		case <-ls.ready:
		case <-ctx.Done():
			return StreamItem{}, nil, ctx.Err()
		}
	}
}

// leave tells the handler nobody reads any more.
func (ls *localStream) leave() {
	ls.mu.Lock()
	ls.gone = true
	ls.q = nil
	ls.mu.Unlock()
	signal(ls.room)
}

// streamLocal serves a stream request with e, a handler in this process.
func (c *Conn) streamLocal(ctx context.Context, e *localHandler, subject string, req proto.Message, window int) (*Stream, error) {
	body := Body{Message: req}
	if e.bytes {
		parts, err := c.opts.codec.Marshal(req)
		if err != nil {
			e.s.inflight.Done()
			return nil, tritonerr.Internalf("bus: cannot encode request to %s: %v", target(subject), err)
		}
		body = Body{Data: newPayload(parts...).bytes()}
	}
	if err := ctx.Err(); err != nil {
		e.s.inflight.Done()
		return nil, transferError(err, subject)
	}
	hctx, err := localContext(ctx, subject)
	if err != nil {
		e.s.inflight.Done()
		return nil, err
	}
	c.opts.local.delivered.Add(1)
	hctx, cancel := context.WithCancel(hctx)
	ls := &localStream{window: window, ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
	w := &StreamWriter{c: e.c, subject: subject, local: ls, window: window, low: window}
	e.c.workers.Go(func() {
		defer e.s.inflight.Done()
		defer cancel()
		resp, err := e.c.invokeBody(context.WithValue(hctx, streamKey{}, w), subject, e.h, body)
		e.c.endStream(hctx, w, resp, err)
	})
	return &Stream{c: c, ctx: ctx, subject: subject, window: window, local: ls, cancelLocal: cancel}, nil
}

// recvLocal is Recv of an in-process stream.
func (s *Stream) recvLocal() (StreamItem, error) {
	s.mu.Lock()
	ended := s.ended
	s.mu.Unlock()
	if ended {
		return StreamItem{}, tritonerr.Internalf("bus: stream from %s already ended", target(s.subject))
	}
	if err := s.ctx.Err(); err != nil {
		// The requester left: its cancellation is the answer, not an item
		// the handler queued as its sends began to fail (next would pick
		// either at random).
		s.Close()
		return StreamItem{}, s.transferError(err)
	}
	item, refusal, err := s.local.next(s.ctx)
	switch {
	case err != nil:
		s.Close()
		return StreamItem{}, s.transferError(err)
	case refusal != nil:
		s.end()
		return StreamItem{}, refusal
	case item.Final:
		s.end()
	}
	return item, nil
}

// closeLocal is Close of an in-process stream: before the end, the
// handler's ctx is cancelled and its sends fail.
func (s *Stream) closeLocal() {
	s.mu.Lock()
	ended, closed := s.ended, s.closed
	s.ended, s.closed = true, true
	s.mu.Unlock()
	if closed {
		return
	}
	if !ended {
		s.local.leave()
		s.cancelLocal()
	}
}

// sendLocal is send to an in-process requester; w.mu is held.
func (w *StreamWriter) sendLocal(ctx context.Context, body []byte, hdr nats.Header, final bool) error {
	item := StreamItem{Data: body, Final: final}
	if hdr != nil {
		item.Err = remoteError(hdr) // the kind and message, as the wire keeps them
	}
	if err := w.local.put(ctx, item); err != nil {
		return w.fail(err)
	}
	w.seq++
	w.ended = final
	return nil
}
