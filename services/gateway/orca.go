package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nereid-io/nereid/api/busv1"
)

// ORCA load reports, as Triton's HTTP endpoint gives them (server
// src/orca_http.cc): an inference request with the header
// endpoint-load-metrics-format set to "text" or "json" is answered with an
// endpoint-load-metrics header holding the KV-cache utilization and token
// capacity that the TensorRT-LLM backend reports in its metric family
// nv_trt_llm_kv_cache_block_metrics (kv_cache_block_type "used", "max" and
// "tokens_per"). A load balancer in front of the gateways reads it.
//
// Triton reads one server's metrics. Here the blocks of every executor
// process serving the requested model are added up (used and max; tokens
// per block is the backend's setting, the same on each), so the report is
// the constellation's for that model; metrics without a model label count
// for every model, as Triton's search of its whole metrics page does. The
// executors' families are read at most once per orcaMaxAge for all
// requests together. Without the family (no TensorRT-LLM backend) there is
// no header, as in Triton.

const (
	orcaFormatHeader = "endpoint-load-metrics-format"
	orcaHeader       = "endpoint-load-metrics"
	kvCacheFamily    = "nv_trt_llm_kv_cache_block_metrics"
	orcaMaxAge       = time.Second
)

// orcaReports keeps the executors' backend metric families for orcaMaxAge.
type orcaReports struct {
	mu    sync.Mutex
	at    time.Time
	parts []*busv1.StatisticsReply
}

// parts returns the executors' statistics replies (their backend metric
// families), fetched anew when older than orcaMaxAge; on a failed fetch,
// the last ones.
func (o *orcaReports) get(ctx context.Context, fetch func(context.Context) ([]*busv1.StatisticsReply, error)) []*busv1.StatisticsReply {
	o.mu.Lock()
	defer o.mu.Unlock()
	if time.Since(o.at) < orcaMaxAge {
		return o.parts
	}
	if parts, err := fetch(ctx); err == nil {
		o.parts, o.at = parts, time.Now()
	}
	return o.parts
}

// orcaLoad sets the endpoint-load-metrics header of an inference response
// to model when the request asked for it (endpoint-load-metrics-format).
func (g *Gateway) orcaLoad(ctx context.Context, out, in http.Header, model string) {
	format := in.Get(orcaFormatHeader)
	if format != "text" && format != "json" {
		return
	}
	parts := g.orca.get(ctx, func(ctx context.Context) ([]*busv1.StatisticsReply, error) {
		_, parts, err := g.executorStats(ctx, "", "")
		return parts, err
	})
	if v := orcaHeaderValue(format, parts, model); v != "" {
		out.Set(orcaHeader, v)
	}
}

// orcaHeaderValue is the endpoint-load-metrics value in format ("text" or
// "json") of model's KV-cache blocks in parts; "" when the family, or one
// of the three block types, is missing.
func orcaHeaderValue(format string, parts []*busv1.StatisticsReply, model string) string {
	used, maxBlocks, tokensPer := -1.0, -1.0, -1.0
	add := func(dst *float64, v float64, sum bool) {
		switch {
		case *dst < 0:
			*dst = v
		case sum:
			*dst += v
		default:
			*dst = max(*dst, v)
		}
	}
	seen := map[string]bool{}
	for _, p := range parts {
		if seen[p.GetBackendMetricsProcess()] {
			continue // the executors of one process report its families alike
		}
		seen[p.GetBackendMetricsProcess()] = true
		for _, f := range p.GetBackendMetrics() {
			if f.GetName() != kvCacheFamily {
				continue
			}
			for _, m := range f.GetMetrics() {
				var kind, of string
				for _, l := range m.GetLabels() {
					switch l.GetName() {
					case "kv_cache_block_type":
						kind = l.GetValue()
					case "model":
						of = l.GetValue()
					}
				}
				if of != "" && of != model {
					continue
				}
				switch kind {
				case "used":
					add(&used, m.GetValue(), true)
				case "max":
					add(&maxBlocks, m.GetValue(), true)
				case "tokens_per":
					add(&tokensPer, m.GetValue(), false)
				}
			}
		}
	}
	if used < 0 || maxBlocks < 0 || tokensPer < 0 {
		return ""
	}
	util := 0.0
	if maxBlocks > 0 {
		util = used / maxBlocks
	}
	capacity := uint64(maxBlocks * tokensPer)
	if format == "json" {
		b, err := json.Marshal(map[string]map[string]json.Number{"named_metrics": {
			"kv_cache_utilization": json.Number(jsonDouble(util)),
			"max_token_capacity":   json.Number(strconv.FormatUint(capacity, 10)),
		}})
		if err != nil {
			return ""
		}
		return "JSON " + string(b)
	}
	return fmt.Sprintf("TEXT named_metrics.kv_cache_utilization=%f, named_metrics.max_token_capacity=%d", util, capacity)
}

// jsonDouble writes v as a JSON double as Triton's JSON writer does: the
// shortest form, with ".0" when it is whole.
func jsonDouble(v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}
