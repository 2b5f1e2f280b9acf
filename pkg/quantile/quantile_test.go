package quantile

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Quantiles of two processes' merged windows are within Accuracy of the
// exact quantiles of all their observations together.
func TestMergedQuantilesMatchExact(t *testing.T) {
	now := time.Unix(1000, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	var a, b Window
	var all []float64
	for i := range 5000 {
		v := math.Exp(rng.Float64()*12) + 1 // 2 µs to ~160 ms
		if i%3 == 0 {
			a.Observe(now, v)
		} else {
			b.Observe(now, v)
		}
		all = append(all, v)
	}
	var m Merged
	m.Add(a.Proto(now, "f"))
	m.Add(b.Proto(now, "f"))
	if m.Count != 5000 {
		t.Fatalf("count %d, want 5000", m.Count)
	}
	var sum float64
	for _, v := range all {
		sum += v
	}
	if math.Abs(m.Sum-sum) > 1e-6*sum {
		t.Fatalf("sum %v, want %v", m.Sum, sum)
	}
	slices.Sort(all)
	qs := []float64{0, 0.5, 0.9, 0.99, 0.999, 1}
	for i, got := range m.Quantiles(qs) {
		rank := max(int(math.Ceil(qs[i]*float64(len(all)))), 1)
		want := all[rank-1]
		if math.Abs(got-want) > Accuracy*want*1.0001 {
			t.Errorf("q%v = %v, want %v within %v", qs[i], got, want, Accuracy)
		}
	}
}

// Observations leave the window after MaxAge; count and sum keep them.
func TestWindowSlides(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var w Window
	w.Observe(t0, 100)
	w.Observe(t0.Add(30*time.Second), 5000)
	var m Merged
	m.Add(w.Proto(t0.Add(65*time.Second), "f"))
	if got := m.Quantiles([]float64{0.5})[0]; math.Abs(got-5000) > 50 {
		t.Errorf("median after the first left the window: %v, want ~5000", got)
	}
	if m.Count != 2 || m.Sum != 5100 {
		t.Errorf("count %d sum %v, want 2 and 5100", m.Count, m.Sum)
	}
	var late Merged
	late.Add(w.Proto(t0.Add(10*time.Minute), "f"))
	if q := late.Quantiles([]float64{0.5})[0]; !math.IsNaN(q) {
		t.Errorf("empty window: quantile %v, want NaN", q)
	}
	if late.Count != 2 {
		t.Errorf("count %d after the window emptied, want 2", late.Count)
	}
}

func TestZeroObservations(t *testing.T) {
	now := time.Unix(0, 0)
	var w Window
	w.Observe(now, 0)
	w.Observe(now, 0)
	w.Observe(now, 10)
	var m Merged
	m.Add(w.Proto(now, "f"))
	got := m.Quantiles([]float64{0.5, 1})
	if got[0] != 0 || math.Abs(got[1]-10) > 0.1 {
		t.Errorf("quantiles %v, want [0 ~10]", got)
	}
}
