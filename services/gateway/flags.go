package gateway

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/nereid-io/nereid/pkg/tlsreload"
	"github.com/nereid-io/nereid/pkg/tracesetting"
	"github.com/nereid-io/nereid/pkg/tritonflag"
)

// EdgeFlags are tritonserver's TLS and restriction flags, shared by the
// gateway's and the standalone server's mains.
type EdgeFlags struct {
	grpc, http             tlsFlags
	httpRestr, grpcRestrct RestrictionFlag
	metrics                MetricsConfig
	trace                  tracesetting.Flag
}

type tlsFlags struct {
	use, mutual     bool
	cert, key, root string
}

// MetricsConfig is tritonserver's --metrics-config: settings of the
// per-model metrics, given as <setting>=<value>.
type MetricsConfig struct {
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
func (m MetricsConfig) Quantiles() []float64 {
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
func (m *MetricsConfig) String() string {
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
func (m *MetricsConfig) Set(v string) error {
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

// Register defines --grpc-use-ssl, --grpc-use-ssl-mutual,
// --grpc-server-cert, --grpc-server-key, --grpc-root-cert, their --http-*
// counterparts, --http-restricted-api and --grpc-restricted-protocol.
func (f *EdgeFlags) Register(fs *flag.FlagSet) {
	tritonflag.BoolVar(fs, &f.grpc.use, "grpc-use-ssl", false, "serve gRPC over TLS")
	tritonflag.BoolVar(fs, &f.grpc.mutual, "grpc-use-ssl-mutual", false, "serve gRPC over mutual TLS: clients must present a certificate signed by --grpc-root-cert")
	fs.StringVar(&f.grpc.cert, "grpc-server-cert", "", "PEM certificate of the gRPC endpoint (re-read when it changes)")
	fs.StringVar(&f.grpc.key, "grpc-server-key", "", "PEM private key of the gRPC endpoint (re-read when it changes)")
	fs.StringVar(&f.grpc.root, "grpc-root-cert", "", "PEM root certificate verifying gRPC clients' certificates")
	tritonflag.BoolVar(fs, &f.http.use, "http-use-ssl", false, "serve HTTPS")
	tritonflag.BoolVar(fs, &f.http.mutual, "http-use-ssl-mutual", false, "serve HTTPS with mutual TLS: clients must present a certificate signed by --http-root-cert")
	fs.StringVar(&f.http.cert, "http-server-cert", "", "PEM certificate of the HTTP endpoint (re-read when it changes)")
	fs.StringVar(&f.http.key, "http-server-key", "", "PEM private key of the HTTP endpoint (re-read when it changes)")
	fs.StringVar(&f.http.root, "http-root-cert", "", "PEM root certificate verifying HTTP clients' certificates")
	fs.Var(&f.httpRestr, "http-restricted-api", "restrict HTTP API groups to requests carrying a header: <api list>:<key>=<value> (repeatable)")
	fs.Var(&f.grpcRestrct, "grpc-restricted-protocol", "restrict gRPC API groups to calls carrying metadata triton-grpc-protocol-<key>: <api list>:<key>=<value> (repeatable)")
	fs.Var(&f.trace, "trace-config", "a trace setting: <setting>=<value> (level, rate, count, log_frequency, mode) or opentelemetry,<setting>=<value> (url, resource, ...) (repeatable)")
	fs.Var(&f.metrics, "metrics-config", "a metrics setting: histogram_latencies=<bool>, counter_latencies=<bool>, summary_latencies=<bool> or summary_quantiles=<q>:<err>,... (repeatable)")
}

func (t tlsFlags) files(name string) (*tlsreload.Files, error) {
	if !t.use && !t.mutual {
		if t.cert != "" || t.key != "" || t.root != "" {
			return nil, errors.New("--" + name + "-server-cert, -key and -root-cert need --" + name + "-use-ssl true")
		}
		return nil, nil
	}
	if t.cert == "" || t.key == "" {
		return nil, errors.New("--" + name + "-use-ssl needs --" + name + "-server-cert and --" + name + "-server-key")
	}
	if t.mutual && t.root == "" {
		return nil, errors.New("--" + name + "-use-ssl-mutual needs --" + name + "-root-cert")
	}
	return &tlsreload.Files{Cert: t.cert, Key: t.key, CA: t.root, Mutual: t.mutual}, nil
}

// Apply sets cfg's TLS and restriction fields from the flags.
func (f *EdgeFlags) Apply(cfg *Config) error {
	var err error
	if cfg.GRPCTLS, err = f.grpc.files("grpc"); err != nil {
		return err
	}
	if cfg.HTTPTLS, err = f.http.files("http"); err != nil {
		return err
	}
	cfg.HTTPRestricted, cfg.GRPCRestricted = f.httpRestr.R, f.grpcRestrct.R
	cfg.Metrics = f.metrics
	cfg.Trace = f.trace.Config()
	return nil
}
