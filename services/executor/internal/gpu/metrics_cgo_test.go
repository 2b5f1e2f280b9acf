//go:build linux && cgo

package gpu

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// fakeGPU stands in for a GPU, which this machine lacks: NVML's answers in
// NVML's units (percent, milliwatts, millijoules).
type fakeGPU struct {
	uuid   string
	util   uint32
	mem    nvml.Memory
	power  uint32
	limit  uint32
	energy uint64
	noPow  bool
	// compute and graphics are the device's processes; noCompute and
	// noGraphics refuse the lists.
	compute, graphics     []nvml.ProcessInfo
	noCompute, noGraphics bool
}

func (f *fakeGPU) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	if f.noCompute {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	return f.compute, nvml.SUCCESS
}

func (f *fakeGPU) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	if f.noGraphics {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	return f.graphics, nvml.SUCCESS
}

func (f *fakeGPU) GetUUID() (string, nvml.Return) { return f.uuid, nvml.SUCCESS }
func (f *fakeGPU) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	return nvml.Utilization{Gpu: f.util}, nvml.SUCCESS
}
func (f *fakeGPU) GetMemoryInfo() (nvml.Memory, nvml.Return) { return f.mem, nvml.SUCCESS }
func (f *fakeGPU) GetPowerUsage() (uint32, nvml.Return) {
	if f.noPow {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return f.power, nvml.SUCCESS
}
func (f *fakeGPU) GetPowerManagementLimit() (uint32, nvml.Return) {
	if f.noPow {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return f.limit, nvml.SUCCESS
}
func (f *fakeGPU) GetTotalEnergyConsumption() (uint64, nvml.Return) {
	if f.noPow {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return f.energy, nvml.SUCCESS
}

// Readings convert NVML's units to Triton's: utilization 0-1, watts,
// joules since the sampler opened; what a GPU cannot give is NaN.
func TestSamplerReadings(t *testing.T) {
	a := &fakeGPU{uuid: "GPU-a", util: 37, mem: nvml.Memory{Total: 80 << 30, Used: 3 << 30}, power: 123456, limit: 700000, energy: 5_000_000}
	b := &fakeGPU{uuid: "GPU-b", util: 0, mem: nvml.Memory{Total: 16 << 30}, noPow: true}
	s := newSampler([]meter{a, b})
	a.energy += 2500 // 2.5 J since the sampler opened
	got := s.Read()
	if len(got) != 2 {
		t.Fatalf("%d readings, want 2", len(got))
	}
	r := got[0]
	if r.UUID != "GPU-a" || r.Utilization != 0.37 || r.MemoryTotal != 80<<30 || r.MemoryUsed != 3<<30 ||
		r.PowerUsage != 123.456 || r.PowerLimit != 700 || r.Energy != 2.5 {
		t.Errorf("reading %+v", r)
	}
	r = got[1]
	if r.UUID != "GPU-b" || r.Utilization != 0 || r.MemoryTotal != 16<<30 || !math.IsNaN(r.PowerUsage) || !math.IsNaN(r.PowerLimit) || !math.IsNaN(r.Energy) {
		t.Errorf("reading without power figures %+v", r)
	}
	s.Close()
}

// ProcessMemory reads the process's own entries of each GPU's compute and
// graphics processes: summed within a list, the larger of the two lists
// (a process with both contexts is listed by both with all its memory),
// 0 where it is not listed, UsageUnknown where NVML cannot say.
func TestProcessMemory(t *testing.T) {
	const me, other = 4242, 7
	p := func(pid uint32, used uint64) nvml.ProcessInfo { return nvml.ProcessInfo{Pid: pid, UsedGpuMemory: used} }
	devs := []*fakeGPU{
		{uuid: "compute", compute: []nvml.ProcessInfo{p(other, 9<<30), p(me, 3<<30), p(me, 1<<30)}},
		{uuid: "both", compute: []nvml.ProcessInfo{p(me, 2<<30)}, graphics: []nvml.ProcessInfo{p(me, 2<<30), p(other, 1<<30)}},
		{uuid: "absent", compute: []nvml.ProcessInfo{p(other, 5<<30)}},
		{uuid: "no graphics list", compute: []nvml.ProcessInfo{p(me, 1<<20)}, noGraphics: true},
		{uuid: "no compute list", graphics: []nvml.ProcessInfo{p(me, 1<<20)}, noCompute: true},
		{uuid: "not available", compute: []nvml.ProcessInfo{p(me, notAvailable)}},
	}
	var meters []meter
	for _, d := range devs {
		meters = append(meters, d)
	}
	got := newSampler(meters).ProcessMemory(me)
	want := []uint64{4 << 30, 2 << 30, 0, 1 << 20, UsageUnknown, UsageUnknown}
	if !slices.Equal(got, want) {
		t.Fatalf("ProcessMemory = %v, want %v", got, want)
	}
	var none *Sampler // no GPU: no sampler, nothing read
	if got := none.ProcessMemory(me); got != nil {
		t.Fatalf("ProcessMemory without a sampler = %v", got)
	}
}

// Without libnvidia-ml.so.1 (this machine) there is no sampler and no
// error other than ErrNoGPU.
func TestOpenSamplerWithoutGPU(t *testing.T) {
	s, err := OpenSampler()
	if err == nil {
		defer s.Close()
		t.Skip("this machine has a GPU: OpenSampler succeeded")
	}
	if s != nil || !errors.Is(err, ErrNoGPU) {
		t.Errorf("OpenSampler: %v %v, want ErrNoGPU", s, err)
	}
}
