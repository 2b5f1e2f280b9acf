package placer

import (
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/pkg/placement"
)

// maxDecisions bounds the decisions kept for the admin API's view.
const maxDecisions = 100

// decided records a decision performed (err: how it failed), for the
// admin API's view; the oldest go beyond maxDecisions.
func (c *Controller) decided(at time.Time, d placement.Decision, err error) {
	rec := &adminv1.PlacementDecision{UnixMs: at.UnixMilli(), Action: d.Action.String(), Model: d.Model,
		Executor: d.Executor, Reason: d.Reason.String(), ForModel: d.For}
	if err != nil {
		rec.Error = err.Error()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.decisions = append(c.decisions, rec)
	if n := len(c.decisions) - maxDecisions; n > 0 {
		c.decisions = slices.Delete(c.decisions, 0, n)
	}
}

// handleState serves the admin API's GetPlacement
// (bus.PlacementStateSubject) while this controller leads.
func (c *Controller) handleState(context.Context, []byte) (proto.Message, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stateLocked(), nil
}

// stateLocked is the planner's view: each model with the executors
// holding it, each executor with its capacity and what it holds, the
// models left waiting at the last round and the latest decisions. c.mu
// held.
func (c *Controller) stateLocked() *adminv1.Placement {
	out := &adminv1.Placement{ControllerId: c.cfg.ID, Waiting: slices.Clone(c.waiting), Decisions: slices.Clone(c.decisions)}
	if c.planner == nil {
		return out
	}
	holders := map[string][]string{}
	for _, e := range c.planner.Executors() {
		pe := &adminv1.PlacementExecutor{Id: e.ID, Node: e.Node, CapacityBytes: e.Capacity.Bytes, CapacitySlots: int64(e.Capacity.Slots),
			Gpu: e.GPU, Draining: e.Draining}
		for _, h := range e.Holds {
			if h.State == placement.Failed {
				continue
			}
			holders[h.Model] = append(holders[h.Model], e.ID)
			pe.HeldModels++
			f := h.Footprint
			if f == 0 {
				f = c.planner.Footprint(h.Model)
			}
			pe.HeldBytes += f
		}
		out.Executors = append(out.Executors, pe)
	}
	for _, m := range c.planner.Models() {
		out.Models = append(out.Models, &adminv1.PlacedModel{Name: m.Name, Executors: holders[m.Name], FootprintBytes: c.planner.Footprint(m.Name),
			MinReplicas: int64(m.MinReplicas), MaxReplicas: int64(m.MaxReplicas), Pinned: m.Pinned, Gpu: m.GPU, Sequence: m.Sequence})
	}
	return out
}

// waitingOf is the admin API's form of the models a plan leaves waiting.
func waitingOf(ws []placement.Waiting) []*adminv1.WaitingModel {
	out := make([]*adminv1.WaitingModel, 0, len(ws))
	for _, w := range ws {
		out = append(out, &adminv1.WaitingModel{Model: w.Model, Replicas: int64(w.Replicas), Why: w.Why.String(), Demanded: w.Demanded})
	}
	return out
}
