package gateway

import (
	"context"
	"slices"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
)

// Reloads an executor makes by itself (poll mode, a restart under the same
// id, a model unloaded and loaded again) reach no gateway's repository API,
// which invalidates the response cache for the reloads it makes. The
// catalog sees them instead: every READY version carries the load stamp its
// executor gave it (busv1 ModelVersionState.loaded_unix_ns), and another
// stamp from the same executor for a version it served is a reload. An
// executor seen serving a version for the first time (one that joins, or
// loads a model it did not have) is not: scaling out keeps the cache; nor
// is one that leaves.

// loadKey names a model version in the load stamps an executor reported.
type loadKey struct{ model, version string }

// maxDeparted bounds the executors gone whose load stamps are kept.
const maxDeparted = 1024

// reloadedModels lists, sorted and once each, the models of the catalog
// next in which its executor reports a version reloaded: READY with a load
// stamp other than the one known for it, or READY again where the
// executor's catalog before (prev) listed it unloaded. known are the
// stamps the executor was seen serving with; prev its catalog before (nil
// when the gateway holds none).
func reloadedModels(known map[loadKey]int64, prev, next []*busv1.ModelVersionState) []string {
	unloaded := map[loadKey]bool{}
	for _, m := range prev {
		if m.GetState() != stateReady && m.GetReason() == bus.ReasonUnloaded {
			unloaded[loadKey{m.GetName(), m.GetVersion()}] = true
		}
	}
	var out []string
	for _, m := range next {
		if m.GetState() != stateReady || m.GetVersion() == "" {
			continue
		}
		k := loadKey{m.GetName(), m.GetVersion()}
		was, ok := known[k]
		restamped := ok && m.GetLoadedUnixNs() != 0 && was != m.GetLoadedUnixNs()
		if restamped || unloaded[k] {
			out = append(out, m.GetName())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// take applies executor id's catalog cat; fetched: it answers this
// gateway's fetch (fetch), which is then over.
//
// The models cat shows reloaded have their cached responses invalidated
// first (c.reloaded: this gateway's cache, the others' over the bus, the
// shared Redis generation), outside c.mu since Redis may be slow, and only
// then does the view show cat: a version loaded again after an unload is
// routed to once its model's old entries are unreachable. applyMu keeps
// another catalog from being taken in between, so the reloads found are
// those the view then shows. Several gateways see the same reload and each
// invalidates: one more generation, or an emptied local cache, changes
// nothing a first one did not.
//
// What remains is the time between the executor's new instance answering
// and this point: the executor's heartbeat announcing the change, and this
// gateway's fetch of its catalog. The gateway cannot know of a reload
// before the executor says so, and the executor says so as soon as the new
// instance serves; meanwhile a lookup may still answer from the old
// model's entries. A response the old instance gives after that (one it
// had taken before it was replaced) may be cached under the new
// generation, so the executor gives the version another stamp once the
// old instance has answered its last request (services/executor
// loadModelFiles), and that invalidates again: from then on only the new
// model's responses are cached.
func (c *catalog) take(id string, cat *busv1.ExecutorCatalog) {
	c.applyMu.Lock()
	defer c.applyMu.Unlock()
	var reloaded []string
	c.mu.Lock()
	if e, ok := c.execs[id]; ok && !stale(e, cat) {
		var prev []*busv1.ModelVersionState
		if e.haveCat {
			prev = e.models
		}
		reloaded = reloadedModels(c.loads[id], prev, cat.GetModels())
	}
	c.mu.Unlock()
	if len(reloaded) > 0 && c.reloaded != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.fetchTimeout)
		for _, model := range reloaded {
			c.log.Info("executor reloaded a model: its cached responses are invalidated", "executor", id, "model", model)
			c.reloaded(ctx, model)
		}
		cancel()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.execs[id]
	if !ok {
		return // not heard yet (its heartbeat brings the catalog), or gone
	}
	c.applyLocked(e, cat)
}

// rememberLoadsLocked records the load stamps of the READY versions in
// models, executor id's catalog. Versions it no longer lists keep theirs,
// so that one it loads again is seen reloaded. c.mu held.
func (c *catalog) rememberLoadsLocked(id string, models []*busv1.ModelVersionState) {
	for _, m := range models {
		if m.GetState() != stateReady || m.GetVersion() == "" || m.GetLoadedUnixNs() == 0 {
			continue
		}
		known := c.loads[id]
		if known == nil {
			known = map[loadKey]int64{}
			c.loads[id] = known
		}
		known[loadKey{m.GetName(), m.GetVersion()}] = m.GetLoadedUnixNs()
	}
}

// departLocked keeps the load stamps of executor id, gone, among the
// maxDeparted latest to go. c.mu held.
func (c *catalog) departLocked(id string) {
	if _, ok := c.loads[id]; !ok {
		return
	}
	c.departed = append(slices.DeleteFunc(c.departed, func(d string) bool { return d == id }), id)
	if len(c.departed) > maxDeparted {
		delete(c.loads, c.departed[0])
		c.departed = slices.Delete(c.departed, 0, 1)
	}
}

// returnLocked takes executor id, back, off the departed. c.mu held.
func (c *catalog) returnLocked(id string) {
	c.departed = slices.DeleteFunc(c.departed, func(d string) bool { return d == id })
}
