package gateway

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/ensemble"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Model version states as executors report them (Triton's ModelReadyState).
const (
	stateReady       = bus.StateReady
	stateUnavailable = bus.StateUnavailable
	stateLoading     = bus.StateLoading
	stateUnloading   = bus.StateUnloading
)

// reasonGone is the index reason of a version that some executor served but
// no live executor serves any more.
const reasonGone = "no live executor serves this model version"

// reasonDraining is the index reason of a version whose executors all
// drain (admin API): loaded, but taking no new requests.
const reasonDraining = "every executor serving this model version drains"

// requester is the part of the bus client the catalog needs.
type requester interface {
	Request(ctx context.Context, subject string, req proto.Message, resp proto.Message) error
}

// linkState is the part of the bus client that says whether NATS is
// reachable (bus.Conn's Connected and Generation).
type linkState interface {
	Connected() bool
	Generation() uint64
}

// alwaysUp is the link of a catalog without a bus (unit tests of its
// bookkeeping).
type alwaysUp struct{}

func (alwaysUp) Connected() bool    { return true }
func (alwaysUp) Generation() uint64 { return 0 }

// catalog is the gateway's picture of what the constellation serves, built
// from executor heartbeats and catalogs. Readers use an immutable snapshot
// (view) swapped atomically, so the request path never takes the lock.
type catalog struct {
	bus          requester
	node         string // the gateway's node (versionView.nodeSubject)
	log          *slog.Logger
	fetchTimeout time.Duration
	expiry       time.Duration
	link         linkState
	linkGen      uint64 // the generation the executors' clocks refer to

	// applyMu makes taking an executor's catalog one step (take,
	// reload.go): its check for reloads, the invalidation they call for,
	// and the view that shows it. Taken before mu, never under it.
	applyMu sync.Mutex

	mu    sync.Mutex
	execs map[string]*executorState
	// seen remembers every model version ever served, so that a model whose
	// executors all went away reads as unavailable rather than unknown.
	seen map[string]map[int64]bool
	// loads are the load stamps (busv1 ModelVersionState.loaded_unix_ns)
	// each executor, by id, was last seen serving its versions with; kept
	// after it leaves, for departed (oldest first, at most maxDeparted) of
	// those gone, so that one restarted under the same id is seen to have
	// reloaded (reload.go).
	loads    map[string]map[loadKey]int64
	departed []string
	// reloaded is told each model an executor reloaded by itself, before
	// the view shows the reload (Gateway.invalidateCache); nil: nothing
	// is told.
	reloaded func(ctx context.Context, model string)

	// settled is closed once the gateway has heard the constellation: one
	// heartbeat interval after it asked every executor for its catalog,
	// and the fetches then under way are done. Before that, a model not
	// (yet) in the view may well exist.
	settled     chan struct{}
	settleOnce  sync.Once
	settleLimit time.Duration

	view atomic.Pointer[view]
	// changed is closed and replaced whenever a new view is published; tests
	// and waiters select on it.
	changed chan struct{}
}

type executorState struct {
	id, node string
	hbGen    uint64 // generation announced by the last heartbeat
	hbRev    uint64 // catalog revision announced by the last heartbeat
	catGen   uint64 // generation of the catalog held in models
	catRev   uint64 // its revision
	haveCat  bool
	fetching bool
	lastSeen time.Time
	models   []*busv1.ModelVersionState
	explicit bool // explicit model control mode
	draining bool // the executor drains: it serves nothing new
}

func newCatalog(r requester, log *slog.Logger) *catalog {
	c := &catalog{
		bus:          r,
		log:          log,
		fetchTimeout: 2 * time.Second,
		expiry:       bus.HeartbeatExpiry,
		execs:        map[string]*executorState{},
		seen:         map[string]map[int64]bool{},
		loads:        map[string]map[loadKey]int64{},
		changed:      make(chan struct{}),
		settled:      make(chan struct{}),
		settleLimit:  bus.HeartbeatInterval + 2*time.Second,
	}
	c.link = alwaysUp{}
	if l, ok := r.(linkState); ok {
		c.link = l
	}
	c.view.Store(&view{models: map[string]*modelView{}})
	return c
}

