// Package placer is the placement controller: the I/O around pkg/placement.
// It runs inside the sequence router's binary (--placement true), shares
// its Redis and its NATS role, and is leader-elected with a lease on the
// model of the router's per-model leases (pkg/failover): one controller of
// the cluster leads, the others wait to take over when its lease lapses.
//
// The leader learns executors from their heartbeats, reads the catalog of
// each executor started under placement every Config.Interval, gives what
// they report to a placement.Planner, performs its decisions by telling
// executors to load or unload (placementbus.Executors) and logs each with
// its reason. Gateways ask it to place a model that no executor holds
// (placementbus.Controller.Demand); the answer waits until an executor
// holds it READY. Footprints measured are kept in Redis, so a controller
// taking over knows them.
//
// The service is a library: New(Config), Run(ctx), Ready().
package placer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/failover"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/placement"
	"github.com/nereid-io/nereid/pkg/placementbus"
	"github.com/nereid-io/nereid/pkg/redisconn"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Defaults of Config.
const (
	DefaultLeaseTTL = 3 * time.Second
	DefaultInterval = time.Second
)

// Config configures a controller.
type Config struct {
	// Conn is the NATS connection (required); the controller does not
	// close it.
	Conn *nats.Conn
	// RedisURL is the sequence router's Redis (required): the lease and
	// the footprints live there.
	RedisURL  string
	RedisAuth redisconn.Options
	// ID names the controller in the lease; default: random.
	ID string
	// LeaseTTL is how long the leader's lease outlives it.
	LeaseTTL time.Duration
	// Interval is how often the leader reads the catalogs and plans.
	Interval time.Duration
	// Planner are the planner's cluster-wide settings.
	Planner placement.Config
	Logger  *slog.Logger
	// Metrics, when set, gets the controller's metrics
	// (nereid_placement_on_demand_seconds, timing.go).
	Metrics prometheus.Registerer
}

// Controller is a placement controller.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	ready chan struct{}

	bus   *bus.Conn
	st    *store
	execs *placementbus.Executors

	mu      sync.Mutex
	planner *placement.Planner // nil unless leading
	epoch   uint64             // the lease's, while leading
	heard   map[string]time.Time
	waiters map[string][]chan []string
	// demandedAt: when each model demanded and not yet loaded was first
	// demanded (timing.go).
	demandedAt map[string]time.Time
	onDemand   *prometheus.SummaryVec
	// Explicit model control (explicit.go): whether the executors run
	// in it, the cluster's loaded models, the executor generations whose
	// startup models were loaded, and the repository loads waiting.
	explicit bool
	// catalogsRead is closed once a round of this leadership has read
	// executors' catalogs (explicit is known from then on: a controller
	// that has just taken over hears of the executors within a heartbeat
	// interval), or when the leadership ends.
	catalogsRead chan struct{}
	loaded       map[string]loadedModel
	started      map[string]uint64
	// composing: each ensemble's step models, from the executors'
	// catalogs (the round's).
	composing map[string][]string
	controls  map[string][]chan controlOutcome
	// lastCat is each live executor's latest catalog read (the round's
	// goroutine only): a round whose read of it fails plans with it.
	lastCat  map[string]*busv1.ExecutorCatalog
	leading  bool
	poke     chan struct{}
	lastWait string
	// The admin API's view (state.go): the models the last round left
	// waiting, the latest decisions.
	waiting   []*adminv1.WaitingModel
	decisions []*adminv1.PlacementDecision
}

