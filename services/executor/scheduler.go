package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/logsetting"
	"github.com/nereid-io/nereid/pkg/shm"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/executor/internal/dynbatch"
)

// pending is a validated request waiting for, or in, an execution.
type pending struct {
	req       *backend.Request
	sh        *shmRequest  // its tensors in shared memory, nil for none
	size      int          // inferences it holds: its batch size, at least 1
	received  time.Time    // request start, for the success/fail durations
	queued    time.Time    // queue start
	ask       dynbatch.Ask // its priority and timeout parameters (askOf)
	cancelled atomic.Bool
	// dropped is the failure reason of a request given up while queued,
	// set before cancelled.
	dropped failReason

	mu       sync.Mutex
	resp     *backend.Response
	reported bool // the backend reported its statistics
	finished bool
	after    []func()
	done     chan struct{}

	// onResponse, for a decoupled model, takes each response as the
	// backend sends it (on the sending goroutine, in order); resp is then
	// only the first one.
	onResponse func(*backend.Response)
	executed   atomic.Bool  // an execution took the request
	started    atomic.Int64 // when that execution started, Unix nanoseconds

	// span is the request's trace span (nil: not traced); its timestamps
	// are recorded with the statistics.
	span trace.Span
	// stamps, when not nil, takes the request's timestamps with the
	// statistics, for a gateway writing Triton's trace file.
	stamps *requestStamps
	// held is a decoupled request's final message, kept back until its
	// execution has returned when its gateway asked for its timestamps
	// (sendHeld): the response, or nil for the final flag alone.
	held    *inference.ModelInferResponse
	holding bool

	// alone is the batch of the backend's requests when p runs alone
	// (executeBatch), in p's allocation rather than one of its own.
	alone [1]*backend.Request

	// prior, with preserve_ordering, is the request queued just before p:
	// p is finished (answered) only once prior is (finish).
	prior *pending
}

// askOf reads the request parameters of Triton's schedule policy
// extension: priority (uint64, or a non-negative int64 over gRPC) and
// timeout (microseconds, int64). The gateway has checked their types.
func askOf(req *inference.ModelInferRequest) dynbatch.Ask {
	params := req.GetParameters()
	if len(params) == 0 {
		return dynbatch.Ask{}
	}
	var priority uint64
	var timeout int64
	switch c := params["priority"].GetParameterChoice().(type) {
	case *inference.InferParameter_Uint64Param:
		priority = c.Uint64Param
	case *inference.InferParameter_Int64Param:
		priority = uint64(max(0, c.Int64Param))
	}
	switch c := params["timeout"].GetParameterChoice().(type) {
	case *inference.InferParameter_Int64Param:
		timeout = c.Int64Param
	case *inference.InferParameter_Uint64Param:
		timeout = int64(min(c.Uint64Param, math.MaxInt64))
	}
	return dynbatch.AskMicros(priority, timeout)
}

// giveUp marks p abandoned because ctx ended: a request still queued is
// dropped, counted as Triton counts it (a deadline as a timeout in the
// scheduler, anything else as a cancellation).
func (p *pending) giveUp(ctx context.Context) {
	p.dropped = reasonCanceled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		p.dropped = reasonRejected
	}
	p.cancelled.Store(true)
}

// Cancelled reports whether p was given up while queued (dynbatch.Item).
func (p *pending) Cancelled() bool { return p.cancelled.Load() }

// execStart is when the execution that took p started (now if none has).
func (p *pending) execStart() time.Time {
	if ns := p.started.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Now()
}

// finish marks p finished, closes its done channel if one was asked for
// (doneCh) and runs what waited for it (whenDone). With preserve_ordering
// p waits for the request queued before it: it finishes when that one
// does, so that replies leave in the order the requests were queued.
func (p *pending) finish() {
	if prior := p.prior; prior != nil {
		p.prior = nil
		prior.whenDone(p.finish)
		return
	}
	p.mu.Lock()
	p.finished = true
	after := p.after
	p.after = nil
	done := p.done
	p.mu.Unlock()
	if done != nil {
		close(done)
	}
	for _, f := range after {
		f()
	}
}

// doneCh is closed once p is finished. It is made when first asked for:
// a request that an idle instance ran on its caller's goroutine is
// finished before anyone waits (answered), and costs no channel.
func (p *pending) doneCh() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		p.done = make(chan struct{})
		if p.finished {
			close(p.done)
		}
	}
	return p.done
}

// answered reports whether p is finished already (an idle instance ran it
// on the caller's goroutine), so that waiting for it does not ask for the
// request context's Done channel, which would arm its deadline's timer.
func (p *pending) answered() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.finished
}

