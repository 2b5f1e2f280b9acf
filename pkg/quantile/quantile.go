// Package quantile keeps the observations behind Triton's latency summaries
// (nv_inference_*_summary_us) in a form that adds up across processes: each
// executor counts the observations of a sliding window in logarithmic
// buckets, and whoever serves the metrics merges the executors' buckets and
// reads the quantiles off the merged counts. A quantile read this way is
// within Accuracy (relative) of an observation of that rank, the guarantee
// a summary's per-quantile error gives, but over the whole constellation
// rather than one process.
package quantile

import (
	"math"
	"slices"
	"time"

	"github.com/nereid-io/nereid/api/busv1"
)

// The window is Triton's (prometheus-cpp's defaults): observations count
// for MaxAge, dropped AgeBuckets at a time.
const (
	MaxAge     = time.Minute
	AgeBuckets = 5
	// Accuracy is the relative error of a quantile read off the buckets.
	Accuracy = 0.01
)

var (
	gamma    = (1 + Accuracy) / (1 - Accuracy)
	logGamma = math.Log(gamma)
)

// zeroBucket holds observations of 0 or less (an interval the clock could
// not resolve).
const zeroBucket = math.MinInt32

// bucket is the index of the bucket holding v: (gamma^(i-1), gamma^i].
func bucket(v float64) int32 {
	if v <= 0 || math.IsNaN(v) {
		return zeroBucket
	}
	return int32(math.Ceil(math.Log(v) / logGamma))
}

// value is the estimate of the observations in bucket i, within Accuracy
// of each of them.
func value(i int32) float64 {
	if i == zeroBucket {
		return 0
	}
	return 2 * math.Pow(gamma, float64(i)) / (gamma + 1)
}

// Window is one summary of one process: the count and sum of every
// observation and the bucket counts of the last MaxAge. It is not safe for
// concurrent use; its owner locks.
type Window struct {
	count uint64
	sum   float64
	ages  [AgeBuckets]map[int32]uint64
	head  int       // the age bucket observations go to
	since time.Time // when head started
}

func (w *Window) rotate(now time.Time) {
	step := MaxAge / AgeBuckets
	if w.since.IsZero() {
		w.since = now
		return
	}
	for n := 0; now.Sub(w.since) >= step && n < AgeBuckets; n++ {
		w.head = (w.head + 1) % AgeBuckets
		clear(w.ages[w.head])
		w.since = w.since.Add(step)
	}
	if now.Sub(w.since) >= step { // idle for longer than the window
		w.since = now
	}
}

// Observe records v, taken at now.
func (w *Window) Observe(now time.Time, v float64) {
	w.rotate(now)
	w.count++
	w.sum += v
	if w.ages[w.head] == nil {
		w.ages[w.head] = map[int32]uint64{}
	}
	w.ages[w.head][bucket(v)]++
}

// Proto is the summary as of now, named family.
func (w *Window) Proto(now time.Time, family string) *busv1.LatencySummary {
	w.rotate(now)
	s := &busv1.LatencySummary{Family: family, Count: w.count, Sum: w.sum, Window: map[int32]uint64{}}
	for _, a := range w.ages {
		for i, n := range a {
			s.Window[i] += n
		}
	}
	return s
}

// Merged is the sum of several processes' windows of one summary.
type Merged struct {
	Count  uint64
	Sum    float64
	window map[int32]uint64
	seen   uint64 // observations in window
}

// Add adds one process's summary.
func (m *Merged) Add(s *busv1.LatencySummary) {
	m.Count += s.GetCount()
	m.Sum += s.GetSum()
	if m.window == nil {
		m.window = map[int32]uint64{}
	}
	for i, n := range s.GetWindow() {
		m.window[i] += n
		m.seen += n
	}
}

// Quantiles are the values at the quantiles qs (each in [0, 1]) of the
// window's observations, NaN for each when the window is empty, as a
// Prometheus summary reports them.
func (m *Merged) Quantiles(qs []float64) []float64 {
	out := make([]float64, len(qs))
	if m.seen == 0 {
		for i := range out {
			out[i] = math.NaN()
		}
		return out
	}
	keys := make([]int32, 0, len(m.window))
	for i := range m.window {
		keys = append(keys, i)
	}
	slices.Sort(keys)
	for qi, q := range qs {
		// The rank of the observation the quantile names, as the nearest-
		// rank method counts (1-based).
		rank := uint64(math.Ceil(q * float64(m.seen)))
		rank = max(rank, 1)
		var cum uint64
		for _, i := range keys {
			cum += m.window[i]
			if cum >= rank {
				out[qi] = value(i)
				break
			}
		}
	}
	return out
}
