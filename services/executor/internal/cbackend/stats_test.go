//go:build cgo

package cbackend

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// steadyRecorder takes statistics as SteadyStamps, as the executor does;
// Timestamps it counts apart.
type steadyRecorder struct {
	mu        sync.Mutex
	requests  []backend.Timestamps
	batches   []backend.Timestamps
	converted int
}

func (s *steadyRecorder) ReportStatistics(*backend.Request, bool, backend.Timestamps) {
	s.mu.Lock()
	s.converted++
	s.mu.Unlock()
}

func (s *steadyRecorder) ReportBatchStatistics(int, backend.Timestamps) {
	s.mu.Lock()
	s.converted++
	s.mu.Unlock()
}

func (s *steadyRecorder) ReportSteadyStatistics(_ *backend.Request, _ bool, t backend.SteadyStamps) {
	s.mu.Lock()
	s.requests = append(s.requests, t.Timestamps())
	s.mu.Unlock()
}

func (s *steadyRecorder) ReportSteadyBatchStatistics(_ int, t backend.SteadyStamps) {
	s.mu.Lock()
	s.batches = append(s.batches, t.Timestamps())
	s.mu.Unlock()
}

// TestSteadyStatistics checks that a C backend's readings of its steady
// clock reach a reporter that takes SteadyStamps as such, placed on Go's
// monotonic clock, in order.
func TestSteadyStatistics(t *testing.T) {
	m := testModel(t, "nidentity", identityConfig("id", "nidentity"), nil)
	stats := &steadyRecorder{}
	in, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "id_0", Kind: inference.ModelInstanceGroup_KIND_CPU, Stats: stats})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Finalize()
	r := backend.NewRequest(context.Background(), func(*backend.Request, *backend.Response) {})
	r.Inputs = []backend.Input{{Name: "INPUT0", DataType: tensor.FP32, Shape: []int64{1, 2}, Data: make([]byte, 8)}}
	r.RequestedOutputs = []string{"OUTPUT0"}
	before := time.Now()
	if err := in.Execute(context.Background(), []*backend.Request{r}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if stats.converted != 0 || len(stats.requests) != 1 || len(stats.batches) != 1 {
		t.Fatalf("%d requests and %d batches as SteadyStamps, %d as Timestamps; want 1, 1, 0", len(stats.requests), len(stats.batches), stats.converted)
	}
	// Converted, a reading runs behind Go's clock by up to the time
	// between the two reads that tie the clocks together (steadyNow): it
	// is never after the execution, and well within a minute of it.
	for _, ts := range []backend.Timestamps{stats.requests[0], stats.batches[0]} {
		points := []time.Time{ts.ExecStart, ts.ComputeStart, ts.ComputeEnd, ts.ExecEnd, after}
		for i := 1; i < len(points); i++ {
			if points[i].Sub(points[i-1]) < 0 {
				t.Fatalf("points out of order (the last is after Execute): %v", points)
			}
		}
		if d := before.Sub(ts.ExecStart); d > time.Minute {
			t.Fatalf("execution started %v before Execute was called", d)
		}
	}
}
