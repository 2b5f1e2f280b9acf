package gateway

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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
		{[]string{"summary_latencies=true"}, MetricsConfig{SummaryLatencies: true}, ""},
		{[]string{"summary_quantiles=0.5:0.05,0.9:0.01"}, MetricsConfig{SummaryQuantiles: "0.5:0.05,0.9:0.01"}, ""},
		{[]string{`summary_quantiles="0.25:0.01"`}, MetricsConfig{SummaryQuantiles: "0.25:0.01"}, ""},
		{[]string{"summary_quantiles=0.5"}, MetricsConfig{}, "no ':' delimiter found"},
		{[]string{"summary_quantiles=1.5:0.01"}, MetricsConfig{}, "the quantile must be a number from 0 to 1"},
		{[]string{"summary_quantiles=0.5:x"}, MetricsConfig{}, "the error must be a number from 0 to 1"},
		{[]string{"response_cache=true"}, MetricsConfig{}, `unknown setting "response_cache"`},
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

func TestMetricsConfigQuantiles(t *testing.T) {
	if got := (MetricsConfig{}).Quantiles(); !slices.Equal(got, []float64{0.5, 0.9, 0.95, 0.99, 0.999}) {
		t.Errorf("default quantiles %v, want Triton's", got)
	}
	if got := (MetricsConfig{SummaryQuantiles: "0.25:0.01,0.75:0.01"}).Quantiles(); !slices.Equal(got, []float64{0.25, 0.75}) {
		t.Errorf("quantiles %v, want [0.25 0.75]", got)
	}
}

// Each GPU shows once, whichever executors report it; figures a GPU does
// not give are left out.
func TestCollectGPUs(t *testing.T) {
	nan := math.NaN()
	a := &busv1.GpuMetrics{Uuid: "GPU-a", Utilization: 0.5, MemoryTotalBytes: 100, MemoryUsedBytes: 40, PowerUsage: 250, PowerLimit: 700, Energy: 12}
	b := &busv1.GpuMetrics{Uuid: "GPU-b", Utilization: 0, MemoryTotalBytes: 50, MemoryUsedBytes: 0, PowerUsage: nan, PowerLimit: nan, Energy: nan}
	ch := make(chan prometheus.Metric, 100)
	collectGPUs(ch, []*busv1.StatisticsReply{{Gpus: []*busv1.GpuMetrics{a, b}}, {Gpus: []*busv1.GpuMetrics{a}}})
	close(ch)
	got := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		name := m.Desc().String()
		name = name[strings.Index(name, `fqName: "`)+9:]
		name = name[:strings.Index(name, `"`)]
		key := name + "/" + pb.GetLabel()[0].GetValue()
		if _, dup := got[key]; dup {
			t.Errorf("%s reported twice", key)
		}
		got[key] = pb.GetGauge().GetValue() + pb.GetCounter().GetValue()
	}
	want := map[string]float64{
		"nv_gpu_utilization/GPU-a": 0.5, "nv_gpu_memory_total_bytes/GPU-a": 100, "nv_gpu_memory_used_bytes/GPU-a": 40,
		"nv_gpu_power_usage/GPU-a": 250, "nv_gpu_power_limit/GPU-a": 700, "nv_energy_consumption/GPU-a": 12,
		"nv_gpu_utilization/GPU-b": 0, "nv_gpu_memory_total_bytes/GPU-b": 50, "nv_gpu_memory_used_bytes/GPU-b": 0,
	}
	if !maps.Equal(got, want) {
		t.Errorf("GPU metrics %v, want %v", got, want)
	}
}
