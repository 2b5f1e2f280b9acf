// Package tritonmetrics renders Triton's per-model metrics (names, help
// texts, labels "model" and "version", counters without a _total suffix)
// from statistics as executors and sequence routers keep them
// (busv1.StatisticsReply): each executor's and router's /metrics for the
// work it did, and a gateway's /metrics/constellation for their sums.
package tritonmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/quantile"
)

var (
	labels = []string{"model", "version"}

	descSuccess = prometheus.NewDesc("nv_inference_request_success",
		"Number of successful inference requests, all batch sizes", labels, nil)
	descFailure = prometheus.NewDesc("nv_inference_request_failure",
		"Number of failed inference requests, all batch sizes", []string{"model", "version", "reason"}, nil)
	descPending = prometheus.NewDesc("nv_inference_pending_request_count",
		"Instantaneous number of pending requests awaiting execution per-model.", labels, nil)
	descCount = prometheus.NewDesc("nv_inference_count",
		"Number of inferences performed (does not include cached requests)", labels, nil)
	descExecCount = prometheus.NewDesc("nv_inference_exec_count",
		"Number of model executions performed (does not include cached requests)", labels, nil)
	descRequestDuration = prometheus.NewDesc("nv_inference_request_duration_us",
		"Cumulative inference request duration in microseconds (includes cached requests)", labels, nil)
	descQueueDuration = prometheus.NewDesc("nv_inference_queue_duration_us",
		"Cumulative inference queuing duration in microseconds (includes cached requests)", labels, nil)
	descComputeInput = prometheus.NewDesc("nv_inference_compute_input_duration_us",
		"Cumulative compute input duration in microseconds (does not include cached requests)", labels, nil)
	descComputeInfer = prometheus.NewDesc("nv_inference_compute_infer_duration_us",
		"Cumulative compute inference duration in microseconds (does not include cached requests)", labels, nil)
	descComputeOutput = prometheus.NewDesc("nv_inference_compute_output_duration_us",
		"Cumulative inference compute output duration in microseconds (does not include cached requests)", labels, nil)
)

// descFirstResponse is Triton's histogram of the time to a decoupled
// model's first response (--metrics-config histogram_latencies=true).
var descFirstResponse = prometheus.NewDesc("nv_inference_first_response_histogram_ms",
	"Duration from request to first response in milliseconds", labels, nil)

// Triton's latency summaries (--metrics-config summary_latencies=true), by
// the family name executors report them under.
var summaryDescs = map[string]*prometheus.Desc{
	"nv_inference_request_summary_us": prometheus.NewDesc("nv_inference_request_summary_us",
		"Summary of inference request duration in microseconds (includes cached requests)", labels, nil),
	"nv_inference_queue_summary_us": prometheus.NewDesc("nv_inference_queue_summary_us",
		"Summary of inference queuing duration in microseconds (includes cached requests)", labels, nil),
	"nv_inference_compute_input_summary_us": prometheus.NewDesc("nv_inference_compute_input_summary_us",
		"Summary of compute input duration in microseconds (does not include cached requests)", labels, nil),
	"nv_inference_compute_infer_summary_us": prometheus.NewDesc("nv_inference_compute_infer_summary_us",
		"Summary of compute inference duration in microseconds (does not include cached requests)", labels, nil),
	"nv_inference_compute_output_summary_us": prometheus.NewDesc("nv_inference_compute_output_summary_us",
		"Summary of inference compute output duration in microseconds (does not include cached requests)", labels, nil),
}

// failureReasons are the values of nv_inference_request_failure's reason
// label; every version reports all four, zeros included, as Triton does.
var failureReasons = []string{"REJECTED", "CANCELED", "BACKEND", "OTHER"}

// Describe sends the descriptions of every family Collect may send.
func Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSuccess, descFailure, descPending, descCount, descExecCount,
		descRequestDuration, descQueueDuration, descComputeInput, descComputeInfer, descComputeOutput, descFirstResponse} {
		ch <- d
	}
	for _, d := range summaryDescs {
		ch <- d
	}
}

// DescribeHeld sends the descriptions of the families CollectHeld sends.
func DescribeHeld(ch chan<- *prometheus.Desc) {
	ch <- descFailure
	ch <- descPending
}

// Key is one model version.
type Key struct{ Name, Version string }

