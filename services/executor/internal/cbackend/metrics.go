package cbackend

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// MetricKind is TRITONSERVER_MetricKind.
type MetricKind int

// The kinds, with Triton's values.
const (
	Counter MetricKind = iota
	Gauge
	Histogram
)

// The custom metrics backends register (TRITONSERVER_MetricFamily and
// TRITONSERVER_Metric), kept per process and written in Prometheus' text
// format next to the executor's own metrics.
var registry struct {
	mu       sync.Mutex
	families map[string]*family
}

type family struct {
	name, help string
	kind       MetricKind
	metrics    []*metric
	refs       int
}

type metric struct {
	f       *family
	labels  [][2]string
	value   float64
	buckets []float64 // histogram bounds
	counts  []uint64  // per bucket, cumulative at write time
	sum     float64
	count   uint64
	refs    int
}

// The names Prometheus accepts, as Triton's prometheus-cpp checks them: a
// metric name, a label name; neither may start with "__" (reserved).
var (
	validMetricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	validLabelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

func newFamily(kind MetricKind, name, help string) (*family, error) {
	if kind < Counter || kind > Histogram {
		return nil, tritonerr.InvalidArgf("Unsupported kind passed to MetricFamily constructor.")
	}
	if !validMetricName.MatchString(name) || strings.HasPrefix(name, "__") {
		return nil, tritonerr.InvalidArgf("Invalid metric name")
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.families == nil {
		registry.families = map[string]*family{}
	}
	if f, ok := registry.families[name]; ok {
		if f.kind != kind {
			return nil, tritonerr.InvalidArgf("Family name already exists with different type")
		}
		if f.help != help {
			return nil, tritonerr.InvalidArgf("Family name already exists")
		}
		f.refs++
		return f, nil
	}
	f := &family{name: name, help: help, kind: kind, refs: 1}
	registry.families[name] = f
	return f, nil
}

func (f *family) release() error {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if len(f.metrics) > 0 && f.refs == 1 {
		return tritonerr.InvalidArgf("Must call MetricDelete on all dependent metrics before calling MetricFamilyDelete.")
	}
	f.refs--
	if f.refs == 0 {
		delete(registry.families, f.name)
	}
	return nil
}

// newMetric finds or makes the metric of f with these labels: the same
// labels give the same metric, as in Triton.
func (f *family) newMetric(labels [][2]string, buckets []float64) (*metric, error) {
	if f.kind == Histogram && buckets == nil {
		return nil, tritonerr.InvalidArgf("Bucket boundaries not found in Metric args.")
	}
	if f.kind != Histogram && buckets != nil {
		return nil, tritonerr.InvalidArgf("Unexpected args found in %s Metric constructor.", map[MetricKind]string{Counter: "counter", Gauge: "gauge"}[f.kind])
	}
	for _, l := range labels {
		if !validLabelName.MatchString(l[0]) || strings.HasPrefix(l[0], "__") {
			return nil, tritonerr.InvalidArgf("Invalid label name")
		}
	}
	slices.SortFunc(labels, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for _, m := range f.metrics {
		if slices.Equal(m.labels, labels) {
			m.refs++
			return m, nil
		}
	}
	m := &metric{f: f, labels: labels, refs: 1}
	if buckets != nil {
		m.buckets = slices.Clone(buckets)
		slices.Sort(m.buckets)
		m.counts = make([]uint64, len(m.buckets))
	}
	f.metrics = append(f.metrics, m)
	return m, nil
}

func (m *metric) release() {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	m.refs--
	if m.refs == 0 {
		m.f.metrics = slices.DeleteFunc(m.f.metrics, func(x *metric) bool { return x == m })
	}
}

// kindName is TRITONSERVER_MetricKind's name, as Triton's messages give it.
var kindName = map[MetricKind]string{Counter: "TRITONSERVER_METRIC_KIND_COUNTER", Gauge: "TRITONSERVER_METRIC_KIND_GAUGE", Histogram: "TRITONSERVER_METRIC_KIND_HISTOGRAM"}

func (m *metric) unsupported(op string) error {
	return tritonerr.Unsupportedf("%s does not support %s", kindName[m.f.kind], op)
}

func (m *metric) read() (float64, error) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if m.f.kind == Histogram {
		return 0, m.unsupported("Value")
	}
	return m.value, nil
}

func (m *metric) increment(v float64) error {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	switch m.f.kind {
	case Counter:
		if v < 0 {
			return tritonerr.InvalidArgf("TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by non-negative values.")
		}
	case Histogram:
		return m.unsupported("Increment")
	}
	m.value += v
	return nil
}

func (m *metric) set(v float64) error {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if m.f.kind != Gauge {
		return m.unsupported("Set")
	}
	m.value = v
	return nil
}

func (m *metric) observe(v float64) error {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if m.f.kind != Histogram {
		return m.unsupported("Observe")
	}
	for i, b := range m.buckets {
		if v <= b {
			m.counts[i]++
			break
		}
	}
	m.sum += v
	m.count++
	return nil
}

// MetricsProcess names this process in the statistics its executors
// report with MetricFamilies: executors sharing a process share the
// registry, so a gateway summing them counts it once.
var MetricsProcess = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}()

// MetricFamilies returns the families backends registered that have
// metrics, by name, each one's metrics by labels, with their values now:
// what the executor reports to gateways with its statistics.
func MetricFamilies() []*busv1.BackendMetricFamily {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	var out []*busv1.BackendMetricFamily
	for _, n := range sortedKeys(registry.families) {
		f := registry.families[n]
		if len(f.metrics) == 0 {
			continue
		}
		pf := &busv1.BackendMetricFamily{Name: f.name, Help: f.help, Kind: uint32(f.kind)}
		for _, m := range f.metrics {
			pm := &busv1.BackendMetric{Value: m.value, Sum: m.sum, Count: m.count, BucketBounds: slices.Clone(m.buckets)}
			for _, l := range m.labels {
				pm.Labels = append(pm.Labels, &busv1.BackendMetricLabel{Name: l[0], Value: l[1]})
			}
			var cum uint64
			for _, c := range m.counts {
				cum += c
				pm.BucketCounts = append(pm.BucketCounts, cum)
			}
			pf.Metrics = append(pf.Metrics, pm)
		}
		slices.SortFunc(pf.Metrics, func(a, b *busv1.BackendMetric) int {
			return strings.Compare(labelText(labelPairs(a), ""), labelText(labelPairs(b), ""))
		})
		out = append(out, pf)
	}
	return out
}

func labelPairs(m *busv1.BackendMetric) [][2]string {
	out := make([][2]string, len(m.GetLabels()))
	for i, l := range m.GetLabels() {
		out[i] = [2]string{l.GetName(), l.GetValue()}
	}
	return out
}

// WriteMetrics writes the backends' custom metrics in Prometheus' text
// exposition format as Triton's (prometheus-cpp) does: "# HELP" when the
// family has a help text, "# TYPE" with counter, gauge or histogram, a
// histogram's _count, _sum and cumulative _bucket lines ending with
// le="+Inf". The executor's /metrics serves them after its own.
func WriteMetrics(w io.Writer) error {
	var b strings.Builder
	for _, f := range MetricFamilies() {
		if f.GetHelp() != "" {
			fmt.Fprintf(&b, "# HELP %s %s\n", f.GetName(), escapeHelp(f.GetHelp()))
		}
		fmt.Fprintf(&b, "# TYPE %s %s\n", f.GetName(), map[MetricKind]string{Counter: "counter", Gauge: "gauge", Histogram: "histogram"}[MetricKind(f.GetKind())])
		for _, m := range f.GetMetrics() {
			labels := labelPairs(m)
			if MetricKind(f.GetKind()) != Histogram {
				fmt.Fprintf(&b, "%s%s %s\n", f.GetName(), labelText(labels, ""), num(m.GetValue()))
				continue
			}
			fmt.Fprintf(&b, "%s_count%s %d\n", f.GetName(), labelText(labels, ""), m.GetCount())
			fmt.Fprintf(&b, "%s_sum%s %s\n", f.GetName(), labelText(labels, ""), num(m.GetSum()))
			for i, bound := range m.GetBucketBounds() {
				fmt.Fprintf(&b, "%s_bucket%s %d\n", f.GetName(), labelText(labels, num(bound)), m.GetBucketCounts()[i])
			}
			if n := len(m.GetBucketBounds()); n == 0 || !math.IsInf(m.GetBucketBounds()[n-1], 1) {
				fmt.Fprintf(&b, "%s_bucket%s %d\n", f.GetName(), labelText(labels, "+Inf"), m.GetCount())
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

// labelText writes labels (and le, when not empty) as Prometheus' text
// format does, values escaped.
func labelText(labels [][2]string, le string) string {
	if len(labels) == 0 && le == "" {
		return ""
	}
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range labels {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `%s="%s"`, l[0], esc.Replace(l[1]))
	}
	if le != "" {
		if len(labels) > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `le="%s"`, le)
	}
	b.WriteByte('}')
	return b.String()
}
