// Package tritontrace writes Triton's JSON trace files (tritonserver
// --trace-config triton,file=PATH, trace mode "triton"): one JSON array of
// records, each naming its trace by "id" — the trace's model
// ({"id","model_name","model_version","request_id"}), one record per
// timestamp ({"id","timestamps":[{"name","ns"}]}) and, at level TENSORS,
// one per tensor ({"id","activity","tensor":{"name","data","shape","dtype"}})
// — as Triton's server (src/tracer.cc) writes them and its QA
// (qa/common/trace_summary.py) reads them.
//
// Traces are gathered by the setting they were sampled under
// (tracesetting.Sampler: the global setting, or a model's), as Triton's
// TraceSetting gathers them: with log_frequency N, every N traces go to a
// new file PATH.<index> (index from 0, shared by every setting); when
// trace_count runs out, the traces gathered go to the next PATH.<index> as
// soon as the last one ends; what a setting gathered is written when a
// change replaces it, and at Close — to PATH.<index> when log_frequency is
// set, else appended to PATH, whose closing bracket Close writes.
//
// Timestamps are wall-clock Unix nanoseconds (Triton's are its steady
// clock's): a Nereid trace joins the gateway's instants (receipt, send,
// request start and end) with the executor's (queue, compute), which may
// run on another machine.
package tritontrace
