package gateway

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/opsmetrics"
	"github.com/nereid-io/nereid/pkg/tritonmetrics"
)

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

// localCollector reports what this gateway does and sees itself.
type localCollector struct{ g *Gateway }

func (c localCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInflight, descCPUUtil, descCPUMemTotal, descCPUMemUsed} {
		ch <- d
	}
}

func (c localCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(c.g.inflight.used.Load()))
	// Machine figures that cannot be read (not Linux) are left out.
	if u, err := c.g.host.CPU(); err == nil {
		ch <- prometheus.MustNewConstMetric(descCPUUtil, prometheus.GaugeValue, u)
	}
	if m, err := c.g.host.Memory(); err == nil {
		ch <- prometheus.MustNewConstMetric(descCPUMemTotal, prometheus.GaugeValue, float64(m.Total))
		ch <- prometheus.MustNewConstMetric(descCPUMemUsed, prometheus.GaugeValue, float64(m.Used))
	}
}

// constellationCollector reports Triton's per-model and GPU metrics of the
// whole constellation, as Triton reports one server's: each scrape asks
// the executors serving each READY version (and the sequence routers
// leading the sequence models, and every gateway for the ensembles it ran
// and its response cache's hits) for their statistics and sums them. Every
// gateway reports the same numbers, which also show on the executors' and
// routers' own endpoints: it is served on /metrics/constellation, which
// Prometheus must not scrape beside them.
type constellationCollector struct{ g *Gateway }

func (c constellationCollector) Describe(ch chan<- *prometheus.Desc) {
	tritonmetrics.Describe(ch)
	for _, d := range opsmetrics.GPUDescs {
		ch <- d
	}
}

func (c constellationCollector) Collect(ch chan<- prometheus.Metric) {
	want, parts, err := c.g.executorStats(context.Background(), "", "")
	if err != nil {
		c.g.log.Warn("metrics: statistics failed", "err", err)
		return
	}
	collectGPUs(ch, parts)
	parts = append(parts, c.g.sharedStats(context.Background(), want)...)
	tritonmetrics.Collect(ch, c.g.cfg.Metrics, sumStats(parts, want).GetModelStats(), parts)
}

// descExecutors is nereid_executors: how many executors serve each READY
// version, as this gateway's catalog has them.
var descExecutors = prometheus.NewDesc("nereid_executors",
	"Number of executors serving the model version READY", []string{"model", "version"}, nil)

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
		Help: "Tensor bytes handed to or from executors of this node outside the bus (pkg/handoff), by direction (request, response) and mode (file; kept: a file an ensemble request's steps share, named without a copy; process)",
	}, []string{"direction", "mode"})
	g.reruns = rerunCounter()
	g.metrics.MustRegister(localCollector{g}, catalogCollector{g}, g.handoff, g.reruns)
}

// countHandoff adds the bytes one request handed off.
func (g *Gateway) countHandoff(o *handoff.Outgoing) {
	in, out := o.Bytes()
	if in == 0 && out == 0 {
		return
	}
	mode := "file"
	switch o.Mode() {
	case handoff.ModeProcess:
		mode = "process"
	case handoff.ModeKept:
		mode = "kept"
	}
	g.handoff.WithLabelValues("request", mode).Add(float64(in))
	g.handoff.WithLabelValues("response", mode).Add(float64(out))
}

// metricsHandler serves, in the Prometheus text format (not OpenMetrics,
// which would append _total to counter names):
//
//   - GET /metrics: the gateway's own metrics, or with
//     Config.MetricsConstellation the same page as /metrics/constellation;
//   - GET /metrics/constellation: the gateway's own metrics and Triton's
//     per-model and GPU metrics summed over the constellation, the page
//     Triton serves for one server.
func (g *Gateway) metricsHandler() http.Handler {
	cons := prometheus.NewRegistry()
	cons.MustRegister(constellationCollector{g})
	opts := promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}
	whole := promhttp.HandlerFor(prometheus.Gatherers{g.metrics, cons}, opts)
	own := g.metrics.Handler(nil)
	if g.cfg.MetricsConstellation {
		own = whole
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", own)
	mux.Handle("/metrics/constellation", whole)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, httpError(http.StatusNotFound, "Not Found"))
	})
	return mux
}
