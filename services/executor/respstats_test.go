package executor

import (
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// TestReportedResponseStats counts reported responses with Triton's
// InferenceStatsAggregator rules: a success splits compute_infer and
// compute_output at the compute-output start; a response with no
// compute-output start is empty; a failure with outputs counts both
// phases and fail; a cancelled one only cancel.
func TestReportedResponseStats(t *testing.T) {
	s := newStats()
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s.reportedResponse(0, backend.ResponseStatistics{Start: at(0), ComputeOutputStart: at(2), End: at(3)})
	s.reportedResponse(1, backend.ResponseStatistics{Start: at(0), ComputeOutputStart: at(2), End: at(3), Err: tritonerr.Internalf("x")})
	s.reportedResponse(2, backend.ResponseStatistics{Start: at(0), End: at(3)})
	s.reportedResponse(2, backend.ResponseStatistics{Start: at(0), End: at(5), Err: tritonerr.Internalf("x")})
	s.reportedResponse(3, backend.ResponseStatistics{Start: at(0), End: at(1), Err: tritonerr.New(tritonerr.Cancelled, "gone")})
	ms := func(n uint64) uint64 { return n * uint64(time.Millisecond) }
	type d = struct{ count, ns uint64 }
	want := []struct{ infer, output, success, fail, empty, cancel d }{
		{infer: d{1, ms(2)}, output: d{1, ms(1)}, success: d{1, ms(3)}},
		{infer: d{1, ms(2)}, output: d{1, ms(1)}, fail: d{1, ms(3)}},
		{infer: d{2, ms(8)}, empty: d{1, ms(3)}, fail: d{1, ms(5)}},
		{cancel: d{1, ms(1)}},
	}
	got := s.proto("m", "1").GetResponseStats()
	if len(got) != len(want) {
		t.Fatalf("%d response indexes, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[[]string{"0", "1", "2", "3"}[i]]
		for name, pair := range map[string][2]d{
			"compute_infer":  {{g.GetComputeInfer().GetCount(), g.GetComputeInfer().GetNs()}, w.infer},
			"compute_output": {{g.GetComputeOutput().GetCount(), g.GetComputeOutput().GetNs()}, w.output},
			"success":        {{g.GetSuccess().GetCount(), g.GetSuccess().GetNs()}, w.success},
			"fail":           {{g.GetFail().GetCount(), g.GetFail().GetNs()}, w.fail},
			"empty_response": {{g.GetEmptyResponse().GetCount(), g.GetEmptyResponse().GetNs()}, w.empty},
			"cancel":         {{g.GetCancel().GetCount(), g.GetCancel().GetNs()}, w.cancel},
		} {
			if pair[0] != pair[1] {
				t.Errorf("index %d %s = %v, want %v", i, name, pair[0], pair[1])
			}
		}
	}
}