// New checks cfg and fills its defaults.
func New(cfg Config) (*Controller, error) {
	if cfg.Conn == nil {
		return nil, errors.New("placement: Config.Conn is required")
	}
	if cfg.RedisURL == "" {
		return nil, errors.New("placement: the controller needs Redis (--redis-url): its lease and state live there")
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ID == "" {
		cfg.ID = "placement-" + time.Now().Format("150405.000000000")
	}
	c := &Controller{cfg: cfg, log: cfg.Logger.With("service", "placement", "controller", cfg.ID), ready: make(chan struct{}),
		heard: map[string]time.Time{}, waiters: map[string][]chan []string{}, demandedAt: map[string]time.Time{},
		loaded: map[string]loadedModel{}, composing: map[string][]string{}, started: map[string]uint64{}, controls: map[string][]chan controlOutcome{},
		lastCat:  map[string]*busv1.ExecutorCatalog{},
		onDemand: onDemandSummary(), poke: make(chan struct{}, 1)}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(c.onDemand); err != nil {
			return nil, fmt.Errorf("placement: metrics: %w", err)
		}
	}
	return c, nil
}

// Ready is closed once the controller runs (leading or standing by).
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Leading reports whether this controller leads the cluster's placement.
func (c *Controller) Leading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading
}

// Run serves until ctx ends, then gives its lease back.
func (c *Controller) Run(ctx context.Context) error {
	rdb, err := redisconn.Open(ctx, c.cfg.RedisURL, c.cfg.RedisAuth)
	if err != nil {
		return err
	}
	defer rdb.Close()
	c.st = &store{rdb: rdb}
	bc, err := bus.New(c.cfg.Conn, bus.WithLogger(c.log))
	if err != nil {
		return err
	}
	defer bc.Close()
	c.bus, c.execs = bc, placementbus.NewExecutors(bc)
	hb, err := bc.Subscribe(bus.HeartbeatSubject, c.heartbeat)
	if err != nil {
		return err
	}
	defer hb.Unsubscribe()
	close(c.ready)

	var lease *failover.Lease
	var demand, state, pin, control *bus.Subscription
	stepDown := func(r failover.Reason) {
		for _, s := range []**bus.Subscription{&demand, &state, &pin, &control} {
			if *s != nil {
				_ = (*s).Unsubscribe()
				*s = nil
			}
		}
		c.mu.Lock()
		c.leading, c.planner = false, nil
		for m, ws := range c.waiters {
			for _, w := range ws {
				close(w)
			}
			delete(c.waiters, m)
		}
		clear(c.demandedAt)
		c.catalogsReadLocked()
		for m := range c.controls {
			c.settleControlsLocked(m, controlOutcome{err: tritonerr.Unavailablef("failed to load '%s': the placement controller stepped down", m)})
		}
		c.mu.Unlock()
		if r.Releases() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.LeaseTTL/4)
			_ = c.st.release(rctx, c.cfg.ID, lease.Epoch())
			cancel()
		}
		c.log.Info("placement: stepped down", "reason", r.String())
		lease = nil
	}
	// keep renews the lease when it is due and reports whether this
	// controller still leads and serves; it steps down when the lease is
	// lost. A round calls it between the requests it makes, so that a long
	// one (thousands of loads) neither lets the lease lapse nor goes on
	// deciding after another controller took over.
	keep := func() bool {
		if lease == nil {
			return false
		}
		now := time.Now()
		if due := lease.NextRenewal(now); !due.IsZero() && !due.After(now) {
			lease.Renewing(now)
			rctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
			a, err := c.st.renew(rctx, c.cfg.ID, lease.Epoch(), c.cfg.LeaseTTL)
			cancel()
			if err != nil && ctx.Err() == nil {
				c.log.Warn("placement: lease renewal", "err", err)
			}
			if r := lease.Renewal(now, a); r != failover.NoReason {
				stepDown(r)
				return false
			}
		}
		if r := lease.Check(time.Now()); r != failover.NoReason {
			stepDown(r)
			return false
		}
		return lease.State(time.Now()) == failover.Serving
	}
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		if lease == nil {
			lease = c.tryLead(ctx)
			if lease != nil {
				if demand, err = bc.HandleDelegated(bus.PlacementSubject, "placement", c.handleDemand); err != nil {
					c.log.Error("placement: cannot serve demands", "err", err)
				}
				if state, err = bc.Handle(bus.PlacementStateSubject, "placement", c.handleState); err != nil {
					c.log.Error("placement: cannot serve its state to the admin API", "err", err)
				}
				if pin, err = bc.Handle(bus.PlacementPinSubject, "placement", c.handlePin); err != nil {
					c.log.Error("placement: cannot serve the admin API's pins", "err", err)
				}
				if control, err = bc.Handle(bus.PlacementControlSubject, "placement", c.handleControl); err != nil {
					c.log.Error("placement: cannot serve the repository API's loads", "err", err)
				}
			}
		}
		if lease != nil && keep() {
			c.round(ctx, lease.Epoch(), keep)
		}
		select {
		case <-ctx.Done():
			if lease != nil {
				stepDown(failover.Shutdown)
			}
			return nil
		case <-tick.C:
		case <-c.poke:
		}
	}
}

