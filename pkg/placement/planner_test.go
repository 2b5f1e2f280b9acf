package placement

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1000, 0)

// cluster simulates executors that do what the planner decides.
type cluster struct {
	t        *testing.T
	p        *Planner
	execs    map[string]*Executor
	measured map[string]uint64 // footprint an executor measures at load
	gpu      map[string]uint64 // GPU footprint an executor measures at load
	failing  map[opKey]bool
}

func newCluster(t *testing.T, cfg Config, models ...Model) *cluster {
	c := &cluster{t: t, p: NewPlanner(cfg), execs: map[string]*Executor{}, measured: map[string]uint64{}, gpu: map[string]uint64{}, failing: map[opKey]bool{}}
	c.p.SetModels(models)
	return c
}

func (c *cluster) observe(now time.Time, id string) {
	e := c.execs[id]
	e.Revision++
	c.p.Observe(now, *e)
}

func (c *cluster) holding(id, model string) *Holding {
	for i := range c.execs[id].Holds {
		if c.execs[id].Holds[i].Model == model {
			return &c.execs[id].Holds[i]
		}
	}
	c.t.Fatalf("%s holds no %s", id, model)
	return nil
}

// apply performs a plan's actions as an executor would.
func (c *cluster) apply(now time.Time, plan Plan) {
	for _, d := range plan.Actions {
		e := c.execs[d.Executor]
		if e == nil {
			c.p.Done(now, d, errors.New("executor gone"))
			continue
		}
		switch {
		case d.Action == Unload:
			e.Holds = slices.DeleteFunc(e.Holds, func(h Holding) bool { return h.Model == d.Model })
			c.observe(now, d.Executor)
			c.p.Done(now, d, nil)
		case c.failing[opKey{d.Model, d.Executor}]:
			c.p.Done(now, d, errors.New("load failed"))
		default:
			e.Holds = append(e.Holds, Holding{Model: d.Model, State: Ready, Footprint: c.measured[d.Model], GPUFootprint: c.gpu[d.Model], LastUse: now})
			c.observe(now, d.Executor)
			c.p.Done(now, d, nil)
		}
	}
}

// planString writes a plan compactly: "+m@e/why" loads, "-m@e/why"
// unloads ("lru>x": evicted for x), "?m:why" waiting models.
func planString(plan Plan) string {
	short := map[Reason]string{BelowMinReplicas: "min", OnDemand: "demand", Evicted: "lru", AboveMaxReplicas: "max", NotServed: "gone",
		ScaledUp: "up", ScaledDown: "down", PinnedHere: "pin", ScaledUpQueue: "queue"}
	waits := map[Why]string{NoExecutor: "none", NoGPUExecutor: "gpu", NoCapacity: "full", NothingEvictable: "stuck",
		PinnedUnavailable: "pin-unavailable", PinnedNoRoom: "pin-full", NoGPUMemory: "gpu-full"}
	var parts []string
	for _, d := range plan.Actions {
		s := "+"
		if d.Action == Unload {
			s = "-"
		}
		s += d.Model + "@" + d.Executor + "/" + short[d.Reason]
		if d.For != "" {
			s += ">" + d.For
		}
		parts = append(parts, s)
	}
	for _, w := range plan.Waiting {
		parts = append(parts, "?"+w.Model+":"+waits[w.Why])
	}
	return strings.Join(parts, " ")
}

// step is one event, at t0 plus at seconds:
//
//   - "exec" "ID NODE CAPACITY REPO [gpu] [gpu=BYTES] [drain]": an
//     executor reports (CAPACITY as --model-capacity, "-" for none; REPO
//     the models of its repository, comma-separated; gpu=BYTES a GPU and
//     its memory);
//   - "hold" "ID MODEL": ID loaded MODEL by itself;
//   - "use" "ID MODEL": a request to MODEL on ID now;
//   - "inflight" "ID MODEL N": N requests in flight;
//   - "queued" "ID MODEL MS N": N more requests left MODEL's queue on ID,
//     after MS milliseconds each;
//   - "measure" "MODEL BYTES [GPUBYTES]": what an executor measures when it
//     loads MODEL;
//   - "fail" "MODEL ID": loads of MODEL on ID fail;
//   - "demand" "MODEL"; "gone" "ID";
//   - "pins" "MODEL=ID,ID MODEL=ID ...": the operator's pins, all of them
//     ("" for none);
//   - "plan": want is planString's; the actions are then performed;
//   - "plan-hold": the same, but nothing is performed (outcomes unknown).
type step struct {
	at   int
	do   string
	arg  string
	want string
}

