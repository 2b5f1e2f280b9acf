package executor

import (
	"context"
	"path/filepath"
	"slices"
	"sync"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/executor/internal/repository"
)

// Ensembles (platform "ensemble") have no backend and no instances here:
// an executor whose repository holds one validates it, loads it as a
// scheduler-only version and announces it in its catalog with its
// configuration; gateways run its steps, each routed like a client's
// request to whichever executor serves the step's model, or, when this
// executor serves every step's model, send it the whole request and it
// runs the steps in-process (ensemblerun.go, docs/ensembles.md).

func isEnsemble(cfg *inference.ModelConfig) bool { return modelconfig.IsEnsemble(cfg) }

// withComposing adds to names the composing models of the ensembles among
// them that the repository holds, as Triton loads an ensemble's composing
// models with it. A composing model in no repository of this executor is
// left to the executors that hold it.
func withComposing(names []string, byName map[string]repository.Model) []string {
	out := slices.Clone(names)
	for i := 0; i < len(out); i++ {
		m, ok := byName[out[i]]
		if !ok || m.Config == nil || !isEnsemble(m.Config) {
			continue
		}
		for _, dep := range modelconfig.EnsembleModels(m.Config) {
			if _, held := byName[dep]; held && !slices.Contains(out, dep) {
				out = append(out, dep)
			}
		}
	}
	return out
}

// checkEnsembles validates the READY ensembles of this executor (names:
// those only; none: all) against the composing models it holds, with
// Triton's messages (modelconfig.ValidateComposition). An ensemble with a
// composing model this executor does not hold at all is left to the
// gateways, which validate every ensemble against the constellation's
// catalog. An ensemble that fails is listed UNAVAILABLE with the reason;
// its error is returned by name.
func (e *Executor) checkEnsembles(names ...string) map[string]error {
	failed := map[string]error{}
	for pass := 0; ; pass++ {
		models := e.snapshot()
		changed := false
		next := slices.Clone(models)
		for i, mv := range models {
			if mv.state != StateReady || !isEnsemble(mv.cfg) || (len(names) > 0 && !slices.Contains(names, mv.name)) {
				continue
			}
			lookup, local := localComposing(models)
			all := true
			for _, dep := range modelconfig.EnsembleModels(mv.cfg) {
				if !local(dep) {
					all = false
				}
			}
			if !all {
				continue
			}
			if _, err := modelconfig.ValidateComposition(mv.cfg, lookup); err != nil {
				failed[mv.name] = err
				e.log.Warn("model failed to load", "model", mv.name, "version", mv.version, "reason", err.Error())
				next[i] = e.placeholder(mv.name, mv.version, mv.vstr, mv.dir, mv.cfg, StateUnavailable, tritonerr.From(err).Msg)
				changed = true
			}
		}
		if !changed || pass > len(models) {
			return failed
		}
		// A failed ensemble may compose another: check again.
		e.setModels(next)
	}
}

// localComposing answers modelconfig.ValidateComposition's lookup from
// this executor's versions, and whether a model is listed here at all.
func localComposing(models []*modelVersion) (func(string) (modelconfig.Composing, bool), func(string) bool) {
	lookup := func(name string) (modelconfig.Composing, bool) {
		var c modelconfig.Composing
		found := false
		for _, mv := range models {
			if mv.name != name {
				continue
			}
			found = true
			if mv.state == StateReady {
				c.Versions = append(c.Versions, mv.version)
				c.Config = mv.cfg
			} else if mv.reason != "" && c.Err == nil {
				c.Err = tritonerr.Unavailablef("%s", mv.reason)
				c.Invalid = mv.vstr == "" // failed before its versions were known: its configuration
			}
		}
		if len(c.Versions) > 0 {
			c.Err, c.Invalid = nil, false
		}
		return c, found
	}
	local := func(name string) bool {
		_, ok := lookup(name)
		return ok
	}
	return lookup, local
}

// loadingKey marks, in a load's context, the ensembles being loaded: a
// cycle between ensembles does not load forever (it fails validation).
type loadingKey struct{}

