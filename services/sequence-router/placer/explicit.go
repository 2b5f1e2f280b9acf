package placer

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/modelconfig"
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

// loadedModel is how a model came to be loaded in the cluster.
type loadedModel struct {
	// dependency: loaded only as the composing model of a loaded ensemble
	// (Triton's models not loaded explicitly); unloading an ensemble with
	// unload_dependents takes it along once no loaded ensemble composes
	// it. A load of its own clears it.
	dependency bool
	// override: the load's configuration and files (the repository API's
	// config and file: parameters), sent with every placement of the
	// model, so that each executor that ever holds it loads what the
	// client loaded, as the one tritonserver would keep it.
	override *busv1.ModelControlRequest
}

// overrideOf is the override a load request carries; nil for none.
func overrideOf(req *busv1.ModelControlRequest) *busv1.ModelControlRequest {
	if req.GetConfig() == "" && len(req.GetFiles()) == 0 {
		return nil
	}
	return &busv1.ModelControlRequest{Name: req.GetName(), Load: true, Config: req.GetConfig(), Files: req.GetFiles()}
}

// loadRequest is what an executor is told to load model with: the
// override it was loaded with in the cluster, else the repository's.
// c.mu held.
func (c *Controller) loadRequestLocked(model string) *busv1.ModelControlRequest {
	if o := c.loaded[model].override; o != nil {
		return o
	}
	return &busv1.ModelControlRequest{Name: model, Load: true}
}

// composingLocked is the closure of model's composing models, nested
// ensembles' included, in the order found, model excluded: from the
// configuration of its override (in change when there, else as loaded),
// else from what executors' catalogs said of it. c.mu held.
func (c *Controller) composingLocked(model string, change map[string]loadedModel) []string {
	var out []string
	seen := map[string]bool{model: true}
	for next := []string{model}; len(next) > 0; next = next[1:] {
		for _, dep := range c.stepsLocked(next[0], change) {
			if !seen[dep] {
				seen[dep] = true
				out = append(out, dep)
				next = append(next, dep)
			}
		}
	}
	return out
}

// stepsLocked are the models the steps of ensemble model use; none for a
// model that is not an ensemble. c.mu held.
func (c *Controller) stepsLocked(model string, change map[string]loadedModel) []string {
	l, ok := change[model]
	if !ok {
		l = c.loaded[model]
	}
	if o := l.override; o.GetConfig() != "" {
		var cfg inference.ModelConfig
		if (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(o.GetConfig()), &cfg) == nil {
			return modelconfig.EnsembleModels(&cfg)
		}
	}
	return c.composing[model]
}

