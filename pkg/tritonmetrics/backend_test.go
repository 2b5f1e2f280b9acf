package tritonmetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nereid-io/nereid/api/busv1"
)

func backendReply(process string, requests, depth float64, observed ...uint64) *busv1.StatisticsReply {
	label := []*busv1.BackendMetricLabel{{Name: "model", Value: "m"}}
	return &busv1.StatisticsReply{BackendMetricsProcess: process, BackendMetrics: []*busv1.BackendMetricFamily{
		{Name: "b_requests", Help: "requests", Kind: uint32(backendCounter), Metrics: []*busv1.BackendMetric{{Labels: label, Value: requests}}},
		{Name: "b_depth", Help: "depth", Kind: uint32(backendGauge), Metrics: []*busv1.BackendMetric{{Labels: label, Value: depth}}},
		{Name: "b_latency", Help: "latency", Kind: uint32(backendHistogram), Metrics: []*busv1.BackendMetric{
			{Labels: label, BucketBounds: []float64{1, 10}, BucketCounts: observed, Sum: float64(observed[1]), Count: observed[1] + 1}}},
	}}
}

type backendCollector []*busv1.StatisticsReply

func (c backendCollector) Describe(chan<- *prometheus.Desc)    {}
func (c backendCollector) Collect(ch chan<- prometheus.Metric) { CollectBackend(ch, c) }

// TestCollectBackend: the families of two processes add up by labels;
// a second executor of one process (the same registry) counts once.
func TestCollectBackend(t *testing.T) {
	parts := backendCollector{backendReply("p1", 2, 1, 1, 2), backendReply("p1", 2, 1, 1, 2), backendReply("p2", 3, 4, 0, 5)}
	want := `
# HELP b_depth depth
# TYPE b_depth gauge
b_depth{model="m"} 5
# HELP b_latency latency
# TYPE b_latency histogram
b_latency_bucket{model="m",le="1"} 1
b_latency_bucket{model="m",le="10"} 7
b_latency_bucket{model="m",le="+Inf"} 9
b_latency_sum{model="m"} 7
b_latency_count{model="m"} 9
# HELP b_requests requests
# TYPE b_requests counter
b_requests{model="m"} 5
`
	if err := testutil.CollectAndCompare(parts, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
