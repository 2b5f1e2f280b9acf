package bus

import (
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/pkg/routines"
)

// handleChanLen is how many requests a subject of HandleBody (inference,
// which any number of clients may send at once) holds received but not
// yet taken by a reader. NATS drops what does not fit as a slow consumer
// (reported to the connection's error handler), so it is ample: readers
// hand any backlog over at once (readers.take), and it only fills while
// every goroutine of the process is kept from running.
const handleChanLen = 4096

// controlChanLen is handleChanLen for the subjects of Handle: control,
// statistics, settings and catalogs, asked by a few services at a time.
// A channel's buffer is scanned whole at every garbage collection, empty
// or not, and a server handles a dozen such subjects: at 4096 pointers
// each they were most of a quarter of a small standalone server's live
// heap, and scanning them every cycle cost a 64-byte HTTP request through
// it 17k instructions of 380k (BenchmarkAlone under callgrind).
const controlChanLen = 256

// readersKept is how many readers of a subject wait for requests without
// a time limit; more, left over from a burst of concurrent requests, exit
// once idle for routines.PoolIdle.
const readersKept = 2

// readers serve the requests of one Handle subscription. NATS delivers
// them from its connection's reading goroutine straight into ch, where
// readers wait: the reader that takes a request serves it itself, one
// hand-off between goroutines fewer than an async subscription's
// goroutine passing each request to a worker. Requests are still served
// concurrently without limit: a reader taking a request when no other
// waits starts one, and hands whatever queued behind it to the Conn's
// workers before serving its own.
type readers struct {
	c  *Conn
	s  *Subscription
	ch chan *nats.Msg
	h  BodyFunc
	// idle counts the readers waiting for a request.
	idle atomic.Int32
}

func newReaders(c *Conn, s *Subscription, h BodyFunc, chanLen int) *readers {
	return &readers{c: c, s: s, ch: make(chan *nats.Msg, chanLen), h: h}
}

// start adds a waiting reader. The Subscription's inflight counts it, so
// that Drain returns only once ch is emptied and closed.
func (r *readers) start() {
	r.idle.Add(1)
	r.s.inflight.Add(1)
	go r.read()
}

func (r *readers) read() {
	defer r.s.inflight.Done()
	var idle *time.Timer
	for {
		timed := r.idle.Load() > readersKept
		if timed && idle == nil {
			idle = time.NewTimer(routines.PoolIdle)
			defer idle.Stop()
		} else if timed {
			idle.Reset(routines.PoolIdle)
		}
		var m *nats.Msg
		var ok bool
		if timed {
			select {
			case m, ok = <-r.ch:
			case <-idle.C:
				if r.idle.Add(-1) > 0 {
					return
				}
				r.idle.Add(1) // the last one waiting stays
				continue
			}
		} else {
			m, ok = <-r.ch
		}
		if !ok {
			return // the subscription closed and ch is empty
		}
		if r.idle.Add(-1) == 0 {
			r.start() // someone must wait for the next request
		}
		r.take()
		if !r.s.stopped.Load() {
			r.s.inflight.Add(1)
			r.c.serve(r.s, m, r.h)
		}
		r.idle.Add(1)
	}
}

// take hands the requests queued in ch to the Conn's workers, so that a
// backlog never waits for the requests ahead of it (nor fills ch) while
// this reader serves its own. It takes no more than were queued when it
// began: under a flood, the reader's own request still gets served.
func (r *readers) take() {
	for n := len(r.ch); n > 0; n-- {
		select {
		case m, ok := <-r.ch:
			if !ok {
				return
			}
			if r.s.stopped.Load() {
				continue
			}
			r.s.inflight.Add(1)
			r.c.workers.Go(func() { r.c.serve(r.s, m, r.h) })
		default:
			return
		}
	}
}
