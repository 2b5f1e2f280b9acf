package placer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The two phases of an on-demand placement, timed apart, so that the
// controller's own part is seen without the model's load:
//
//   - place: from the first demand for the model (a gateway's request
//     found it placed nowhere) to the load command the controller sends
//     for it. The round's catalog reads, the plan, and the unloads that
//     make room for it (performed before its load) are in it.
//   - load: from that command to the executor's answer that it holds
//     the model READY.
const (
	phasePlace = "place"
	phaseLoad  = "load"
)

// onDemandSummary is nereid_placement_on_demand_seconds, by phase.
func onDemandSummary() *prometheus.SummaryVec {
	return prometheus.NewSummaryVec(prometheus.SummaryOpts{
		Name:       "nereid_placement_on_demand_seconds",
		Help:       "On-demand placements led by this controller, by phase: place (first demand to the load command sent, room made included), load (the executor's load until READY)",
		Objectives: map[float64]float64{0.5: 0.01, 0.9: 0.01, 0.99: 0.001},
		MaxAge:     10 * time.Minute,
	}, []string{"phase"})
}

// demandLocked gives model demand in the planner and, on its first
// demand, starts its placement's clock. c.mu held, leading.
func (c *Controller) demandLocked(model string) {
	now := time.Now()
	c.planner.Demand(now, model)
	if _, ok := c.demandedAt[model]; !ok {
		c.demandedAt[model] = now
	}
}

// loading times the load command for model sent at sent: it observes the
// place phase when the model was demanded, and returns the function that
// observes the load phase once the executor answered (err: how).
func (c *Controller) loading(model string, sent time.Time) (done func(err error)) {
	c.mu.Lock()
	at := c.demandedAt[model] // zero: not demanded
	c.mu.Unlock()
	if at.IsZero() {
		return func(error) {}
	}
	place := sent.Sub(at)
	c.onDemand.WithLabelValues(phasePlace).Observe(place.Seconds())
	return func(err error) {
		load := time.Since(sent)
		c.mu.Lock()
		if c.demandedAt[model].Equal(at) {
			delete(c.demandedAt, model)
		}
		c.mu.Unlock()
		if err != nil {
			c.log.Info("placement: on demand, load failed", "model", model, "place", place, "load", load, "err", err)
			return
		}
		c.onDemand.WithLabelValues(phaseLoad).Observe(load.Seconds())
		c.log.Info("placement: on demand, placed", "model", model, "place", place, "load", load)
	}
}
