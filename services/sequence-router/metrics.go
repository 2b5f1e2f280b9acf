package seqrouter

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/opsmetrics"
	"github.com/nereid-io/nereid/pkg/tritonmetrics"
)

// The router's /metrics: what it holds per model whose lease it has, its
// part of Triton's per-model metrics of those models (the requests it
// holds and those it failed itself, nv_inference_pending_request_count and
// nv_inference_request_failure; executors report the rest), and Nereid's
// NATS round trips. Gateways get the same part over
// bus.SequenceStatsSubject for the statistics extension and
// /metrics/constellation.
var (
	modelLabels = []string{"model", "version"}
	descQueued  = prometheus.NewDesc("nereid_sequence_router_queued_requests",
		"Requests the sequence router holds for a model: queued in a sequence slot, in the backlog or waiting for the model's configuration", modelLabels, nil)
	descBacklog = prometheus.NewDesc("nereid_sequence_router_backlog_sequences",
		"Sequences waiting for a free sequence slot (the backlog)", modelLabels, nil)
	descActive = prometheus.NewDesc("nereid_sequence_router_active_sequences",
		"Sequences bound to a sequence slot", modelLabels, nil)
	descSlots = prometheus.NewDesc("nereid_sequence_router_instances",
		"Model instances the sequence router batches for", modelLabels, nil)
	descLeases = prometheus.NewDesc("nereid_sequence_router_models",
		"Model versions whose lease this sequence router holds (it serves their sequences)", nil, nil)
)

type routerCollector struct{ s *Service }

func (c routerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueued, descBacklog, descActive, descSlots, descLeases} {
		ch <- d
	}
	tritonmetrics.DescribeHeld(ch)
}

func (c routerCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	models := make([]*model, 0, len(c.s.models))
	for _, m := range c.s.models {
		models = append(models, m)
	}
	c.s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(len(models)))
	held := make([]*busv1.VersionMetrics, 0, len(models))
	for _, m := range models {
		m.lock()
		held = append(held, m.metrics())
		queued := len(m.pre)
		var backlog, active, instances int
		if m.core != nil {
			st := m.core.Snapshot()
			queued += st.Queued
			backlog, active, instances = st.Backlog, st.Active, st.Instances
		}
		m.unlock()
		for _, v := range []struct {
			d *prometheus.Desc
			n int
		}{{descQueued, queued}, {descBacklog, backlog}, {descActive, active}, {descSlots, instances}} {
			ch <- prometheus.MustNewConstMetric(v.d, prometheus.GaugeValue, float64(v.n), m.name, m.version)
		}
	}
	tritonmetrics.CollectHeld(ch, held)
}

// MetricsHandler serves the router's metrics at /metrics.
func (s *Service) MetricsHandler() http.Handler { return s.metrics.Handler(nil) }

// MetricsRegistry is the registry MetricsHandler serves: what runs beside
// the router in its process (the placement controller) adds its own.
func (s *Service) MetricsRegistry() prometheus.Registerer { return s.metrics }

func newRouterMetrics(s *Service) *opsmetrics.Registry {
	reg := opsmetrics.New()
	reg.MustRegister(routerCollector{s})
	return reg
}
