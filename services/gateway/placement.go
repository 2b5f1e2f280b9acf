package gateway

import (
	"context"
	"time"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/pkg/placementbus"
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
	wait := g.cfg.PlacementWait
	if wait <= 0 {
		wait = DefaultPlacementWait
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if _, derr := placementbus.NewController(g.bus).Demand(ctx, name); derr != nil {
		g.log.Warn("placement: model not placed on demand", "model", name, "err", derr)
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

// GetPlacement is the placement controller's view, asked of the controller
// leading placement (placementbus.Controller.State).
func (a *adminService) GetPlacement(ctx context.Context, _ *adminv1.GetPlacementRequest) (*adminv1.Placement, error) {
	ctx, cancel := context.WithTimeout(ctx, adminCallTimeout)
	defer cancel()
	return placementbus.NewController(a.g.bus).State(ctx)
}
