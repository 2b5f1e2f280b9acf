//go:build linux && cgo

package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Sampler reads Triton's GPU metrics from NVML, which it keeps initialised
// until Close.
type Sampler struct {
	devs     []*sampled
	shutdown func() // nvml.Shutdown, for a sampler on NVML itself
}

// meter is the part of an NVML device the metrics read (nvml.Device has
// it; tests without a GPU give their own).
type meter interface {
	GetUUID() (string, nvml.Return)
	GetUtilizationRates() (nvml.Utilization, nvml.Return)
	GetMemoryInfo() (nvml.Memory, nvml.Return)
	GetPowerUsage() (uint32, nvml.Return)
	GetPowerManagementLimit() (uint32, nvml.Return)
	GetTotalEnergyConsumption() (uint64, nvml.Return)
	GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return)
	GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return)
}

// sampled is one device with what its readings are relative to.
type sampled struct {
	meter
	uuid        string
	energyStart uint64 // mJ at OpenSampler: energy counts from there
	energyOK    bool
}

// OpenSampler initialises NVML for the metrics of every GPU it sees.
// Without NVML or a GPU it returns an error wrapping ErrNoGPU, and the
// metrics are left out, as Triton leaves them out.
func OpenSampler() (*Sampler, error) {
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: NVML: %s", ErrNoGPU, nvmlError(ret))
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS || n == 0 {
		nvml.Shutdown()
		return nil, fmt.Errorf("%w: NVML found no device", ErrNoGPU)
	}
	var devs []meter
	for i := range n {
		h, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		devs = append(devs, h)
	}
	s := newSampler(devs)
	s.shutdown = func() { nvml.Shutdown() }
	return s, nil
}

func newSampler(devs []meter) *Sampler {
	s := &Sampler{}
	for _, d := range devs {
		sd := &sampled{meter: d}
		sd.uuid, _ = d.GetUUID()
		if e, ret := d.GetTotalEnergyConsumption(); ret == nvml.SUCCESS {
			sd.energyStart, sd.energyOK = e, true
		}
		s.devs = append(s.devs, sd)
	}
	return s
}

// Read takes every GPU's figures now. A figure NVML cannot give (a GPU
// without power readings) is left out of that GPU's Reading (NaN).
func (s *Sampler) Read() []Reading {
	if s == nil {
		return nil
	}
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	out := make([]Reading, 0, len(s.devs))
	for _, d := range s.devs {
		r := newReading(d.uuid)
		if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
			r.Utilization = float64(u.Gpu) / 100
		}
		if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			r.MemoryTotal, r.MemoryUsed = float64(mem.Total), float64(mem.Used)
		}
		if p, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
			r.PowerUsage = float64(p) / 1000 // mW
		}
		if p, ret := d.GetPowerManagementLimit(); ret == nvml.SUCCESS {
			r.PowerLimit = float64(p) / 1000
		}
		if e, ret := d.GetTotalEnergyConsumption(); ret == nvml.SUCCESS && d.energyOK && e >= d.energyStart {
			r.Energy = float64(e-d.energyStart) / 1000 // mJ
		}
		out = append(out, r)
	}
	return out
}

// ProcessMemory is the memory process pid uses on each GPU of the sampler,
// in the sampler's order (bytes), as NVML lists it among the device's
// compute and graphics processes; 0 on a GPU that does not list it. A GPU
// whose list of compute processes NVML cannot give, or that reports the
// figure not available (some virtualised GPUs), is UsageUnknown. NVML
// names processes by their PID in the host's namespace: in a container
// with a PID namespace of its own the process is not found, and every GPU
// reads 0.
func (s *Sampler) ProcessMemory(pid int) []uint64 {
	if s == nil {
		return nil
	}
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	out := make([]uint64, 0, len(s.devs))
	for _, d := range s.devs {
		out = append(out, processMemory(d, pid))
	}
	return out
}

// notAvailable is NVML_VALUE_NOT_AVAILABLE as a ProcessInfo's
// UsedGpuMemory carries it.
const notAvailable = ^uint64(0)

// processMemory is pid's memory on d. A process with both a CUDA and a
// graphics context is listed by both calls, each time with all of its
// memory, so the larger of the two figures counts, not their sum. The
// graphics list is optional (a GPU without graphics may refuse it); the
// compute list, where the models' CUDA memory shows, is not.
func processMemory(d meter, pid int) uint64 {
	compute, ret := d.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return UsageUnknown
	}
	used, ok := usedBy(compute, pid)
	if !ok {
		return UsageUnknown
	}
	if graphics, ret := d.GetGraphicsRunningProcesses(); ret == nvml.SUCCESS {
		g, ok := usedBy(graphics, pid)
		if !ok {
			return UsageUnknown
		}
		used = max(used, g)
	}
	return used
}

// usedBy sums pid's entries of procs; ok is false when one says its
// figure is not available.
func usedBy(procs []nvml.ProcessInfo, pid int) (used uint64, ok bool) {
	for _, p := range procs {
		if int(p.Pid) != pid {
			continue
		}
		if p.UsedGpuMemory == notAvailable {
			return 0, false
		}
		used += p.UsedGpuMemory
	}
	return used, true
}

// Close shuts NVML down for this sampler.
func (s *Sampler) Close() {
	if s == nil {
		return
	}
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	if s.shutdown != nil {
		s.shutdown()
		s.shutdown = nil
	}
}
