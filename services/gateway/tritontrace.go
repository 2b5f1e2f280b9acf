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
}

type fileFrontKey struct{}

// fileFront returns the front of a request for model that started at
// start, or nil when no request for model may be traced into the file.
func (g *Gateway) fileFront(model string, grpc bool, start time.Time) *fileFront {
	if g.traceFile == nil || g.trace.Level(model) == tracesetting.LevelOff {
		return nil
	}
	f := &fileFront{received: start, recvStart: tritontrace.HTTPRecvStart, recvEnd: tritontrace.HTTPRecvEnd,
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
func (g *Gateway) startFileTrace(ctx context.Context, vv *versionView, req *inference.ModelInferRequest) (context.Context, *tritontrace.Trace) {
	if g.traceFile == nil || g.trace.Level(req.GetModelName()) == tracesetting.LevelOff {
		return ctx, nil
	}
	tr := g.traceFile.Start(req.GetModelName(), vv.version, req.GetId())
	if tr == nil {
		return ctx, nil
	}
	if f, ok := ctx.Value(fileFrontKey{}).(*fileFront); ok {
		f.trace = tr
		tr.Stamp(f.recvStart, f.received)
		tr.Stamp(f.recvEnd, f.read)
	}
	tr.Stamp(tritontrace.RequestStart, time.Now())
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
	if p, ok := resp.GetParameters()[tracing.TimestampsParameter]; ok {
		delete(resp.Parameters, tracing.TimestampsParameter)
		if ts, ok := tracing.DecodeTimestamps(p.GetStringParam()); ok {
			tr.Stamp(tritontrace.QueueStart, ts.QueueStart)
			tr.Stamp(tritontrace.ComputeStart, ts.ExecStart)
			tr.Stamp(tritontrace.ComputeInputEnd, ts.ComputeStart)
			tr.Stamp(tritontrace.ComputeOutputStart, ts.ComputeEnd)
			tr.Stamp(tritontrace.ComputeEnd, ts.ExecEnd)
		}
	}
	if tr.Tensors() && resp != nil {
		raw := resp.GetRawOutputContents()
		for i, out := range resp.GetOutputs() {
			if i < len(raw) {
				tr.AddTensor(tritontrace.TensorBackendOutput, out.GetName(), out.GetDatatype(), out.GetShape(), raw[i])
			}
		}
	}
	if f, ok := ctx.Value(fileFrontKey{}).(*fileFront); !ok || f.trace != tr {
		g.traceFile.Finish(tr)
	}
}

// sent stamps the response's send, from start to now, and finishes the
// trace (nil, or not traced: nothing).
func (g *Gateway) sent(f *fileFront, start time.Time) {
	if !f.traced() {
		return
	}
	f.trace.Stamp(f.sendStart, start)
	f.trace.Stamp(f.sendEnd, time.Now())
	g.traceFile.Finish(f.trace)
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