// whenDone runs f once p is finished: at once if it is, else on the
// goroutine that finishes it. It releases what a request given up while
// queued or executing still lends the backend, without a goroutine
// waiting for it.
func (p *pending) whenDone(f func()) {
	p.mu.Lock()
	if !p.finished {
		p.after = append(p.after, f)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	f()
}

// Complete is the request's completion callback (a backend.Completer).
// The reply waits until Execute has returned, so that the statistics of
// the execution (reported after the responses by most backends) are in
// place when the client sees the answer.
func (p *pending) Complete(_ *backend.Request, resp *backend.Response) {
	p.mu.Lock()
	if p.resp == nil {
		p.resp = resp
	}
	p.mu.Unlock()
	if p.onResponse != nil {
		p.onResponse(resp)
	}
}

// scheduler feeds a model version's instances. Batches are formed only when
// an instance is free, so requests accumulate while all instances are busy
// (Triton's dynamic batcher); an instance never runs two executions at once.
//
// When nothing is queued and an instance is free, the batch the batcher would
// form now is the new request alone: enqueue then runs it on the caller's
// goroutine. That spares two hand-offs between goroutines (request to
// batcher, batcher to instance), which dominate the latency of small
// requests; under load requests queue and the batcher takes over, and an
// instance that finishes an execution takes the next batch due itself
// (again).
//
// Which requests form a batch, and when, is decided by the queue
// (internal/dynbatch, pure logic on a clock passed in); the scheduler
// does the rest: the lock, the instances, the batcher goroutine and its
// timer, and answering the requests dropped or left at unload.
type scheduler struct {
	mv  *modelVersion
	ctx context.Context

	mu      sync.Mutex
	queue   *dynbatch.Queue[*pending]
	gaveUp  []*pending  // DropCancelled's buffer, reused; empty between uses
	expired []*pending  // Expire's buffer, reused; empty between uses
	free    []*instance // instances neither executing nor handed a batch
	// ordered is preserve_ordering: replies leave in the order requests
	// were queued; last is the request queued last, the next one's prior.
	ordered bool
	last    *pending
	closed  bool
	notify  chan struct{} // the queue or the free list changed (capacity 1)
	quit    chan struct{}
	stopped sync.WaitGroup
}

func newScheduler(ctx context.Context, mv *modelVersion) *scheduler {
	s := &scheduler{
		mv:      mv,
		ctx:     ctx,
		queue:   dynbatch.New[*pending](dynbatch.ConfigFrom(mv.cfg)),
		ordered: mv.cfg.GetDynamicBatching().GetPreserveOrdering(),
		notify:  make(chan struct{}, 1),
		quit:    make(chan struct{}),
	}
	for _, in := range mv.instances {
		in.work = make(chan []*pending)
		s.free = append(s.free, in)
		s.stopped.Go(func() { in.run(s) })
	}
	s.stopped.Go(s.batcher)
	return s
}

// enqueue queues a request at the priority level and with the timeout its
// parameters ask for (p.ask), or runs it at once on the caller's goroutine
// when that is what the batcher would do; after stop, or when its level
// holds max_queue_size requests, it is refused (refusal says how the
// statistics count the error). The request is answered when p is
// finished (doneCh).
func (s *scheduler) enqueue(p *pending) error {
	p.queued = time.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return tritonerr.Unavailablef("model '%s' version %s is unloading", s.mv.name, s.mv.vstr)
	}
	alone, err := s.queue.Add(p.queued, p, p.size, len(s.free), p.ask)
	if err != nil {
		s.mu.Unlock()
		id := ""
		if p.req != nil {
			id = p.req.ID
		}
		return queueFull{tritonerr.Unavailablef("%s%s", logRequest(id), dynbatch.ErrFull)}
	}
	if s.ordered && (p.req == nil || !p.req.Decoupled) {
		p.prior, s.last = s.last, p
	}
	if alone {
		in := s.takeFree()
		s.mu.Unlock()
		// Never counted pending: it runs now.
		in.executeBatch(s.ctx, []*pending{p})
		s.release(in)
		return nil
	}
	s.countPending()
	s.mu.Unlock()
	s.wake()
	return nil
}

// queueFull is enqueue's refusal of a request whose priority level holds
// max_queue_size requests: Triton's UNAVAILABLE "Exceeds maximum queue
// size", counted as REJECTED as Triton counts it.
type queueFull struct{ err *tritonerr.Error }

func (e queueFull) Error() string { return e.err.Msg }
func (e queueFull) Unwrap() error { return e.err }

