package opsmetrics

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nereid-io/nereid/api/busv1"
)

// Triton's GPU metrics, by gpu_uuid: the executor's of the GPUs it sees,
// and the gateway's of every GPU the executors report.
var (
	gpuLabels      = []string{"gpu_uuid"}
	descGPUUtil    = prometheus.NewDesc("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", gpuLabels, nil)
	descGPUMemTot  = prometheus.NewDesc("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", gpuLabels, nil)
	descGPUMemUsed = prometheus.NewDesc("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", gpuLabels, nil)
	descGPUPower   = prometheus.NewDesc("nv_gpu_power_usage", "GPU power usage in watts", gpuLabels, nil)
	descGPULimit   = prometheus.NewDesc("nv_gpu_power_limit", "GPU power management limit in watts", gpuLabels, nil)
	descGPUEnergy  = prometheus.NewDesc("nv_energy_consumption", "GPU energy consumption in joules since the executor started", gpuLabels, nil)
)

// GPUDescs are the GPU metric families, for a collector's Describe.
var GPUDescs = []*prometheus.Desc{descGPUUtil, descGPUMemTot, descGPUMemUsed, descGPUPower, descGPULimit, descGPUEnergy}

// CollectGPU sends one GPU's figures; a NaN (a figure the GPU does not
// give) is left out.
func CollectGPU(ch chan<- prometheus.Metric, g *busv1.GpuMetrics) {
	for _, m := range []struct {
		d *prometheus.Desc
		t prometheus.ValueType
		v float64
	}{
		{descGPUUtil, prometheus.GaugeValue, g.GetUtilization()},
		{descGPUMemTot, prometheus.GaugeValue, g.GetMemoryTotalBytes()},
		{descGPUMemUsed, prometheus.GaugeValue, g.GetMemoryUsedBytes()},
		{descGPUPower, prometheus.GaugeValue, g.GetPowerUsage()},
		{descGPULimit, prometheus.GaugeValue, g.GetPowerLimit()},
		{descGPUEnergy, prometheus.CounterValue, g.GetEnergy()},
	} {
		if !math.IsNaN(m.v) {
			ch <- prometheus.MustNewConstMetric(m.d, m.t, m.v, g.GetUuid())
		}
	}
}
