package executor

import (
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/opsmetrics"
	"github.com/nereid-io/nereid/pkg/tritonmetrics"
	"github.com/nereid-io/nereid/services/executor/internal/cbackend"
	"github.com/nereid-io/nereid/services/executor/internal/gpu"
)

// The executor's /metrics: Triton's per-model metrics of the requests
// this executor served, Triton's GPU metrics of the GPUs it sees, Nereid's
// NATS round trips, and the custom metric families of the Triton backends
// it runs. Each request is counted by the one executor that served it (a
// sequence router counts those it failed or holds itself), so Prometheus'
// sums over executors are the constellation's; a gateway's
// /metrics/constellation shows those sums on one page.

// modelCollector reports Triton's per-model metrics of the READY versions
// from the executor's own statistics, as it reports them to gateways.
type modelCollector struct{ e *Executor }

func (c modelCollector) Describe(ch chan<- *prometheus.Desc) { tritonmetrics.Describe(ch) }

func (c modelCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.e.statsReply("", "")
	tritonmetrics.Collect(ch, c.e.cfg.Metrics, r.GetModelStats(), []*busv1.StatisticsReply{r})
}

// gpuCollector reads NVML at scrape time. Without a GPU there is no
// sampler and no GPU metric, as Triton has none.
type gpuCollector struct{ s *gpu.Sampler }

func (c gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range opsmetrics.GPUDescs {
		ch <- d
	}
}

func (c gpuCollector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range gpuProtos(c.s.Read()) {
		opsmetrics.CollectGPU(ch, g)
	}
}

// gpuProtos are readings as the gateways get them with the statistics.
func gpuProtos(rs []gpu.Reading) []*busv1.GpuMetrics {
	out := make([]*busv1.GpuMetrics, 0, len(rs))
	for _, r := range rs {
		out = append(out, &busv1.GpuMetrics{Uuid: r.UUID, Utilization: r.Utilization, MemoryTotalBytes: r.MemoryTotal,
			MemoryUsedBytes: r.MemoryUsed, PowerUsage: r.PowerUsage, PowerLimit: r.PowerLimit, Energy: r.Energy})
	}
	return out
}

// newMetrics makes the executor's registry and, when NVML finds GPUs, the
// sampler of their metrics (closed by the caller).
func newMetrics(e *Executor) (*opsmetrics.Registry, *gpu.Sampler, error) {
	reg := opsmetrics.New()
	reg.MustRegister(modelCollector{e})
	s, err := gpu.OpenSampler()
	switch {
	case err == nil:
		reg.MustRegister(gpuCollector{s})
	case !errors.Is(err, gpu.ErrNoGPU):
		return nil, nil, err
	}
	return reg, s, nil
}

// MetricsHandler serves the executor's metrics at /metrics, the Triton
// backends' custom families after its own.
func (e *Executor) MetricsHandler() http.Handler {
	return e.metrics.Handler(func(w http.ResponseWriter) { _ = cbackend.WriteMetrics(w) })
}