// refusal is the failure reason the statistics count for an error of
// enqueue.
func refusal(err error) failReason {
	if errors.As(err, new(queueFull)) {
		return reasonRejected
	}
	return reasonOther
}

// logRequest is Triton's LogRequest(): the request id in brackets, or
// nothing for a request without one.
func logRequest(id string) string {
	if id == "" {
		return ""
	}
	return "[request id: " + id + "] "
}

// countPending publishes the queue's length as the version's
// nv_inference_pending_request_count; s.mu is held.
func (s *scheduler) countPending() { s.mv.stats.pending.Store(int64(s.queue.Len())) }

// now is the time the queue's decisions are taken at: the zero time when
// they do not read the clock (no queue delay), sparing a read per batch.
func (s *scheduler) now() time.Time {
	if s.queue.Timed() {
		return time.Now()
	}
	return time.Time{}
}

func (s *scheduler) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// takeFree pops a free instance; s.mu must be held and s.free non-empty.
func (s *scheduler) takeFree() *instance {
	in := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	return in
}

// release returns an instance to the free list after an execution.
func (s *scheduler) release(in *instance) {
	s.mu.Lock()
	s.freeUnlock(in)
}

// freeUnlock puts in on the free list and unlocks s.mu, which the caller
// holds. The batcher is woken only when requests are queued: a free
// instance is all it could use then. With nothing queued, the next enqueue
// wakes it (or runs its request at once), so a wake-up per execution of a
// lightly loaded model would be a goroutine scheduled for nothing.
func (s *scheduler) freeUnlock(in *instance) {
	s.free = append(s.free, in)
	queued := s.queue.Len() > 0
	s.mu.Unlock()
	if queued {
		s.wake()
	}
}

// stop ends the batcher and the instances once their current execution is
// done, and fails whatever is still queued.
func (s *scheduler) stop() {
	s.mu.Lock()
	s.closed = true
	left := s.queue.Drain(nil)
	s.countPending()
	s.mu.Unlock()
	close(s.quit)
	s.stopped.Wait()
	for _, p := range left {
		p.Complete(p.req, &backend.Response{Err: tritonerr.Unavailablef("model '%s' version %s is unloading", s.mv.name, s.mv.vstr), Final: true})
		s.mv.stats.failed(p.received, reasonOther)
		p.finish()
	}
}

// batcher hands batches to free instances until the scheduler stops.
func (s *scheduler) batcher() {
	defer func() {
		for _, in := range s.mv.instances {
			close(in.work)
		}
	}()
	for {
		in, batch := s.next()
		if batch == nil {
			return
		}
		in.work <- batch
	}
}

// next waits for a free instance and the next batch for it: one request,
// or with dynamic batching as many as Triton's dynamic batcher would put
// together. It returns a nil batch when the scheduler stops.
func (s *scheduler) next() (*instance, []*pending) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		s.mu.Lock()
		now := s.now()
		s.dropCancelled()
		soon := s.expire(now)
		batch, wait := s.queue.Next(now, len(s.free))
		if batch != nil {
			s.countPending()
			in := s.takeFree()
			s.mu.Unlock()
			return in, batch
		}
		s.mu.Unlock()
		if soon > 0 && (wait == 0 || soon < wait) {
			wait = soon // a queued request times out first
		}

		var expire <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			expire = timer.C
		}
		select {
		case <-s.notify:
		case <-expire:
		case <-s.quit:
			return nil, nil
		}
	}
}

// dropCancelled drops the queued requests whose client gave up; s.mu must
// be held.
func (s *scheduler) dropCancelled() {
	s.gaveUp = s.queue.DropCancelled(s.gaveUp)
	for i, p := range s.gaveUp {
		s.mv.stats.failed(p.received, p.dropped)
		p.finish()
		s.gaveUp[i] = nil
	}
	s.gaveUp = s.gaveUp[:0]
	s.countPending()
}

// expire applies the queue policies' timeouts at now: the requests that
// timed out under REJECT fail with Triton's UNAVAILABLE "Request timeout
// expired", counted as REJECTED. It returns how long until the next
// request times out (0: none will); s.mu must be held.
func (s *scheduler) expire(now time.Time) time.Duration {
	var soon time.Duration
	s.expired, soon = s.queue.Expire(now, s.expired)
	if len(s.expired) == 0 {
		return soon
	}
	for i, p := range s.expired {
		p.Complete(p.req, &backend.Response{Err: tritonerr.Unavailablef("Request timeout expired"), Final: true})
		s.mv.stats.failed(p.received, reasonRejected)
		p.finish()
		s.expired[i] = nil
	}
	s.expired = s.expired[:0]
	s.countPending()
	return soon
}

