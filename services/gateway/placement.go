package gateway

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/pkg/placementbus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// DefaultPlacementWait bounds how long a request waits for its model to be
// placed when neither it nor Config.PlacementWait says otherwise.
const DefaultPlacementWait = 30 * time.Second

// resolveInfer is resolveRequest for a request that runs the model. Under
// placement, a model that the catalog lists (an executor's repository has
// it) but that no executor holds is placed on demand: the gateway asks the
// placement controller, which answers once an executor holds it, then
// waits for that executor's catalog; the wait is bounded by the request's
// context and Config.PlacementWait. Without placement, or for a model no
// executor lists, it answers as resolveRequest.
func (g *Gateway) resolveInfer(ctx context.Context, name, version string) (*versionView, error) {
	vv, err := g.resolveRequest(name, version)
	if v := g.cat.current(); err == nil || !g.cfg.Placement || (v.models[name] == nil && !v.listed[name]) {
		return vv, err
	}
	ctx, cancel := g.placementWait(ctx)
	defer cancel()
	if g.demand(ctx, name) != nil {
		return nil, err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if vv, rerr := g.resolveRequest(name, version); rerr == nil {
			return vv, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-tick.C:
		}
	}
}

// placementWait bounds ctx by Config.PlacementWait (DefaultPlacementWait
// when unset): how long a request waits for its model to be placed.
func (g *Gateway) placementWait(ctx context.Context) (context.Context, context.CancelFunc) {
	wait := g.cfg.PlacementWait
	if wait <= 0 {
		wait = DefaultPlacementWait
	}
	return context.WithTimeout(ctx, wait)
}

// demand asks the placement controller to place model and waits until an
// executor holds it (bounded by ctx).
func (g *Gateway) demand(ctx context.Context, model string) error {
	if _, err := placementbus.NewController(g.bus).Demand(ctx, model); err != nil {
		g.log.Warn("placement: model not placed on demand", "model", model, "err", err)
		return err
	}
	return nil
}

// GetPlacement is the placement controller's view, asked of the controller
// leading placement (placementbus.Controller.State).
func (a *adminService) GetPlacement(ctx context.Context, _ *adminv1.GetPlacementRequest) (*adminv1.Placement, error) {
	ctx, cancel := context.WithTimeout(ctx, adminCallTimeout)
	defer cancel()
	return placementbus.NewController(a.g.bus).State(ctx)
}

// PinModel pins a model to executors, through the controller leading
// placement (placementbus.Controller.Pin), which checks them.
func (a *adminService) PinModel(ctx context.Context, req *adminv1.PinModelRequest) (*adminv1.Placement, error) {
	if req.GetModel() == "" {
		return nil, tritonerr.InvalidArgf("model is required")
	}
	if len(req.GetExecutors()) == 0 {
		return nil, tritonerr.InvalidArgf("executors are required: the executors to pin model '%s' to (UnpinModel removes a pin)", req.GetModel())
	}
	ctx, cancel := context.WithTimeout(ctx, adminCallTimeout)
	defer cancel()
	return placementbus.NewController(a.g.bus).Pin(ctx, req.GetModel(), req.GetExecutors())
}

// UnpinModel removes a model's pin.
func (a *adminService) UnpinModel(ctx context.Context, req *adminv1.UnpinModelRequest) (*adminv1.Placement, error) {
	if req.GetModel() == "" {
		return nil, tritonerr.InvalidArgf("model is required")
	}
	ctx, cancel := context.WithTimeout(ctx, adminCallTimeout)
	defer cancel()
	return placementbus.NewController(a.g.bus).Pin(ctx, req.GetModel(), nil)
}

// notPlacedElsewhere lists, sorted, the models executor id holds READY
// that no other executor, not draining, serves READY while one of them
// has the model in its repository: under placement, a draining executor's
// models are placed elsewhere (pkg/placement), and its drain is not over
// until they serve there. A model no other executor can hold is not
// waited for.
func (c *catalog) notPlacedElsewhere(id string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.execs[id]
	if e == nil {
		return nil
	}
	servedElsewhere, listedElsewhere := map[string]bool{}, map[string]bool{}
	for oid, o := range c.execs {
		if oid == id || o.draining {
			continue
		}
		for _, m := range o.models {
			listedElsewhere[m.GetName()] = true
			if m.GetState() == stateReady {
				servedElsewhere[m.GetName()] = true
			}
		}
	}
	var out []string
	for _, m := range e.models {
		if n := m.GetName(); m.GetState() == stateReady && listedElsewhere[n] && !servedElsewhere[n] && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// placedDrain holds a drained executor's status at DRAINING under
// placement while its models are not yet served elsewhere
// (notPlacedElsewhere), so that whoever waits for the drain (nereidctl
// drain, a pod's preStop) stops the executor only once they are.
func (a *adminService) placedDrain(id string, st *adminv1.DrainStatus) {
	if !a.g.cfg.Placement || st.GetState() != adminv1.DrainState_DRAIN_STATE_DRAINED {
		return
	}
	if wait := a.g.cat.notPlacedElsewhere(id); len(wait) > 0 {
		st.State = adminv1.DrainState_DRAIN_STATE_DRAINING
		st.WaitingFor = "its models to be placed on other executors: " + strings.Join(wait, ", ")
	}
}
