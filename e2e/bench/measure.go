package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Recorder collects request latencies. It is not safe for concurrent use:
// Drive gives each worker its own and merges them at the end, so the timed
// loop never contends on a lock.
type Recorder struct {
	ns     []int64
	sorted bool
}

// NewRecorder returns a recorder with room for n samples, so that adding
// never allocates inside a timed loop.
func NewRecorder(n int) *Recorder { return &Recorder{ns: make([]int64, 0, n)} }

// Add records one latency.
func (r *Recorder) Add(d time.Duration) {
	r.ns = append(r.ns, int64(d))
	r.sorted = false
}

// Merge appends o's samples.
func (r *Recorder) Merge(o *Recorder) {
	r.ns = append(r.ns, o.ns...)
	r.sorted = false
}

// Len is the number of samples.
func (r *Recorder) Len() int { return len(r.ns) }

// Percentile is the nearest-rank percentile (p in [0, 100]); zero without
// samples.
func (r *Recorder) Percentile(p float64) time.Duration {
	if len(r.ns) == 0 {
		return 0
	}
	if !r.sorted {
		slices.Sort(r.ns)
		r.sorted = true
	}
	rank := int(math.Ceil(p / 100 * float64(len(r.ns))))
	rank = min(max(rank, 1), len(r.ns))
	return time.Duration(r.ns[rank-1])
}

// Mean is the arithmetic mean latency.
func (r *Recorder) Mean() time.Duration {
	if len(r.ns) == 0 {
		return 0
	}
	var sum float64
	for _, v := range r.ns {
		sum += float64(v)
	}
	return time.Duration(sum / float64(len(r.ns)))
}

// Result is one measured run of a path at one concurrency.
type Result struct {
	Conc      int
	N         int
	Elapsed   time.Duration
	P50, P99  time.Duration
	Mean, Max time.Duration
	// PerSec is completed requests per second over the whole timed window.
	PerSec float64
}

func (r Result) String() string {
	return fmt.Sprintf("c=%d n=%d p50=%s p99=%s max=%s %.0f req/s", r.Conc, r.N, r.P50, r.P99, r.Max, r.PerSec)
}

// Op sends one request and checks the answer. full asks for a complete
// check (used while warming up); otherwise the op checks only what it can
// afford inside the timed loop (status, sizes, a sample of the bytes) so
// the client's checking does not dominate what is measured. Any error is
// fatal to the run: a broken server must never show a fast number.
type Op func(full bool) error

// Worker builds the per-worker state (its own stream, buffers) and returns
// the op plus a cleanup, called once the run is over.
type Worker func(id int) (Op, func(), error)

// Timer is the part of *testing.B that Drive drives, so the benchmark's
// own ns/op covers only the timed loop.
type Timer interface {
	ResetTimer()
	StopTimer()
}

// Drive sends n requests from conc closed-loop workers (each waits for its
// answer before sending the next), after warmup untimed requests per worker
// that are checked in full. It stops at the first error and returns it.
func Drive(t Timer, n, conc, warmup int, newWorker Worker) (Result, error) {
	s, err := startSession(conc, warmup, newWorker)
	if err != nil {
		return Result{}, err
	}
	defer s.close()
	if t != nil {
		t.ResetTimer()
	}
	err = s.run(n)
	if t != nil {
		t.StopTimer()
	}
	if err != nil {
		return Result{}, err
	}
	return s.result(n)
}

// DrivePair measures two paths the same way as Drive, alternating between
// them in up to 8 rounds of n/rounds requests each (A, B, A, B, ...), so
// that both sides of a ratio see the same machine: on a shared 2-core box
// background load comes and goes within seconds, and measuring one side
// after the other would put that drift into the ratio.
func DrivePair(t Timer, n, conc, warmup int, a, b Worker) (Result, Result, error) {
	sa, err := startSession(conc, warmup, a)
	if err != nil {
		return Result{}, Result{}, fmt.Errorf("first path: %w", err)
	}
	defer sa.close()
	sb, err := startSession(conc, warmup, b)
	if err != nil {
		return Result{}, Result{}, fmt.Errorf("second path: %w", err)
	}
	defer sb.close()
	rounds := min(8, max(1, n/(4*conc)))
	if t != nil {
		t.ResetTimer()
	}
	for r := range rounds {
		k := n/rounds + btoi(r < n%rounds)
		if err := sa.run(k); err != nil {
			return Result{}, Result{}, fmt.Errorf("first path: %w", err)
		}
		if err := sb.run(k); err != nil {
			return Result{}, Result{}, fmt.Errorf("second path: %w", err)
		}
	}
	if t != nil {
		t.StopTimer()
	}
	ra, err := sa.result(n)
	if err != nil {
		return Result{}, Result{}, fmt.Errorf("first path: %w", err)
	}
	rb, err := sb.result(n)
	if err != nil {
		return Result{}, Result{}, fmt.Errorf("second path: %w", err)
	}
	return ra, rb, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// session is one path's workers, warmed up, with their recorders; run may
// be called several times and the timed windows add up.
type session struct {
	conc     int
	ops      []Op
	cleanups []func()
	recs     []*Recorder
	elapsed  time.Duration
}

func startSession(conc, warmup int, newWorker Worker) (_ *session, err error) {
	conc = max(conc, 1)
	s := &session{conc: conc, ops: make([]Op, conc), recs: make([]*Recorder, conc)}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	for i := range conc {
		op, cleanup, err := newWorker(i)
		if err != nil {
			return nil, fmt.Errorf("worker %d: %w", i, err)
		}
		s.ops[i] = op
		s.cleanups = append(s.cleanups, cleanup)
		s.recs[i] = NewRecorder(0)
	}
	// Warm-up in parallel: connections, streams and server caches are hot
	// and every worker's answers are checked in full before timing starts.
	if err := parallel(conc, func(i int) error {
		for k := range warmup {
			if err := s.ops[i](true); err != nil {
				return fmt.Errorf("warm-up request %d: %w", k, err)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// run sends n more requests, spread over the workers as they free up.
func (s *session) run(n int) error {
	for _, r := range s.recs {
		r.ns = slices.Grow(r.ns, n/s.conc+1)
	}
	var next atomic.Int64
	var failed atomic.Bool
	start := time.Now()
	err := parallel(s.conc, func(i int) error {
		op, rec := s.ops[i], s.recs[i]
		for next.Add(1) <= int64(n) && !failed.Load() {
			t0 := time.Now()
			if err := op(false); err != nil {
				failed.Store(true)
				return err
			}
			rec.Add(time.Since(t0))
		}
		return nil
	})
	s.elapsed += time.Since(start)
	return err
}

func (s *session) result(n int) (Result, error) {
	all := NewRecorder(n)
	for _, r := range s.recs {
		all.Merge(r)
	}
	if all.Len() != n {
		return Result{}, fmt.Errorf("recorded %d of %d requests", all.Len(), n)
	}
	return Result{
		Conc: s.conc, N: n, Elapsed: s.elapsed,
		P50: all.Percentile(50), P99: all.Percentile(99), Max: all.Percentile(100), Mean: all.Mean(),
		PerSec: float64(n) / s.elapsed.Seconds(),
	}, nil
}

func (s *session) close() {
	for _, c := range s.cleanups {
		if c != nil {
			c()
		}
	}
}

// parallel runs f(0..n-1) in goroutines and joins their errors.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
