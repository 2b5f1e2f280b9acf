package backend

import (
	"context"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Backend is one initialized backend: TRITONBACKEND_Initialize has run (the
// Factory) and Finalize runs when the process that loaded it stops. A
// Backend is shared by every model that names it, so NewModel may be called
// concurrently for different models.
type Backend interface {
	// NewModel is TRITONBACKEND_ModelInitialize: called once per loaded
	// model version. An error means the model version fails to load; its
	// message is what the repository index shows.
	NewModel(ctx context.Context, m ModelInfo) (Model, error)
	// Finalize is TRITONBACKEND_Finalize: called once, after every model of
	// this backend has been finalized.
	Finalize() error
}

// Model is one loaded model version (TRITONBACKEND_Model). It makes the
// instances the executor runs.
type Model interface {
	// NewInstance is TRITONBACKEND_ModelInstanceInitialize: called once per
	// instance, that is instance_group entry × count. An error means the
	// model version fails to load.
	NewInstance(ctx context.Context, i InstanceInfo) (Instance, error)
	// Finalize is TRITONBACKEND_ModelFinalize: called after all of the
	// model's instances have been finalized.
	Finalize() error
}

// Instance is one model instance (TRITONBACKEND_ModelInstance). The executor
// never calls Execute on the same instance concurrently; different instances
// run in parallel.
type Instance interface {
	// Execute is TRITONBACKEND_ModelInstanceExecute. Every request must
	// get its answer: for a model that is not decoupled, exactly one
	// response (Request.Respond or Request.RespondError) before Execute
	// returns. A decoupled model sends any number of responses through the
	// request's ResponseSender, during Execute or after it from a goroutine
	// the instance owns, and ends each request with a final response or
	// the final flag (ResponseSender.SendFlags(ResponseFinal)); its inputs
	// stay valid until then. A non-nil error fails every request not yet
	// ended with that error (Triton hands ownership of the requests back
	// to the server in that case); requests already answered keep their
	// answer. ctx ends when the executor shuts down.
	Execute(ctx context.Context, requests []*Request) error
	// Finalize is TRITONBACKEND_ModelInstanceFinalize.
	Finalize() error
}

// ModelInfo is what a backend learns about a model version when it is
// loaded.
type ModelInfo struct {
	Name    string
	Version int64
	// Dir is the model's directory in the repository (where config.pbtxt
	// lives); VersionDir is Dir/<version>, where model files live.
	Dir        string
	VersionDir string
	// Config is the complete model configuration, defaults filled in. The
	// backend must not modify it.
	Config *inference.ModelConfig
}

// InstanceInfo describes one instance of a model.
type InstanceInfo struct {
	// Name is Triton's instance name: "<group name>_<index>", where the group
	// name defaults to "<model>_<group index>".
	Name string
	// Group is the index of the instance_group entry, Index the instance's
	// index within that entry's count.
	Group, Index int
	Kind         inference.ModelInstanceGroup_Kind
	// DeviceID is the GPU for KIND_GPU instances, 0 otherwise.
	DeviceID int32
	// Stats receives the instance's statistics (TRITONBACKEND_ModelInstance
	// ReportStatistics / ReportBatchStatistics). Never nil.
	Stats StatsReporter
}

// Timestamps are the four points of one execution that Triton's statistics
// are built from. Go's time.Time carries a monotonic reading, so differences
// are steady-clock durations as Triton requires.
//
//	compute_input  = ComputeStart - ExecStart
//	compute_infer  = ComputeEnd   - ComputeStart
//	compute_output = ExecEnd      - ComputeEnd
type Timestamps struct {
	ExecStart, ComputeStart, ComputeEnd, ExecEnd time.Time
}

// SteadyStamps are Timestamps as durations after Base, on Base's monotonic
// clock. A backend that reads a steady clock of its own (a C backend's
// std::chrono::steady_clock) has them without making a time.Time of each
// reading, which costs more than what the statistics do with it: they
// need durations, and one time.Time (Base) to place them.
type SteadyStamps struct {
	Base                                         time.Time
	ExecStart, ComputeStart, ComputeEnd, ExecEnd time.Duration
}

// Timestamps returns the same points as Timestamps.
func (s SteadyStamps) Timestamps() Timestamps {
	return Timestamps{ExecStart: s.Base.Add(s.ExecStart), ComputeStart: s.Base.Add(s.ComputeStart),
		ComputeEnd: s.Base.Add(s.ComputeEnd), ExecEnd: s.Base.Add(s.ExecEnd)}
}

// Steady returns the same points as SteadyStamps, after ExecStart.
func (t Timestamps) Steady() SteadyStamps {
	return SteadyStamps{Base: t.ExecStart, ComputeStart: t.ComputeStart.Sub(t.ExecStart),
		ComputeEnd: t.ComputeEnd.Sub(t.ExecStart), ExecEnd: t.ExecEnd.Sub(t.ExecStart)}
}

// SteadyStatsReporter is a StatsReporter that also takes SteadyStamps, with
// the same meaning. A backend that has them reports through it when its
// StatsReporter implements it (the executor's does).
type SteadyStatsReporter interface {
	ReportSteadyStatistics(r *Request, success bool, t SteadyStamps)
	ReportSteadyBatchStatistics(totalBatchSize int, t SteadyStamps)
}

// StatsReporter is where an instance reports what it did. It mirrors
// TRITONBACKEND_ModelInstanceReportStatistics and
// TRITONBACKEND_ModelInstanceReportBatchStatistics.
//
// Backends that report nothing still get correct counts: after Execute the
// executor reports, for every request and for the batch left unreported,
// the whole Execute call as compute_infer. Report per request before
// responding to it, as Triton requires before the request is released.
type StatsReporter interface {
	// ReportStatistics records one request's execution. When success is
	// false the timestamps are ignored and the request counts as failed.
	ReportStatistics(r *Request, success bool, t Timestamps)
	// ReportBatchStatistics records one execution of totalBatchSize
	// inferences: the sum of the batch sizes of its requests (1 for each
	// request of a model without batching).
	ReportBatchStatistics(totalBatchSize int, t Timestamps)
}

// ResponseStatistics are one response of a decoupled request as its backend
// reports them (TRITONBACKEND_ModelInstanceResponseStatistics): Start is
// when the backend began the response, ComputeOutputStart when it began
// putting its outputs together (zero for an empty response, which has
// none), End when it was done. Err is the error the response carried, nil
// for a success.
type ResponseStatistics struct {
	Start, ComputeOutputStart, End time.Time
	Err                            *tritonerr.Error
}

// ResponseStatsReporter is a StatsReporter that also takes the statistics
// of single responses (TRITONBACKEND_ModelInstanceReportResponseStatistics),
// counted in Triton's response_stats at index, the response's place among
// the request's reported responses (Request.NextResponseIndex).
type ResponseStatsReporter interface {
	ReportResponseStatistics(r *Request, index int, s ResponseStatistics)
}

// ResponseStatsOwner is implemented by a Model whose backend reports its
// responses' statistics itself, as Triton's C backends do: the executor
// then counts response_stats only from those reports, as Triton does,
// instead of timing each response of a decoupled request on its own.
type ResponseStatsOwner interface {
	ReportsResponseStatistics() bool
}
