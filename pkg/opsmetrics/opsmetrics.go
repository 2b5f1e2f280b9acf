// Package opsmetrics is what every Nereid service needs to serve Prometheus
// metrics: a registry of its own per service instance (several run in one
// process in tests and in the standalone server, so nothing is global), the
// NATS round-trip histogram every service has, and the /metrics endpoint.
// Nereid's own metrics are named nereid_*; Triton's keep their nv_* names.
package opsmetrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/probe"
)

// Registry is one service instance's metrics.
type Registry struct {
	*prometheus.Registry
	roundTrip *prometheus.HistogramVec
}

// RoundTripBuckets are the bounds of nereid_nats_round_trip_seconds: 100 µs
// to about 6.5 s, by fours.
var RoundTripBuckets = prometheus.ExponentialBuckets(0.0001, 4, 9)

// New is a registry holding nereid_nats_round_trip_seconds and
// nereid_bus_forged_replies.
func New() *Registry {
	r := &Registry{Registry: prometheus.NewRegistry()}
	r.roundTrip = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "nereid_nats_round_trip_seconds",
		Help:    "Time from sending a request over NATS to its reply (or failure), by subject kind",
		Buckets: RoundTripBuckets,
	}, []string{"kind"})
	r.MustRegister(r.roundTrip, prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "nereid_bus_forged_replies",
		Help: "Messages this process refused on its reply inboxes because they did not come from the role and instance the request went to (a forged or misdirected reply)",
	}, func() float64 { return float64(bus.ForgedReplies()) }))
	return r
}

// ObserveRoundTrip records one request's round trip on subject.
func (r *Registry) ObserveRoundTrip(subject string, d time.Duration) {
	r.roundTrip.WithLabelValues(bus.SubjectKind(subject)).Observe(d.Seconds())
}

// BusOption has a bus.Conn report its round trips here.
func (r *Registry) BusOption() bus.Option { return bus.WithRoundTrip(r.ObserveRoundTrip) }

// Handler serves the registry in the Prometheus text format (not
// OpenMetrics, which would append _total to counter names, as Triton's
// endpoint does not), followed by what more writes, if not nil (a Triton
// backend's custom metric families, already in the text format).
func (r *Registry) Handler(more func(w http.ResponseWriter)) http.Handler {
	h := promhttp.HandlerFor(r, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	if more == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// Uncompressed, so that more's text can follow in the same body.
		req.Header.Del("Accept-Encoding")
		h.ServeHTTP(w, req)
		more(w)
	})
}

// Server serves GET /metrics on its own port.
type Server = probe.Server

// Listen serves h at /metrics on addr ("" disables: a nil *Server is
// valid); anything else is 404.
func Listen(addr string, h http.Handler) (*Server, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	return probe.Serve(addr, mux)
}

// ListenPort is Listen on every interface's port (0 disables), for the
// services' --metrics-port.
func ListenPort(port int, h http.Handler) (*Server, error) {
	if port == 0 {
		return nil, nil
	}
	return Listen(":"+strconv.Itoa(port), h)
}
