package tritonmetrics

import (
	"testing"

	"github.com/nereid-io/nereid/api/busv1"
)

// Executors' and routers' VersionMetrics of one version add up.
func TestSumMetrics(t *testing.T) {
	parts := []*busv1.StatisticsReply{
		{Metrics: []*busv1.VersionMetrics{{Name: "m", Version: "1", FailureBackend: 2, FailureOther: 1, Pending: 3,
			Summaries: []*busv1.LatencySummary{{Family: "f", Count: 2, Sum: 30, Window: map[int32]uint64{10: 2}}}}}},
		{Metrics: []*busv1.VersionMetrics{{Name: "m", Version: "1", FailureRejected: 4, FailureCanceled: 5, Pending: 1,
			Summaries: []*busv1.LatencySummary{{Family: "f", Count: 1, Sum: 5, Window: map[int32]uint64{3: 1}}}}}},
	}
	x := SumMetrics(parts)[Key{"m", "1"}]
	if x == nil || x.Failures != [4]uint64{4, 5, 2, 1} || x.Pending != 4 {
		t.Fatalf("sum %+v", x)
	}
	if s := x.Summaries["f"]; s == nil || s.Count != 3 || s.Sum != 35 {
		t.Errorf("summary %+v", s)
	}
}

// Executors' histograms of one version add up into cumulative buckets.
func TestSumFirstResponse(t *testing.T) {
	h := func(counts ...uint64) *busv1.FirstResponseHistogram {
		var n uint64
		for _, c := range counts {
			n += c
		}
		return &busv1.FirstResponseHistogram{Name: "m", Version: "1", Bounds: []float64{100, 500}, Counts: counts, Sum: 7, Count: n}
	}
	parts := []*busv1.StatisticsReply{
		{FirstResponse: []*busv1.FirstResponseHistogram{h(1, 2, 3)}},
		{FirstResponse: []*busv1.FirstResponseHistogram{h(4, 0, 1)}},
	}
	got := SumFirstResponse(parts, []Key{{"m", "1"}, {"other", "1"}})
	if len(got) != 1 {
		t.Fatalf("got %d histograms, want 1", len(got))
	}
	f := got[0]
	if f.Count != 11 || f.Sum != 14 || f.Buckets[100] != 5 || f.Buckets[500] != 7 || len(f.Buckets) != 2 {
		t.Errorf("sum %+v", f)
	}
}
