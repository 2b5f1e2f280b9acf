package tritonmetrics

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nereid-io/nereid/api/busv1"
)

// The metric families Triton backends register (TRITONSERVER_MetricFamilyNew)
// show beside Triton's own on the metrics port, with the names, help and
// labels the backends gave them (Triton adds no label). Executors report
// theirs with their statistics; these are added up over the constellation
// as Triton's per-model counters are.

// The kinds of BackendMetricFamily, TRITONSERVER_MetricKind's values.
const (
	backendCounter uint32 = iota
	backendGauge
	backendHistogram
)

// SumBackend merges the backend metric families of parts: each process's
// families once (the executors of one process report the same ones); the
// metrics of one family with the same labels added up: counters, gauges,
// and histograms whose bucket bounds agree (one whose bounds differ from
// the first seen is left out of the sum). A family whose kind differs from
// the first seen with its name is left out. Families come by name, their
// metrics by labels.
func SumBackend(parts []*busv1.StatisticsReply) []*busv1.BackendMetricFamily {
	seen := map[string]bool{}
	byName := map[string]*busv1.BackendMetricFamily{}
	metrics := map[string]map[string]*busv1.BackendMetric{} // family, labels
	for _, p := range parts {
		if len(p.GetBackendMetrics()) == 0 || seen[p.GetBackendMetricsProcess()] {
			continue
		}
		seen[p.GetBackendMetricsProcess()] = true
		for _, f := range p.GetBackendMetrics() {
			sum := byName[f.GetName()]
			if sum == nil {
				sum = &busv1.BackendMetricFamily{Name: f.GetName(), Help: f.GetHelp(), Kind: f.GetKind()}
				byName[f.GetName()] = sum
				metrics[f.GetName()] = map[string]*busv1.BackendMetric{}
			}
			if sum.GetKind() != f.GetKind() {
				continue
			}
			for _, m := range f.GetMetrics() {
				key := labelKey(m)
				s := metrics[f.GetName()][key]
				if s == nil {
					s = &busv1.BackendMetric{Labels: m.GetLabels(), BucketBounds: m.GetBucketBounds(), BucketCounts: slices.Clone(m.GetBucketCounts())}
					metrics[f.GetName()][key] = s
					sum.Metrics = append(sum.Metrics, s)
				} else if !slices.Equal(s.GetBucketBounds(), m.GetBucketBounds()) || len(s.BucketCounts) != len(m.GetBucketCounts()) {
					continue
				} else {
					for i, c := range m.GetBucketCounts() {
						s.BucketCounts[i] += c
					}
				}
				s.Value += m.GetValue()
				s.Sum += m.GetSum()
				s.Count += m.GetCount()
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]*busv1.BackendMetricFamily, 0, len(names))
	for _, n := range names {
		f := byName[n]
		slices.SortFunc(f.Metrics, func(a, b *busv1.BackendMetric) int { return strings.Compare(labelKey(a), labelKey(b)) })
		out = append(out, f)
	}
	return out
}

// labelKey identifies a metric of a family by its labels (sorted by name).
func labelKey(m *busv1.BackendMetric) string {
	var b strings.Builder
	for _, l := range m.GetLabels() {
		b.WriteString(l.GetName())
		b.WriteByte(0)
		b.WriteString(l.GetValue())
		b.WriteByte(0)
	}
	return b.String()
}

// CollectBackend sends the backend metric families of parts, summed
// (SumBackend). A metric Prometheus cannot take (a name the backend gave
// that it refuses) is left out.
func CollectBackend(ch chan<- prometheus.Metric, parts []*busv1.StatisticsReply) {
	for _, f := range SumBackend(parts) {
		for _, m := range f.GetMetrics() {
			labels := make(prometheus.Labels, len(m.GetLabels()))
			for _, l := range m.GetLabels() {
				labels[l.GetName()] = l.GetValue()
			}
			d := prometheus.NewDesc(f.GetName(), f.GetHelp(), nil, labels)
			var pm prometheus.Metric
			var err error
			switch f.GetKind() {
			case backendCounter:
				pm, err = prometheus.NewConstMetric(d, prometheus.CounterValue, m.GetValue())
			case backendGauge:
				pm, err = prometheus.NewConstMetric(d, prometheus.GaugeValue, m.GetValue())
			case backendHistogram:
				buckets := make(map[float64]uint64, len(m.GetBucketBounds()))
				for i, b := range m.GetBucketBounds() {
					if i < len(m.GetBucketCounts()) {
						buckets[b] = m.GetBucketCounts()[i]
					}
				}
				pm, err = prometheus.NewConstHistogram(d, m.GetCount(), m.GetSum(), buckets)
			default:
				continue
			}
			if err == nil {
				ch <- pm
			}
		}
	}
}
