package gateway

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/opsmetrics"
	"github.com/nereid-io/nereid/pkg/quantile"
)

// The per-model inference metrics are Triton's (names, help texts, labels
// "model" and "version", counters without a _total suffix). They are not kept
// in the gateway: each scrape sums the executors' statistics, so every
// gateway of a constellation reports the same numbers.
var (
	labels = []string{"model", "version"}

	descSuccess = prometheus.NewDesc("nv_inference_request_success",
		"Number of successful inference requests, all batch sizes", labels, nil)
	descFailure = prometheus.NewDesc("nv_inference_request_failure",
		"Number of failed inference requests, all batch sizes", []string{"model", "version", "reason"}, nil)
	descPending = prometheus.NewDesc("nv_inference_pending_request_count",
		"Instantaneous number of pending requests awaiting execution per-model.", labels, nil)
	descCount = prometheus.NewDesc("nv_inference_count",
		"Number of inferences performed (does not include cached requests)", labels, nil)
	descExecCount = prometheus.NewDesc("nv_inference_exec_count",
		"Number of model executions performed (does not include cached requests)", labels, nil)
	descRequestDuration = prometheus.NewDesc("nv_inference_request_duration_us",
		"Cumulative inference request duration in microseconds (includes cached requests)", labels, nil)
	descQueueDuration = prometheus.NewDesc("nv_inference_queue_duration_us",
		"Cumulative inference queuing duration in microseconds (includes cached requests)", labels, nil)
	descComputeInput = prometheus.NewDesc("nv_inference_compute_input_duration_us",
		"Cumulative compute input duration in microseconds (does not include cached requests)", labels, nil)
	descComputeInfer = prometheus.NewDesc("nv_inference_compute_infer_duration_us",
		"Cumulative compute inference duration in microseconds (does not include cached requests)", labels, nil)
	descComputeOutput = prometheus.NewDesc("nv_inference_compute_output_duration_us",
		"Cumulative inference compute output duration in microseconds (does not include cached requests)", labels, nil)
)

// descFirstResponse is Triton's histogram of the time to a decoupled
// model's first response (--metrics-config histogram_latencies=true).
var descFirstResponse = prometheus.NewDesc("nv_inference_first_response_histogram_ms",
	"Duration from request to first response in milliseconds", labels, nil)

// Triton's latency summaries (--metrics-config summary_latencies=true), by
// the family name executors report them under.
var summaryDescs = map[string]*prometheus.Desc{
	"nv_inference_request_summary_us": prometheus.NewDesc("nv_inference_request_summary_us",
		"Summary of inference request duration in microseconds (includes cached requests)", labels, nil),
	"nv_inference_queue_summary_us": prometheus.NewDesc("nv_inference_queue_summary_us",
		"Summary of inference queuing duration in microseconds (includes cached requests)", labels, nil),
	"nv_inference_compute_input_summary_us": prometheus.NewDesc("nv_inference_compute_input_summary_us",
		"Summary of compute input duration in microseconds (does not include cached requests)", labels, nil),
	"nv_inference_compute_infer_summary_us": prometheus.NewDesc("nv_inference_compute_infer_summary_us",
		"Summary of compute inference duration in microseconds (does not include cached requests)", labels, nil),
	"nv_inference_compute_output_summary_us": prometheus.NewDesc("nv_inference_compute_output_summary_us",
		"Summary of inference compute output duration in microseconds (does not include cached requests)", labels, nil),
}

// failureReasons are the values of nv_inference_request_failure's reason
// label; every version reports all four, zeros included, as Triton does.
var failureReasons = []string{"REJECTED", "CANCELED", "BACKEND", "OTHER"}

// collectGPUs reports each GPU once: executors sharing a machine see the
// same GPUs.
func collectGPUs(ch chan<- prometheus.Metric, parts []*busv1.StatisticsReply) {
	seen := map[string]bool{}
	for _, p := range parts {
		for _, g := range p.GetGpus() {
			if seen[g.GetUuid()] {
				continue
			}
			seen[g.GetUuid()] = true
			opsmetrics.CollectGPU(ch, g)
		}
	}
}