// tryLead takes the lease if nobody holds it, and starts planning with
// the footprints, the operator's pins and the loaded models the previous
// leader kept. A controller that cannot read the pins or the loaded
// models gives the lease back rather than place without them (it would
// evict what the operator pinned, or unload what clients loaded).
func (c *Controller) tryLead(ctx context.Context) *failover.Lease {
	sent := time.Now()
	actx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
	epoch, err := c.st.acquire(actx, c.cfg.ID, c.cfg.LeaseTTL)
	cancel()
	if err != nil || epoch == 0 {
		if err != nil && ctx.Err() == nil {
			c.log.Warn("placement: cannot take the lease", "err", err)
		}
		return nil
	}
	p := placement.NewPlanner(c.cfg.Planner)
	fctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
	kept, err := c.st.footprints(fctx)
	cancel()
	if err != nil {
		c.log.Warn("placement: cannot read the footprints kept", "err", err)
	}
	for m, n := range kept {
		p.RememberFootprint(m, n)
	}
	gctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
	keptGPU, err := c.st.gpuFootprints(gctx)
	cancel()
	if err != nil {
		c.log.Warn("placement: cannot read the GPU footprints kept", "err", err)
	}
	for m, n := range keptGPU {
		p.RememberGPUFootprint(m, n)
	}
	var pins map[string][]string
	var loaded map[string]loadedModel
	var started map[string]uint64
	rctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
	pins, err = c.st.pins(rctx)
	if err == nil {
		loaded, started, err = c.st.loaded(rctx)
	}
	cancel()
	if err != nil {
		c.log.Warn("placement: cannot read the pins or loaded models kept; giving the lease back", "err", err)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.LeaseTTL/4)
		_ = c.st.release(rctx, c.cfg.ID, epoch)
		cancel()
		return nil
	}
	p.SetPins(pins)
	c.mu.Lock()
	c.planner, c.leading, c.epoch = p, true, epoch
	c.catalogsRead = make(chan struct{})
	c.loaded, c.started = loaded, started
	c.mu.Unlock()
	c.log.Info("placement: leading", "epoch", epoch, "footprints_known", len(kept), "pins", len(pins))
	return failover.NewLease(c.cfg.LeaseTTL, epoch, sent)
}

func (c *Controller) heartbeat(_ context.Context, data []byte) {
	var hb busv1.ExecutorHeartbeat
	if proto.Unmarshal(data, &hb) != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if hb.GetWithdraw() {
		delete(c.heard, hb.GetExecutorId())
		if c.planner != nil {
			c.planner.Gone(time.Now(), hb.GetExecutorId())
		}
		c.pokeLocked()
		return
	}
	c.heard[hb.GetExecutorId()] = time.Now()
}

// catalogsReadLocked says this leadership has read the executors'
// catalogs once (or ended). c.mu held.
func (c *Controller) catalogsReadLocked() {
	if c.catalogsRead == nil {
		return
	}
	select {
	case <-c.catalogsRead:
	default:
		close(c.catalogsRead)
	}
}