// loadWithComposing loads a model with load; an ensemble's composing models
// this executor holds and does not serve yet are loaded first, as Triton
// loads them with the ensemble, and the ensemble is then validated against
// them: its failure is the load's.
func (e *Executor) loadWithComposing(ctx context.Context, req *busv1.ModelControlRequest, load func(context.Context, *busv1.ModelControlRequest) error) error {
	name := req.GetName()
	cfg := e.repositoryConfig(name, req)
	loading, _ := ctx.Value(loadingKey{}).(map[string]bool)
	if loading == nil { // the model the request names, not a composing one
		defer func() {
			if e.servesReady(name) {
				e.deps.explicit(name)
			}
		}()
	}
	if cfg == nil || !isEnsemble(cfg) {
		return load(ctx, req)
	}
	if loading == nil {
		loading = map[string]bool{}
		ctx = context.WithValue(ctx, loadingKey{}, loading)
	}
	loading[name] = true
	defer delete(loading, name)
	for _, dep := range modelconfig.EnsembleModels(cfg) {
		// Under placement the controller places the composing models,
		// each where it decides; this executor loads the ensemble alone.
		if e.cfg.Placement || loading[dep] || e.servesReady(dep) {
			continue
		}
		if dir, err := e.modelDir(dep); err == nil && isDir(dir) {
			// A composing model that fails says why in the ensemble's
			// validation ("... loading failed with error: ...").
			_ = e.loadWithComposing(ctx, &busv1.ModelControlRequest{Name: dep, Load: true}, load)
			if e.servesReady(dep) {
				e.deps.loadedFor(dep)
			}
		}
	}
	if err := load(ctx, req); err != nil {
		return err
	}
	if ferr := e.checkEnsembles(name)[name]; ferr != nil {
		e.changed()
		return tritonerr.New(tritonerr.KindOf(ferr), "failed to load '%s', %s", name, tritonerr.From(ferr).Msg)
	}
	return nil
}

// repositoryConfig is the configuration a load request would load: its
// override, else the repository's; nil when it has none that parses.
func (e *Executor) repositoryConfig(name string, req *busv1.ModelControlRequest) *inference.ModelConfig {
	if name == "" || !filepath.IsLocal(name) {
		return nil
	}
	dir, err := e.modelDir(name)
	if err != nil {
		return nil
	}
	if req.GetConfig() != "" {
		cfg, err := modelconfig.LoadJSON(dir, []byte(req.GetConfig()))
		if err != nil {
			return nil
		}
		return cfg
	}
	cfg, err := modelconfig.Load(dir)
	if err != nil {
		return nil
	}
	return cfg
}

// servesReady reports whether this executor holds a READY version of name.
func (e *Executor) servesReady(name string) bool {
	for _, mv := range e.snapshot() {
		if mv.name == name && mv.state == StateReady {
			return true
		}
	}
	return false
}

// dependencyLoads are the models this executor loaded only because an
// ensemble loaded here composes them (Triton's models not "explicitly
// loaded"). Unloading an ensemble with unload_dependents unloads those of
// its composing models, as Triton's repository manager does.
type dependencyLoads struct {
	mu   sync.Mutex
	only map[string]bool
}

// loadedFor records that name was loaded as a composing model.
func (d *dependencyLoads) loadedFor(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.only == nil {
		d.only = map[string]bool{}
	}
	d.only[name] = true
}

// explicit records that a request named name: it stays loaded when an
// ensemble that composes it is unloaded with its dependents.
func (d *dependencyLoads) explicit(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.only, name)
}

// dependencyOnly reports whether name was loaded only as a composing model.
func (d *dependencyLoads) dependencyOnly(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.only[name]
}

// unloadWithDependents unloads name; with dependents (the repository
// API's unload_dependents), an ensemble's composing models go with it when
// they were loaded only for an ensemble and no ensemble still loaded here
// composes them, down the whole graph. A model named in a load request of
// its own stays, as in Triton.
func (e *Executor) unloadWithDependents(name string, dependents bool) {
	var deps []string
	if dependents {
		for _, mv := range e.snapshot() {
			if mv.name == name && mv.state == StateReady && isEnsemble(mv.cfg) {
				deps = append(deps, modelconfig.EnsembleModels(mv.cfg)...)
			}
		}
	}
	e.unloadModel(name)
	e.deps.explicit(name) // a later load of it by dependency records it anew
	for _, dep := range deps {
		if e.deps.dependencyOnly(dep) && !e.composedByReady(dep) {
			e.unloadWithDependents(dep, true)
		}
	}
}

// composedByReady reports whether a READY ensemble here composes name.
func (e *Executor) composedByReady(name string) bool {
	for _, mv := range e.snapshot() {
		if mv.state == StateReady && isEnsemble(mv.cfg) && slices.Contains(modelconfig.EnsembleModels(mv.cfg), name) {
			return true
		}
	}
	return false
}