func run(t *testing.T, c *cluster, steps []step) {
	t.Helper()
	for i, s := range steps {
		now := t0.Add(time.Duration(s.at) * time.Second)
		f := strings.Fields(s.arg)
		switch s.do {
		case "exec":
			e := &Executor{ID: f[0], Node: f[1], Generation: 1}
			if f[2] != "-" {
				capa, err := ParseCapacity(f[2])
				if err != nil {
					t.Fatal(err)
				}
				e.Capacity = capa
			}
			e.Repository = strings.Split(f[3], ",")
			e.GPU = slices.Contains(f, "gpu")
			for _, x := range f[4:] {
				if v, ok := strings.CutPrefix(x, "gpu="); ok {
					n, err := ParseBytes(v)
					if err != nil {
						t.Fatal(err)
					}
					e.GPU, e.GPUMemory = true, n
				}
			}
			e.Draining = slices.Contains(f, "drain")
			if old := c.execs[f[0]]; old != nil {
				e.Holds, e.Revision = old.Holds, old.Revision
			}
			c.execs[f[0]] = e
			c.observe(now, f[0])
		case "hold":
			c.execs[f[0]].Holds = append(c.execs[f[0]].Holds, Holding{Model: f[1], State: Ready, LastUse: now})
			c.observe(now, f[0])
		case "use":
			c.holding(f[0], f[1]).LastUse = now
			c.observe(now, f[0])
		case "inflight":
			n, _ := strconv.Atoi(f[2])
			c.holding(f[0], f[1]).Inflight = n
			c.observe(now, f[0])
		case "queued":
			ms, _ := strconv.Atoi(f[2])
			n, _ := strconv.Atoi(f[3])
			h := c.holding(f[0], f[1])
			h.QueueNs += uint64(n) * uint64(ms) * uint64(time.Millisecond)
			h.QueueCount += uint64(n)
			c.observe(now, f[0])
		case "measure":
			n, err := ParseBytes(f[1])
			if err != nil {
				t.Fatal(err)
			}
			c.measured[f[0]] = n
			if len(f) > 2 {
				if c.gpu[f[0]], err = ParseBytes(f[2]); err != nil {
					t.Fatal(err)
				}
			}
		case "fail":
			c.failing[opKey{f[0], f[1]}] = true
		case "demand":
			c.p.Demand(now, f[0])
		case "gone":
			delete(c.execs, f[0])
			c.p.Gone(now, f[0])
		case "pins":
			pins := map[string][]string{}
			for _, kv := range f {
				m, ids, _ := strings.Cut(kv, "=")
				pins[m] = strings.Split(ids, ",")
			}
			c.p.SetPins(pins)
		case "plan", "plan-hold":
			plan := c.p.Plan(now)
			if got := planString(plan); got != s.want {
				t.Fatalf("step %d (%ds %s): plan = %q, want %q", i, s.at, s.do, got, s.want)
			}
			if s.do == "plan" {
				c.apply(now, plan)
			}
		default:
			t.Fatalf("step %d: unknown event %q", i, s.do)
		}
	}
}

func names(prefix string, n int) []Model {
	var out []Model
	for i := range n {
		out = append(out, Model{Name: fmt.Sprintf("%s%d", prefix, i)})
	}
	return out
}

const ten = "m0,m1,m2,m3,m4,m5,m6,m7,m8,m9"

