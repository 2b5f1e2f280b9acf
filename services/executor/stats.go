package executor

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/quantile"
	"github.com/nereid-io/nereid/pkg/tracing"
)

// duration is Triton's $duration_stat: a count and the total time.
type duration struct{ count, ns uint64 }

func (d *duration) add(t time.Duration) {
	d.count++
	if t > 0 {
		d.ns += uint64(t)
	}
}

func (d duration) proto() *inference.StatisticDuration {
	return &inference.StatisticDuration{Count: d.count, Ns: d.ns}
}

type batchStats struct{ input, infer, output duration }

// stats is one model version's statistics, kept as Triton's
// InferenceStatsAggregator keeps them.
type stats struct {
	mu                              sync.Mutex
	lastInference                   uint64 // ms since the epoch
	inferenceCount, executionCount  uint64
	success, fail, queue            duration
	computeInput, computeInfer, out duration
	batches                         map[uint64]*batchStats
	responses                       []responseStats // decoupled models, by response index
	// first is nv_inference_first_response_histogram_ms, for decoupled
	// models only (as Triton creates it).
	first *histogram
	// failures counts nv_inference_request_failure by reason, summaries
	// the observations of Triton's latency summaries (successes only).
	failures  [numReasons]uint64
	summaries [numSummaries]quantile.Window
	// pending is nv_inference_pending_request_count: requests queued and
	// not yet taken by an execution (the scheduler keeps it).
	pending atomic.Int64
}

// failReason is the reason label of Triton's nv_inference_request_failure.
type failReason uint8

const (
	reasonRejected failReason = iota // a request timeout in the scheduler
	reasonCanceled                   // the client cancelled it
	reasonBackend                    // the backend failed it
	reasonOther                      // anything else (invalid, unloading)
	numReasons
)

// Triton's latency summaries, in the order of summaryFamilies.
const (
	sumRequest = iota
	sumQueue
	sumComputeInput
	sumComputeInfer
	sumComputeOutput
	numSummaries
)

var summaryFamilies = [numSummaries]string{
	"nv_inference_request_summary_us", "nv_inference_queue_summary_us", "nv_inference_compute_input_summary_us",
	"nv_inference_compute_infer_summary_us", "nv_inference_compute_output_summary_us",
}

// responseStats is Triton's InferResponseStatistics for one response index.
type responseStats struct{ infer, output, success, fail, empty, cancel duration }

func newStats() *stats {
	return &stats{batches: map[uint64]*batchStats{}}
}

// responseKind is what became of one response of a decoupled model.
type responseKind uint8

const (
	responseSuccess   responseKind = iota
	responseFail                   // an error response
	responseEmpty                  // the final flag alone
	responseCancelled              // produced after the client had gone
)

// responseTimes are the instants of one response of a decoupled model,
// as Triton's backends report them
// (TRITONBACKEND_ModelInstanceResponseStatistics): start is when the
// previous response went out (the request's execution start for the
// first), output when the backend handed the response over (its outputs
// start being copied into the reply), end when the reply was ready to go.
type responseTimes struct{ start, output, end time.Time }

// response records the response at index of a decoupled model's request
// with the rules of Triton's InferenceStatsAggregator: a success counts
// compute_infer (start to output), compute_output (output to end) and
// success (start to end); a failure compute_infer and fail (start to end,
// no outputs were copied); the final flag alone compute_infer and
// empty_response; a response produced after the client had gone only
// cancel.
func (s *stats) response(index int, kind responseKind, t responseTimes) {
	total := t.end.Sub(t.start)
	s.mu.Lock()
	defer s.mu.Unlock()
	if index >= len(s.responses) {
		s.responses = append(s.responses, make([]responseStats, index+1-len(s.responses))...)
	}
	r := &s.responses[index]
	switch kind {
	case responseSuccess:
		r.infer.add(t.output.Sub(t.start))
		r.output.add(t.end.Sub(t.output))
		r.success.add(total)
	case responseFail:
		r.infer.add(total)
		r.fail.add(total)
	case responseEmpty:
		r.infer.add(total)
		r.empty.add(total)
	case responseCancelled:
		r.cancel.add(total)
	}
}