func (c *Controller) pokeLocked() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// round reads every live executor's catalog, plans, and performs the plan;
// it stops as soon as keep says this controller no longer leads.
func (c *Controller) round(ctx context.Context, epoch uint64, keep func() bool) {
	now := time.Now()
	c.mu.Lock()
	var live []string
	for id, at := range c.heard {
		if now.Sub(at) > bus.HeartbeatExpiry {
			delete(c.heard, id)
			if c.planner != nil {
				c.planner.Gone(now, id)
				c.log.Info("placement: executor gone", "executor", id)
			}
			continue
		}
		live = append(live, id)
	}
	c.mu.Unlock()
	slices.Sort(live)
	for id := range c.lastCat {
		if !slices.Contains(live, id) {
			delete(c.lastCat, id)
		}
	}
	models := map[string]placement.Model{}
	composing := map[string][]string{}
	var cats []*busv1.ExecutorCatalog
	for _, id := range live {
		if !keep() {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, c.cfg.Interval)
		cat, err := c.execs.Catalog(rctx, id)
		cancel()
		// A live executor whose catalog did not come in time still serves
		// what it said last: planning without it would take its models
		// for no longer served and unload them everywhere.
		fresh := err == nil
		if fresh {
			c.lastCat[id] = cat
		} else if cat = c.lastCat[id]; cat == nil {
			continue
		}
		if !cat.GetPlacement() {
			continue
		}
		cats = append(cats, cat)
		for _, m := range cat.GetModels() {
			if _, ok := models[m.GetName()]; !ok || m.GetConfig() != nil {
				pm := placement.Model{Name: m.GetName()}
				if m.GetConfig() != nil {
					if got, err := placement.ModelFrom(m.GetConfig()); err == nil {
						pm = got
					}
					if steps := modelconfig.EnsembleModels(m.GetConfig()); len(steps) > 0 {
						composing[m.GetName()] = steps
					}
				}
				models[m.GetName()] = pm
			}
		}
		if fresh {
			c.observe(time.Now(), cat)
		}
	}
	if ctx.Err() != nil {
		return // shutting down: the reads failed for that
	}
	c.mu.Lock()
	c.composing = composing
	c.mu.Unlock()
	explicit, loaded := c.explicitRound(ctx, epoch, cats)
	if explicit {
		// Explicit model control: only the models loaded in the cluster
		// are served; the others held somewhere are unloaded.
		maps.DeleteFunc(models, func(name string, _ placement.Model) bool {
			_, ok := loaded[name]
			return !ok
		})
		// A model loaded with its files is in no repository until an
		// executor holds it.
		for name, l := range loaded {
			if _, ok := models[name]; !ok && len(l.override.GetFiles()) > 0 {
				models[name] = overriddenModel(name, l.override)
			}
		}
	}
	if len(cats) > 0 {
		c.mu.Lock()
		c.catalogsReadLocked()
		c.mu.Unlock()
	}
	c.mu.Lock()
	p := c.planner
	if p == nil {
		c.mu.Unlock()
		return
	}
	p.SetModels(slices.Collect(maps.Values(models)))
	before, gpuBefore := p.Footprints(), p.GPUFootprints()
	plan := p.Plan(time.Now())
	c.mu.Unlock()
	for _, d := range plan.Actions {
		if !keep() {
			return
		}
		c.log.Info("placement: decision", "action", d.Action.String(), "model", d.Model, "executor", d.Executor, "reason", d.Reason.String(), "for", d.For)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		var cat *busv1.ExecutorCatalog
		var err error
		if d.Action == placement.Load {
			loaded := c.loading(d.Model, time.Now())
			c.mu.Lock()
			req := c.loadRequestLocked(d.Model)
			c.mu.Unlock()
			cat, err = c.execs.LoadWith(rctx, d.Executor, req)
			loaded(err)
		} else {
			cat, err = c.execs.Unload(rctx, d.Executor, d.Model)
		}
		cancel()
		if err != nil {
			c.log.Warn("placement: decision failed", "action", d.Action.String(), "model", d.Model, "executor", d.Executor, "err", err)
		}
		c.decided(time.Now(), d, err)
		if cat != nil {
			c.observe(time.Now(), cat)
		}
		c.mu.Lock()
		if c.planner == p {
			p.Done(time.Now(), d, err)
		}
		if err != nil && d.Action == placement.Load {
			c.settleControlsLocked(d.Model, controlOutcome{cat: cat, err: err})
		}
		c.mu.Unlock()
	}
	var waits []string
	for _, w := range plan.Waiting {
		waits = append(waits, w.Model+": "+w.Why.String())
	}
	c.mu.Lock()
	c.waiting = waitingOf(plan.Waiting)
	// A repository load whose model the plan could not place fails with
	// why, as a load without the memory for it fails in Triton.
	for _, w := range plan.Waiting {
		if w.Replicas == 0 && len(c.controls[w.Model]) > 0 {
			c.settleControlsLocked(w.Model, controlOutcome{err: tritonerr.Unavailablef("failed to load '%s': %s", w.Model, w.Why)})
		}
	}
	c.mu.Unlock()
	if joined := strings.Join(waits, "; "); joined != c.lastWait {
		c.log.Info("placement: models waiting", "waiting", joined)
		c.lastWait = joined
	}
	if after := p.Footprints(); !maps.Equal(before, after) {
		wctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
		if err := c.st.saveFootprints(wctx, c.cfg.ID, epoch, after); err != nil {
			c.log.Warn("placement: saving footprints", "err", err)
		}
		cancel()
	}
	if after := p.GPUFootprints(); !maps.Equal(gpuBefore, after) {
		wctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
		if err := c.st.saveGPUFootprints(wctx, c.cfg.ID, epoch, after); err != nil {
			c.log.Warn("placement: saving GPU footprints", "err", err)
		}
		cancel()
	}
}