func TestPlanner(t *testing.T) {
	gpuModel := Model{Name: "g", GPU: true}
	for _, tc := range []struct {
		name   string
		cfg    Config
		models []Model
		steps  []step
	}{{
		name:   "packs by slots, spreads over nodes, leaves the rest waiting without demand",
		models: names("m", 10),
		steps: []step{
			{0, "exec", "e1 n1 slots=3 " + ten, ""},
			{0, "exec", "e2 n2 slots=3 " + ten, ""},
			{0, "exec", "e3 n3 slots=3 " + ten, ""},
			// Best fit: the executor left with the least room, so one
			// fills before the next is used.
			{0, "plan", "", "+m0@e1/min +m1@e1/min +m2@e1/min +m3@e2/min +m4@e2/min +m5@e2/min +m6@e3/min +m7@e3/min +m8@e3/min ?m9:full"},
			{1, "plan", "", "?m9:full"},
		},
	}, {
		name:   "on demand: the least recently used model without traffic is evicted",
		models: names("m", 4),
		steps: []step{
			{0, "exec", "e1 n1 slots=3 m0,m1,m2,m3", ""},
			{0, "plan", "", "+m0@e1/min +m1@e1/min +m2@e1/min ?m3:full"},
			{5, "use", "e1 m0", ""},
			{6, "use", "e1 m2", ""},
			{7, "inflight", "e1 m1 1", ""}, // m1 is the oldest, but busy
			{8, "demand", "m3", ""},
			{8, "plan", "", "-m0@e1/lru>m3 +m3@e1/demand"},
			// Placed: the demand is over; m0 waits for room.
			{9, "plan", "", "?m0:full"},
			{10, "inflight", "e1 m1 0", ""},
			{11, "demand", "m0", ""},
			{11, "plan", "", "-m1@e1/lru>m0 +m0@e1/demand"},
		},
	}, {
		name:   "an ensemble takes no slot: placed beside full executors, never evicted for room",
		models: []Model{{Name: "ens", Ensemble: true}, {Name: "m0"}, {Name: "m1"}, {Name: "m2"}},
		steps: []step{
			{0, "exec", "e1 n1 slots=2 ens,m0,m1,m2", ""},
			{0, "plan", "", "+ens@e1/min +m0@e1/min +m1@e1/min ?m2:full"},
			{1, "use", "e1 m1", ""},
			{2, "demand", "m2", ""},
			// The ensemble, least recently used, frees no slot: m0 goes.
			{2, "plan", "", "-m0@e1/lru>m2 +m2@e1/demand"},
		},
	}, {
		name:   "never evicts a pinned, sequence or demanded model, nor one with requests in flight",
		models: []Model{{Name: "pin", Pinned: true}, {Name: "seq", Sequence: true}, {Name: "busy"}, {Name: "x"}},
		steps: []step{
			{0, "exec", "e1 n1 slots=3 pin,seq,busy,x", ""},
			{0, "plan", "", "+pin@e1/min +busy@e1/min +seq@e1/min ?x:full"},
			{1, "inflight", "e1 busy 2", ""},
			{2, "demand", "x", ""},
			{2, "plan", "", "?x:stuck"},
			{3, "inflight", "e1 busy 0", ""},
			{4, "plan", "", "-busy@e1/lru>x +x@e1/demand"},
			{5, "plan", "", "?busy:full"},
		},
	}, {
		name:   "a pin loads the model on its executor, evicting there, and it is never evicted from it",
		models: names("m", 5),
		steps: []step{
			{0, "exec", "e1 n1 slots=2 m0,m1,m2,m3,m4", ""},
			{0, "exec", "e2 n2 slots=2 m0,m1,m2,m3,m4", ""},
			{0, "plan", "", "+m0@e1/min +m1@e1/min +m2@e2/min +m3@e2/min ?m4:full"},
			{1, "use", "e1 m1", ""},
			{1, "pins", "m3=e1", ""},
			// e1 is full: its least recently used model makes room; m3
			// keeps its replica on e2 too.
			{1, "plan", "", "-m0@e1/lru>m3 +m3@e1/pin ?m0:full ?m4:full"},
			{2, "use", "e2 m2", ""},
			{2, "use", "e2 m3", ""},
			{3, "use", "e1 m1", ""},
			// m3 on e1 is the least recently used model anywhere, but
			// pinned there: the demand evicts elsewhere.
			{4, "demand", "m4", ""},
			{4, "plan", "", "-m2@e2/lru>m4 +m4@e2/demand ?m0:full"},
			{5, "plan", "", "?m0:full ?m2:full"},
			// Unpinned, it is the first to go.
			{6, "pins", "", ""},
			{7, "use", "e1 m1", ""},
			{7, "use", "e2 m4", ""},
			{8, "demand", "m0", ""},
			{8, "plan", "", "-m3@e1/lru>m0 +m0@e1/demand ?m2:full"},
		},
	}, {
		name:   "a pin waits for its executor, and for room there; pinned replicas stay above max_replicas and idle",
		cfg:    Config{ScaleUpPending: 4, ScaleDownAfter: 10 * time.Second},
		models: []Model{{Name: "a", MaxReplicas: 1}, {Name: "b"}, {Name: "busy"}},
		steps: []step{
			{0, "exec", "e1 n1 slots=2 a,b,busy", ""},
			{0, "plan", "", "+a@e1/min +b@e1/min ?busy:full"},
			{1, "pins", "a=e1,e2 busy=e1", ""},
			{1, "inflight", "e1 b 1", ""},
			// e2 is not there; e1 has nothing evictable for busy (a is
			// pinned there, b has a request in flight).
			{1, "plan", "", "?a:pin-unavailable ?busy:pin-full ?busy:full"},
			{2, "exec", "e2 n2 slots=2 a,b,busy", ""},
			// a goes on e2 although its max_replicas is 1; busy, which
			// no executor had room for, takes e2's last slot meanwhile.
			{2, "plan", "", "+a@e2/pin +busy@e2/min ?busy:pin-full"},
			{2, "inflight", "e1 b 0", ""},
			{3, "plan", "", "-b@e1/lru>busy +busy@e1/pin ?b:full"},
			// Idle long past ScaleDownAfter: the unpinned replica of busy
			// goes, the pinned ones stay (a above its max_replicas).
			{60, "plan", "", "-busy@e2/down ?b:full"},
			// A draining executor keeps its pinned model until it goes;
			// then the pin waits for it.
			{61, "exec", "e2 n2 slots=2 a,b,busy drain", ""},
			{61, "plan", "", "?b:full"},
			{62, "gone", "e2", ""},
			{62, "plan", "", "?a:pin-unavailable ?b:full"},
		},
	}, {
		name:   "the eviction goes to the executor whose victim was used longest ago",
		models: names("m", 5),
		steps: []step{
			{0, "exec", "e1 n1 slots=2 m0,m1,m2,m3,m4", ""},
			{0, "exec", "e2 n2 slots=2 m0,m1,m2,m3,m4", ""},
			{0, "plan", "", "+m0@e1/min +m1@e1/min +m2@e2/min +m3@e2/min ?m4:full"},
			{3, "use", "e1 m0", ""},
			{3, "use", "e1 m1", ""},
			{4, "use", "e2 m3", ""},
			{5, "demand", "m4", ""},
			{5, "plan", "", "-m2@e2/lru>m4 +m4@e2/demand"},
			// The victim waits for room, or for a request of its own.
			{6, "plan", "", "?m2:full"},
		},
	}, {
		name:   "packs by bytes with measured footprints, remembered after unload",
		models: []Model{{Name: "big", FootprintHint: 1 << 30}, {Name: "a"}, {Name: "b"}, {Name: "c"}},
		cfg:    Config{DefaultFootprint: 1 << 20},
		steps: []step{
			{0, "measure", "big 3GiB", ""},
			{0, "exec", "e1 n1 4GiB big,a,b,c", ""},
			{0, "exec", "e2 n2 2GiB big,a,b,c", ""},
			// The hint (1GiB) fits e2 best; the load measures 3GiB.
			{0, "plan", "", "+a@e2/min +b@e2/min +big@e2/min +c@e2/min"},
		},
	}, {
		name:   "a measured footprint larger than the hint moves the next placement",
		models: []Model{{Name: "big", FootprintHint: 1 << 30}, {Name: "small", FootprintHint: 1 << 30}},
		steps: []step{
			{0, "measure", "big 3GiB", ""},
			{0, "exec", "e1 n1 4GiB big", ""},
			{0, "plan", "", "+big@e1/min ?small:none"},
			{1, "exec", "e2 n2 2GiB big,small", ""},
			{1, "gone", "e1", ""},
			// 3GiB measured on e1 no longer fits e2's 2GiB.
			{2, "plan", "", "+small@e2/min ?big:full"},
		},
	}, {
		name:   "GPU models only on executors with a GPU",
		models: []Model{gpuModel, {Name: "c"}},
		steps: []step{
			{0, "exec", "e1 n1 slots=4 g,c", ""},
			{0, "plan", "", "+c@e1/min ?g:gpu"},
			{1, "exec", "e2 n2 slots=4 g,c gpu", ""},
			{1, "plan", "", "+g@e2/min"},
		},
	}, {
		name: "GPU models pack by GPU memory; a CPU model takes no GPU room",
		models: []Model{{Name: "c"}, {Name: "g1", GPU: true, GPUFootprintHint: 5 << 30}, {Name: "g2", GPU: true, GPUFootprintHint: 5 << 30},
			{Name: "g3", GPU: true, GPUFootprintHint: 5 << 30}, {Name: "g4", GPU: true, GPUFootprintHint: 5 << 30}, {Name: "z"}},
		steps: []step{
			{0, "exec", "e1 n1 slots=4 c,g1,g2,g3,g4,z gpu=12GiB", ""},
			{0, "exec", "e2 n2 slots=4 c,g1,g2,g3,g4,z gpu=8GiB", ""},
			// Best fit by GPU memory: g1 leaves 3GiB on e2, 7GiB on e1;
			// then e2 has no GPU room for 5GiB more and e1 takes two; g4
			// finds slots but no GPU memory. z, a CPU model, still takes
			// e1's last slot, where 2GiB of GPU memory are left.
			{0, "plan", "", "+c@e1/min +g1@e2/min +g2@e1/min +g3@e1/min +z@e1/min ?g4:gpu-full"},
			{1, "plan", "", "?g4:gpu-full"},
		},
	}, {
		name:   "a measured GPU footprint is remembered and moves the next placement",
		models: []Model{{Name: "g", GPU: true}},
		steps: []step{
			{0, "measure", "g 1MiB 6GiB", ""},
			{0, "exec", "e1 n1 slots=4 g gpu=8GiB", ""},
			{0, "plan", "", "+g@e1/min"},
			{1, "gone", "e1", ""},
			// e2 fits best by slots, but has 4GiB of GPU memory.
			{2, "exec", "e2 n2 slots=1 g gpu=4GiB", ""},
			{2, "exec", "e3 n3 slots=4 g gpu=8GiB", ""},
			{2, "plan", "", "+g@e3/min"},
		},
	}, {
		name:   "on demand, GPU room is made by evicting GPU models; a CPU model evicted would free none",
		models: []Model{{Name: "c"}, {Name: "g1", GPU: true, GPUFootprintHint: 5 << 30}, {Name: "g2", GPU: true, GPUFootprintHint: 5 << 30}},
		steps: []step{
			{0, "exec", "e1 n1 slots=4 c,g1,g2 gpu=8GiB", ""},
			{0, "plan", "", "+c@e1/min +g1@e1/min ?g2:gpu-full"},
			// c is the least recently used, but holds no GPU memory.
			{1, "use", "e1 g1", ""},
			{2, "demand", "g2", ""},
			{2, "plan", "", "-g1@e1/lru>g2 +g2@e1/demand"},
			{3, "plan", "", "?g1:gpu-full"},
		},
	}, {
		name:   "eviction frees slots and GPU memory together",
		models: []Model{{Name: "a", GPU: true, GPUFootprintHint: 2 << 30}, {Name: "b", GPU: true, GPUFootprintHint: 2 << 30}, {Name: "big", GPU: true, GPUFootprintHint: 7 << 30}},
		steps: []step{
			{0, "exec", "e1 n1 slots=2 a,b,big gpu=8GiB", ""},
			{0, "plan", "", "+a@e1/min +b@e1/min ?big:full"},
			{1, "use", "e1 b", ""},
			// One victim frees the slot, but 6GiB of GPU memory is not
			// enough for 7GiB: both go.
			{2, "demand", "big", ""},
			{2, "plan", "", "-a@e1/lru>big -b@e1/lru>big +big@e1/demand"},
		},
	}, {
		name:   "replicas spread across nodes first, within min and max",
		models: []Model{{Name: "r", MinReplicas: 3, MaxReplicas: 3}},
		steps: []step{
			{0, "exec", "a1 nA slots=3 r", ""},
			{0, "exec", "a2 nA slots=1 r", ""},
			{0, "exec", "b1 nB slots=3 r", ""},
			// a2 fits best but nA is taken by then: b1 comes first.
			{0, "plan", "", "+r@a2/min +r@b1/min +r@a1/min"},
			{1, "plan", "", ""},
		},
	}, {
		name:   "a model's parameters override the cluster's replicas; replicas above max are unloaded, least recently used first",
		cfg:    Config{MaxReplicas: 1},
		models: []Model{{Name: "r", MinReplicas: 2, MaxReplicas: 3}, {Name: "one"}},
		steps: []step{
			{0, "exec", "e1 n1 - r,one", ""},
			{0, "exec", "e2 n2 - r,one", ""},
			{0, "exec", "e3 n3 - r,one", ""},
			{0, "plan", "", "+one@e1/min +r@e1/min +r@e2/min"},
			{1, "hold", "e2 one", ""},
			{2, "hold", "e3 one", ""},
			{3, "use", "e1 one", ""},
			{3, "inflight", "e2 one 1", ""},
			// One replica at most (the cluster's default): e2 is the
			// least recently used, but busy, so it is the one kept.
			{4, "plan", "", "-one@e3/max -one@e1/max"},
			{5, "inflight", "e2 one 0", ""},
			{5, "plan", "", ""},
		},
	}, {
		name:   "an executor's loss: its models go where there is room",
		models: names("m", 4),
		steps: []step{
			{0, "exec", "e1 n1 slots=2 m0,m1,m2,m3", ""},
			{0, "exec", "e2 n2 slots=4 m0,m1,m2,m3", ""},
			{0, "plan", "", "+m0@e1/min +m1@e1/min +m2@e2/min +m3@e2/min"},
			{5, "gone", "e1", ""},
			{5, "plan", "", "+m0@e2/min +m1@e2/min"},
		},
	}, {
		name:   "a failed load is not retried on that executor before RetryAfter",
		cfg:    Config{RetryAfter: 10 * time.Second},
		models: []Model{{Name: "m"}},
		steps: []step{
			{0, "fail", "m e1", ""},
			{0, "exec", "e1 n1 slots=3 m", ""},
			{0, "plan", "", "+m@e1/min"},
			{1, "plan", "", "?m:none"},
			{8, "plan", "", "?m:none"},
			{9, "exec", "e2 n2 slots=3 m", ""},
			{9, "plan", "", "+m@e2/min"},
		},
	}, {
		name:   "a load under way counts until its outcome, or until ActionTimeout",
		cfg:    Config{ActionTimeout: 30 * time.Second},
		models: []Model{{Name: "m"}},
		steps: []step{
			{0, "exec", "e1 n1 slots=1 m", ""},
			{0, "plan-hold", "", "+m@e1/min"},
			{10, "plan", "", ""},
			{30, "plan", "", "+m@e1/min"},
		},
	}, {
		name:   "draining executors and models not in an executor's repository",
		models: []Model{{Name: "a"}, {Name: "b"}},
		steps: []step{
			{0, "exec", "e1 n1 slots=3 a,b drain", ""},
			{0, "exec", "e2 n2 slots=3 a", ""},
			{0, "plan", "", "+a@e2/min ?b:none"},
		},
	}, {
		name:   "a demand expires after DemandTTL; min residency protects fresh loads",
		cfg:    Config{DemandTTL: 5 * time.Second, MinResidency: 10 * time.Second},
		models: names("m", 2),
		steps: []step{
			{0, "exec", "e1 n1 slots=1 m0,m1", ""},
			{0, "plan", "", "+m0@e1/min ?m1:full"},
			{1, "demand", "m1", ""},
			{1, "plan", "", "?m1:stuck"},
			{6, "plan", "", "?m1:full"},
			{12, "demand", "m1", ""},
			{12, "plan", "", "-m0@e1/lru>m1 +m1@e1/demand"},
		},
	}, {
		name:   "a draining executor's models are placed elsewhere before it stops",
		cfg:    Config{MaxReplicas: 1},
		models: []Model{{Name: "a"}, {Name: "b"}},
		steps: []step{
			{0, "exec", "e1 n1 slots=3 a,b", ""},
			{0, "plan", "", "+a@e1/min +b@e1/min"},
			{1, "exec", "e2 n2 slots=3 a,b", ""},
			{1, "plan", "", ""},
			// e1 drains: its replicas count for nothing, max_replicas
			// included, and it is not unloaded from under its requests.
			{2, "inflight", "e1 a 3", ""},
			{2, "exec", "e1 n1 slots=3 a,b drain", ""},
			{2, "plan", "", "+a@e2/min +b@e2/min"},
			{3, "plan", "", ""},
		},
	}, {
		name:   "scaling by load is off by default",
		models: []Model{{Name: "m"}},
		steps: []step{
			{0, "exec", "e1 n1 slots=3 m", ""},
			{0, "exec", "e2 n2 slots=3 m", ""},
			{0, "plan", "", "+m@e1/min"},
			{1, "inflight", "e1 m 50", ""},
			{1, "plan", "", ""},
			{100, "plan", "", ""},
		},
	}, {
		name:   "a replica is added while the load lasts, one per window, and idle ones go",
		cfg:    Config{ScaleUpPending: 4, ScaleUpAfter: 10 * time.Second, ScaleDownAfter: time.Minute},
		models: []Model{{Name: "m", MaxReplicas: 3}, {Name: "quiet"}},
		steps: []step{
			{0, "exec", "e1 n1 slots=2 m,quiet", ""},
			{0, "exec", "e2 n2 slots=2 m,quiet", ""},
			{0, "exec", "e3 n3 slots=2 m,quiet", ""},
			{0, "exec", "e4 n4 slots=2 m,quiet", ""},
			{0, "plan", "", "+m@e1/min +quiet@e1/min"},
			// 3 per replica: under the threshold.
			{1, "inflight", "e1 m 3", ""},
			{1, "plan", "", ""},
			// 8: above it, but not yet for ScaleUpAfter.
			{2, "inflight", "e1 m 8", ""},
			{2, "plan", "", ""},
			{11, "plan", "", ""},
			// Spread: a node without a replica, best fit among them.
			{12, "plan", "", "+m@e2/up"},
			// 8 over two replicas is 4 each: still at the threshold; the
			// next replica only after another window.
			{13, "inflight", "e2 m 0", ""},
			{13, "plan", "", ""},
			{22, "plan", "", "+m@e3/up"},
			// max_replicas 3 bounds it.
			{40, "plan", "", ""},
			// The load ends; e1 keeps serving, e2 and e3 go idle and are
			// unloaded once idle for ScaleDownAfter, down to min_replicas,
			// least recently used first.
			{41, "inflight", "e1 m 0", ""},
			{45, "use", "e3 m", ""},
			{70, "use", "e1 m", ""},
			{72, "plan", "", "-m@e2/down"},
			{104, "plan", "", ""},
			{106, "plan", "", "-m@e3/down"},
			{500, "plan", "", ""},
		},
	}, {
		name:   "queue time adds a replica once it stayed above the threshold; a report without dequeued requests keeps the verdict",
		cfg:    Config{ScaleUpQueueTime: 100 * time.Millisecond, ScaleUpAfter: 10 * time.Second, ScaleDownAfter: time.Minute},
		models: []Model{{Name: "m", MaxReplicas: 2}},
		steps: []step{
			{0, "exec", "e1 n1 slots=2 m", ""},
			{0, "exec", "e2 n2 slots=2 m", ""},
			{0, "plan", "", "+m@e1/min"},
			{1, "inflight", "e1 m 2", ""},
			{1, "queued", "e1 m 50 10", ""}, // 50 ms on the mean: below
			{1, "plan", "", ""},
			{2, "queued", "e1 m 300 10", ""}, // above: hot from now
			{2, "plan", "", ""},
			{4, "queued", "e1 m 10 10", ""}, // below again: the window starts over
			{4, "plan", "", ""},
			{5, "queued", "e1 m 300 10", ""},
			{5, "plan", "", ""},
			// Requests in flight, none out of the queue since: still hot.
			{8, "inflight", "e1 m 3", ""},
			{8, "plan", "", ""},
			{14, "plan", "", ""},
			{15, "plan", "", "+m@e2/queue"},
			{30, "plan", "", ""}, // max_replicas
			// Idle: the replica beyond min_replicas goes.
			{31, "inflight", "e1 m 0", ""},
			{31, "use", "e1 m", ""},
			{80, "plan", "", "-m@e2/down"},
		},
	}, {
		name:   "scaling up takes only free room: it never evicts",
		cfg:    Config{ScaleUpPending: 1, ScaleUpAfter: time.Second},
		models: []Model{{Name: "m"}, {Name: "other"}},
		steps: []step{
			{0, "exec", "e1 n1 slots=1 m,other", ""},
			{0, "exec", "e2 n2 slots=1 m,other", ""},
			{0, "plan", "", "+m@e1/min +other@e2/min"},
			{1, "inflight", "e1 m 10", ""},
			{1, "plan", "", ""},
			{5, "plan", "", ""},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			run(t, newCluster(t, tc.cfg, tc.models...), tc.steps)
		})
	}
}

