package placement

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

// HoldState is the state of a model on an executor.
type HoldState uint8

// The states of a holding, from the executor's catalog.
const (
	// Ready: the model serves there.
	Ready HoldState = iota
	// Loading: a load is under way; it takes its room already.
	Loading
	// Failed: the model is listed there but not loaded (a failed load,
	// unloaded); it takes no room.
	Failed
)

// Holding is one model an executor lists.
type Holding struct {
	Model string
	State HoldState
	// Footprint is the memory the load took, as the executor measured it;
	// 0 when unknown.
	Footprint uint64
	// GPUFootprint is the GPU memory the load took on the executor's GPUs,
	// as it measured it; 0 when unknown or none.
	GPUFootprint uint64
	// LastUse is the last request's time, or the load's when none came.
	LastUse time.Time
	// Inflight counts the requests the executor handles for the model now.
	Inflight int
	// QueueNs and QueueCount are the time the model's requests waited in
	// its queue there and how many they were, summed since it loaded: two
	// reports give the mean queue time between them.
	QueueNs, QueueCount uint64
}

// Executor is what an executor advertises.
type Executor struct {
	ID, Node string
	// Generation and Revision order the executor's reports: an
	// observation older than one already seen is ignored.
	Generation, Revision uint64
	Capacity             Capacity
	GPU                  bool
	// GPUMemory is the memory of its GPUs, summed: the GPU footprints of
	// what it holds stay within it. 0 does not bound (a GPU whose memory
	// is not known).
	GPUMemory uint64
	Draining  bool
	// Repository lists the models its model repository has: those it can
	// load.
	Repository []string
	Holds      []Holding
}

// Config holds the planner's cluster-wide settings.
type Config struct {
	// MinReplicas is the default of Model.MinReplicas; 0 is 1.
	MinReplicas int
	// MaxReplicas is the default of Model.MaxReplicas; 0 is unbounded.
	MaxReplicas int
	// DefaultFootprint is the footprint of a model never measured and
	// without a hint.
	DefaultFootprint uint64
	// ActionTimeout is how long a load or unload counts as under way
	// without an outcome; default 2 minutes.
	ActionTimeout time.Duration
	// RetryAfter is how long a failed load is not tried on the same
	// executor again; default 30 seconds.
	RetryAfter time.Duration
	// DemandTTL is how long a demand for a model lasts without being
	// renewed (its requests time out meanwhile); default 1 minute.
	DemandTTL time.Duration
	// MinResidency protects a model loaded or used less than this long ago
	// from eviction; default 0.
	MinResidency time.Duration
	// ScaleUpPending turns scaling by load on: a model whose requests in
	// flight per replica stay at or above it for ScaleUpAfter gets one more
	// replica, in free capacity (load never evicts), up to its
	// max_replicas; a replica beyond min_replicas that has had no request
	// for ScaleDownAfter is unloaded. 0: off.
	ScaleUpPending float64
	// ScaleUpQueueTime turns scaling by queue time on: a model whose
	// requests waited at least this long in its replicas' queues on the
	// mean (between the last two reports of each) for ScaleUpAfter gets one
	// more replica, as with ScaleUpPending. 0: off.
	ScaleUpQueueTime time.Duration
	// ScaleUpAfter is how long the load must last before each replica
	// added; default 10 seconds.
	ScaleUpAfter time.Duration
	// ScaleDownAfter is how long a replica beyond min_replicas stays idle
	// before it is unloaded; default 5 minutes.
	ScaleDownAfter time.Duration
}

// Action is what a decision does.
type Action uint8

// The actions.
const (
	Load Action = iota
	Unload
)

func (a Action) String() string {
	if a == Load {
		return "load"
	}
	return "unload"
}

// Reason is why a decision was taken.
type Reason uint8

// The reasons.
const (
	// BelowMinReplicas: fewer executors hold the model than its
	// min_replicas, and one has room.
	BelowMinReplicas Reason = iota + 1
	// OnDemand: a request wants the model and no executor holds it.
	OnDemand
	// Evicted: the least recently used model without traffic on its
	// executor makes room for a model on demand (Decision.For).
	Evicted
	// AboveMaxReplicas: more executors hold the model than its
	// max_replicas.
	AboveMaxReplicas
	// NotServed: the cluster no longer serves the model.
	NotServed
	// ScaledUp: the model's requests in flight per replica stayed at or
	// above Config.ScaleUpPending for Config.ScaleUpAfter.
	ScaledUp
	// ScaledDown: a replica beyond min_replicas had no request for
	// Config.ScaleDownAfter.
	ScaledDown
	// ScaledUpQueue: the model's mean queue time stayed at or above
	// Config.ScaleUpQueueTime for Config.ScaleUpAfter.
	ScaledUpQueue
	// PinnedHere: the operator pinned the model to the executor
	// (Planner.SetPins).
	PinnedHere
)

