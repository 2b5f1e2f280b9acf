package shmregistry

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/opsmetrics"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// The registry's /metrics: the regions it holds, the requests it answered
// and Nereid's NATS round trips.
var descRegions = prometheus.NewDesc("nereid_shm_registry_regions",
	"Shared-memory regions registered, by kind (system, cuda)", []string{"kind"}, nil)

type regionCollector struct{ s *Service }

func (c regionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descRegions }

func (c regionCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.currentStore()
	if st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	regions, err := st.List(ctx)
	if err != nil {
		c.s.log.Warn("metrics: cannot list regions", "err", err)
		return
	}
	n := map[string]int{"system": 0, "cuda": 0}
	for _, r := range regions {
		n[strings.ToLower(strings.TrimPrefix(r.GetKind().String(), "SHM_KIND_"))]++
	}
	for kind, count := range n {
		ch <- prometheus.MustNewConstMetric(descRegions, prometheus.GaugeValue, float64(count), kind)
	}
}

func newRegistryMetrics(s *Service) (*opsmetrics.Registry, *prometheus.CounterVec) {
	reg := opsmetrics.New()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nereid_shm_registry_requests",
		Help: "Requests the shared-memory registry answered, by operation and Triton error kind (OK for success)",
	}, []string{"op", "code"})
	reg.MustRegister(regionCollector{s}, requests)
	return reg, requests
}

// counted wraps h to count its answers as op.
func (s *Service) counted(op string, h bus.HandlerFunc) bus.HandlerFunc {
	return func(ctx context.Context, req []byte) (proto.Message, error) {
		resp, err := h(ctx, req)
		code := "OK"
		if err != nil {
			code = tritonerr.KindOf(err).String()
		}
		s.requests.WithLabelValues(op, code).Inc()
		return resp, err
	}
}

// MetricsHandler serves the registry's metrics at /metrics.
func (s *Service) MetricsHandler() http.Handler { return s.metrics.Handler(nil) }
