package placer

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/placement"
	"github.com/nereid-io/nereid/pkg/tritonerr"
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
			Gpu: e.GPU, Draining: e.Draining, GpuCapacityBytes: e.GPUMemory}
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
			// Without a GPU a model holds no GPU memory there, whatever it
			// took on an executor with one.
			if e.GPU {
				g := h.GPUFootprint
				if g == 0 {
					g = c.planner.GPUFootprint(h.Model)
				}
				pe.HeldGpuBytes += g
			}
		}
		out.Executors = append(out.Executors, pe)
	}
	for _, m := range c.planner.Models() {
		out.Models = append(out.Models, &adminv1.PlacedModel{Name: m.Name, Executors: holders[m.Name], FootprintBytes: c.planner.Footprint(m.Name),
			MinReplicas: int64(m.MinReplicas), MaxReplicas: int64(m.MaxReplicas), Pinned: m.Pinned, Gpu: m.GPU, Sequence: m.Sequence,
			GpuFootprintBytes: c.planner.GPUFootprint(m.Name)})
	}
	pins := c.planner.Pins()
	for _, m := range slices.Sorted(maps.Keys(pins)) {
		out.Pins = append(out.Pins, &adminv1.ModelPin{Model: m, Executors: pins[m]})
	}
	return out
}

// handlePin serves the admin API's PinModel and UnpinModel
// (bus.PlacementPinSubject) while this controller leads: it checks the
// pin against what the executors advertise, keeps it in the store (fenced
// by the lease, so that a controller taking over has it), gives it to the
// planner and starts a round. No executors: the model's pin is removed.
func (c *Controller) handlePin(ctx context.Context, data []byte) (proto.Message, error) {
	var req adminv1.PinModelRequest
	if err := proto.Unmarshal(data, &req); err != nil || req.GetModel() == "" {
		return nil, tritonerr.InvalidArgf("malformed pin request")
	}
	model, ids := req.GetModel(), slices.Compact(slices.Sorted(slices.Values(req.GetExecutors())))
	c.mu.Lock()
	p, epoch := c.planner, c.epoch
	if p == nil {
		c.mu.Unlock()
		return nil, bus.NotTaken("this controller does not lead placement")
	}
	if err := checkPin(p, model, ids); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
	err := c.st.savePin(wctx, c.cfg.ID, epoch, model, ids)
	cancel()
	if err != nil {
		return nil, tritonerr.Unavailablef("the pin of model '%s' was not kept: %v", model, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.planner != p {
		return nil, tritonerr.Unavailablef("the pin of model '%s' is kept, but this controller stepped down: the next one applies it", model)
	}
	pins := p.Pins()
	if len(ids) == 0 {
		delete(pins, model)
		c.log.Info("placement: unpinned", "model", model)
	} else {
		pins[model] = ids
		c.log.Info("placement: pinned", "model", model, "executors", strings.Join(ids, ","))
	}
	p.SetPins(pins)
	c.pokeLocked()
	return c.stateLocked(), nil
}

// checkPin says what is wrong with pinning model to ids (none: unpinning,
// always accepted): a model no executor under placement has, an executor
// not under placement, one whose repository lacks the model.
func checkPin(p *placement.Planner, model string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if !slices.ContainsFunc(p.Models(), func(m placement.Model) bool { return m.Name == model }) {
		return tritonerr.NotFoundf("model '%s' is in the repository of no executor under placement", model)
	}
	execs := p.Executors()
	for _, id := range ids {
		i := slices.IndexFunc(execs, func(e placement.Executor) bool { return e.ID == id })
		switch {
		case i < 0:
			return tritonerr.InvalidArgf("executor '%s' is not under placement (not started with --placement true, or not running)", id)
		case !slices.Contains(execs[i].Repository, model):
			return tritonerr.InvalidArgf("executor '%s' has no model '%s' in its repository", id, model)
		}
	}
	return nil
}

// waitingOf is the admin API's form of the models a plan leaves waiting.
func waitingOf(ws []placement.Waiting) []*adminv1.WaitingModel {
	out := make([]*adminv1.WaitingModel, 0, len(ws))
	for _, w := range ws {
		out = append(out, &adminv1.WaitingModel{Model: w.Model, Replicas: int64(w.Replicas), Why: w.Why.String(), Demanded: w.Demanded})
	}
	return out
}