// current returns the latest snapshot.
func (c *catalog) current() *view { return c.view.Load() }

// heartbeat records an executor heartbeat, fetching the executor's catalog
// when the executor is new or its generation changed.
func (c *catalog) heartbeat(hb *busv1.ExecutorHeartbeat) {
	id := hb.GetExecutorId()
	if id == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if hb.GetWithdraw() {
		if _, ok := c.execs[id]; ok {
			delete(c.execs, id)
			c.departLocked(id)
			c.log.Info("executor withdrew", "executor", id)
			c.publishLocked()
		}
		return
	}
	e, ok := c.execs[id]
	if !ok {
		e = &executorState{id: id}
		c.execs[id] = e
		c.returnLocked(id)
		c.log.Info("executor joined", "executor", id, "node", hb.GetNode())
	}
	e.node = hb.GetNode()
	e.hbGen = hb.GetGeneration()
	e.hbRev = hb.GetRevision()
	e.lastSeen = time.Now()
	if (!e.haveCat || e.catGen != e.hbGen || e.catRev < e.hbRev) && !e.fetching {
		e.fetching = true
		go c.fetch(id)
	}
}

// fetch asks executor id for its catalog. A heartbeat that comes while a
// fetch is under way starts none, and the answer may predate the change
// it announced: while the heartbeats announce a newer revision of the
// generation fetched, fetch asks again at once, rather than at the next
// heartbeat. A failure is retried on the next heartbeat (the executor's
// generation still differs from ours). Each request is bounded by
// fetchTimeout.
func (c *catalog) fetch(id string) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), c.fetchTimeout)
		var cat busv1.ExecutorCatalog
		err := c.bus.Request(ctx, bus.ExecutorCatalogSubject(id), &busv1.CatalogRequest{}, &cat)
		cancel()
		if err == nil {
			c.take(id, &cat)
		}
		c.mu.Lock()
		e, ok := c.execs[id]
		switch {
		case !ok: // expired or withdrew meanwhile
		case err != nil:
			e.fetching = false
			c.log.Warn("fetching executor catalog failed", "executor", id, "err", err)
		case e.haveCat && e.catGen == e.hbGen && e.catRev < e.hbRev:
			c.mu.Unlock()
			continue
		default:
			e.fetching = false
		}
		c.mu.Unlock()
		return
	}
}

// apply records a catalog an executor sent with its answer to a repository
// load or unload, so that the gateway's view has the change before the
// answer reaches the client.
func (c *catalog) apply(cat *busv1.ExecutorCatalog) {
	c.take(cat.GetExecutorId(), cat)
}

// stale reports whether the gateway already holds a catalog of e newer
// than cat.
func stale(e *executorState, cat *busv1.ExecutorCatalog) bool {
	return e.haveCat && e.catGen == cat.GetGeneration() && e.catRev > cat.GetRevision()
}

// applyLocked takes cat unless the gateway already holds a newer one.
// c.applyMu and c.mu held.
func (c *catalog) applyLocked(e *executorState, cat *busv1.ExecutorCatalog) {
	if stale(e, cat) {
		return
	}
	c.rememberLoadsLocked(e.id, cat.GetModels())
	e.models = cat.GetModels()
	e.explicit = cat.GetExplicitControl()
	e.draining = cat.GetDraining()
	e.catGen = cat.GetGeneration()
	e.catRev = cat.GetRevision()
	e.haveCat = true
	c.publishLocked()
}

// refresh asks every executor for its catalog now and applies the
// answers, so that the repository index reflects the repositories as they
// are on disk at the call, as Triton's does (it reads the repository
// directories on each index request).
func (c *catalog) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.fetchTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range c.executorIDs() {
		wg.Go(func() {
			var cat busv1.ExecutorCatalog
			if err := c.bus.Request(ctx, bus.ExecutorCatalogSubject(id), &busv1.CatalogRequest{}, &cat); err != nil {
				c.log.Debug("refreshing executor catalog failed", "executor", id, "err", err)
				return
			}
			c.apply(&cat)
		})
	}
	wg.Wait()
}