func (r Reason) String() string {
	switch r {
	case BelowMinReplicas:
		return "below min_replicas"
	case OnDemand:
		return "on demand"
	case Evicted:
		return "least recently used, evicted"
	case AboveMaxReplicas:
		return "above max_replicas"
	case NotServed:
		return "no longer served"
	case ScaledUp:
		return "requests in flight per replica above the scale-up threshold"
	case ScaledDown:
		return "idle replica beyond min_replicas"
	case ScaledUpQueue:
		return "queue time above the scale-up threshold"
	case PinnedHere:
		return "pinned to the executor by the operator"
	}
	return "unknown"
}

// Decision is one load or unload.
type Decision struct {
	Action   Action
	Model    string
	Executor string
	Reason   Reason
	// For is the model an eviction makes room for.
	For string
	// Footprint is what the planner counts the model to take, and
	// GPUFootprint what it counts it to take of the executor's GPU memory.
	Footprint, GPUFootprint uint64
}

func (d Decision) String() string {
	s := fmt.Sprintf("%s %s on %s: %s", d.Action, d.Model, d.Executor, d.Reason)
	if d.For != "" {
		s += " for " + d.For
	}
	return s
}

// Why is why a model waits unplaced (or below its min_replicas).
type Why uint8

// The reasons a model waits.
const (
	// NoExecutor: no live executor's repository has the model.
	NoExecutor Why = iota + 1
	// NoGPUExecutor: the model needs a GPU and no executor that has it has one.
	NoGPUExecutor
	// NoCapacity: no executor has room, and the model has no demand that
	// would evict another.
	NoCapacity
	// NothingEvictable: the model has demand, but no executor can make
	// room by evicting models without traffic.
	NothingEvictable
	// PinnedUnavailable: an executor the model is pinned to is not there,
	// drains, cannot load it (not in its repository, no GPU for a GPU
	// model) or failed to load it lately.
	PinnedUnavailable
	// PinnedNoRoom: an executor the model is pinned to has no room, and
	// nothing there can be evicted for it.
	PinnedNoRoom
	// NoGPUMemory: executors have slots and bytes for the model, but none
	// has GPU memory left for it, and it has no demand that would evict
	// another.
	NoGPUMemory
)

func (w Why) String() string {
	switch w {
	case NoExecutor:
		return "no executor has the model in its repository"
	case NoGPUExecutor:
		return "the model needs a GPU and no executor that has it has one"
	case NoCapacity:
		return "no executor has room for it"
	case NothingEvictable:
		return "no executor can make room: every model there has traffic, is pinned or is wanted"
	case PinnedUnavailable:
		return "an executor it is pinned to is not there, drains, cannot load it, or failed to"
	case PinnedNoRoom:
		return "an executor it is pinned to has no room, and nothing there can be evicted for it"
	case NoGPUMemory:
		return "no executor has GPU memory left for it"
	}
	return "unknown"
}

// Waiting is a model the plan leaves short of its min_replicas, or
// missing from an executor it is pinned to.
type Waiting struct {
	Model    string
	Replicas int // executors holding it, loads under way included
	Why      Why
	Demanded bool
}

// Plan is what Planner.Plan decides: actions in the order to perform them
// (an executor's unloads before its load), and the models left waiting.
type Plan struct {
	Actions []Decision
	Waiting []Waiting
}

type opKey struct{ model, executor string }

type op struct {
	action Action
	at     time.Time
}

// Planner keeps what placement knows; see the package comment.
type Planner struct {
	cfg        Config
	executors  map[string]*Executor
	models     map[string]Model
	footprints map[string]uint64 // measured, remembered after unloads
	// gpuFootprints are the GPU footprints measured, likewise.
	gpuFootprints map[string]uint64
	ops           map[opKey]op // decided, outcome not yet known
	failed        map[opKey]time.Time
	demand        map[string]time.Time
	// hot is when each model's requests in flight per replica last rose
	// to Config.ScaleUpPending (or when it last got a replica for it).
	hot map[string]time.Time
	// pins are the executors the operator pinned each model to.
	pins map[string][]string
	// queued is, by model and executor, the queue time summed and the
	// requests counted between its last two reports.
	queued map[opKey]queueDelta
}

// queueDelta is a model's queue time and requests on one executor between
// two of its reports.
type queueDelta struct{ ns, count uint64 }

