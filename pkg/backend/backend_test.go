package backend

import (
	"testing"
	"time"
)

// TestSteadyStamps checks that Timestamps and SteadyStamps convert to each
// other without losing a point, on the monotonic clock.
func TestSteadyStamps(t *testing.T) {
	t0 := time.Now()
	ts := Timestamps{ExecStart: t0, ComputeStart: t0.Add(time.Microsecond), ComputeEnd: t0.Add(3 * time.Microsecond), ExecEnd: t0.Add(4 * time.Microsecond)}
	s := ts.Steady()
	if s.ExecStart != 0 || s.ComputeStart != time.Microsecond || s.ComputeEnd != 3*time.Microsecond || s.ExecEnd != 4*time.Microsecond {
		t.Fatalf("steady %+v", s)
	}
	back := s.Timestamps()
	for i, p := range [][2]time.Time{{back.ExecStart, ts.ExecStart}, {back.ComputeStart, ts.ComputeStart}, {back.ComputeEnd, ts.ComputeEnd}, {back.ExecEnd, ts.ExecEnd}} {
		if !p[0].Equal(p[1]) || p[0].Sub(t0) != p[1].Sub(t0) {
			t.Errorf("point %d: %v, want %v", i, p[0], p[1])
		}
	}
	// A base that is not the first point, as a backend's clock origin.
	base := t0.Add(-time.Hour)
	off := SteadyStamps{Base: base, ExecStart: time.Hour, ComputeStart: time.Hour + time.Microsecond}
	if got := off.Timestamps().ComputeStart.Sub(t0); got != time.Microsecond {
		t.Errorf("compute start %v after t0, want 1µs", got)
	}
}
