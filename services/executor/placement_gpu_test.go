package executor

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/placementbus"
	"github.com/nereid-io/nereid/services/executor/internal/gpu"
)

// fakeGPUMemory stands in for NVML, as no GPU exists where the tests run:
// each reading is the next of readings (the last one repeated), and it
// checks that the executor asks about its own process.
type fakeGPUMemory struct {
	t        *testing.T
	mu       sync.Mutex
	readings [][]uint64
	reads    int
}

func (f *fakeGPUMemory) ProcessMemory(pid int) []uint64 {
	if pid != os.Getpid() {
		f.t.Errorf("GPU memory read for pid %d, not the executor's %d", pid, os.Getpid())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.readings[min(f.reads, len(f.readings)-1)]
	f.reads++
	return r
}

// TestPlacementGPUFootprint: the GPU memory the executor's process grew
// by on its GPUs while the controller's load ran is the version's
// gpu_footprint_bytes in the catalog, as footprint_bytes is for the
// resident set; a load that took none reads 0.
func TestPlacementGPUFootprint(t *testing.T) {
	url := startNATS(t)
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, url: url, client: client}
	h.ex, h.stop = runExecutor(t, url, Config{RepositoryPath: exampleRepo, ID: "ex-gpu", Node: "node-a", Placement: true})
	// Two GPUs: the load takes 2GiB on the first, 512MiB on the second.
	fake := &fakeGPUMemory{t: t, readings: [][]uint64{{1 << 30, 0}, {3 << 30, 512 << 20}}}
	h.ex.controlMu.Lock()
	h.ex.gpuMem = fake
	h.ex.controlMu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x := placementbus.NewExecutors(client)
	cat, err := x.Load(ctx, "ex-gpu", "simple")
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(2<<30 + 512<<20)
	if st := placedState(cat, "simple"); st.GetState() != StateReady || st.GetGpuFootprintBytes() != want {
		t.Fatalf("after the load: %v, want READY with gpu_footprint_bytes %d", st, want)
	}
	if got := placedState(h.catalog(), "simple").GetGpuFootprintBytes(); got != want {
		t.Fatalf("catalog's gpu_footprint_bytes %d, want %d", got, want)
	}
	fake.mu.Lock()
	if fake.reads != 2 {
		t.Errorf("GPU memory read %d times, want once before and once after the load", fake.reads)
	}
	fake.mu.Unlock()

	// Unloaded: no footprint; loaded again with the GPUs' usage unchanged:
	// 0, not the usage itself.
	if cat, err = x.Unload(ctx, "ex-gpu", "simple"); err != nil || placedState(cat, "simple").GetGpuFootprintBytes() != 0 {
		t.Fatalf("after the unload: %v, %v", placedState(cat, "simple"), err)
	}
	if cat, err = x.Load(ctx, "ex-gpu", "simple"); err != nil {
		t.Fatal(err)
	}
	if st := placedState(cat, "simple"); st.GetState() != StateReady || st.GetGpuFootprintBytes() != 0 {
		t.Fatalf("a load that took no GPU memory: %v", st)
	}
}

// gpuGrowth sums each GPU's growth; a GPU that shrank counts 0, one
// unknown in either reading (or missing from one) is left out.
func TestGPUGrowth(t *testing.T) {
	u := gpu.UsageUnknown
	for _, tc := range []struct {
		before, after []uint64
		want          uint64
	}{
		{nil, nil, 0},
		{[]uint64{1, 10}, []uint64{5, 30}, 24},
		{[]uint64{10, 0}, []uint64{4, 8}, 8},
		{[]uint64{u, 0}, []uint64{100, 8}, 8},
		{[]uint64{0, 0}, []uint64{u, 8}, 8},
		{[]uint64{0}, []uint64{3, 8}, 3},
	} {
		if got := gpuGrowth(tc.before, tc.after); got != tc.want {
			t.Errorf("gpuGrowth(%v, %v) = %d, want %d", tc.before, tc.after, got, tc.want)
		}
	}
}