// TestNotServedUnload: an executor holding a model the cluster stopped
// serving unloads it once no request is in flight.
func TestNotServedUnload(t *testing.T) {
	c := newCluster(t, Config{}, Model{Name: "a"})
	c.execs["e1"] = &Executor{ID: "e1", Node: "n1", Repository: []string{"a", "old"},
		Holds: []Holding{{Model: "old", State: Ready, LastUse: t0, Inflight: 1}}}
	c.observe(t0, "e1")
	run(t, c, []step{
		{0, "plan", "", "+a@e1/min"},
		{1, "inflight", "e1 old 0", ""},
		{1, "plan", "", "-old@e1/gone"},
	})
}

// TestObserveIgnoresOlderReports: a report older than one already seen
// (a catalog fetched before a load, answered after it) changes nothing.
func TestObserveIgnoresOlderReports(t *testing.T) {
	p := NewPlanner(Config{})
	p.SetModels([]Model{{Name: "a"}})
	p.Observe(t0, Executor{ID: "e1", Node: "n1", Revision: 5, Repository: []string{"a"}, Holds: []Holding{{Model: "a", State: Ready}}})
	p.Observe(t0, Executor{ID: "e1", Node: "n1", Revision: 4, Repository: []string{"a"}})
	if got := planString(p.Plan(t0)); got != "" {
		t.Fatalf("plan = %q, want nothing (a is held)", got)
	}
	p.Observe(t0, Executor{ID: "e1", Node: "n1", Generation: 1, Revision: 1, Repository: []string{"a"}})
	if got := planString(p.Plan(t0)); got != "+a@e1/min" {
		t.Fatalf("plan after a restart = %q, want +a@e1/min", got)
	}
}