// descInflight is the gateway's own: the HTTP body bytes that requests in
// flight hold, against --http-max-inflight-body-size.
var descInflight = prometheus.NewDesc("nereid_http_inflight_body_bytes",
	"HTTP request body bytes received by requests in flight", nil, nil)

// Triton's CPU metrics, of the machine the gateway runs on.
var (
	descCPUUtil     = prometheus.NewDesc("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", nil, nil)
	descCPUMemTotal = prometheus.NewDesc("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", nil, nil)
	descCPUMemUsed  = prometheus.NewDesc("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", nil, nil)
)

// statsCollector turns the summed statistics into Prometheus metrics at
// scrape time.
type statsCollector struct{ g *Gateway }

func (c statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSuccess, descFailure, descPending, descCount, descExecCount,
		descRequestDuration, descQueueDuration, descComputeInput, descComputeInfer, descComputeOutput, descInflight, descFirstResponse,
		descCPUUtil, descCPUMemTotal, descCPUMemUsed} {
		ch <- d
	}
	for _, d := range summaryDescs {
		ch <- d
	}
	for _, d := range opsmetrics.GPUDescs {
		ch <- d
	}
}

func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(c.g.inflight.used.Load()))
	// Machine figures that cannot be read (not Linux) are left out.
	if u, err := c.g.host.CPU(); err == nil {
		ch <- prometheus.MustNewConstMetric(descCPUUtil, prometheus.GaugeValue, u)
	}
	if m, err := c.g.host.Memory(); err == nil {
		ch <- prometheus.MustNewConstMetric(descCPUMemTotal, prometheus.GaugeValue, float64(m.Total))
		ch <- prometheus.MustNewConstMetric(descCPUMemUsed, prometheus.GaugeValue, float64(m.Used))
	}
	want, parts, err := c.g.executorStats(context.Background(), "", "")
	if err != nil {
		c.g.log.Warn("metrics: statistics failed", "err", err)
		return
	}
	collectGPUs(ch, parts)
	parts = append(parts, c.g.routerStats(context.Background(), want)...)
	resp := sumStats(parts, want)
	extra := sumMetrics(parts)
	mc := c.g.cfg.Metrics
	quantiles := mc.Quantiles()
	counter := func(d *prometheus.Desc, v uint64, model, version string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), model, version)
	}
	for _, s := range resp.GetModelStats() {
		m, v := s.GetName(), s.GetVersion()
		is := s.GetInferenceStats()
		x := extra[statsKey{m, v}]
		if x == nil {
			x = &versionMetrics{}
		}
		counter(descSuccess, is.GetSuccess().GetCount(), m, v)
		for i, r := range failureReasons {
			ch <- prometheus.MustNewConstMetric(descFailure, prometheus.CounterValue, float64(x.failures[i]), m, v, r)
		}
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(x.pending), m, v)
		counter(descCount, s.GetInferenceCount(), m, v)
		counter(descExecCount, s.GetExecutionCount(), m, v)
		if mc.SummaryLatencies {
			for family, d := range summaryDescs {
				sm := x.summaries[family]
				if sm == nil {
					sm = &quantile.Merged{}
				}
				qv := sm.Quantiles(quantiles)
				qm := make(map[float64]float64, len(quantiles))
				for i, q := range quantiles {
					qm[q] = qv[i]
				}
				ch <- prometheus.MustNewConstSummary(d, sm.Count, sm.Sum, qm, m, v)
			}
		}
		if mc.NoCounterLatencies {
			continue
		}
		counter(descRequestDuration, is.GetSuccess().GetNs()/1000, m, v)
		counter(descQueueDuration, is.GetQueue().GetNs()/1000, m, v)
		counter(descComputeInput, is.GetComputeInput().GetNs()/1000, m, v)
		counter(descComputeInfer, is.GetComputeInfer().GetNs()/1000, m, v)
		counter(descComputeOutput, is.GetComputeOutput().GetNs()/1000, m, v)
	}
	if mc.HistogramLatencies {
		for _, h := range sumFirstResponse(parts, want) {
			ch <- prometheus.MustNewConstHistogram(descFirstResponse, h.count, h.sum, h.buckets, h.name, h.version)
		}
	}
}

// versionMetrics is one version's VersionMetrics summed over executors
// and routers.
type versionMetrics struct {
	failures  [4]uint64 // in the order of failureReasons
	pending   uint64
	summaries map[string]*quantile.Merged
}

