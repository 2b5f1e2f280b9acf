package gateway

import (
	"testing"

	"github.com/nereid-io/nereid/api/busv1"
)

// kvPart is one executor process's report of KV-cache block gauges, each
// "type=value" for model (no model label when model is "").
func kvPart(process, model string, blocks map[string]float64) *busv1.StatisticsReply {
	f := &busv1.BackendMetricFamily{Name: kvCacheFamily, Kind: 1}
	for kind, v := range blocks {
		labels := []*busv1.BackendMetricLabel{{Name: "kv_cache_block_type", Value: kind}}
		if model != "" {
			labels = append(labels, &busv1.BackendMetricLabel{Name: "model", Value: model})
		}
		f.Metrics = append(f.Metrics, &busv1.BackendMetric{Labels: labels, Value: v})
	}
	return &busv1.StatisticsReply{BackendMetricsProcess: process, BackendMetrics: []*busv1.BackendMetricFamily{f}}
}

func TestORCAHeaderValue(t *testing.T) {
	full := map[string]float64{"used": 30, "max": 100, "tokens_per": 64}
	for _, tc := range []struct {
		name   string
		format string
		parts  []*busv1.StatisticsReply
		want   string
	}{
		{"one executor, text", "text", []*busv1.StatisticsReply{kvPart("p1", "llm", full)},
			"TEXT named_metrics.kv_cache_utilization=0.300000, named_metrics.max_token_capacity=6400"},
		{"one executor, json", "json", []*busv1.StatisticsReply{kvPart("p1", "llm", full)},
			`JSON {"named_metrics":{"kv_cache_utilization":0.3,"max_token_capacity":6400}}`},
		{"two processes: blocks add up, tokens per block does not", "text", []*busv1.StatisticsReply{
			kvPart("p1", "llm", full), kvPart("p2", "llm", map[string]float64{"used": 10, "max": 100, "tokens_per": 64})},
			"TEXT named_metrics.kv_cache_utilization=0.200000, named_metrics.max_token_capacity=12800"},
		{"two executors of one process count once", "text", []*busv1.StatisticsReply{
			kvPart("p1", "llm", full), kvPart("p1", "llm", full)},
			"TEXT named_metrics.kv_cache_utilization=0.300000, named_metrics.max_token_capacity=6400"},
		{"another model's blocks are left out", "text", []*busv1.StatisticsReply{
			kvPart("p1", "llm", full), kvPart("p2", "other", map[string]float64{"used": 100, "max": 100, "tokens_per": 16})},
			"TEXT named_metrics.kv_cache_utilization=0.300000, named_metrics.max_token_capacity=6400"},
		{"blocks without a model label count", "json", []*busv1.StatisticsReply{kvPart("p1", "", full)},
			`JSON {"named_metrics":{"kv_cache_utilization":0.3,"max_token_capacity":6400}}`},
		{"no blocks at all: zero utilization", "json", []*busv1.StatisticsReply{
			kvPart("p1", "llm", map[string]float64{"used": 0, "max": 0, "tokens_per": 64})},
			`JSON {"named_metrics":{"kv_cache_utilization":0.0,"max_token_capacity":0}}`},
		{"a block type missing: no header", "text", []*busv1.StatisticsReply{
			kvPart("p1", "llm", map[string]float64{"used": 1, "max": 100})}, ""},
		{"no family: no header", "text", []*busv1.StatisticsReply{{BackendMetricsProcess: "p1"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := orcaHeaderValue(tc.format, tc.parts, "llm"); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
