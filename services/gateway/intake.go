package gateway

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Request bodies are the one thing a client can make the gateway hold on
// its behalf, so their intake is bounded three ways, whatever the handler:
//
//   - memory follows the bytes that arrive, not the size a client
//     announces: an announced size is allocated only once the body has
//     shown it is coming, and then counts in the budget at once
//     (readAnnounced; a shared hand-off file gets its pages as they are
//     written);
//   - the bytes received by all bodies in flight, and those compressed
//     bodies and gRPC messages inflate to as they are produced, count
//     against one budget (Limits.HTTPMaxInflightBodySize): once it is
//     spent, a body that would add to it is refused with UNAVAILABLE, so a
//     crowd of large, lying or highly compressed uploads cannot exhaust
//     memory. A body alone may exceed it, so that a tensor larger than the
//     budget still goes through on a quiet gateway;
//   - a body must keep arriving at a minimum rate after a grace period
//     (Limits.HTTPBodyMinRate, HTTPBodyGrace): a client trickling bytes
//     loses its connection instead of holding it, and its buffer, forever,
//     while a large upload on a slow link still completes.

// inflightBudget counts the body bytes received by requests in flight.
type inflightBudget struct {
	limit int64 // <= 0: no limit
	used  atomic.Int64
}

// take counts n more bytes for a body that already holds mine, unless
// that passes the limit while other bodies hold part of it.
func (b *inflightBudget) take(mine, n int64) bool {
	for {
		used := b.used.Load()
		if b.limit > 0 && used-mine > 0 && used+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

func (b *inflightBudget) give(n int64) { b.used.Add(-n) }

// intakeBody is a request body under the gateway's limits.
type intakeBody struct {
	body    io.ReadCloser
	g       *Gateway
	w       http.ResponseWriter // its read deadlines are set through rc
	start   time.Time
	n       int64 // bytes received
	held    int64 // bytes held beyond them: what the body inflated to (hold)
	charged int64 // bytes counted in the budget: received, held or reserved
	failed  error
	slow    bool // failed the minimum rate: the connection goes
}

// limitBodies puts every request body of next under the intake limits.
func (g *Gateway) limitBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		b := &intakeBody{body: r.Body, g: g, w: w, start: time.Now()}
		r.Body = b
		defer b.done()
		next.ServeHTTP(w, r)
	})
}

func (b *intakeBody) Read(p []byte) (int, error) {
	if b.failed != nil {
		return 0, b.failed
	}
	lim := &b.g.cfg.Limits
	if lim.HTTPBodyMinRate > 0 {
		// By now the body must have delivered rate × (elapsed − grace)
		// bytes: the next read may wait until that holds for one byte more.
		due := lim.HTTPBodyGrace + time.Duration(float64(b.n+1)/float64(lim.HTTPBodyMinRate)*float64(time.Second))
		_ = b.rc().SetReadDeadline(b.start.Add(due))
	}
	n, err := b.body.Read(p)
	if n > 0 {
		b.n += int64(n)
		if err := b.charge(); err != nil {
			return 0, err
		}
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		b.slow = true
		b.failed = tritonerr.InvalidArgf("request body too slow: %d bytes in %s, below the minimum rate of %d bytes/s after %s (--http-body-min-rate, --http-body-grace)",
			b.n, time.Since(b.start).Round(time.Millisecond), lim.HTTPBodyMinRate, lim.HTTPBodyGrace)
		return n, b.failed
	}
	if err != nil && lim.HTTPBodyMinRate > 0 {
		// Done with the body: the server's own reads (the next request,
		// or noticing that the client went away) must not inherit the
		// deadline.
		_ = b.rc().SetReadDeadline(time.Time{})
	}
	return n, err
}

func (b *intakeBody) Close() error { return b.body.Close() }

// charge counts in the budget what the body has received and holds beyond
// what is counted already, unless the budget refuses it.
func (b *intakeBody) charge() error {
	if more := b.n + b.held - b.charged; more > 0 {
		if !b.g.inflight.take(b.charged, more) {
			return b.refuse()
		}
		b.charged += more
	}
	return nil
}