// sumMetrics adds up the executors' and routers' VersionMetrics.
func sumMetrics(parts []*busv1.StatisticsReply) map[statsKey]*versionMetrics {
	out := map[statsKey]*versionMetrics{}
	for _, p := range parts {
		for _, vm := range p.GetMetrics() {
			k := statsKey{vm.GetName(), vm.GetVersion()}
			x := out[k]
			if x == nil {
				x = &versionMetrics{summaries: map[string]*quantile.Merged{}}
				out[k] = x
			}
			for i, n := range []uint64{vm.GetFailureRejected(), vm.GetFailureCanceled(), vm.GetFailureBackend(), vm.GetFailureOther()} {
				x.failures[i] += n
			}
			x.pending += vm.GetPending()
			for _, s := range vm.GetSummaries() {
				m := x.summaries[s.GetFamily()]
				if m == nil {
					m = &quantile.Merged{}
					x.summaries[s.GetFamily()] = m
				}
				m.Add(s)
			}
		}
	}
	return out
}

// firstResponse is one version's time-to-first-response histogram summed
// over executors: cumulative counts by upper bound, as Prometheus wants.
type firstResponse struct {
	name, version string
	count         uint64
	sum           float64
	buckets       map[float64]uint64
}

// sumFirstResponse adds up the executors' histograms of the versions in
// want, in that order. Executors loaded from the same config have the
// same bounds; a bound only some have counts what falls at or below it
// where it is known.
func sumFirstResponse(parts []*busv1.StatisticsReply, want []statsKey) []firstResponse {
	sums := map[statsKey]*firstResponse{}
	for _, p := range parts {
		for _, h := range p.GetFirstResponse() {
			k := statsKey{h.GetName(), h.GetVersion()}
			f := sums[k]
			if f == nil {
				f = &firstResponse{name: k.name, version: k.version, buckets: map[float64]uint64{}}
				sums[k] = f
			}
			f.count += h.GetCount()
			f.sum += h.GetSum()
			var below uint64
			for i, b := range h.GetBounds() {
				if i < len(h.GetCounts()) {
					below += h.GetCounts()[i]
				}
				f.buckets[b] += below
			}
		}
	}
	var out []firstResponse
	for _, k := range want {
		if f := sums[k]; f != nil {
			out = append(out, *f)
		}
	}
	return out
}

// descExecutors is nereid_executors: how many executors serve each READY
// version, as this gateway's catalog has them.
var descExecutors = prometheus.NewDesc("nereid_executors",
	"Number of executors serving the model version READY", labels, nil)

// catalogCollector reports what the gateway's catalog knows.
type catalogCollector struct{ g *Gateway }

func (c catalogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descExecutors }

func (c catalogCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.g.cat.current()
	for name, mv := range v.models {
		for _, vv := range mv.versions {
			if vv.ready() {
				ch <- prometheus.MustNewConstMetric(descExecutors, prometheus.GaugeValue, float64(len(vv.executors)), name, vv.versionString())
			}
		}
	}
}

// registerMetrics adds the gateway's collectors to its registry.
func (g *Gateway) registerMetrics() {
	g.handoff = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nereid_handoff_bytes",
		Help: "Tensor bytes handed to or from executors of this node outside the bus (pkg/handoff), by direction (request, response) and mode (file, process)",
	}, []string{"direction", "mode"})
	g.metrics.MustRegister(statsCollector{g}, catalogCollector{g}, g.handoff)
}

// countHandoff adds the bytes one request handed off.
func (g *Gateway) countHandoff(o *handoff.Outgoing) {
	in, out := o.Bytes()
	if in == 0 && out == 0 {
		return
	}
	mode := "file"
	if o.Mode() == handoff.ModeProcess {
		mode = "process"
	}
	g.handoff.WithLabelValues("request", mode).Add(float64(in))
	g.handoff.WithLabelValues("response", mode).Add(float64(out))
}

// metricsHandler serves GET /metrics in the Prometheus text format (not
// OpenMetrics, which would append _total to counter names).
func (g *Gateway) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", g.metrics.Handler(nil))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, httpError(http.StatusNotFound, "Not Found"))
	})
	return mux
}
