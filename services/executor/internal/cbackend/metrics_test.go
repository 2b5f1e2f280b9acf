package cbackend

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// TestCustomMetricExposition: a backend's families are written as Triton's
// prometheus-cpp writes them (HELP only with a help text, TYPE, the
// metrics with the labels the backend gave and no other, a histogram's
// _count, _sum and cumulative buckets up to +Inf), and the calls a kind
// does not support fail with Triton's messages.
func TestCustomMetricExposition(t *testing.T) {
	c, err := newFamily(Counter, "nereid_test_expo_requests", "Requests")
	if err != nil {
		t.Fatal(err)
	}
	g, err := newFamily(Gauge, "nereid_test_expo_depth", "")
	if err != nil {
		t.Fatal(err)
	}
	h, err := newFamily(Histogram, "nereid_test_expo_latency", "Latency")
	if err != nil {
		t.Fatal(err)
	}
	labels := func() [][2]string { return [][2]string{{"version", "1"}, {"model", `m"x`}} }
	cm, err := c.newMetric(labels(), nil)
	if err != nil {
		t.Fatal(err)
	}
	gm, err := g.newMetric(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hm, err := h.newMetric(labels(), []float64{10, 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, m := range []*metric{cm, gm, hm} {
			m.release()
		}
		for _, f := range []*family{c, g, h} {
			if err := f.release(); err != nil {
				t.Error(err)
			}
		}
	}()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cm.increment(2))
	must(gm.set(-1.5))
	must(gm.increment(0.5))
	for _, v := range []float64{0.5, 3, 30} {
		must(hm.observe(v))
	}
	var buf bytes.Buffer
	must(WriteMetrics(&buf))
	want := `# TYPE nereid_test_expo_depth gauge
nereid_test_expo_depth -1
# HELP nereid_test_expo_latency Latency
# TYPE nereid_test_expo_latency histogram
nereid_test_expo_latency_count{model="m\"x",version="1"} 3
nereid_test_expo_latency_sum{model="m\"x",version="1"} 33.5
nereid_test_expo_latency_bucket{model="m\"x",version="1",le="1"} 1
nereid_test_expo_latency_bucket{model="m\"x",version="1",le="10"} 2
nereid_test_expo_latency_bucket{model="m\"x",version="1",le="+Inf"} 3
# HELP nereid_test_expo_requests Requests
# TYPE nereid_test_expo_requests counter
nereid_test_expo_requests{model="m\"x",version="1"} 2
`
	var got strings.Builder
	keep := false
	for _, line := range strings.SplitAfter(buf.String(), "\n") {
		if strings.HasPrefix(line, "# ") {
			keep = strings.Contains(line, "nereid_test_expo_")
		}
		if keep {
			got.WriteString(line)
		}
	}
	if got.String() != want {
		t.Fatalf("exposition:\n%s\nwant:\n%s", got.String(), want)
	}

	for _, tc := range []struct {
		err  error
		kind tritonerr.Kind
		msg  string
	}{
		{cm.set(1), tritonerr.Unsupported, "TRITONSERVER_METRIC_KIND_COUNTER does not support Set"},
		{cm.increment(-1), tritonerr.InvalidArg, "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by non-negative values."},
		{cm.observe(1), tritonerr.Unsupported, "TRITONSERVER_METRIC_KIND_COUNTER does not support Observe"},
		{gm.observe(1), tritonerr.Unsupported, "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe"},
		{hm.increment(1), tritonerr.Unsupported, "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment"},
		{hm.set(1), tritonerr.Unsupported, "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Set"},
		{func() error { _, err := hm.read(); return err }(), tritonerr.Unsupported, "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value"},
		{func() error { _, err := h.newMetric(nil, nil); return err }(), tritonerr.InvalidArg, "Bucket boundaries not found in Metric args."},
		{func() error { _, err := c.newMetric(nil, []float64{1}); return err }(), tritonerr.InvalidArg, "Unexpected args found in counter Metric constructor."},
		{func() error { _, err := c.newMetric([][2]string{{"bad-label", "x"}}, nil); return err }(), tritonerr.InvalidArg, "Invalid label name"},
		{func() error { _, err := newFamily(Counter, "bad-name", ""); return err }(), tritonerr.InvalidArg, "Invalid metric name"},
		{func() error { _, err := newFamily(Gauge, "nereid_test_expo_requests", "Requests"); return err }(), tritonerr.InvalidArg, "Family name already exists with different type"},
		{func() error { _, err := newFamily(Counter, "nereid_test_expo_requests", "Other"); return err }(), tritonerr.InvalidArg, "Family name already exists"},
	} {
		te := tritonerr.From(tc.err)
		if tc.err == nil || te.Kind != tc.kind || te.Msg != tc.msg {
			t.Errorf("got %v, want %v %q", tc.err, tc.kind, tc.msg)
		}
	}
}
