package placer

import (
	"context"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/placement"
	"github.com/nereid-io/nereid/pkg/redisconn/redistest"
)

// TestObserveGPU: an executor's catalog gives the planner its GPUs'
// memory, summed, as its GPU capacity, and each model's GPU footprint (its
// versions' together); the planner then keeps a GPU model that does not
// fit out of it, a CPU model does not count there, and the admin view
// shows the GPU capacity, what is held of it and each model's GPU
// footprint.
func TestObserveGPU(t *testing.T) {
	c := &Controller{cfg: Config{ID: "ctl"}, planner: placement.NewPlanner(placement.Config{}),
		waiters: map[string][]chan []string{}, controls: map[string][]chan controlOutcome{}}
	c.planner.SetModels([]placement.Model{{Name: "g", GPU: true}, {Name: "c"}, {Name: "big", GPU: true, GPUFootprintHint: 20 << 30}})
	cat := &busv1.ExecutorCatalog{ExecutorId: "e1", Node: "n1", Generation: 1, Revision: 1, Placement: true,
		Capacity: &busv1.ExecutorCapacity{Slots: 8, GpuMemoryBytes: []uint64{16 << 30, 8 << 30}},
		Models: []*busv1.ModelVersionState{
			{Name: "g", Version: "1", State: bus.StateReady, GpuFootprintBytes: 3 << 30},
			{Name: "g", Version: "2", State: bus.StateReady, GpuFootprintBytes: 1 << 30},
			{Name: "c", Version: "1", State: bus.StateReady},
			{Name: "big"},
		}}
	c.observe(time.Now(), cat)

	e := c.planner.Executors()
	if len(e) != 1 || !e[0].GPU || e[0].GPUMemory != 24<<30 {
		t.Fatalf("executors %+v, want e1 with 24GiB of GPU memory", e)
	}
	if got := c.planner.GPUFootprint("g"); got != 4<<30 {
		t.Fatalf("g's GPU footprint %d, want its two versions' 4GiB", got)
	}
	// 4GiB held of 24GiB: big's 20GiB would be 24GiB and fits; more
	// would not.
	plan := c.planner.Plan(time.Now())
	if len(plan.Actions) != 1 || plan.Actions[0].Model != "big" || plan.Actions[0].GPUFootprint != 20<<30 {
		t.Fatalf("plan %+v, want big loaded on e1 with a GPU footprint of 20GiB", plan)
	}
	c.planner.SetModels([]placement.Model{{Name: "g", GPU: true}, {Name: "c"}, {Name: "big", GPU: true, GPUFootprintHint: 21 << 30}})
	c.observe(time.Now(), cat) // the load did not happen
	c.planner.Done(time.Now(), plan.Actions[0], context.Canceled)
	if plan := c.planner.Plan(time.Now().Add(time.Hour)); len(plan.Actions) != 0 || len(plan.Waiting) != 1 || plan.Waiting[0].Why != placement.NoGPUMemory {
		t.Fatalf("plan %+v, want big waiting for GPU memory", plan)
	}

	c.mu.Lock()
	st := c.stateLocked()
	c.mu.Unlock()
	if len(st.GetExecutors()) != 1 || st.GetExecutors()[0].GetGpuCapacityBytes() != 24<<30 || st.GetExecutors()[0].GetHeldGpuBytes() != 4<<30 {
		t.Fatalf("admin view of e1: %v, want 24GiB of GPU memory, 4GiB held", st.GetExecutors())
	}
	for _, m := range st.GetModels() {
		want := map[string]uint64{"g": 4 << 30, "c": 0, "big": 21 << 30}[m.GetName()]
		if m.GetGpuFootprintBytes() != want {
			t.Errorf("admin view of %s: GPU footprint %d, want %d", m.GetName(), m.GetGpuFootprintBytes(), want)
		}
	}
}

// TestStoreGPUFootprints: the GPU footprints measured are kept by the
// lease's holder only and read back by the next controller.
func TestStoreGPUFootprints(t *testing.T) {
	ctx := context.Background()
	s := &store{rdb: redistest.Plain(t)}
	ttl := 300 * time.Millisecond
	e1, err := s.acquire(ctx, "a", ttl)
	if err != nil || e1 == 0 {
		t.Fatalf("a acquires: %d, %v", e1, err)
	}
	if err := s.saveGPUFootprints(ctx, "a", e1, map[string]uint64{"g": 3 << 30, "h": 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := s.saveGPUFootprints(ctx, "b", e1, map[string]uint64{"g": 1}); err != errNotLeading {
		t.Fatalf("a write by a controller without the lease: %v, want %v", err, errNotLeading)
	}
	time.Sleep(ttl + 100*time.Millisecond)
	if _, err := s.acquire(ctx, "b", ttl); err != nil {
		t.Fatal(err)
	}
	if err := s.saveGPUFootprints(ctx, "a", e1, map[string]uint64{"g": 1}); err != errNotLeading {
		t.Fatalf("a write after a's lease lapsed: %v, want %v", err, errNotLeading)
	}
	got, err := s.gpuFootprints(ctx)
	if err != nil || len(got) != 2 || got["g"] != 3<<30 || got["h"] != 1<<20 {
		t.Fatalf("GPU footprints read back: %v, %v; want g 3GiB, h 1MiB", got, err)
	}
	if f, err := s.footprints(ctx); err != nil || len(f) != 0 {
		t.Fatalf("the GPU footprints went into the footprints: %v, %v", f, err)
	}
}
