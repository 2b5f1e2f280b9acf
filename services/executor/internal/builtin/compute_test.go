package builtin

import (
	"context"
	"testing"
	"time"
)

func TestComputeTakesItsTime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		clock func() *computeClock
		d     time.Duration
	}{
		{"clock", newComputeClock, 3 * time.Millisecond},
		{"clock, longer than a slice", newComputeClock, computeSlice + 2*time.Millisecond},
		{"Go timers", func() *computeClock { return nil }, 3 * time.Millisecond},
		{"closed clock", func() *computeClock { c := newComputeClock(); c.close(); return c }, 3 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.clock()
			defer c.close()
			for range 3 { // the clock is re-armed for each execution
				start := time.Now()
				if err := compute(context.Background(), c, tc.d); err != nil {
					t.Fatalf("compute: %v", err)
				}
				if took := time.Since(start); took < tc.d {
					t.Fatalf("compute of %s returned after %s", tc.d, took)
				}
			}
		})
	}
}

func TestComputeStopsWithItsContext(t *testing.T) {
	c := newComputeClock()
	defer c.close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- compute(ctx, c, time.Hour) }()
	cancel()
	err := <-done
	if err == nil || err.Error() != "executor is shutting down" {
		t.Fatalf("compute after its context ended: %v, want the executor's shutdown error", err)
	}
}
