package gateway

import (
	"context"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tracesetting"
	"github.com/nereid-io/nereid/pkg/tracing"
	"github.com/nereid-io/nereid/pkg/tritontrace"
)

// Triton's trace mode (--trace-config triton,file=PATH): the gateway that
// receives a request writes its trace to PATH (g.traceFile,
// pkg/tritontrace). forwardInfer samples the request and stamps
// REQUEST_START and REQUEST_END around its trip to the executor, which
// returns QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END,
// COMPUTE_OUTPUT_START and COMPUTE_END when asked (tracing.AskTimestamps);
// the HTTP and gRPC front ends add their receipt and send instants
// (fileFront). A request for a model whose trace level is OFF pays one
// settings lookup, and nothing at all in the other trace mode.

// fileFront is what a front end knows of a request that may be traced
// into the trace file: its protocol's names, when it started and finished
// reading the request, and the trace once forwardInfer sampled one, which
// the front end then stamps with its send and finishes.
type fileFront struct {
	recvStart, recvEnd, sendStart, sendEnd tritontrace.Stamp
	received, read                         time.Time
	trace                                  *tritontrace.Trace
	file                                   *tritontrace.Writer
	// perResponse: the front sends each response of a decoupled model as
	// it comes (a gRPC stream, generate_stream), and streamInfer stamps
	// each send (Triton's GRPC_SEND_START/END per response) and finishes
	// the trace; otherwise the front stamps its one send (sent).
	perResponse bool
}

type fileFrontKey struct{}

// fileParentKey holds the trace of the ensemble request whose steps run
// under the context: each step is traced as its child (Triton's
// SpawnChildTrace), whatever the step model's trace settings, and only
// then (a composing model's request is not sampled on its own).
type fileParentKey struct{}

// fileFront returns the front of a request for model that started at
// start, or nil when no request for model may be traced into the file.
func (g *Gateway) fileFront(model string, grpc bool, start time.Time) *fileFront {
	if g.traceFile == nil || g.trace.Level(model) == tracesetting.LevelOff {
		return nil
	}
	f := &fileFront{file: g.traceFile, received: start, recvStart: tritontrace.HTTPRecvStart, recvEnd: tritontrace.HTTPRecvEnd,
		sendStart: tritontrace.HTTPSendStart, sendEnd: tritontrace.HTTPSendEnd}
	if grpc {
		f.recvStart, f.recvEnd = tritontrace.GRPCWaitReadStart, tritontrace.GRPCWaitReadEnd
		f.sendStart, f.sendEnd = tritontrace.GRPCSendStart, tritontrace.GRPCSendEnd
	}
	return f
}

// httpFileFront is the front of an HTTP request for model starting now
// (nil: see fileFront). Without a trace file it does not read the clock.
func (g *Gateway) httpFileFront(model string) *fileFront {
	if g.traceFile == nil {
		return nil
	}
	return g.fileFront(model, false, time.Now())
}

// readDone records that the request has been read.
func (f *fileFront) readDone() {
	if f != nil {
		f.read = time.Now()
	}
}

// traced reports whether the request is traced into the file.
func (f *fileFront) traced() bool { return f != nil && f.trace != nil }

// withFileFront keeps f in ctx for forwardInfer (nothing when f is nil).
func withFileFront(ctx context.Context, f *fileFront) context.Context {
	if f == nil {
		return ctx
	}
	return context.WithValue(ctx, fileFrontKey{}, f)
}

// startFileTrace decides whether req is traced into the trace file and,
// if so, returns its trace and ctx asking the executor for its
// timestamps. Recording req's inputs (level TENSORS) happens here, before
// forwarding hands them over.
//
// An ensemble's step (ensembleStep) is traced as a child of the
// ensemble's trace, when it has one; an ensemble's own trace has Triton's
// QUEUE_START (its scheduler queues it at once) and no compute, and its
// steps run under it (fileParentKey).
func (g *Gateway) startFileTrace(ctx context.Context, vv *versionView, req *inference.ModelInferRequest) (context.Context, *tritontrace.Trace) {
	if g.traceFile == nil {
		return ctx, nil
	}
	var tr *tritontrace.Trace
	if ctx.Value(ensembleStepKey{}) != nil {
		parent, _ := ctx.Value(fileParentKey{}).(*tritontrace.Trace)
		if tr = g.traceFile.StartChild(parent, req.GetModelName(), vv.version, req.GetId()); tr == nil {
			return ctx, nil
		}
	} else {
		if g.trace.Level(req.GetModelName()) == tracesetting.LevelOff {
			return ctx, nil
		}
		if tr = g.traceFile.Start(req.GetModelName(), vv.version, req.GetId()); tr == nil {
			return ctx, nil
		}
		if f, ok := ctx.Value(fileFrontKey{}).(*fileFront); ok {
			f.trace = tr
			tr.Stamp(f.recvStart, f.received)
			tr.Stamp(f.recvEnd, f.read)
		}
	}
	tr.Stamp(tritontrace.RequestStart, time.Now())
	if vv.plan != nil {
		tr.Stamp(tritontrace.QueueStart, time.Now())
		tr.Spawns()
		ctx = context.WithValue(ctx, fileParentKey{}, tr)
	}
	if tr.Tensors() {
		raw := req.GetRawInputContents()
		for i, in := range req.GetInputs() {
			if i < len(raw) {
				tr.AddTensor(tritontrace.TensorQueueInput, in.GetName(), in.GetDatatype(), in.GetShape(), raw[i])
			}
		}
	}
	return tracing.AskTimestamps(ctx), tr
}