// overriddenModel is placement's view of a model loaded with the
// configuration of override: what it reads of that configuration, else the
// name alone.
func overriddenModel(name string, override *busv1.ModelControlRequest) placement.Model {
	var cfg inference.ModelConfig
	if (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(override.GetConfig()), &cfg) == nil {
		cfg.Name = name
		if m, err := placement.ModelFrom(&cfg); err == nil {
			return m
		}
	}
	return placement.Model{Name: name}
}

// observe gives an executor's catalog to the planner, and answers the
// demands it satisfies.
func (c *Controller) observe(now time.Time, cat *busv1.ExecutorCatalog) {
	e := placement.Executor{ID: cat.GetExecutorId(), Node: cat.GetNode(), Generation: cat.GetGeneration(), Revision: cat.GetRevision(),
		Capacity: placement.Capacity{Bytes: cat.GetCapacity().GetBytes(), Slots: int(cat.GetCapacity().GetSlots())},
		GPU:      len(cat.GetCapacity().GetGpuMemoryBytes()) > 0, Draining: cat.GetDraining()}
	// The planner bounds GPU footprints by all of the executor's GPUs
	// together: a load's growth is measured over them all.
	for _, n := range cat.GetCapacity().GetGpuMemoryBytes() {
		e.GPUMemory += n
	}
	byModel := map[string]*placement.Holding{}
	var order []string
	for _, m := range cat.GetModels() {
		if !slices.Contains(e.Repository, m.GetName()) {
			e.Repository = append(e.Repository, m.GetName())
		}
		var st placement.HoldState
		switch m.GetState() {
		case bus.StateReady:
			st = placement.Ready
		case bus.StateLoading:
			st = placement.Loading
		default:
			continue
		}
		h := byModel[m.GetName()]
		if h == nil {
			h = &placement.Holding{Model: m.GetName(), State: st}
			byModel[m.GetName()] = h
			order = append(order, m.GetName())
		} else if st == placement.Loading {
			h.State = placement.Loading
		}
		h.Footprint += m.GetFootprintBytes()
		h.GPUFootprint += m.GetGpuFootprintBytes()
		h.Inflight += int(m.GetInflight())
		h.QueueNs += m.GetQueueNs()
		h.QueueCount += m.GetQueueCount()
		if t := time.UnixMilli(m.GetLastUsedUnixMs()); m.GetLastUsedUnixMs() > 0 && t.After(h.LastUse) {
			h.LastUse = t
		}
	}
	for _, name := range order {
		e.Holds = append(e.Holds, *byModel[name])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.planner == nil {
		return
	}
	// A model loaded with its files needs no repository: any executor
	// can hold it.
	for m, l := range c.loaded {
		if len(l.override.GetFiles()) > 0 && !slices.Contains(e.Repository, m) {
			e.Repository = append(e.Repository, m)
		}
	}
	c.planner.Observe(now, e)
	for _, h := range e.Holds {
		if h.State != placement.Ready {
			continue
		}
		for _, w := range c.waiters[h.Model] {
			w <- []string{e.ID}
			close(w)
		}
		delete(c.waiters, h.Model)
		if len(c.controls[h.Model]) > 0 {
			c.settleControlsLocked(h.Model, controlOutcome{cat: cat})
		}
	}
}

// handleDemand serves a gateway's PlacementDemand: the model gets demand,
// a round starts at once, and the answer waits until an executor holds
// the model READY or the request's deadline.
func (c *Controller) handleDemand(ctx context.Context, _, reply string, data []byte) {
	var d busv1.PlacementDemand
	if err := proto.Unmarshal(data, &d); err != nil || d.GetModel() == "" {
		c.bus.ReplyError(reply, errors.New("malformed placement demand"))
		return
	}
	w := make(chan []string, 1)
	c.mu.Lock()
	if c.planner == nil {
		c.mu.Unlock()
		_ = c.bus.Reply(ctx, reply, &busv1.PlacementDemandReply{Reason: "this controller does not lead placement"})
		return
	}
	if _, loaded := c.loaded[d.GetModel()]; c.explicit && !loaded {
		c.mu.Unlock()
		_ = c.bus.Reply(ctx, reply, &busv1.PlacementDemandReply{Reason: "the model is not loaded (explicit model control: load it through the repository API)"})
		return
	}
	c.demandLocked(d.GetModel())
	// An ensemble's composing models are demanded with it: its requests
	// run their steps at once.
	for _, m := range c.composingLocked(d.GetModel(), nil) {
		if _, loaded := c.loaded[m]; !c.explicit || loaded {
			c.demandLocked(m)
		}
	}
	c.waiters[d.GetModel()] = append(c.waiters[d.GetModel()], w)
	c.pokeLocked()
	c.mu.Unlock()
	c.log.Info("placement: demand", "model", d.GetModel())
	select {
	case ids, ok := <-w:
		if !ok {
			_ = c.bus.Reply(context.WithoutCancel(ctx), reply, &busv1.PlacementDemandReply{Reason: "the controller stepped down"})
			return
		}
		_ = c.bus.Reply(context.WithoutCancel(ctx), reply, &busv1.PlacementDemandReply{Executors: ids})
	case <-ctx.Done():
		c.mu.Lock()
		c.waiters[d.GetModel()] = slices.DeleteFunc(c.waiters[d.GetModel()], func(x chan []string) bool { return x == w })
		if len(c.waiters[d.GetModel()]) == 0 {
			delete(c.waiters, d.GetModel())
			delete(c.demandedAt, d.GetModel())
		}
		c.mu.Unlock()
		_ = c.bus.Reply(context.WithoutCancel(ctx), reply, &busv1.PlacementDemandReply{Reason: "not placed before the request's deadline"})
	}
}