// again is what an instance that has just finished an execution does
// next: when a batch is due now it takes it itself, sparing the two
// hand-offs through the batcher (instance to batcher, batcher back to an
// instance) that would otherwise sit between two executions of a busy
// model; else it joins the free list for the batcher and returns nil.
func (s *scheduler) again(in *instance) []*pending {
	s.mu.Lock()
	if !s.closed {
		now := s.now()
		s.dropCancelled()
		s.expire(now)
		// The instance calling is idle: it just finished.
		if batch, _ := s.queue.Next(now, 1); batch != nil {
			s.countPending()
			s.mu.Unlock()
			return batch
		}
	}
	s.freeUnlock(in)
	return nil
}

// instance runs one backend instance: one execution at a time.
type instance struct {
	mv   *modelVersion
	info backend.InstanceInfo
	inst backend.Instance
	work chan []*pending

	// What the current execution's reports refer to.
	mu            sync.Mutex
	current       map[*backend.Request]*pending
	batchReported bool
	// spare is the map of the last execution, kept for the next one; only
	// the goroutine running the instance's execution touches it.
	spare map[*backend.Request]*pending
}

func (in *instance) run(s *scheduler) {
	for batch := range in.work {
		for batch != nil {
			in.executeBatch(s.ctx, batch)
			batch = s.again(in)
		}
	}
}

// executeBatch runs a batch of the scheduler's requests.
func (in *instance) executeBatch(ctx context.Context, batch []*pending) {
	var reqs []*backend.Request
	if len(batch) == 1 {
		reqs = batch[0].alone[:] // a request run alone lends its own slice
	} else {
		reqs = make([]*backend.Request, len(batch))
	}
	for i, p := range batch {
		reqs[i] = p.req
	}
	in.execute(ctx, reqs, batch, true)
}

// execute is the one execution path of stateless and sequence requests: it
// runs reqs (in the order the backend sees them) on the instance, of which
// batch are the real requests and the rest padding (the empty slots of a
// direct sequence batch), and does what the backend left undone: an answer
// for every request, and the statistics, timing the whole Execute as
// compute. Padding counts in the batch size, not in inference_count, as
// Triton reports a direct sequence batch with null requests. Every p is
// finished when it returns.
//
// A memory fault in a client's shared-memory region fails the requests
// whose region it was (and poisons the region); with rerun, the requests
// the backend had not answered run again without them (a stateless request
// that did not complete can), else they fail (a sequence's state may
// already have moved).
func (in *instance) execute(ctx context.Context, reqs []*backend.Request, batch []*pending, rerun bool) {
	current := in.spare // one execution at a time: the last one's map, emptied
	if current == nil {
		current = make(map[*backend.Request]*pending, len(batch))
	}
	in.spare = nil
	// The execution's rate limiter resources are waited for before it
	// starts, so that the wait counts as queue time, as in Triton.
	release, waited := in.allocate(ctx)
	start := time.Now()
	for _, p := range batch {
		current[p.req] = p
		p.started.Store(start.UnixNano())
		p.executed.Store(true)
	}
	in.mu.Lock()
	in.current, in.batchReported = current, false
	in.mu.Unlock()

	err := waited
	if err == nil {
		err = in.call(ctx, reqs)
		for f, ok := shm.AsFault(err); ok; f, ok = shm.AsFault(err) {
			err = in.faulted(ctx, batch, f, rerun)
		}
	}
	release()
	end := time.Now()

	in.mu.Lock()
	in.current = nil
	batchReported := in.batchReported
	in.mu.Unlock()
	clear(current)
	in.spare = current

	ts := backend.SteadyStamps{Base: start, ComputeEnd: end.Sub(start), ExecEnd: end.Sub(start)}
	total := 0
	st := in.mv.stats
	for _, p := range batch {
		total += p.size
		ok := in.settle(p, err)
		p.mu.Lock()
		reported := p.reported
		p.mu.Unlock()
		if !reported {
			st.request(p, ok, ts)
		}
	}
	if !batchReported {
		st.execution(total, total+len(reqs)-len(batch), ts)
	}
	if log := in.mv.e.log; log.Enabled(ctx, slog.LevelDebug) {
		for _, p := range batch {
			log.DebugContext(p.logContext(), "request executed", "model", in.mv.name, "version", in.mv.vstr,
				"instance", in.info.Name, "batch_size", total, "compute_us", end.Sub(start).Microseconds(), "err", p.failure())
		}
	}
	for _, p := range batch {
		p.finish()
	}
}