// TestGPUFootprintsRemembered: the GPU footprints measured are kept after
// the executor goes, and one seeded (a controller taking over reads them
// back) counts before any load measured it.
func TestGPUFootprintsRemembered(t *testing.T) {
	c := newCluster(t, Config{}, Model{Name: "g", GPU: true, GPUFootprintHint: 1 << 30}, Model{Name: "h", GPU: true})
	run(t, c, []step{
		{0, "measure", "g 0 3GiB", ""},
		{0, "exec", "e1 n1 slots=2 g gpu=8GiB", ""},
		{0, "plan", "", "+g@e1/min ?h:none"},
		{1, "gone", "e1", ""},
	})
	if got := c.p.GPUFootprints(); len(got) != 1 || got["g"] != 3<<30 || c.p.GPUFootprint("g") != 3<<30 {
		t.Fatalf("GPU footprints %v, g counted %d; want g 3GiB", got, c.p.GPUFootprint("g"))
	}
	c.p.RememberGPUFootprint("h", 5<<30)
	c.p.RememberGPUFootprint("h", 1<<30) // the largest stays
	run(t, c, []step{
		{2, "exec", "e2 n2 slots=2 g,h gpu=6GiB", ""},
		{2, "plan", "", "+g@e2/min ?h:gpu-full"},
	})
	if got := c.p.GPUFootprint("h"); got != 5<<30 {
		t.Fatalf("h counted %d, want 5GiB", got)
	}
}

func TestDecisionString(t *testing.T) {
	d := Decision{Action: Unload, Model: "m0", Executor: "e1", Reason: Evicted, For: "m3"}
	if got, want := d.String(), "unload m0 on e1: least recently used, evicted for m3"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}