// NewPlanner returns a planner with cfg's defaults filled.
func NewPlanner(cfg Config) *Planner {
	if cfg.MinReplicas <= 0 {
		cfg.MinReplicas = 1
	}
	if cfg.ActionTimeout <= 0 {
		cfg.ActionTimeout = 2 * time.Minute
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = 30 * time.Second
	}
	if cfg.DemandTTL <= 0 {
		cfg.DemandTTL = time.Minute
	}
	if cfg.ScaleUpAfter <= 0 {
		cfg.ScaleUpAfter = 10 * time.Second
	}
	if cfg.ScaleDownAfter <= 0 {
		cfg.ScaleDownAfter = 5 * time.Minute
	}
	return &Planner{cfg: cfg, executors: map[string]*Executor{}, models: map[string]Model{},
		footprints: map[string]uint64{}, gpuFootprints: map[string]uint64{}, ops: map[opKey]op{}, failed: map[opKey]time.Time{}, demand: map[string]time.Time{},
		hot: map[string]time.Time{}, pins: map[string][]string{}, queued: map[opKey]queueDelta{}}
}

// SetPins replaces the operator's pins: model -> the executors that must
// hold it. A pinned model is loaded on each of its executors (evicting
// there the least recently used models without traffic when it must) and
// never unloaded from them, not even above its max_replicas; replicas
// beyond its pins follow the other rules. A pin to an executor that is
// not there waits for it.
func (p *Planner) SetPins(pins map[string][]string) {
	p.pins = make(map[string][]string, len(pins))
	for m, ids := range pins {
		if len(ids) > 0 {
			p.pins[m] = slices.Clone(ids)
		}
	}
}

// Pins returns the operator's pins, by model.
func (p *Planner) Pins() map[string][]string {
	out := make(map[string][]string, len(p.pins))
	for m, ids := range p.pins {
		out[m] = slices.Clone(ids)
	}
	return out
}

// pinnedTo reports whether the operator pinned model to executor id.
func (p *Planner) pinnedTo(model, id string) bool { return slices.Contains(p.pins[model], id) }

// SetModels replaces the set of models the cluster serves.
func (p *Planner) SetModels(models []Model) {
	p.models = make(map[string]Model, len(models))
	for _, m := range models {
		p.models[m.Name] = m
	}
}