// hold counts n more bytes that the body's request holds beyond the bytes
// received: a compressed body's inflated bytes, as they are produced
// (readBody), so that a small compressed body counts in the budget for
// what it makes the server hold.
func (b *intakeBody) hold(n int64) error {
	if b.failed != nil {
		return b.failed
	}
	b.held += n
	return b.charge()
}

// rc is the response's controller, made where it is used (on the stack:
// most bodies never set a deadline, and a controller kept in b would be an
// allocation of every request's).
func (b *intakeBody) rc() *http.ResponseController { return http.NewResponseController(b.w) }

// done gives the body's bytes back to the budget when its request ends.
func (b *intakeBody) done() {
	b.g.inflight.give(b.charged)
	b.charged = 0
	switch {
	case b.slow:
		// The rest of a slow body is not worth waiting for: a deadline in
		// the past makes the server drop the connection after the answer.
		_ = b.rc().SetReadDeadline(time.Unix(1, 0))
		b.g.conns.closed.WithLabelValues("http", "min_rate").Inc()
	case b.g.cfg.Limits.HTTPBodyMinRate > 0:
		_ = b.rc().SetReadDeadline(time.Time{})
	}
}

// firstBodyChunk is what a body of announced length must deliver before
// the rest of its announced length is allocated.
const firstBodyChunk = 64 << 10

// maxUpfront bounds what an announcement can make the gateway allocate
// ahead of the bytes: past it, the buffer grows (doubling) with the bytes
// that arrive, so a client that announces a terabyte and sends a little
// more than firstBodyChunk cannot exhaust the process's address space.
// A variable so that tests can exercise the growth with small bodies.
var maxUpfront int64 = 1 << 30

// readAnnounced reads a body that announced n bytes. Its first
// firstBodyChunk bytes go into a buffer of their own; once they have
// arrived, the announced size (up to maxUpfront) is reserved (reserve,
// which may refuse) and allocated at once, so that the rest is read in
// place, without the copies that growing a buffer step by step would take.
// A client announcing gigabytes and sending ten bytes costs ten bytes and
// a small buffer; one that keeps sending has its announcement counted in
// the budget, and a body larger than maxUpfront is reserved and grown as
// it arrives.
func readAnnounced(r io.Reader, n int64, reserve func(total int64) error) ([]byte, error) {
	first := make([]byte, min(n, firstBodyChunk))
	if _, err := io.ReadFull(r, first); err != nil {
		return nil, unexpectedEOF(err)
	}
	if int64(len(first)) == n {
		return first, nil
	}
	buf := first
	for size := min(n, max(maxUpfront, int64(len(first)))); ; size = min(n, 2*size) {
		if reserve != nil {
			if err := reserve(size); err != nil {
				return nil, err
			}
		}
		next := make([]byte, size)
		copy(next, buf)
		m, err := io.ReadFull(r, next[len(buf):])
		if err != nil {
			return nil, unexpectedEOF(err)
		}
		buf = next[:len(buf)+m]
		if size == n {
			return buf, nil
		}
	}
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// reserve counts total bytes of the body in the budget now, ahead of
// their arrival (a buffer of that size is about to be allocated).
func (b *intakeBody) reserve(total int64) error {
	total += b.held
	if total <= b.charged {
		return nil
	}
	if !b.g.inflight.take(b.charged, total-b.charged) {
		return b.refuse()
	}
	b.charged = total
	return nil
}

func (b *intakeBody) refuse() error {
	b.failed = tritonerr.Unavailablef("request body refused: the server is already receiving %d bytes of request bodies, its limit (--http-max-inflight-body-size %d); retry later",
		b.g.inflight.used.Load(), b.g.inflight.limit)
	return b.failed
}

// reserveFunc is r's body's reserve, or nil when the body is not under
// the intake limits.
func reserveFunc(r *http.Request) func(int64) error {
	if b, ok := r.Body.(*intakeBody); ok {
		return b.reserve
	}
	return nil
}

// bodyError is the answer for a body that could not be read: the intake's
// own errors as they are, anything else (the client went away, a short
// body) as Triton's "failed to read".
func bodyError(err error, format string) error {
	var te *tritonerr.Error
	if errors.As(err, &te) {
		return te
	}
	return tritonerr.InvalidArgf(format, err)
}
