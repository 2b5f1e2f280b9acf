package gpu

import "math"

// Reading is one GPU's figures at one moment: Triton's GPU metrics
// (nv_gpu_utilization, nv_gpu_memory_total_bytes, nv_gpu_memory_used_bytes,
// nv_gpu_power_usage, nv_gpu_power_limit, nv_energy_consumption). A figure
// the GPU cannot give is NaN.
type Reading struct {
	UUID                    string
	Utilization             float64 // 0 to 1
	MemoryTotal, MemoryUsed float64 // bytes
	PowerUsage, PowerLimit  float64 // watts
	Energy                  float64 // joules since the sampler opened
}

// UsageUnknown stands, in Sampler.ProcessMemory's answer, for a GPU that
// could not say how much of its memory the process uses: a caller
// comparing two answers leaves that GPU out rather than take its whole
// usage for growth.
const UsageUnknown = ^uint64(0)

func newReading(uuid string) Reading {
	nan := math.NaN()
	return Reading{UUID: uuid, Utilization: nan, MemoryTotal: nan, MemoryUsed: nan, PowerUsage: nan, PowerLimit: nan, Energy: nan}
}
