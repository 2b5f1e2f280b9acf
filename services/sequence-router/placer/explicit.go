package placer

import (
	"context"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/placement"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Explicit model control under placement. Executors started with
// --model-control-mode explicit and --placement keep Triton's meaning for
// clients: a model loaded through the repository API is served by the
// cluster, an unloaded one nowhere. The controller keeps the cluster's
// loaded models in its store (nereid:placement:loaded) and places only
// those; a gateway's repository load or unload comes to it
// (bus.PlacementControlSubject) instead of to every executor. An
// executor's --load-model models join the loaded models once per
// generation of the executor, as a tritonserver started with them loads
// them.

// controlOutcome is how a load the repository API asked for ended: the
// catalog of the executor that holds the model READY, or the error.
type controlOutcome struct {
	cat *busv1.ExecutorCatalog
	err error
}

// explicitRound brings the startup models of the explicit executors in
// cats into the loaded models, once per executor generation, and returns
// whether the cluster runs in explicit mode with the loaded models then.
// Stores what it adds (fenced by the lease); a change it could not store
// is tried again next round.
func (c *Controller) explicitRound(ctx context.Context, epoch uint64, cats []*busv1.ExecutorCatalog) (bool, map[string]bool) {
	explicit := false
	for _, cat := range cats {
		if !cat.GetExplicitControl() {
			continue
		}
		explicit = true
		c.mu.Lock()
		done := c.started[cat.GetExecutorId()] == cat.GetGeneration()
		c.mu.Unlock()
		if done {
			continue
		}
		add := startupModels(cat)
		wctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
		err := c.st.saveLoaded(wctx, c.cfg.ID, epoch, loadedChange{add: add, executor: cat.GetExecutorId(), generation: cat.GetGeneration()})
		cancel()
		if err != nil {
			c.log.Warn("placement: the startup models of an executor were not stored", "executor", cat.GetExecutorId(), "err", err)
			continue
		}
		c.mu.Lock()
		c.started[cat.GetExecutorId()] = cat.GetGeneration()
		for _, m := range add {
			c.loaded[m] = true
		}
		c.mu.Unlock()
		if len(add) > 0 {
			c.log.Info("placement: startup models loaded", "executor", cat.GetExecutorId(), "models", add)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.explicit = explicit
	return explicit, maps.Clone(c.loaded)
}

// startupModels is what an explicit executor's --load-model names, with
// "*" standing for every model its repository lists.
func startupModels(cat *busv1.ExecutorCatalog) []string {
	names := cat.GetStartupModels()
	if !slices.Contains(names, "*") {
		return slices.Clone(names)
	}
	var all []string
	for _, m := range cat.GetModels() {
		if !slices.Contains(all, m.GetName()) {
			all = append(all, m.GetName())
		}
	}
	return all
}

// handleControl serves a gateway's repository load or unload under
// placement (bus.PlacementControlSubject) while this controller leads.
func (c *Controller) handleControl(ctx context.Context, data []byte) (proto.Message, error) {
	var req busv1.ModelControlRequest
	if err := proto.Unmarshal(data, &req); err != nil || req.GetName() == "" {
		return nil, tritonerr.InvalidArgf("malformed model control request")
	}
	// Whether the executors run in explicit mode is known once this
	// leadership has read their catalogs: a load that comes right after a
	// takeover waits for that (bounded by its deadline).
	c.mu.Lock()
	read := c.catalogsRead
	c.mu.Unlock()
	if read == nil {
		return nil, bus.NotTaken("this controller does not lead placement")
	}
	select {
	case <-read:
	case <-ctx.Done():
		return nil, tritonerr.Unavailablef("failed to %s '%s': the placement controller has not read the executors' catalogs yet", controlAction(&req), req.GetName())
	}
	c.mu.Lock()
	p, epoch, explicit := c.planner, c.epoch, c.explicit
	c.mu.Unlock()
	if p == nil {
		return nil, bus.NotTaken("this controller does not lead placement")
	}
	var cat *busv1.ExecutorCatalog
	var err error
	switch {
	case !explicit:
		err = tritonerr.Unavailablef("explicit model load / unload is not allowed if polling is enabled")
	case req.GetLoad():
		cat, err = c.load(ctx, p, epoch, &req)
	default:
		cat, err = c.unload(ctx, p, epoch, req.GetName())
	}
	reply := &busv1.ModelControlReply{ExecutorId: c.cfg.ID, Catalog: cat}
	if err != nil {
		te := tritonerr.From(err)
		reply.ErrorKind, reply.Error = te.Kind.String(), te.Msg
	}
	return reply, nil
}

// load loads a model in the cluster: added to the loaded models, then
// placed as on demand (evicting when it must), and answered once an
// executor holds it READY, or with why it was not placed (it is then not
// loaded). A model some executors hold already is loaded again on each
// (Triton's reload: what changed on disk is read anew).
func (c *Controller) load(ctx context.Context, p *placement.Planner, epoch uint64, req *busv1.ModelControlRequest) (*busv1.ExecutorCatalog, error) {
	name := req.GetName()
	if req.GetConfig() != "" || len(req.GetFiles()) > 0 {
		return nil, tritonerr.Unsupportedf("failed to load '%s': a configuration or files given with the load are not supported under placement; put them in the model repository", name)
	}
	c.mu.Lock()
	var holders []string
	listed := false
	for _, e := range p.Executors() {
		listed = listed || slices.Contains(e.Repository, name)
		for _, h := range e.Holds {
			if h.Model == name && h.State == placement.Ready {
				holders = append(holders, e.ID)
			}
		}
	}
	loaded := c.loaded[name]
	c.mu.Unlock()
	if !listed {
		return nil, tritonerr.Internalf("failed to load '%s', failed to poll from model repository", name)
	}
	if !loaded {
		wctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
		err := c.st.saveLoaded(wctx, c.cfg.ID, epoch, loadedChange{add: []string{name}})
		cancel()
		if err != nil {
			return nil, tritonerr.Unavailablef("failed to load '%s': the loaded models could not be stored: %v", name, err)
		}
	}
	if len(holders) > 0 {
		c.mu.Lock()
		c.loaded[name] = true
		c.mu.Unlock()
		last, err := c.onEach(ctx, holders, name, c.execs.Load)
		if err == nil {
			c.log.Info("placement: loaded again", "model", name, "executors", holders)
		}
		return last, err
	}
	w := make(chan controlOutcome, 1)
	c.mu.Lock()
	if c.planner != p {
		c.mu.Unlock()
		return nil, tritonerr.Unavailablef("failed to load '%s': the placement controller stepped down", name)
	}
	c.loaded[name] = true
	c.demandLocked(name)
	c.controls[name] = append(c.controls[name], w)
	c.pokeLocked()
	c.mu.Unlock()
	c.log.Info("placement: load", "model", name)
	var out controlOutcome
	select {
	case out = <-w:
	case <-ctx.Done():
		c.mu.Lock()
		c.controls[name] = slices.DeleteFunc(c.controls[name], func(x chan controlOutcome) bool { return x == w })
		c.mu.Unlock()
		out.err = tritonerr.Unavailablef("failed to load '%s': not placed before the request's deadline", name)
	}
	if out.err != nil {
		// Not loaded, as a model whose load failed in Triton.
		c.forget(context.WithoutCancel(ctx), p, epoch, name)
	}
	return out.cat, out.err
}

// unload unloads a model from the cluster: removed from the loaded models,
// then unloaded from every executor holding it (requests there finish
// first), before the answer.
func (c *Controller) unload(ctx context.Context, p *placement.Planner, epoch uint64, name string) (*busv1.ExecutorCatalog, error) {
	wctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
	err := c.st.saveLoaded(wctx, c.cfg.ID, epoch, loadedChange{remove: []string{name}})
	cancel()
	if err != nil {
		return nil, tritonerr.Unavailablef("failed to unload '%s': the loaded models could not be stored: %v", name, err)
	}
	c.mu.Lock()
	delete(c.loaded, name)
	if c.planner == p {
		// Served no more from now on, not from the next round's view.
		p.SetModels(slices.DeleteFunc(p.Models(), func(m placement.Model) bool { return m.Name == name }))
	}
	var holders []string
	for _, e := range p.Executors() {
		if slices.ContainsFunc(e.Holds, func(h placement.Holding) bool { return h.Model == name && h.State != placement.Failed }) {
			holders = append(holders, e.ID)
		}
	}
	c.mu.Unlock()
	last, err := c.onEach(ctx, holders, name, c.execs.Unload)
	if err == nil {
		c.log.Info("placement: unloaded", "model", name, "executors", holders)
	}
	return last, err
}

// onEach tells each executor of ids to load or unload model (do), in
// turn, observing their catalogs; it stops at the first failure. It
// returns the last catalog.
func (c *Controller) onEach(ctx context.Context, ids []string, model string,
	do func(context.Context, string, string) (*busv1.ExecutorCatalog, error)) (*busv1.ExecutorCatalog, error) {
	var last *busv1.ExecutorCatalog
	for _, id := range ids {
		cat, err := do(ctx, id, model)
		if cat != nil {
			last = cat
			c.observe(time.Now(), cat)
		}
		if err != nil {
			return last, err
		}
	}
	return last, nil
}

// forget takes a model whose load failed out of the loaded models.
func (c *Controller) forget(ctx context.Context, p *placement.Planner, epoch uint64, name string) {
	wctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
	err := c.st.saveLoaded(wctx, c.cfg.ID, epoch, loadedChange{remove: []string{name}})
	cancel()
	if err != nil {
		c.log.Warn("placement: a model whose load failed stays among the loaded models", "model", name, "err", err)
		return
	}
	c.mu.Lock()
	if c.planner == p {
		delete(c.loaded, name)
	}
	c.mu.Unlock()
}

// settleControlsLocked answers the loads waiting for model with out.
// c.mu held.
func (c *Controller) settleControlsLocked(model string, out controlOutcome) {
	for _, w := range c.controls[model] {
		w <- out
	}
	delete(c.controls, model)
}

func controlAction(req *busv1.ModelControlRequest) string {
	if req.GetLoad() {
		return "load"
	}
	return "unload"
}