// expire drops executors not heard from within the expiry.
func (c *catalog) expire(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	dropped := false
	if gen := c.link.Generation(); !c.link.Connected() || gen != c.linkGen {
		// Nothing could be heard while NATS was down: the executors'
		// silence says nothing about them. Their clocks start again.
		c.linkGen = gen
		for _, e := range c.execs {
			e.lastSeen = now
		}
		return
	}
	for id, e := range c.execs {
		if now.Sub(e.lastSeen) > c.expiry {
			delete(c.execs, id)
			c.departLocked(id)
			c.log.Warn("executor expired: no heartbeat", "executor", id, "after", c.expiry)
			dropped = true
		}
	}
	if dropped {
		c.publishLocked()
	}
}

// settle waits one heartbeat interval (in which every live executor has
// announced itself), then for the catalog fetches under way (each bounded
// by the fetch timeout), and marks the catalog settled. Ending ctx settles
// it at once.
func (c *catalog) settle(ctx context.Context, interval time.Duration) {
	defer c.markSettled()
	t := time.NewTimer(interval)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return
	}
	t.Reset(c.fetchTimeout)
	for {
		c.mu.Lock()
		pending := false
		for _, e := range c.execs {
			pending = pending || e.fetching
		}
		changed := c.changed
		c.mu.Unlock()
		if !pending {
			return
		}
		select {
		case <-changed:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (c *catalog) markSettled() { c.settleOnce.Do(func() { close(c.settled) }) }

// isSettled reports whether the catalog has settled.
func (c *catalog) isSettled() bool {
	select {
	case <-c.settled:
		return true
	default:
		return false
	}
}

// waitSettled waits until the catalog settles (at most settleLimit, for a
// catalog nobody settles) and reports whether it had to wait: then a
// lookup that failed is worth repeating.
func (c *catalog) waitSettled() bool {
	if c.isSettled() {
		return false
	}
	t := time.NewTimer(c.settleLimit)
	defer t.Stop()
	select {
	case <-c.settled:
	case <-t.C:
	}
	return true
}

// executorIDs lists the executors that have delivered a catalog.
func (c *catalog) executorIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, 0, len(c.execs))
	for id, e := range c.execs {
		if e.haveCat {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// publishLocked rebuilds the view from the executors' catalogs. c.mu held.
func (c *catalog) publishLocked() {
	v := &view{models: map[string]*modelView{}}
	// Models a live executor in explicit mode reports: their state is what
	// the repository API made it, so versions served before by executors
	// now gone are not waited for.
	decided := map[string]bool{}
	// Versions a draining executor holds READY: not ready unless another
	// executor serves them.
	drained := map[string]map[int64]bool{}
	for _, e := range c.execs {
		if !e.haveCat {
			continue
		}
		v.executors++
		if !e.draining {
			v.serving++
		}
		for _, m := range e.models {
			if e.explicit {
				decided[m.GetName()] = true
			}
			if m.GetState() == "" {
				// In the repository, never loaded: listed by the index only.
				if v.listed == nil {
					v.listed = map[string]bool{}
				}
				v.listed[m.GetName()] = true
				continue
			}
			mv := v.models[m.GetName()]
			if mv == nil {
				mv = &modelView{name: m.GetName(), versions: map[int64]*versionView{}}
				v.models[m.GetName()] = mv
			}
			if m.GetState() == stateLoading {
				v.loading = true
			}
			if m.GetVersion() == "" {
				// The model failed before its versions were known.
				mv.failed = mergeState(mv.failed, &versionView{version: -1, state: m.GetState(), reason: m.GetReason()})
				continue
			}
			n, err := strconv.ParseInt(m.GetVersion(), 10, 64)
			if err != nil || n < 0 {
				c.log.Warn("executor reported a bad model version", "executor", e.id, "model", m.GetName(), "version", m.GetVersion())
				continue
			}
			vv := mv.versions[n]
			if vv == nil {
				vv = &versionView{version: n}
				mv.versions[n] = vv
			}
			state, reason := m.GetState(), m.GetReason()
			if m.GetState() == stateReady {
				// A draining executor still answers for its statistics,
				// but takes no request: the version is ready only where
				// an executor serves it.
				vv.executors = append(vv.executors, e.id)
				if !m.GetFaultsContained() {
					vv.native = true
				}
				if e.draining {
					state, reason = stateUnavailable, reasonDraining
					if drained[m.GetName()] == nil {
						drained[m.GetName()] = map[int64]bool{}
					}
					drained[m.GetName()][n] = true
				} else {
					if vv.execNodes == nil {
						vv.execNodes = map[string]string{}
					}
					vv.execNodes[e.id] = e.node
				}
				if c.seen[m.GetName()] == nil {
					c.seen[m.GetName()] = map[int64]bool{}
				}
				c.seen[m.GetName()][n] = true
			}
			merged := mergeState(vv, &versionView{version: n, state: state, reason: reason, config: m.GetConfig()})
			merged.executors = vv.executors
			merged.execNodes = vv.execNodes
			merged.native = vv.native
			mv.versions[n] = merged
		}
	}
	// Versions served before but by no live executor now.
	for name, versions := range c.seen {
		if decided[name] {
			continue
		}
		for n := range versions {
			mv := v.models[name]
			if mv == nil {
				mv = &modelView{name: name, versions: map[int64]*versionView{}}
				v.models[name] = mv
			}
			if _, ok := mv.versions[n]; !ok {
				mv.versions[n] = &versionView{version: n, state: stateUnavailable, reason: reasonGone, gone: true}
			}
		}
	}
	for name, versions := range drained {
		for n := range versions {
			if vv := v.models[name].versions[n]; !vv.ready() {
				vv.drained = true
				v.drainedOut = true
			}
		}
	}
	for name, mv := range v.models {
		for _, vv := range mv.versions {
			slices.Sort(vv.executors)
			vv.subject = bus.InferSubject(name, vv.versionString())
			vv.nodeSubject = bus.InferNodeSubject(name, vv.versionString(), c.node)
			vv.cached = vv.config.GetResponseCache().GetEnable()
		}
	}
	checkEnsembles(v) // ensemble.go
	c.view.Store(v)
	close(c.changed)
	c.changed = make(chan struct{})
}

// stateRank orders states for merging reports from several executors: one
// READY executor makes the version READY; otherwise the most hopeful state
// wins (a version still loading somewhere is not yet failed).
func stateRank(s string) int {
	switch s {
	case stateReady:
		return 4
	case stateLoading:
		return 3
	case stateUnloading:
		return 2
	case stateUnavailable:
		return 1
	}
	return 0
}

func mergeState(have, add *versionView) *versionView {
	if have == nil || have.state == "" || stateRank(add.state) > stateRank(have.state) {
		if have != nil && add.config == nil {
			add.config = have.config
		}
		return add
	}
	if have.config == nil {
		have.config = add.config
	}
	return have
}

// view is an immutable snapshot of the catalog.
type view struct {
	models map[string]*modelView
	// listed are the models of the executors' repositories that none of
	// them has loaded or tried to: the repository index shows their names.
	listed    map[string]bool
	executors int  // executors whose catalog we hold
	serving   int  // those of them not draining
	loading   bool // some executor is still loading a model
	// drainedOut: some version is loaded but not ready because every
	// executor holding it drains.
	drainedOut bool
}

type modelView struct {
	name     string
	versions map[int64]*versionView
	failed   *versionView // state of a model that failed before versions were known
}

type versionView struct {
	version   int64
	state     string
	reason    string
	config    *inference.ModelConfig
	executors []string // executors holding this version READY (draining ones too)
	// native: some executor holding it READY runs it in native code (a
	// Triton C backend), or does not say it does not (busv1
	// ModelVersionState.faults_contained): a fault there ends the
	// executor (rerun.go).
	native  bool
	gone    bool // served before, no live executor serves it now
	drained bool // loaded, but every executor holding it drains

	// execNodes are the nodes of the executors, by id (node-local hand-off).
	execNodes map[string]string

	// cached: the configuration enables response_cache (respcache.go).
	cached bool

	// plan is the step graph of an ensemble version valid against the
	// catalog, which this gateway runs (ensemble.go); its config says
	// decoupled when a decoupled step is on its data path.
	plan *ensemble.Plan
	// wholeOn are the executors to which a request to this ensemble may
	// go whole (ensembleExecutor): each holds it and the version every step
	// resolves to READY and does not drain, and no step keeps the
	// gateway's path. Sorted; made with the plan, once per view.
	wholeOn []wholeExec
	// wholeRerun: every step (nested ones included) may run again when
	// its executor is lost (reruns), so a request whose executor was lost
	// running it whole may run from this gateway.
	wholeRerun bool

	// subject and nodeSubject are bus.InferSubject and, for the gateway's
	// node, bus.InferNodeSubject of this version, made once per view
	// rather than per request; empty in a view built by hand (tests).
	subject, nodeSubject string
}

// inferSubject is bus.InferSubject(model, version) for this version of
// model.
func (vv *versionView) inferSubject(model string) string {
	if vv.subject != "" {
		return vv.subject
	}
	return bus.InferSubject(model, vv.versionString())
}

// inferNodeSubject is bus.InferNodeSubject(model, version, node) for this
// version of model and the gateway's node.
func (vv *versionView) inferNodeSubject(model, node string) string {
	if vv.nodeSubject != "" {
		return vv.nodeSubject
	}
	return bus.InferNodeSubject(model, vv.versionString(), node)
}

func (vv *versionView) ready() bool { return vv.state == stateReady }

// versionString is the version as the protocol spells it.
func (vv *versionView) versionString() string { return strconv.FormatInt(vv.version, 10) }

// serverReady is Triton's server readiness adapted to a constellation: at
// least one executor that does not drain has reported its catalog, none is
// still loading, and no loaded model is left without a serving executor by
// a drain (Triton's server is not ready while a loaded model is not).
// Models that failed to load do not make the server unready (Triton's
// non-strict readiness); they show in the repository index instead.
func (v *view) serverReady() bool { return v.serving > 0 && !v.loading && !v.drainedOut }

// resolve finds the version of model name a request addresses, as Triton's
// ModelLifeCycle::GetModel does, with its messages. version is latestVersion
// for "the highest ready version".
func (v *view) resolve(name string, version int64) (*versionView, error) {
	mv := v.models[name]
	if mv == nil {
		if v.executors == 0 {
			// No executor has reported what it serves: whether the model
			// exists cannot be known yet. Transient, so UNAVAILABLE (503)
			// for clients and load balancers to retry, not NOT_FOUND.
			return nil, errNoExecutorYet(name)
		}
		return nil, tritonerr.NotFoundf("Request for unknown model: '%s' is not found", name)
	}
	if version == latestVersion {
		var best, drainedSeq *versionView
		transient, gone, loading, drained := false, false, false, false
		for _, vv := range mv.versions {
			if vv.ready() && (best == nil || vv.version > best.version) {
				best = vv
			}
			if vv.drained && isSequence(vv) && (drainedSeq == nil || vv.version > drainedSeq.version) {
				drainedSeq = vv
			}
			drained = drained || vv.drained
			gone = gone || vv.gone
			loading = loading || vv.state == stateLoading
			transient = gone || loading
		}
		if best != nil {
			return best, nil
		}
		// Triton answers NOT_FOUND here. When the versions are merely out of
		// reach (their executors went away, or are still loading) the
		// condition is transient, and we say so with UNAVAILABLE (HTTP 503) so
		// clients and load balancers retry instead of giving up.
		if drainedSeq != nil {
			return drainedSeq, nil // see below
		}
		if drained && !loading {
			return nil, errDrained(name)
		}
		if gone && !loading {
			return nil, errNoExecutor(name)
		}
		if transient {
			return nil, tritonerr.Unavailablef("Request for unknown model: '%s' has no available versions", name)
		}
		ended := ""
		for _, vv := range mv.versions {
			if endedSequences(vv) {
				ended = sequencesEnded
			}
		}
		return nil, tritonerr.NotFoundf("Request for unknown model: '%s' has no available versions%s", name, ended)
	}
	vv := mv.versions[version]
	if vv == nil {
		return nil, tritonerr.NotFoundf("Request for unknown model: '%s' version %d is not found", name, version)
	}
	if vv.gone {
		return nil, errNoExecutor(name)
	}
	if vv.drained {
		if isSequence(vv) {
			// The sequences bound to the draining executors run to their
			// END there, which the drain waits for: their requests go on
			// to the sequence router (new sequences wait in its backlog).
			// The version is still not ready (modelReady).
			return vv, nil
		}
		return nil, errDrained(name)
	}
	if !vv.ready() {
		ended := ""
		if endedSequences(vv) {
			ended = sequencesEnded
		}
		return nil, tritonerr.Unavailablef("Request for unknown model: '%s' version %d is not at ready state%s", name, version, ended)
	}
	return vv, nil
}

// sequencesEnded completes Triton's message for a request to a sequence
// model that was unloaded: the client of a sequence in progress learns
// that its sequence is over, not only that the model is unknown.
const sequencesEnded = "; the model was unloaded, which ended its sequences"

// endedSequences reports whether vv is a version of a sequence model that
// was unloaded (or is unloading).
func endedSequences(vv *versionView) bool {
	return vv.reason == bus.ReasonUnloaded && vv.config.GetSequenceBatching() != nil
}

// errNoExecutor is the answer for a model this gateway has seen served
// whose executors have all gone: the model exists, nothing runs it now.
func errNoExecutor(name string) error {
	return tritonerr.Unavailablef("model '%s' has no ready executor: the executors that served it are gone; it is served again as soon as one is back", name)
}

// isSequence reports whether vv is a version of a sequence model.
func isSequence(vv *versionView) bool { return vv.config.GetSequenceBatching() != nil }

// modelReady is Triton's model readiness of a version resolve found: a
// version that only draining executors hold is not ready, though requests
// of the sequences still bound to them are served.
func modelReady(vv *versionView, err error) bool { return err == nil && !vv.drained }

// errNoExecutorYet is the answer for a model asked of a gateway that holds
// no executor's catalog (none has joined, or all went away).
func errNoExecutorYet(name string) error {
	return tritonerr.Unavailablef("Request for model '%s' cannot be served: no executor is connected to this gateway yet", name)
}

// errDrained is the answer for a model whose executors all drain.
func errDrained(name string) error {
	return tritonerr.Unavailablef("model '%s' has no ready executor: every executor serving it drains", name)
}

// readyVersions lists the ready versions of a model, ascending.
func (v *view) readyVersions(name string) []int64 {
	mv := v.models[name]
	if mv == nil {
		return nil
	}
	var out []int64
	for n, vv := range mv.versions {
		if vv.ready() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// indexEntry is one row of the repository index.
type indexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// index lists every known model version sorted by name then version, as
// Triton's repository index does; readyOnly keeps READY versions only.
func (v *view) index(readyOnly bool) []indexEntry {
	names := make([]string, 0, len(v.models)+len(v.listed))
	for n := range v.models {
		names = append(names, n)
	}
	for n := range v.listed {
		if v.models[n] == nil {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	out := []indexEntry{}
	for _, name := range names {
		mv := v.models[name]
		if mv == nil {
			if !readyOnly {
				out = append(out, indexEntry{Name: name}) // Triton lists it by name alone
			}
			continue
		}
		if mv.failed != nil && !readyOnly && len(mv.versions) == 0 {
			out = append(out, indexEntry{Name: name, State: mv.failed.state, Reason: mv.failed.reason})
		}
		versions := make([]int64, 0, len(mv.versions))
		for n := range mv.versions {
			versions = append(versions, n)
		}
		slices.Sort(versions)
		for _, n := range versions {
			vv := mv.versions[n]
			if readyOnly && !vv.ready() {
				continue
			}
			out = append(out, indexEntry{Name: name, Version: vv.versionString(), State: vv.state, Reason: vv.reason})
		}
	}
	return out
}