// request records one request's outcome (TRITONBACKEND_ModelInstance
// ReportStatistics). A failure counts only its total duration.
func (s *stats) request(p *pending, success bool, t backend.SteadyStamps) {
	if (p.span != nil || p.stamps != nil) && success {
		ts := t.Timestamps()
		stamps := tracing.Timestamps{QueueStart: p.queued, ExecStart: ts.ExecStart, ComputeStart: ts.ComputeStart, ComputeEnd: ts.ComputeEnd, ExecEnd: ts.ExecEnd}
		tracing.RecordTimestamps(p.span, stamps)
		if p.stamps != nil {
			*p.stamps = stamps
		}
	}
	end := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !success {
		s.fail.add(end.Sub(p.received))
		s.failures[reasonBackend]++
		return
	}
	phases := [numSummaries]time.Duration{end.Sub(p.received), t.Base.Sub(p.queued) + t.ExecStart,
		t.ComputeStart - t.ExecStart, t.ComputeEnd - t.ComputeStart, t.ExecEnd - t.ComputeEnd}
	s.success.add(phases[sumRequest])
	s.queue.add(phases[sumQueue])
	s.computeInput.add(phases[sumComputeInput])
	s.computeInfer.add(phases[sumComputeInfer])
	s.out.add(phases[sumComputeOutput])
	for i, d := range phases {
		s.summaries[i].Observe(end, float64(max(d, 0).Microseconds()))
	}
	s.touch(end)
}

// ensembleRun records one request to an ensemble this executor ran
// (a nested one, in the request of an ensemble it runs whole), as a
// gateway records the ensembles it runs: a failure its duration; a success
// its duration, an execution of batch entries whose compute is the time
// its steps' requests took, and no queue or input/output time.
func (s *stats) ensembleRun(start time.Time, batch int, compute time.Duration, err error) {
	end := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.fail.add(end.Sub(start))
		s.failures[reasonBackend]++
		return
	}
	s.success.add(end.Sub(start))
	s.queue.add(0)
	s.computeInput.add(0)
	s.computeInfer.add(compute)
	s.out.add(0)
	s.executionCount++
	s.inferenceCount += uint64(batch)
	b := s.batches[uint64(batch)]
	if b == nil {
		b = &batchStats{}
		s.batches[uint64(batch)] = b
	}
	b.input.add(0)
	b.infer.add(compute)
	b.output.add(0)
	s.touch(end)
}

// failed records a request that never reached a backend (invalid, or
// dropped from the queue), with its reason.
func (s *stats) failed(received time.Time, why failReason) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail.add(time.Since(received))
	s.failures[why]++
}

// metricsProto is what Triton reports of the version only as metrics.
func (s *stats) metricsProto(name, version string) *busv1.VersionMetrics {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &busv1.VersionMetrics{Name: name, Version: version,
		FailureRejected: s.failures[reasonRejected], FailureCanceled: s.failures[reasonCanceled],
		FailureBackend: s.failures[reasonBackend], FailureOther: s.failures[reasonOther],
		Pending: uint64(max(s.pending.Load(), 0))}
	for i := range s.summaries {
		m.Summaries = append(m.Summaries, s.summaries[i].Proto(now, summaryFamilies[i]))
	}
	return m
}

// batch records one execution (ReportBatchStatistics): it is what
// execution_count, inference_count and batch_stats count.
func (s *stats) batch(total int, t backend.SteadyStamps) {
	s.execution(total, total, t)
}

// execution records one execution of size entries, of which real are
// requests and the rest padding (the direct sequence strategy's empty
// slots): batch_stats counts size, inference_count only real.
func (s *stats) execution(real, size int, t backend.SteadyStamps) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.executionCount++
	s.inferenceCount += uint64(real)
	b := s.batches[uint64(size)]
	if b == nil {
		b = &batchStats{}
		s.batches[uint64(size)] = b
	}
	b.input.add(t.ComputeStart - t.ExecStart)
	b.infer.add(t.ComputeEnd - t.ComputeStart)
	b.output.add(t.ExecEnd - t.ComputeEnd)
	s.touch(time.Now())
}