// endFileTrace stamps REQUEST_END and the executor's timestamps, which it
// takes out of resp, and records resp's outputs (level TENSORS). The
// trace is finished here unless a front end sends the response.
func (g *Gateway) endFileTrace(ctx context.Context, tr *tritontrace.Trace, resp *inference.ModelInferResponse) {
	if tr == nil {
		return
	}
	tr.Stamp(tritontrace.RequestEnd, time.Now())
	takeStamps(tr, resp)
	recordOutputs(tr, resp)
	if f, ok := ctx.Value(fileFrontKey{}).(*fileFront); !ok || f.trace != tr {
		g.traceFile.Finish(tr)
	}
}

// takeStamps stamps tr with the executor's timestamps that resp carries,
// which it takes out; alone reports that resp was nothing but them, the
// final flag of a decoupled model (tracing.TimestampsAloneParameter).
func takeStamps(tr *tritontrace.Trace, resp *inference.ModelInferResponse) (alone bool) {
	params := resp.GetParameters()
	if len(params) == 0 {
		return false
	}
	p, ok := params[tracing.TimestampsParameter]
	if !ok {
		if p, alone = params[tracing.TimestampsAloneParameter]; !alone {
			return false
		}
		delete(params, tracing.TimestampsAloneParameter)
	} else {
		delete(params, tracing.TimestampsParameter)
	}
	if ts, ok := tracing.DecodeTimestamps(p.GetStringParam()); ok {
		tr.Stamp(tritontrace.QueueStart, ts.QueueStart)
		tr.Stamp(tritontrace.ComputeStart, ts.ExecStart)
		tr.Stamp(tritontrace.ComputeInputEnd, ts.ComputeStart)
		tr.Stamp(tritontrace.ComputeOutputStart, ts.ComputeEnd)
		tr.Stamp(tritontrace.ComputeEnd, ts.ExecEnd)
	}
	return alone
}

// recordOutputs records resp's outputs (level TENSORS).
func recordOutputs(tr *tritontrace.Trace, resp *inference.ModelInferResponse) {
	if !tr.Tensors() || resp == nil {
		return
	}
	raw := resp.GetRawOutputContents()
	for i, out := range resp.GetOutputs() {
		if i < len(raw) {
			tr.AddTensor(tritontrace.TensorBackendOutput, out.GetName(), out.GetDatatype(), out.GetShape(), raw[i])
		}
	}
}

// fileEmit is emit for a stream traced into the file (streamInfer): each
// response loses the executor's timestamps, which the final message
// carries (the message of nothing but them becomes the final flag
// alone), and has its outputs recorded; where the front sends each
// response as it comes, each send is stamped.
func fileEmit(ctx context.Context, tr *tritontrace.Trace, emit func(response) error) func(response) error {
	f, _ := ctx.Value(fileFrontKey{}).(*fileFront)
	if f != nil && (f.trace != tr || !f.perResponse) {
		f = nil
	}
	return func(r response) error {
		if r.resp != nil {
			if takeStamps(tr, r.resp) {
				r.resp = nil
			}
			recordOutputs(tr, r.resp)
		}
		if f == nil || (r.resp == nil && r.err == nil) {
			return emit(r)
		}
		start := time.Now()
		err := emit(r)
		tr.Append(f.sendStart, start)
		tr.Append(f.sendEnd, time.Now())
		return err
	}
}

// endFileStream stamps REQUEST_END of a traced stream and finishes its
// trace, unless a front sends its one response (generate).
func (g *Gateway) endFileStream(ctx context.Context, tr *tritontrace.Trace) {
	if tr == nil {
		return
	}
	tr.Stamp(tritontrace.RequestEnd, time.Now())
	if f, ok := ctx.Value(fileFrontKey{}).(*fileFront); !ok || f.trace != tr || f.perResponse {
		g.traceFile.Finish(tr)
	}
}

// sent stamps the response's send, from start to now, and finishes the
// trace (nil, or not traced: nothing).
func (g *Gateway) sent(f *fileFront, start time.Time) { f.sent(start) }

// sent stamps the response's send, from start to now, and finishes the
// trace (nil, or not traced: nothing).
func (f *fileFront) sent(start time.Time) {
	if !f.traced() {
		return
	}
	f.trace.Stamp(f.sendStart, start)
	f.trace.Stamp(f.sendEnd, time.Now())
	f.file.Finish(f.trace)
}

// tracedReply is a traced unary gRPC answer: the codec stamps its send
// around encoding it (grpc-go writes it out after that, asynchronously)
// and finishes its trace.
type tracedReply struct {
	msg   any // *inference.ModelInferResponse or *encodedResponse
	front *fileFront
	g     *Gateway
}

// grpcReply is the answer of a unary gRPC infer request: out, or out in a
// tracedReply when the request is traced into the file. A failed traced
// request is finished at once, its error being what is sent.
func (g *Gateway) grpcReply(f *fileFront, out any, err error) (any, error) {
	if !f.traced() {
		return out, err
	}
	if err != nil {
		g.sent(f, time.Now())
		return nil, err
	}
	return &tracedReply{msg: out, front: f, g: g}, nil
}
