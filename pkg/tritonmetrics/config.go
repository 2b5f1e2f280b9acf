package tritonmetrics

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nereid-io/nereid/pkg/tritonflag"
)

// Config is tritonserver's --metrics-config: settings of the per-model
// metrics, given as <setting>=<value>.
type Config struct {
	// HistogramLatencies (histogram_latencies=true; default false) adds
	// nv_inference_first_response_histogram_ms for decoupled models.
	HistogramLatencies bool
	// NoCounterLatencies (counter_latencies=false) leaves out the
	// cumulative duration counters (nv_inference_*_duration_us).
	NoCounterLatencies bool
	// SummaryLatencies (summary_latencies=true; default false) adds the
	// latency summaries (nv_inference_*_summary_us).
	SummaryLatencies bool
	// SummaryQuantiles is summary_quantiles, "<quantile>:<error>,..."
	// (validated; empty: Triton's quantiles, defaultQuantiles).
	SummaryQuantiles string
}

// defaultQuantiles are Triton's summary quantiles.
var defaultQuantiles = []float64{0.5, 0.9, 0.95, 0.99, 0.999}

// Quantiles are the summaries' quantiles. The error half of each pair is
// not needed: quantiles are read off the executors' merged observations
// within pkg/quantile's Accuracy, tighter than Triton's default errors.
func (m Config) Quantiles() []float64 {
	if m.SummaryQuantiles == "" {
		return defaultQuantiles
	}
	qs, _ := parseQuantiles(m.SummaryQuantiles)
	return qs
}

// parseQuantiles reads Triton's summary_quantiles list.
func parseQuantiles(v string) ([]float64, error) {
	var qs []float64
	for _, pair := range strings.Split(v, ",") {
		qs1, e1, ok := strings.Cut(strings.TrimSpace(pair), ":")
		if !ok {
			return nil, fmt.Errorf("invalid quantile %q: no ':' delimiter found, expected <quantile>:<error>", pair)
		}
		q, err := strconv.ParseFloat(qs1, 64)
		if err != nil || q < 0 || q > 1 {
			return nil, fmt.Errorf("invalid quantile %q: the quantile must be a number from 0 to 1", pair)
		}
		e, err := strconv.ParseFloat(e1, 64)
		if err != nil || e < 0 || e > 1 {
			return nil, fmt.Errorf("invalid quantile %q: the error must be a number from 0 to 1", pair)
		}
		qs = append(qs, q)
	}
	return qs, nil
}

// String implements flag.Value.
func (m *Config) String() string {
	if m == nil {
		return ""
	}
	s := fmt.Sprintf("histogram_latencies=%t,counter_latencies=%t,summary_latencies=%t", m.HistogramLatencies, !m.NoCounterLatencies, m.SummaryLatencies)
	if m.SummaryQuantiles != "" {
		s += ",summary_quantiles=" + m.SummaryQuantiles
	}
	return s
}

// Set implements flag.Value: one <setting>=<value>.
func (m *Config) Set(v string) error {
	key, val, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("--metrics-config %q: expected <setting>=<value>", v)
	}
	var b bool
	switch key {
	case "histogram_latencies", "counter_latencies", "summary_latencies":
		var err error
		if b, err = tritonflag.ParseBool(val); err != nil {
			return fmt.Errorf("--metrics-config %s: %v", key, err)
		}
	}
	switch key {
	case "histogram_latencies":
		m.HistogramLatencies = b
	case "counter_latencies":
		m.NoCounterLatencies = !b
	case "summary_latencies":
		m.SummaryLatencies = b
	case "summary_quantiles":
		val = strings.Trim(val, `"`)
		if _, err := parseQuantiles(val); err != nil {
			return fmt.Errorf("--metrics-config summary_quantiles: %v", err)
		}
		m.SummaryQuantiles = val
	default:
		return fmt.Errorf("--metrics-config %q: unknown setting %q (histogram_latencies, counter_latencies, summary_latencies, summary_quantiles)", v, key)
	}
	return nil
}

// FlagUsage is --metrics-config's usage line.
const FlagUsage = "a metrics setting: histogram_latencies=<bool>, counter_latencies=<bool>, summary_latencies=<bool> or summary_quantiles=<q>:<err>,... (repeatable)"