// Models returns the models the cluster serves, by name.
func (p *Planner) Models() []Model {
	out := make([]Model, 0, len(p.models))
	for _, m := range p.models {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Model) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Observe records an executor's report, unless one newer was seen. It
// remembers the footprints it measured, and settles the actions its report
// shows done.
func (p *Planner) Observe(now time.Time, e Executor) {
	if old := p.executors[e.ID]; old != nil && (e.Generation < old.Generation || e.Generation == old.Generation && e.Revision < old.Revision) {
		return
	}
	e.Repository = slices.Clone(e.Repository)
	e.Holds = slices.Clone(e.Holds)
	p.observeQueues(p.executors[e.ID], &e)
	p.executors[e.ID] = &e
	held := map[string]bool{}
	for _, h := range e.Holds {
		if h.Footprint > p.footprints[h.Model] {
			p.footprints[h.Model] = h.Footprint
		}
		if h.GPUFootprint > p.gpuFootprints[h.Model] {
			p.gpuFootprints[h.Model] = h.GPUFootprint
		}
		if h.State == Ready {
			held[h.Model] = true
			delete(p.demand, h.Model)
		}
	}
	for k, o := range p.ops {
		if k.executor != e.ID {
			continue
		}
		if (o.action == Load && held[k.model]) || (o.action == Unload && !held[k.model] && !holdsLoading(&e, k.model)) {
			delete(p.ops, k)
		}
	}
}

// observeQueues records each model's queue time on e since old, the
// executor's previous report (nil: none): a model held in both (same
// generation, its sums not reset by a reload) gets the difference, one
// that appears starts from its first report.
func (p *Planner) observeQueues(old, e *Executor) {
	for k := range p.queued {
		if k.executor == e.ID {
			delete(p.queued, k)
		}
	}
	if old == nil || old.Generation != e.Generation {
		return
	}
	for _, h := range e.Holds {
		for _, o := range old.Holds {
			if o.Model == h.Model && h.State == Ready && h.QueueCount >= o.QueueCount && h.QueueNs >= o.QueueNs {
				p.queued[opKey{h.Model, e.ID}] = queueDelta{ns: h.QueueNs - o.QueueNs, count: h.QueueCount - o.QueueCount}
			}
		}
	}
}

// queueTime is model's mean queue time over have, its replicas, between
// their last two reports; ok is false when no request left a queue then.
func (p *Planner) queueTime(model string, have []string) (time.Duration, bool) {
	var sum queueDelta
	for _, id := range have {
		d := p.queued[opKey{model, id}]
		sum.ns += d.ns
		sum.count += d.count
	}
	if sum.count == 0 {
		return 0, false
	}
	return time.Duration(sum.ns / sum.count), true
}

func holdsLoading(e *Executor, model string) bool {
	for _, h := range e.Holds {
		if h.Model == model && h.State == Loading {
			return true
		}
	}
	return false
}

// Gone forgets an executor (it withdrew, or stopped heartbeating): its
// models count as held nowhere there.
func (p *Planner) Gone(_ time.Time, id string) {
	delete(p.executors, id)
	for k := range p.ops {
		if k.executor == id {
			delete(p.ops, k)
		}
	}
	for k := range p.queued {
		if k.executor == id {
			delete(p.queued, k)
		}
	}
}

// Executors returns the executors known, by id.
func (p *Planner) Executors() []Executor {
	out := make([]Executor, 0, len(p.executors))
	for _, e := range p.executors {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b Executor) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Demand records that a request wants model, which no executor holds: the
// next Plan places it first, evicting if it must. A demand lasts
// Config.DemandTTL from its last renewal, or until an executor holds the
// model.
func (p *Planner) Demand(now time.Time, model string) { p.demand[model] = now }

// Demanded reports whether model has a live demand.
func (p *Planner) Demanded(now time.Time, model string) bool {
	at, ok := p.demand[model]
	return ok && now.Sub(at) < p.cfg.DemandTTL
}

// Footprint is what the planner counts model to take: the largest
// footprint measured, else the hint, else Config.DefaultFootprint.
func (p *Planner) Footprint(model string) uint64 {
	if f := p.footprints[model]; f > 0 {
		return f
	}
	if h := p.models[model].FootprintHint; h > 0 {
		return h
	}
	return p.cfg.DefaultFootprint
}

// RememberFootprint seeds a measured footprint (a controller taking over
// reads them back from its store).
func (p *Planner) RememberFootprint(model string, n uint64) {
	if n > p.footprints[model] {
		p.footprints[model] = n
	}
}

// Footprints returns the measured footprints, by model.
func (p *Planner) Footprints() map[string]uint64 {
	return maps.Clone(p.footprints)
}

// GPUFootprint is what the planner counts model to take of an executor's
// GPU memory: the largest GPU footprint measured, else the hint, else 0
// (a model that uses no GPU memory takes no GPU room).
func (p *Planner) GPUFootprint(model string) uint64 {
	if f := p.gpuFootprints[model]; f > 0 {
		return f
	}
	return p.models[model].GPUFootprintHint
}

// RememberGPUFootprint seeds a measured GPU footprint (a controller taking
// over reads them back from its store).
func (p *Planner) RememberGPUFootprint(model string, n uint64) {
	if n > p.gpuFootprints[model] {
		p.gpuFootprints[model] = n
	}
}

// GPUFootprints returns the measured GPU footprints, by model.
func (p *Planner) GPUFootprints() map[string]uint64 {
	return maps.Clone(p.gpuFootprints)
}

// size is what the planner counts model to take: host bytes and GPU
// bytes.
func (p *Planner) size(model string) size {
	return size{slots: p.slots(model), bytes: p.Footprint(model), gpu: p.GPUFootprint(model)}
}

// slots is the model slots model takes: none for an ensemble, which holds
// no instance (its executor only announces it), else one.
func (p *Planner) slots(model string) int {
	if p.models[model].Ensemble {
		return 0
	}
	return 1
}

// Done records the outcome of a decision performed: a failed load is not
// tried on that executor again for Config.RetryAfter; a successful one
// counts as under way until the executor's report shows it (Observe).
func (p *Planner) Done(now time.Time, d Decision, err error) {
	k := opKey{d.Model, d.Executor}
	if err != nil {
		delete(p.ops, k)
		if d.Action == Load {
			p.failed[k] = now
		}
	}
}

// Under returns the actions decided whose outcome is not known yet.
func (p *Planner) Under() int { return len(p.ops) }

// size is what a model takes on an executor: footprint bytes, and bytes
// of its GPU memory (0 for a model that uses none).
type size struct {
	slots      int
	bytes, gpu uint64
}

// holder is a model on an executor during planning.
type holder struct {
	slots     int
	footprint uint64
	gpu       uint64
	lastUse   time.Time
	inflight  int
	settled   bool // ready and no action under way
}

type execState struct {
	e     *Executor
	slots int // model slots held
	bytes uint64
	gpu   uint64 // GPU footprints held
	held  map[string]*holder
	repo  map[string]bool
}

// gpuBound is the GPU memory that bounds s: 0 (no bound) on an executor
// without a GPU, where a model of KIND_GPU is not placed at all and any
// other uses no GPU memory, or whose GPUs' memory is not known.
func (s *execState) gpuBound() uint64 {
	if !s.e.GPU {
		return 0
	}
	return s.e.GPUMemory
}

// short says which of s's dimensions lack room for f: slots, bytes, GPU
// bytes. A model without a GPU footprint is never short of GPU memory,
// even on an executor whose GPUs hold more than thought.
func (s *execState) short(f size) (slots, bytes, gpu bool) {
	c := s.e.Capacity
	g := s.gpuBound()
	return c.Slots > 0 && f.slots > 0 && s.slots+f.slots > c.Slots,
		c.Bytes > 0 && s.bytes+f.bytes > c.Bytes,
		g > 0 && f.gpu > 0 && s.gpu+f.gpu > g
}

func (s *execState) fits(f size) bool {
	slots, bytes, gpu := s.short(f)
	return !slots && !bytes && !gpu
}

// relieves reports whether evicting h gives s room it lacks for f: a
// victim that frees nothing short (a CPU model when GPU memory is what
// lacks) is not worth evicting.
func (s *execState) relieves(h *holder, f size) bool {
	slots, bytes, gpu := s.short(f)
	return slots && h.slots > 0 || bytes && h.footprint > 0 || gpu && h.gpu > 0
}

// free is how much room s leaves after taking f, for best fit: slots,
// bytes and GPU bytes; unbounded dimensions count as all the room there
// is, and so does GPU memory for a model that takes none.
func (s *execState) free(f size) (int, uint64, uint64) {
	c := s.e.Capacity
	slots, bytes, gpu := int(^uint(0)>>1), ^uint64(0), ^uint64(0)
	if c.Slots > 0 {
		slots = c.Slots - s.slots - f.slots
	}
	if c.Bytes > 0 {
		bytes = c.Bytes - s.bytes - f.bytes
	}
	if g := s.gpuBound(); g > 0 && f.gpu > 0 {
		gpu = g - s.gpu - f.gpu
	}
	return slots, bytes, gpu
}

func (s *execState) add(model string, f size, now time.Time) {
	s.held[model] = &holder{slots: f.slots, footprint: f.bytes, gpu: f.gpu, lastUse: now}
	s.slots += f.slots
	s.bytes += f.bytes
	s.gpu += f.gpu
}

func (s *execState) remove(model string) {
	if h := s.held[model]; h != nil {
		s.slots -= min(h.slots, s.slots)
		s.bytes -= min(h.footprint, s.bytes)
		s.gpu -= min(h.gpu, s.gpu)
		delete(s.held, model)
	}
}

// Plan decides what to load and unload now.
func (p *Planner) Plan(now time.Time) Plan {
	for k, o := range p.ops {
		if now.Sub(o.at) >= p.cfg.ActionTimeout {
			delete(p.ops, k)
		}
	}
	for k, at := range p.failed {
		if now.Sub(at) >= p.cfg.RetryAfter {
			delete(p.failed, k)
		}
	}
	for m, at := range p.demand {
		if now.Sub(at) >= p.cfg.DemandTTL {
			delete(p.demand, m)
		}
	}

	states := p.states(now)
	ids := make([]string, 0, len(states))
	for id := range states {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// A draining executor's replicas do not count: it is going away, so
	// its models are placed elsewhere while it finishes what it has.
	replicas := func(model string) []string {
		var out []string
		for _, id := range ids {
			if states[id].held[model] != nil && !states[id].e.Draining {
				out = append(out, id)
			}
		}
		return out
	}

	var plan Plan
	decide := func(d Decision) {
		plan.Actions = append(plan.Actions, d)
		p.ops[opKey{d.Model, d.Executor}] = op{action: d.Action, at: now}
		s := states[d.Executor]
		if d.Action == Load {
			s.add(d.Model, size{slots: p.slots(d.Model), bytes: d.Footprint, gpu: d.GPUFootprint}, now)
		} else {
			s.remove(d.Model)
		}
	}

	// Models no longer served, and replicas beyond max_replicas, least
	// recently used first.
	for _, id := range ids {
		s := states[id]
		for _, name := range sortedKeys(s.held) {
			if _, ok := p.models[name]; !ok && s.held[name].settled && s.held[name].inflight == 0 {
				decide(Decision{Action: Unload, Model: name, Executor: id, Reason: NotServed, Footprint: s.held[name].footprint, GPUFootprint: s.held[name].gpu})
			}
		}
	}
	for _, m := range p.Models() {
		maxR := cmp.Or(m.MaxReplicas, p.cfg.MaxReplicas)
		if maxR == 0 {
			continue
		}
		have := replicas(m.Name)
		if len(have) <= maxR {
			continue
		}
		var spare []string
		for _, id := range have {
			if h := states[id].held[m.Name]; h.settled && h.inflight == 0 && !p.pinnedTo(m.Name, id) {
				spare = append(spare, id)
			}
		}
		slices.SortStableFunc(spare, func(a, b string) int {
			return states[a].held[m.Name].lastUse.Compare(states[b].held[m.Name].lastUse)
		})
		for _, id := range spare[:min(len(spare), len(have)-maxR)] {
			decide(Decision{Action: Unload, Model: m.Name, Executor: id, Reason: AboveMaxReplicas, Footprint: states[id].held[m.Name].footprint, GPUFootprint: states[id].held[m.Name].gpu})
		}
	}

	// Pins: each pinned model on each executor it is pinned to.
	for _, name := range sortedKeys(p.pins) {
		m, served := p.models[name]
		if !served {
			continue
		}
		f := p.size(name)
		for _, id := range p.pins[name] {
			s := states[id]
			if s != nil && s.held[name] != nil {
				continue
			}
			_, failed := p.failed[opKey{name, id}]
			if s == nil || !s.repo[name] || s.e.Draining || (m.GPU && !s.e.GPU) || failed {
				plan.Waiting = append(plan.Waiting, Waiting{Model: name, Replicas: len(replicas(name)), Why: PinnedUnavailable, Demanded: p.Demanded(now, name)})
				continue
			}
			if !s.fits(f) {
				t, victims := p.evictFor(now, []*execState{s}, f)
				if t == nil {
					plan.Waiting = append(plan.Waiting, Waiting{Model: name, Replicas: len(replicas(name)), Why: PinnedNoRoom, Demanded: p.Demanded(now, name)})
					continue
				}
				for _, v := range victims {
					decide(Decision{Action: Unload, Model: v, Executor: id, Reason: Evicted, For: name, Footprint: s.held[v].footprint, GPUFootprint: s.held[v].gpu})
				}
			}
			decide(Decision{Action: Load, Model: name, Executor: id, Reason: PinnedHere, Footprint: f.bytes, GPUFootprint: f.gpu})
		}
	}

	// Models short of min_replicas: those with demand first (oldest
	// demand first), then pinned ones, then by name.
	type need struct {
		m        Model
		demanded bool
		at       time.Time
	}
	var needs []need
	for _, m := range p.Models() {
		minR := cmp.Or(m.MinReplicas, p.cfg.MinReplicas)
		if maxR := cmp.Or(m.MaxReplicas, p.cfg.MaxReplicas); maxR > 0 {
			minR = min(minR, maxR)
		}
		if len(replicas(m.Name)) >= minR {
			continue
		}
		n := need{m: m, demanded: p.Demanded(now, m.Name)}
		n.at = p.demand[m.Name]
		needs = append(needs, n)
	}
	slices.SortStableFunc(needs, func(a, b need) int {
		switch {
		case a.demanded != b.demanded:
			if a.demanded {
				return -1
			}
			return 1
		case a.demanded:
			return a.at.Compare(b.at)
		case a.m.Pinned != b.m.Pinned:
			if a.m.Pinned {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.m.Name, b.m.Name)
	})
	for _, n := range needs {
		m := n.m
		f := p.size(m.Name)
		minR := cmp.Or(m.MinReplicas, p.cfg.MinReplicas)
		if maxR := cmp.Or(m.MaxReplicas, p.cfg.MaxReplicas); maxR > 0 {
			minR = min(minR, maxR)
		}
		for {
			have := replicas(m.Name)
			if len(have) >= minR {
				break
			}
			nodes := map[string]bool{}
			for _, id := range have {
				nodes[states[id].e.Node] = true
			}
			var cands []*execState
			why := NoExecutor
			for _, id := range ids {
				s := states[id]
				if !s.repo[m.Name] || s.held[m.Name] != nil || s.e.Draining {
					continue
				}
				if _, failed := p.failed[opKey{m.Name, id}]; failed {
					continue
				}
				if m.GPU && !s.e.GPU {
					why = NoGPUExecutor
					continue
				}
				cands = append(cands, s)
			}
			if len(cands) == 0 {
				plan.Waiting = append(plan.Waiting, Waiting{Model: m.Name, Replicas: len(have), Why: why, Demanded: n.demanded})
				break
			}
			reason := BelowMinReplicas
			if n.demanded && len(have) == 0 {
				reason = OnDemand
			}
			if s := bestFit(cands, nodes, f); s != nil {
				decide(Decision{Action: Load, Model: m.Name, Executor: s.e.ID, Reason: reason, Footprint: f.bytes, GPUFootprint: f.gpu})
				continue
			}
			if reason != OnDemand {
				why := NoCapacity
				if f.gpu > 0 && slices.ContainsFunc(cands, func(s *execState) bool { return s.fits(size{slots: f.slots, bytes: f.bytes}) }) {
					why = NoGPUMemory
				}
				plan.Waiting = append(plan.Waiting, Waiting{Model: m.Name, Replicas: len(have), Why: why, Demanded: n.demanded})
				break
			}
			s, victims := p.evictFor(now, cands, f)
			if s == nil {
				plan.Waiting = append(plan.Waiting, Waiting{Model: m.Name, Replicas: len(have), Why: NothingEvictable, Demanded: true})
				break
			}
			for _, v := range victims {
				decide(Decision{Action: Unload, Model: v, Executor: s.e.ID, Reason: Evicted, For: m.Name, Footprint: s.held[v].footprint, GPUFootprint: s.held[v].gpu})
			}
			decide(Decision{Action: Load, Model: m.Name, Executor: s.e.ID, Reason: OnDemand, Footprint: f.bytes, GPUFootprint: f.gpu})
		}
	}
	if p.cfg.ScaleUpPending > 0 || p.cfg.ScaleUpQueueTime > 0 {
		p.scale(now, ids, states, replicas, decide)
	}
	return plan
}

// scale adds a replica to each model whose requests in flight per replica
// stayed at or above Config.ScaleUpPending, or whose mean queue time stayed
// at or above Config.ScaleUpQueueTime, for Config.ScaleUpAfter (in free
// capacity only: a busy model takes no room from another), and unloads
// replicas beyond min_replicas idle for Config.ScaleDownAfter, least
// recently used first.
func (p *Planner) scale(now time.Time, ids []string, states map[string]*execState, replicas func(string) []string, decide func(Decision)) {
	for name := range p.hot {
		if _, ok := p.models[name]; !ok {
			delete(p.hot, name)
		}
	}
	for _, m := range p.Models() {
		have := replicas(m.Name)
		minR := cmp.Or(m.MinReplicas, p.cfg.MinReplicas)
		maxR := cmp.Or(m.MaxReplicas, p.cfg.MaxReplicas)
		inflight, underway := 0, false
		for _, id := range have {
			h := states[id].held[m.Name]
			inflight += h.inflight
			underway = underway || !h.settled
		}
		pending := p.cfg.ScaleUpPending > 0 && float64(inflight) >= p.cfg.ScaleUpPending*float64(len(have))
		// Queue time: from the requests that left a queue between the
		// replicas' last two reports; with requests in flight and none of
		// them out of a queue since, the last verdict stands.
		queued, unknown := false, false
		if p.cfg.ScaleUpQueueTime > 0 {
			q, ok := p.queueTime(m.Name, have)
			queued = ok && q >= p.cfg.ScaleUpQueueTime
			unknown = !ok && inflight > 0
		}
		reason := ScaledUp
		if !pending {
			reason = ScaledUpQueue
		}
		_, wasHot := p.hot[m.Name]
		if len(have) == 0 || !pending && !queued && !(unknown && wasHot) {
			delete(p.hot, m.Name)
		} else if since, ok := p.hot[m.Name]; !ok {
			p.hot[m.Name] = now
		} else if now.Sub(since) >= p.cfg.ScaleUpAfter && !underway && (maxR == 0 || len(have) < maxR) {
			nodes := map[string]bool{}
			for _, id := range have {
				nodes[states[id].e.Node] = true
			}
			var cands []*execState
			for _, id := range ids {
				s := states[id]
				if _, failed := p.failed[opKey{m.Name, id}]; !failed && s.repo[m.Name] && s.held[m.Name] == nil && !s.e.Draining && (!m.GPU || s.e.GPU) {
					cands = append(cands, s)
				}
			}
			f := p.size(m.Name)
			if s := bestFit(cands, nodes, f); s != nil {
				decide(Decision{Action: Load, Model: m.Name, Executor: s.e.ID, Reason: reason, Footprint: f.bytes, GPUFootprint: f.gpu})
				p.hot[m.Name] = now // the next replica only after another ScaleUpAfter of load
				continue
			}
		}
		if len(have) <= minR || m.Sequence {
			continue // a sequence model's replicas may hold live sequences
		}
		var idle []string
		for _, id := range have {
			if h := states[id].held[m.Name]; h.settled && h.inflight == 0 && now.Sub(h.lastUse) >= p.cfg.ScaleDownAfter && !p.pinnedTo(m.Name, id) {
				idle = append(idle, id)
			}
		}
		slices.SortStableFunc(idle, func(a, b string) int {
			return states[a].held[m.Name].lastUse.Compare(states[b].held[m.Name].lastUse)
		})
		for _, id := range idle[:min(len(idle), len(have)-minR)] {
			decide(Decision{Action: Unload, Model: m.Name, Executor: id, Reason: ScaledDown, Footprint: states[id].held[m.Name].footprint, GPUFootprint: states[id].held[m.Name].gpu})
		}
	}
}

// states is every executor's holdings with the actions under way counted
// as done.
func (p *Planner) states(now time.Time) map[string]*execState {
	out := make(map[string]*execState, len(p.executors))
	for id, e := range p.executors {
		s := &execState{e: e, held: map[string]*holder{}, repo: map[string]bool{}}
		for _, r := range e.Repository {
			s.repo[r] = true
		}
		for _, h := range e.Holds {
			if h.State == Failed {
				continue
			}
			f := h.Footprint
			if f == 0 {
				f = p.Footprint(h.Model)
			}
			g := h.GPUFootprint
			if g == 0 {
				g = p.GPUFootprint(h.Model)
			}
			n := p.slots(h.Model)
			s.held[h.Model] = &holder{slots: n, footprint: f, gpu: g, lastUse: h.LastUse, inflight: h.Inflight, settled: h.State == Ready}
			s.slots += n
			s.bytes += f
			s.gpu += g
		}
		out[id] = s
	}
	for k, o := range p.ops {
		s := out[k.executor]
		if s == nil {
			continue
		}
		if o.action == Unload {
			s.remove(k.model)
		} else if h := s.held[k.model]; h != nil {
			h.settled = false
		} else {
			s.add(k.model, p.size(k.model), o.at)
			s.held[k.model].settled = false
		}
	}
	return out
}

// bestFit picks, among the executors with room for f, one on a node
// without a replica if any, then the one left with the least room (GPU
// memory first for a model that takes some, as it is the scarcer; then
// slots, then bytes), then by id.
func bestFit(cands []*execState, nodes map[string]bool, f size) *execState {
	var best *execState
	better := func(a, b *execState) bool {
		if an, bn := nodes[a.e.Node], nodes[b.e.Node]; an != bn {
			return !an
		}
		as, ab, ag := a.free(f)
		bs, bb, bg := b.free(f)
		if ag != bg {
			return ag < bg
		}
		if as != bs {
			return as < bs
		}
		if ab != bb {
			return ab < bb
		}
		return a.e.ID < b.e.ID
	}
	for _, s := range cands {
		if s.fits(f) && (best == nil || better(s, best)) {
			best = s
		}
	}
	return best
}

// evictFor finds the executor whose least recently used evictable models
// make room for f (slots, bytes and GPU bytes alike; a model that frees
// nothing lacking is passed over), preferring the one whose victim was
// used longest ago, and returns it with the victims, least recently used
// first.
func (p *Planner) evictFor(now time.Time, cands []*execState, f size) (*execState, []string) {
	var best *execState
	var bestVictims []string
	var bestAge time.Time
	for _, s := range cands {
		var evictable []string
		for name, h := range s.held {
			m := p.models[name]
			if !h.settled || h.inflight > 0 || m.Pinned || p.pinnedTo(name, s.e.ID) || m.Sequence || p.Demanded(now, name) ||
				(p.cfg.MinResidency > 0 && now.Sub(h.lastUse) < p.cfg.MinResidency) {
				continue
			}
			evictable = append(evictable, name)
		}
		slices.SortFunc(evictable, func(a, b string) int {
			if c := s.held[a].lastUse.Compare(s.held[b].lastUse); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		trial := &execState{e: s.e, slots: s.slots, bytes: s.bytes, gpu: s.gpu, held: map[string]*holder{}}
		for k, v := range s.held {
			trial.held[k] = v
		}
		var victims []string
		for _, v := range evictable {
			if trial.fits(f) {
				break
			}
			if !trial.relieves(trial.held[v], f) {
				continue
			}
			trial.remove(v)
			victims = append(victims, v)
		}
		if !trial.fits(f) || len(victims) == 0 {
			continue
		}
		age := s.held[victims[0]].lastUse
		if best == nil || age.Before(bestAge) {
			best, bestVictims, bestAge = s, victims, age
		}
	}
	return best, bestVictims
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