// explicitRound brings the startup models of the explicit executors in
// cats into the loaded models, once per executor generation, with the
// composing models of the ensembles among them, and returns whether the
// cluster runs in explicit mode with the loaded models then. Stores what
// it adds (fenced by the lease); a change it could not store is tried
// again next round.
func (c *Controller) explicitRound(ctx context.Context, epoch uint64, cats []*busv1.ExecutorCatalog) (bool, map[string]loadedModel) {
	explicit := false
	for _, cat := range cats {
		if !cat.GetExplicitControl() {
			continue
		}
		explicit = true
		c.mu.Lock()
		done := c.started[cat.GetExecutorId()] == cat.GetGeneration()
		var add map[string]loadedModel
		if !done {
			add = c.withDependenciesLocked(startupModels(cat))
		}
		c.mu.Unlock()
		if done {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
		err := c.st.saveLoaded(wctx, c.cfg.ID, epoch, loadedChange{add: add, executor: cat.GetExecutorId(), generation: cat.GetGeneration()})
		cancel()
		if err != nil {
			c.log.Warn("placement: the startup models of an executor were not stored", "executor", cat.GetExecutorId(), "err", err)
			continue
		}
		c.mu.Lock()
		c.started[cat.GetExecutorId()] = cat.GetGeneration()
		maps.Copy(c.loaded, add)
		c.mu.Unlock()
		if len(add) > 0 {
			c.log.Info("placement: startup models loaded", "executor", cat.GetExecutorId(), "models", slices.Sorted(maps.Keys(add)))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.explicit = explicit
	return explicit, maps.Clone(c.loaded)
}

// withDependenciesLocked is the change that loads names, each a load of
// its own (kept as it was when it was one already), and, as
// dependencies, the composing models of the ensembles among them that are
// not loaded yet. c.mu held.
func (c *Controller) withDependenciesLocked(names []string) map[string]loadedModel {
	add := map[string]loadedModel{}
	for _, name := range names {
		l := c.loaded[name]
		l.dependency = false
		add[name] = l
	}
	return c.dependenciesLocked(add)
}

// dependenciesLocked adds to the change add, as dependencies, the
// composing models of the ensembles it loads that are not loaded yet,
// and returns it. c.mu held.
func (c *Controller) dependenciesLocked(add map[string]loadedModel) map[string]loadedModel {
	for _, name := range slices.Sorted(maps.Keys(add)) {
		if add[name].dependency {
			continue
		}
		for _, dep := range c.composingLocked(name, add) {
			if _, ok := add[dep]; !ok {
				if _, loaded := c.loaded[dep]; !loaded {
					add[dep] = loadedModel{dependency: true}
				}
			}
		}
	}
	return add
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
		cat, err = c.unload(ctx, p, epoch, req.GetName(), req.GetUnloadDependents())
	}
	reply := &busv1.ModelControlReply{ExecutorId: c.cfg.ID, Catalog: cat}
	if err != nil {
		te := tritonerr.From(err)
		reply.ErrorKind, reply.Error = te.Kind.String(), te.Msg
	}
	return reply, nil
}

// load loads a model in the cluster, as a tritonserver's repository load
// does: the model joins the loaded models with the load's configuration
// and files, and an ensemble's composing models not loaded yet join as
// its dependencies. A model some executors hold already is loaded again
// on each (Triton's reload: what changed on disk, or the new override, is
// read anew); it and those composing models that no executor holds are
// placed as on demand (evicting when they must). The answer comes once
// each is READY, or says why one was not placed; the models this load
// added are then not loaded.
func (c *Controller) load(ctx context.Context, p *placement.Planner, epoch uint64, req *busv1.ModelControlRequest) (*busv1.ExecutorCatalog, error) {
	name := req.GetName()
	c.mu.Lock()
	holders := map[string][]string{}
	listed := false
	for _, e := range p.Executors() {
		listed = listed || slices.Contains(e.Repository, name)
		for _, h := range e.Holds {
			if h.State == placement.Ready {
				holders[h.Model] = append(holders[h.Model], e.ID)
			}
		}
	}
	add := c.dependenciesLocked(map[string]loadedModel{name: {override: overrideOf(req)}})
	var fresh []string // what this load adds to the loaded models
	for m := range add {
		if _, ok := c.loaded[m]; !ok {
			fresh = append(fresh, m)
		}
	}
	composing := c.composingLocked(name, add)
	c.mu.Unlock()
	if !listed && len(req.GetFiles()) == 0 {
		// A load that brings its files needs no repository.
		return nil, tritonerr.Internalf("failed to load '%s', failed to poll from model repository", name)
	}
	wctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
	err := c.st.saveLoaded(wctx, c.cfg.ID, epoch, loadedChange{add: add})
	cancel()
	if err != nil {
		return nil, tritonerr.Unavailablef("failed to load '%s': the loaded models could not be stored: %v", name, err)
	}
	c.mu.Lock()
	if c.planner != p {
		c.mu.Unlock()
		return nil, tritonerr.Unavailablef("failed to load '%s': the placement controller stepped down", name)
	}
	maps.Copy(c.loaded, add)
	c.mu.Unlock()
	var last *busv1.ExecutorCatalog
	if hs := holders[name]; len(hs) > 0 {
		last, err = c.onEach(ctx, hs, func(ctx context.Context, id string) (*busv1.ExecutorCatalog, error) {
			return c.execs.LoadWith(ctx, id, &busv1.ModelControlRequest{Name: name, Load: true, Config: req.GetConfig(), Files: req.GetFiles()})
		})
		if err != nil {
			return last, err // a failed reload keeps the versions serving, as in Triton
		}
		c.log.Info("placement: loaded again", "model", name, "executors", hs)
	}
	var place []string
	for _, m := range append([]string{name}, composing...) {
		if len(holders[m]) == 0 {
			place = append(place, m)
		}
	}
	if len(place) == 0 {
		return last, nil
	}
	c.log.Info("placement: load", "model", name, "placing", place)
	cat, failed, err := c.placeAll(ctx, p, place)
	if err != nil {
		// Not loaded, as a model whose load failed in Triton.
		c.forget(context.WithoutCancel(ctx), p, epoch, fresh)
		if failed != name {
			return cat, tritonerr.Unavailablef("failed to load '%s', ensemble '%s' depends on '%s' which has no loaded version. Model '%s' loading failed with error: %s",
				name, name, failed, failed, tritonerr.From(err).Msg)
		}
		return cat, err
	}
	return cmp.Or(cat, last), nil
}

// placeAll places models, loaded in the cluster, as on demand, and waits
// (bounded by ctx) until an executor holds each READY: the catalog of the
// last one to, or the first model that failed and why.
func (c *Controller) placeAll(ctx context.Context, p *placement.Planner, models []string) (*busv1.ExecutorCatalog, string, error) {
	ws := make([]chan controlOutcome, len(models))
	c.mu.Lock()
	if c.planner != p {
		c.mu.Unlock()
		return nil, models[0], tritonerr.Unavailablef("failed to load '%s': the placement controller stepped down", models[0])
	}
	for i, m := range models {
		ws[i] = make(chan controlOutcome, 1)
		c.demandLocked(m)
		c.controls[m] = append(c.controls[m], ws[i])
	}
	c.pokeLocked()
	c.mu.Unlock()
	var cat *busv1.ExecutorCatalog
	for i, m := range models {
		var out controlOutcome
		select {
		case out = <-ws[i]:
		case <-ctx.Done():
			out.err = tritonerr.Unavailablef("failed to load '%s': not placed before the request's deadline", m)
		}
		if out.err != nil {
			c.mu.Lock()
			for j, m := range models {
				c.controls[m] = slices.DeleteFunc(c.controls[m], func(x chan controlOutcome) bool { return x == ws[j] })
				if len(c.controls[m]) == 0 {
					delete(c.controls, m)
				}
			}
			c.mu.Unlock()
			return out.cat, m, out.err
		}
		cat = cmp.Or(out.cat, cat)
	}
	return cat, "", nil
}

// unload unloads a model from the cluster: removed from the loaded models
// and unloaded from every executor holding it (requests there finish
// first) before the answer. With dependents (the repository API's
// unload_dependents), an ensemble's composing models loaded only as
// dependencies go with it once no loaded ensemble composes them, down
// nested ensembles, as Triton's repository manager does.
func (c *Controller) unload(ctx context.Context, p *placement.Planner, epoch uint64, name string, dependents bool) (*busv1.ExecutorCatalog, error) {
	c.mu.Lock()
	gone := []string{name}
	if dependents {
		gone = c.dependentsLocked(name)
	}
	c.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
	err := c.st.saveLoaded(wctx, c.cfg.ID, epoch, loadedChange{remove: gone})
	cancel()
	if err != nil {
		return nil, tritonerr.Unavailablef("failed to unload '%s': the loaded models could not be stored: %v", name, err)
	}
	c.mu.Lock()
	holders := map[string][]string{}
	for _, m := range gone {
		delete(c.loaded, m)
	}
	if c.planner == p {
		// Served no more from now on, not from the next round's view.
		p.SetModels(slices.DeleteFunc(p.Models(), func(m placement.Model) bool { return slices.Contains(gone, m.Name) }))
	}
	for _, e := range p.Executors() {
		for _, h := range e.Holds {
			if slices.Contains(gone, h.Model) && h.State != placement.Failed {
				holders[h.Model] = append(holders[h.Model], e.ID)
			}
		}
	}
	c.mu.Unlock()
	var last *busv1.ExecutorCatalog
	for _, m := range gone {
		cat, err := c.onEach(ctx, holders[m], func(ctx context.Context, id string) (*busv1.ExecutorCatalog, error) {
			return c.execs.Unload(ctx, id, m)
		})
		last = cmp.Or(cat, last)
		if err != nil {
			return last, err
		}
		c.log.Info("placement: unloaded", "model", m, "executors", holders[m], "for", name)
	}
	return last, nil
}

// dependentsLocked is what unloading ensemble name with its dependents
// unloads: name, then each of its composing models loaded only as a
// dependency that no other loaded ensemble composes, and theirs in turn.
// c.mu held.
func (c *Controller) dependentsLocked(name string) []string {
	gone := []string{name}
	for changed := true; changed; {
		changed = false
		for _, dep := range c.composingLocked(name, nil) {
			if slices.Contains(gone, dep) || !c.loaded[dep].dependency {
				continue
			}
			used := false
			for m := range c.loaded {
				if !slices.Contains(gone, m) && slices.Contains(c.stepsLocked(m, nil), dep) {
					used = true
					break
				}
			}
			if !used {
				gone = append(gone, dep)
				changed = true
			}
		}
	}
	return gone
}

// onEach runs do for each executor of ids in turn, observing their
// catalogs; it stops at the first failure. It returns the last catalog.
func (c *Controller) onEach(ctx context.Context, ids []string, do func(context.Context, string) (*busv1.ExecutorCatalog, error)) (*busv1.ExecutorCatalog, error) {
	var last *busv1.ExecutorCatalog
	for _, id := range ids {
		cat, err := do(ctx, id)
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

// forget takes models a failed load added out of the loaded models.
func (c *Controller) forget(ctx context.Context, p *placement.Planner, epoch uint64, models []string) {
	wctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
	err := c.st.saveLoaded(wctx, c.cfg.ID, epoch, loadedChange{remove: models})
	cancel()
	if err != nil {
		c.log.Warn("placement: models whose load failed stay among the loaded models", "models", models, "err", err)
		return
	}
	c.mu.Lock()
	if c.planner == p {
		for _, m := range models {
			delete(c.loaded, m)
		}
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