// Collect sends Triton's per-model metrics of the versions in stats, in
// that order: stats are the versions' statistics (summed where several
// executors serve one), parts the replies that carried them, whose
// VersionMetrics and first-response histograms are summed here, followed
// by the metric families backends registered that parts carry
// (CollectBackend).
func Collect(ch chan<- prometheus.Metric, cfg Config, stats []*inference.ModelStatistics, parts []*busv1.StatisticsReply) {
	extra := SumMetrics(parts)
	quantiles := cfg.Quantiles()
	counter := func(d *prometheus.Desc, v uint64, model, version string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), model, version)
	}
	want := make([]Key, 0, len(stats))
	for _, s := range stats {
		m, v := s.GetName(), s.GetVersion()
		want = append(want, Key{m, v})
		is := s.GetInferenceStats()
		x := extra[Key{m, v}]
		if x == nil {
			x = &VersionMetrics{}
		}
		counter(descSuccess, is.GetSuccess().GetCount(), m, v)
		for i, r := range failureReasons {
			ch <- prometheus.MustNewConstMetric(descFailure, prometheus.CounterValue, float64(x.Failures[i]), m, v, r)
		}
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(x.Pending), m, v)
		counter(descCount, s.GetInferenceCount(), m, v)
		counter(descExecCount, s.GetExecutionCount(), m, v)
		if cfg.SummaryLatencies {
			for family, d := range summaryDescs {
				sm := x.Summaries[family]
				if sm == nil {
					sm = &quantile.Merged{}
				}
				qv := sm.Quantiles(quantiles)
				qm := make(map[float64]float64, len(quantiles))
				for i, q := range quantiles {
					qm[q] = qv[i]
				}
				ch <- prometheus.MustNewConstSummary(d, sm.Count, sm.Sum, qm, m, v)
			}
		}
		if cfg.NoCounterLatencies {
			continue
		}
		counter(descRequestDuration, is.GetSuccess().GetNs()/1000, m, v)
		counter(descQueueDuration, is.GetQueue().GetNs()/1000, m, v)
		counter(descComputeInput, is.GetComputeInput().GetNs()/1000, m, v)
		counter(descComputeInfer, is.GetComputeInfer().GetNs()/1000, m, v)
		counter(descComputeOutput, is.GetComputeOutput().GetNs()/1000, m, v)
	}
	if cfg.HistogramLatencies {
		for _, h := range SumFirstResponse(parts, want) {
			ch <- prometheus.MustNewConstHistogram(descFirstResponse, h.Count, h.Sum, h.Buckets, h.Name, h.Version)
		}
	}
	CollectBackend(ch, parts)
}

// CollectHeld sends what a sequence router reports of the versions it
// leads: the requests it failed itself, by reason, and those it holds
// (nv_inference_request_failure, nv_inference_pending_request_count).
// Its executors report the rest of the versions' metrics.
func CollectHeld(ch chan<- prometheus.Metric, vms []*busv1.VersionMetrics) {
	for _, vm := range vms {
		m, v := vm.GetName(), vm.GetVersion()
		for i, n := range failureCounts(vm) {
			ch <- prometheus.MustNewConstMetric(descFailure, prometheus.CounterValue, float64(n), m, v, failureReasons[i])
		}
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(vm.GetPending()), m, v)
	}
}

func failureCounts(vm *busv1.VersionMetrics) [4]uint64 {
	return [4]uint64{vm.GetFailureRejected(), vm.GetFailureCanceled(), vm.GetFailureBackend(), vm.GetFailureOther()}
}

// VersionMetrics is one version's busv1.VersionMetrics summed over
// executors and routers.
type VersionMetrics struct {
	Failures  [4]uint64 // REJECTED, CANCELED, BACKEND, OTHER
	Pending   uint64
	Summaries map[string]*quantile.Merged
}

// SumMetrics adds up the executors' and routers' VersionMetrics.
func SumMetrics(parts []*busv1.StatisticsReply) map[Key]*VersionMetrics {
	out := map[Key]*VersionMetrics{}
	for _, p := range parts {
		for _, vm := range p.GetMetrics() {
			k := Key{vm.GetName(), vm.GetVersion()}
			x := out[k]
			if x == nil {
				x = &VersionMetrics{Summaries: map[string]*quantile.Merged{}}
				out[k] = x
			}
			for i, n := range failureCounts(vm) {
				x.Failures[i] += n
			}
			x.Pending += vm.GetPending()
			for _, s := range vm.GetSummaries() {
				m := x.Summaries[s.GetFamily()]
				if m == nil {
					m = &quantile.Merged{}
					x.Summaries[s.GetFamily()] = m
				}
				m.Add(s)
			}
		}
	}
	return out
}

// FirstResponse is one version's time-to-first-response histogram summed
// over executors: cumulative counts by upper bound, as Prometheus wants.
type FirstResponse struct {
	Name, Version string
	Count         uint64
	Sum           float64
	Buckets       map[float64]uint64
}

// SumFirstResponse adds up the executors' histograms of the versions in
// want, in that order. Executors loaded from the same config have the
// same bounds; a bound only some have counts what falls at or below it
// where it is known.
func SumFirstResponse(parts []*busv1.StatisticsReply, want []Key) []FirstResponse {
	sums := map[Key]*FirstResponse{}
	for _, p := range parts {
		for _, h := range p.GetFirstResponse() {
			k := Key{h.GetName(), h.GetVersion()}
			f := sums[k]
			if f == nil {
				f = &FirstResponse{Name: k.Name, Version: k.Version, Buckets: map[float64]uint64{}}
				sums[k] = f
			}
			f.Count += h.GetCount()
			f.Sum += h.GetSum()
			var below uint64
			for i, b := range h.GetBounds() {
				if i < len(h.GetCounts()) {
					below += h.GetCounts()[i]
				}
				f.Buckets[b] += below
			}
		}
	}
	var out []FirstResponse
	for _, k := range want {
		if f := sums[k]; f != nil {
			out = append(out, *f)
		}
	}
	return out
}
