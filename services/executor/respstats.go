package executor

import (
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// ReportResponseStatistics implements backend.ResponseStatsReporter: a
// backend's report of one response (Triton's C backends call
// TRITONBACKEND_ModelInstanceReportResponseStatistics after each send).
func (in *instance) ReportResponseStatistics(_ *backend.Request, index int, s backend.ResponseStatistics) {
	in.mv.stats.reportedResponse(index, s)
}

// reportedResponse counts a reported response at index with the rules of
// Triton's InferenceStatsAggregator: a success counts compute_infer
// (start to compute-output start), compute_output (from there to the end)
// and success (start to end); a response without outputs (no
// compute-output start) compute_infer and empty_response; a failure
// compute_infer (up to its outputs, or to its end when it has none),
// compute_output when it had outputs, and fail; a cancelled one cancel.
func (s *stats) reportedResponse(index int, r backend.ResponseStatistics) {
	if index < 0 {
		return
	}
	total := r.End.Sub(r.Start)
	hasOutput := !r.ComputeOutputStart.IsZero()
	s.mu.Lock()
	defer s.mu.Unlock()
	if index >= len(s.responses) {
		s.responses = append(s.responses, make([]responseStats, index+1-len(s.responses))...)
	}
	rs := &s.responses[index]
	switch {
	case r.Err != nil && r.Err.Kind == tritonerr.Cancelled:
		rs.cancel.add(total)
	case r.Err != nil:
		if hasOutput {
			rs.infer.add(r.ComputeOutputStart.Sub(r.Start))
			rs.output.add(r.End.Sub(r.ComputeOutputStart))
		} else {
			rs.infer.add(total)
		}
		rs.fail.add(total)
	case hasOutput:
		rs.infer.add(r.ComputeOutputStart.Sub(r.Start))
		rs.output.add(r.End.Sub(r.ComputeOutputStart))
		rs.success.add(total)
	default:
		rs.infer.add(total)
		rs.empty.add(total)
	}
}
