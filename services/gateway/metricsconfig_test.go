package gateway

import (
	"strings"
	"testing"

	"github.com/nereid-io/nereid/api/busv1"
)

func TestMetricsConfigFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want MetricsConfig
		err  string
	}{
		{[]string{"histogram_latencies=true"}, MetricsConfig{HistogramLatencies: true}, ""},
		{[]string{"histogram_latencies=true", "counter_latencies=false"}, MetricsConfig{HistogramLatencies: true, NoCounterLatencies: true}, ""},
		{[]string{"histogram_latencies=maybe"}, MetricsConfig{}, `invalid boolean value "maybe"`},
		{[]string{"summary_latencies=true"}, MetricsConfig{}, `unknown setting "summary_latencies"`},
		{[]string{"histogram_latencies"}, MetricsConfig{}, "expected <setting>=<value>"},
	} {
		var m MetricsConfig
		var err error
		for _, a := range tc.args {
			if err = m.Set(a); err != nil {
				break
			}
		}
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
		case tc.err == "" && (err != nil || m != tc.want):
			t.Errorf("%v: %+v %v, want %+v", tc.args, m, err, tc.want)
		}
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
	got := sumFirstResponse(parts, []statsKey{{"m", "1"}, {"other", "1"}})
	if len(got) != 1 {
		t.Fatalf("got %d histograms, want 1", len(got))
	}
	f := got[0]
	if f.count != 11 || f.sum != 14 || f.buckets[100] != 5 || f.buckets[500] != 7 || len(f.buckets) != 2 {
		t.Errorf("sum %+v", f)
	}
}
