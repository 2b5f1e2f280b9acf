package executor

import (
	"slices"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
)

// Triton's InferenceStatsAggregator rules for response_stats.
func TestResponseStats(t *testing.T) {
	s := newStats()
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s.response(0, responseSuccess, responseTimes{start: at(0), output: at(30), end: at(40)})
	s.response(1, responseFail, responseTimes{start: at(40), output: at(60), end: at(65)})
	s.response(2, responseEmpty, responseTimes{start: at(65), output: at(70), end: at(70)})
	s.response(3, responseCancelled, responseTimes{start: at(70), output: at(75), end: at(80)})
	s.response(0, responseSuccess, responseTimes{start: at(0), output: at(10), end: at(12)})
	ms := s.proto("m", "1").GetResponseStats()
	d := func(count, ms uint64) *inference.StatisticDuration {
		return &inference.StatisticDuration{Count: count, Ns: ms * uint64(time.Millisecond)}
	}
	want := map[string]*inference.InferResponseStatistics{
		"0": {ComputeInfer: d(2, 40), ComputeOutput: d(2, 12), Success: d(2, 52), Fail: d(0, 0), EmptyResponse: d(0, 0), Cancel: d(0, 0)},
		"1": {ComputeInfer: d(1, 25), ComputeOutput: d(0, 0), Success: d(0, 0), Fail: d(1, 25), EmptyResponse: d(0, 0), Cancel: d(0, 0)},
		"2": {ComputeInfer: d(1, 5), ComputeOutput: d(0, 0), Success: d(0, 0), Fail: d(0, 0), EmptyResponse: d(1, 5), Cancel: d(0, 0)},
		"3": {ComputeInfer: d(0, 0), ComputeOutput: d(0, 0), Success: d(0, 0), Fail: d(0, 0), EmptyResponse: d(0, 0), Cancel: d(1, 10)},
	}
	if len(ms) != len(want) {
		t.Fatalf("response_stats has %d indexes, want %d", len(ms), len(want))
	}
	for k, w := range want {
		g := ms[k]
		for _, pair := range [][2]*inference.StatisticDuration{
			{g.GetComputeInfer(), w.ComputeInfer}, {g.GetComputeOutput(), w.ComputeOutput}, {g.GetSuccess(), w.Success},
			{g.GetFail(), w.Fail}, {g.GetEmptyResponse(), w.EmptyResponse}, {g.GetCancel(), w.Cancel},
		} {
			if pair[0].GetCount() != pair[1].GetCount() || pair[0].GetNs() != pair[1].GetNs() {
				t.Errorf("index %s: got %v, want %v (all: %v)", k, pair[0], pair[1], g)
			}
		}
	}
}

// The first-response histogram: Triton's default buckets, a model's
// model_metrics override, and inclusive upper bounds.
func TestFirstResponseHistogram(t *testing.T) {
	if b := firstResponseBuckets(&inference.ModelConfig{}); !slices.Equal(b, []float64{100, 500, 2000, 5000}) {
		t.Errorf("default buckets %v", b)
	}
	cfg := &inference.ModelConfig{ModelMetrics: &inference.ModelMetrics{MetricControl: []*inference.ModelMetrics_MetricControl{{
		MetricIdentifier: &inference.ModelMetrics_MetricControl_MetricIdentifier{Family: FirstResponseFamily},
		MetricOptions: &inference.ModelMetrics_MetricControl_HistogramOptions_{
			HistogramOptions: &inference.ModelMetrics_MetricControl_HistogramOptions{Buckets: []float64{10, 1, 10}}},
	}}}}
	bounds := firstResponseBuckets(cfg)
	if !slices.Equal(bounds, []float64{1, 10}) {
		t.Fatalf("override buckets %v", bounds)
	}
	s := newStats()
	s.first = newHistogram(bounds)
	for _, d := range []time.Duration{0, 1500 * time.Microsecond, 10 * time.Millisecond, 11 * time.Millisecond} {
		s.firstResponse(d)
	}
	h := s.firstResponseProto("m", "1")
	if !slices.Equal(h.GetCounts(), []uint64{2, 1, 1}) || h.GetCount() != 4 || h.GetSum() != 22 {
		t.Errorf("histogram %v", h)
	}
	if newStats().firstResponseProto("m", "1") != nil {
		t.Error("a model without the histogram reports one")
	}
}

// Failures count by Triton's reason; successes feed the latency summaries
// (queue from queued to the execution's start, in microseconds).
func TestFailureReasonsAndSummaries(t *testing.T) {
	s := newStats()
	t0 := time.Now()
	p := &pending{received: t0, queued: t0.Add(time.Millisecond)}
	ts := backend.Timestamps{ExecStart: t0.Add(3 * time.Millisecond), ComputeStart: t0.Add(4 * time.Millisecond),
		ComputeEnd: t0.Add(6 * time.Millisecond), ExecEnd: t0.Add(7 * time.Millisecond)}.Steady()
	s.request(p, true, ts)
	s.request(p, true, ts)
	s.request(p, false, ts)
	s.failed(t0, reasonRejected)
	s.failed(t0, reasonCanceled)
	s.failed(t0, reasonCanceled)
	s.failed(t0, reasonOther)
	s.pending.Store(3)
	m := s.metricsProto("m", "1")
	if m.GetFailureBackend() != 1 || m.GetFailureRejected() != 1 || m.GetFailureCanceled() != 2 || m.GetFailureOther() != 1 || m.GetPending() != 3 {
		t.Fatalf("metrics %v", m)
	}
	if got := s.proto("m", "1").GetInferenceStats().GetFail().GetCount(); got != 5 {
		t.Errorf("fail count %d, want 5 (every reason)", got)
	}
	if len(m.GetSummaries()) != numSummaries {
		t.Fatalf("%d summaries, want %d", len(m.GetSummaries()), numSummaries)
	}
	for i, want := range []float64{0, 2000, 1000, 2000, 1000} { // request duration depends on now
		sum := m.GetSummaries()[i]
		if sum.GetFamily() != summaryFamilies[i] || sum.GetCount() != 2 {
			t.Errorf("summary %d: %v", i, sum)
		}
		if i > 0 && sum.GetSum() != 2*want {
			t.Errorf("%s sum %v, want %v", sum.GetFamily(), sum.GetSum(), 2*want)
		}
	}
}