func (s *stats) touch(now time.Time) {
	if ms := uint64(now.UnixMilli()); ms > s.lastInference {
		s.lastInference = ms
	}
}

// proto is Triton's ModelStatistics, every duration present (zeros
// included) as Triton prints them, batch_stats sorted by batch size.
func (s *stats) proto(name, version string) *inference.ModelStatistics {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := &inference.ModelStatistics{
		Name: name, Version: version,
		LastInference: s.lastInference, InferenceCount: s.inferenceCount, ExecutionCount: s.executionCount,
		InferenceStats: &inference.InferStatistics{
			Success: s.success.proto(), Fail: s.fail.proto(), Queue: s.queue.proto(),
			ComputeInput: s.computeInput.proto(), ComputeInfer: s.computeInfer.proto(), ComputeOutput: s.out.proto(),
			CacheHit: duration{}.proto(), CacheMiss: duration{}.proto(),
		},
		BatchStats:    []*inference.InferBatchStatistics{},
		ResponseStats: map[string]*inference.InferResponseStatistics{},
	}
	for i, r := range s.responses {
		ms.ResponseStats[strconv.Itoa(i)] = &inference.InferResponseStatistics{
			ComputeInfer: r.infer.proto(), ComputeOutput: r.output.proto(), Success: r.success.proto(),
			Fail: r.fail.proto(), EmptyResponse: r.empty.proto(), Cancel: r.cancel.proto(),
		}
	}
	sizes := make([]uint64, 0, len(s.batches))
	for n := range s.batches {
		sizes = append(sizes, n)
	}
	slices.Sort(sizes)
	for _, n := range sizes {
		b := s.batches[n]
		ms.BatchStats = append(ms.BatchStats, &inference.InferBatchStatistics{
			BatchSize: n, ComputeInput: b.input.proto(), ComputeInfer: b.infer.proto(), ComputeOutput: b.output.proto(),
		})
	}
	return ms
}

// FirstResponseFamily is the metric family of the time to first response,
// whose buckets a model's model_metrics may set.
const FirstResponseFamily = "nv_inference_first_response_histogram_ms"

// defaultFirstResponseBuckets are Triton's bucket bounds, in milliseconds.
var defaultFirstResponseBuckets = []float64{100, 500, 2000, 5000}

// firstResponseBuckets are the model's buckets for the time to first
// response: those of a model_metrics metric_control for the family, else
// Triton's.
func firstResponseBuckets(cfg *inference.ModelConfig) []float64 {
	for _, mc := range cfg.GetModelMetrics().GetMetricControl() {
		if mc.GetMetricIdentifier().GetFamily() == FirstResponseFamily {
			b := slices.Clone(mc.GetHistogramOptions().GetBuckets())
			slices.Sort(b)
			return slices.Compact(b)
		}
	}
	return defaultFirstResponseBuckets
}

// histogram counts observations per bucket (a Prometheus histogram kept
// as plain counts, so that executors' histograms add up at the gateway).
type histogram struct {
	bounds []float64
	counts []uint64 // per bound, then one above every bound
	sum    float64
	count  uint64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v) // the first bound >= v
	h.counts[i]++
	h.sum += v
	h.count++
}

// firstResponse records the time from a request's arrival to its first
// response, in whole milliseconds as Triton rounds it.
func (s *stats) firstResponse(d time.Duration) {
	if s == nil || s.first == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first.observe(float64(d.Milliseconds()))
}

// firstResponseProto is the histogram on the bus, nil for a model without.
func (s *stats) firstResponseProto(name, version string) *busv1.FirstResponseHistogram {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == nil {
		return nil
	}
	return &busv1.FirstResponseHistogram{Name: name, Version: version, Bounds: slices.Clone(s.first.bounds),
		Counts: slices.Clone(s.first.counts), Sum: s.first.sum, Count: s.first.count}
}