// logContext is the context of the log lines about p: its trace span
// (pkg/logsetting adds trace_id and span_id) and its request id.
func (p *pending) logContext() context.Context {
	if p == nil || p.req == nil {
		return context.Background()
	}
	ctx := p.req.Context()
	if p.span != nil {
		ctx = trace.ContextWithSpan(ctx, p.span)
	}
	return logsetting.WithRequestID(ctx, p.req.ID)
}

// failure is the error p was answered with, nil when none (yet).
func (p *pending) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resp == nil || p.resp.Err == nil {
		return nil
	}
	return p.resp.Err
}

// settle gives a request the answer the backend left out once Execute has
// returned with err, and reports whether the request succeeded. A
// decoupled model may still be sending: only a failed Execute ends its
// request here.
func (in *instance) settle(p *pending, err error) bool {
	if p.req.Decoupled {
		if err != nil && !p.req.Responded() {
			_ = p.req.RespondError(err)
		}
		return err == nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resp == nil {
		e := tritonerr.From(err)
		if e == nil {
			e = tritonerr.Internalf("backend of model '%s' did not respond to the request", in.mv.name)
		}
		p.resp = &backend.Response{Err: e, Final: true}
	}
	return p.resp.Err == nil
}

// call runs Execute, turning a panic into an error for the batch (the
// stack goes to the log) and a memory fault (a client truncated a region
// the batch reads or writes in place) into a *shm.Fault for the caller to
// pin on a request.
func (in *instance) call(ctx context.Context, reqs []*backend.Request) (err error) {
	defer func() {
		if v := recover(); v != nil {
			in.mv.e.log.Error("backend panic", "model", in.mv.name, "instance", in.info.Name, "panic", v, "stack", string(debug.Stack()))
			err = tritonerr.Internalf("backend of model '%s' failed: %v", in.mv.name, fmt.Sprint(v))
		}
	}()
	inst := in.inst
	if l, ok := inst.(*limitedInstance); ok {
		inst = l.Instance // execute holds its resources already
	}
	return shm.Guard(func() error { return inst.Execute(ctx, reqs) })
}

// faulted handles an execution of batch that faulted at f: the requests
// whose region it was fail (and the region with them); the ones the
// backend had not answered run again without them (rerun) or fail. It
// returns the outcome for the requests left unanswered.
func (in *instance) faulted(ctx context.Context, batch []*pending, f *shm.Fault, rerun bool) error {
	hit := false
	for _, p := range batch {
		if ferr := p.sh.faulted(f); ferr != nil {
			hit = true
			p.mu.Lock()
			if p.resp == nil {
				p.resp = &backend.Response{Err: tritonerr.From(ferr)}
			}
			p.mu.Unlock()
		}
	}
	if !hit {
		return tritonerr.Internalf("backend of model '%s' failed: %v", in.mv.name, f)
	}
	if !rerun {
		return tritonerr.Unavailablef("the execution of model '%s' was interrupted by a fault in another request's shared memory region; the request may have partly run", in.mv.name)
	}
	var again []*backend.Request
	for _, p := range batch {
		p.mu.Lock()
		if p.resp == nil {
			again = append(again, p.req)
		}
		p.mu.Unlock()
	}
	if len(again) == 0 {
		return nil
	}
	return in.call(ctx, again)
}

// ReportStatistics implements backend.StatsReporter.
func (in *instance) ReportStatistics(r *backend.Request, success bool, t backend.Timestamps) {
	in.ReportSteadyStatistics(r, success, t.Steady())
}

// ReportBatchStatistics implements backend.StatsReporter.
func (in *instance) ReportBatchStatistics(total int, t backend.Timestamps) {
	in.ReportSteadyBatchStatistics(total, t.Steady())
}

// ReportSteadyStatistics implements backend.SteadyStatsReporter.
func (in *instance) ReportSteadyStatistics(r *backend.Request, success bool, t backend.SteadyStamps) {
	in.mu.Lock()
	p := in.current[r]
	in.mu.Unlock()
	if p == nil {
		return // not a request of the running execution
	}
	p.mu.Lock()
	dup := p.reported
	p.reported = true
	p.mu.Unlock()
	if !dup {
		in.mv.stats.request(p, success, t)
	}
}

// ReportSteadyBatchStatistics implements backend.SteadyStatsReporter.
func (in *instance) ReportSteadyBatchStatistics(total int, t backend.SteadyStamps) {
	in.mu.Lock()
	in.batchReported = true
	in.mu.Unlock()
	in.mv.stats.batch(total, t)
}
