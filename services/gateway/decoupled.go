package gateway

import (
	"context"
	"google.golang.org/grpc/mem"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/infercodec"
	"github.com/nereid-io/nereid/pkg/kserve"
	"github.com/nereid-io/nereid/pkg/tracing"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Decoupled models answer a request with zero or more responses. The
// gateway asks the executor for a bus stream (bus.Conn.Stream) and hands
// each response on as it arrives: to the gRPC stream (ModelStreamInfer) or
// as a server-sent event (generate_stream). The bus stream's window bounds
// what waits between executor and gateway, and the gateway takes the next
// response only once the client has taken the last one, so a slow client
// slows the model down.

// streamWindow of a decoupled request: responses in flight between the
// executor and the gateway.
const decoupledWindow = bus.DefaultStreamWindow

// response is one response of a decoupled model as the gateway hands it
// on: outputs (resp) or an error, Final on the last one. A Final response
// with neither is the final flag alone.
type response struct {
	resp  *inference.ModelInferResponse
	err   error
	final bool
	// enc is resp as the executor encoded it, when the caller of
	// streamInfer asked for responses undecoded (resp is then nil): a
	// gRPC stream passes them on as they are.
	enc []byte
}

// isDecoupled reports whether the model uses the decoupled transaction
// policy.
func isDecoupled(vv *versionView) bool {
	return vv.config.GetModelTransactionPolicy().GetDecoupled()
}

// streamInfer sends a request of a decoupled model, its tensors all in
// raw_input_contents, to an executor and calls emit for each response in
// order until the final one. emit blocks as long as the client needs; its
// error (the client is gone) ends the stream and cancels the request. A
// failure of the transport (the executor lost mid-stream) is returned.
// A request the trace settings select is traced from here to the final
// response (in Triton's trace file: tritontrace.go, fileEmit).
func (g *Gateway) streamInfer(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, encoded bool, emit func(response) error) error {
	ctx, span := g.startRequestSpan(ctx, vv, req)
	ctx, file := g.startFileTrace(ctx, vv, req)
	if file != nil {
		encoded, emit = false, fileEmit(ctx, file, emit) // the final message carries the executor's timestamps
	}
	ctx, verbose := g.logRequest(ctx, vv, req)
	err := g.stream(ctx, vv, req, encoded, emit)
	if verbose {
		g.logOutcome(ctx, req, err)
	}
	if span != nil {
		tracing.End(span, err)
	}
	g.endFileStream(ctx, file)
	return err
}

func (g *Gateway) stream(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, encoded bool, emit func(response) error) error {
	if vv.plan != nil { // a decoupled ensemble: its steps run from here (ensemble.go)
		return g.streamEnsemble(ctx, vv, req, emit)
	}
	req.ModelVersion = vv.versionString()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // an early return cancels the executor's work
	if vv.config.GetSequenceBatching() != nil {
		// A decoupled sequence model: the router queues the request for
		// its sequence's slot, and the executor that runs it streams the
		// responses straight here.
		sp, err := sequenceParams(req)
		if err != nil {
			return err
		}
		return g.sendSequence(ctx, vv, req, sp, decoupledWindow, func(rctx context.Context, subject string, sr *busv1.SequenceRequest) error {
			st, err := g.bus.StreamQueued(rctx, subject, sr, decoupledWindow)
			if err != nil {
				return err
			}
			defer st.Close()
			return relay(st, encoded, emit)
		})
	}
	subject, release, err := g.shmRoute(ctx, req, bus.InferSubject(req.GetModelName(), req.GetModelVersion()))
	if err != nil {
		return err
	}
	defer release()
	st, err := g.bus.Stream(ctx, subject, req, decoupledWindow)
	if err != nil {
		return err
	}
	defer st.Close()
	return relay(st, encoded, emit)
}

// relay hands the responses of st to emit until the final one, decoded
// or, when encoded, as the executor encoded them.
func relay(st *bus.Stream, encoded bool, emit func(response) error) error {
	for {
		item, err := st.Recv()
		if err != nil {
			return err
		}
		r := response{final: item.Final}
		switch {
		case item.Err != nil:
			r.err = item.Err
		case encoded && (len(item.Data) > 0 || !item.Final):
			r.enc = item.Data
		case len(item.Data) > 0 || !item.Final:
			r.resp = &inference.ModelInferResponse{}
			if err := st.Unmarshal(item.Data, r.resp); err != nil {
				return err
			}
		}
		if err := emit(r); err != nil {
			return err
		}
		if item.Final {
			return nil
		}
	}
}

// begin counts a decoupled request of the stream in flight: the handler
// does not return before it is done.
func (st *streamState) begin() {
	st.mu.Lock()
	st.active++
	st.mu.Unlock()
}

// end1 marks a decoupled request done and frees its window slot.
func (st *streamState) end1() {
	st.mu.Lock()
	st.active--
	st.mu.Unlock()
	<-st.window
	st.drain()
}

// errStreamStopped is what sendNow returns once the handler is ending.
var errStreamStopped = tritonerr.New(tritonerr.Cancelled, "the stream has ended")

// sendNow writes one response of a decoupled request at once (decoupled
// responses are not ordered behind other requests' answers, as in
// Triton): a *inference.ModelStreamInferResponse, or one already encoded
// (encodedStreamResponse). With "triton_grpc_error: true" an error ends
// the stream with its status.
func (st *streamState) sendNow(out any, err error) error {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	st.mu.Lock()
	stopped := st.stopped
	if err != nil && st.grpcErrors && !stopped {
		st.finish(err)
		stopped = true
	}
	st.mu.Unlock()
	if stopped {
		return errStreamStopped
	}
	if err := st.stream.SendMsg(out); err != nil {
		st.mu.Lock()
		st.finish(err)
		st.mu.Unlock()
		return err
	}
	return nil
}

// streamDecoupledGRPC serves one request of a decoupled model on a
// ModelStreamInfer stream: every response as a stream response with the
// request's id; errors in error_message, the stream staying open. With
// the request parameter triton_enable_empty_final_response every response
// carries triton_final_response (true on the last), and a final flag sent
// alone becomes an empty response, as Triton does.
func (g *Gateway) streamDecoupledGRPC(ctx context.Context, st *streamState, vv *versionView, req *inference.ModelInferRequest) {
	defer func() { handoff.TakeRegion(req).Release() }()
	emptyFinal := req.GetParameters()["triton_enable_empty_final_response"].GetBoolParam()
	header := func() *inference.ModelInferResponse {
		return &inference.ModelInferResponse{ModelName: req.GetModelName(), ModelVersion: vv.versionString(), Id: req.GetId()}
	}
	var clientErr error
	emit := func(r response) error {
		if r.enc != nil {
			// The executor's encoding is the stream response's
			// infer_response as it is: no decoding, no re-encoding.
			clientErr = st.sendNow(wrapStreamResponse(r.enc, emptyFinal, r.final), nil)
			return clientErr
		}
		out := &inference.ModelStreamInferResponse{InferResponse: r.resp}
		if r.err != nil {
			out.ErrorMessage = tritonerr.From(r.err).Msg
			out.InferResponse = header()
		}
		if out.InferResponse == nil { // the final flag alone
			if !emptyFinal {
				return nil
			}
			out.InferResponse = header()
		}
		if emptyFinal {
			if out.InferResponse.Parameters == nil {
				out.InferResponse.Parameters = map[string]*inference.InferParameter{}
			}
			out.InferResponse.Parameters["triton_final_response"] = &inference.InferParameter{
				ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: r.final}}
		}
		if out.InferResponse.Id == "" {
			out.InferResponse.Id = req.GetId()
		}
		clientErr = st.sendNow(out, r.err)
		return clientErr
	}
	err := checkGRPCParams(req.GetParameters())
	if err == nil {
		err = checkGRPCShm(req)
	}
	if err == nil {
		err = kserve.ContentsToRaw(req)
	}
	if err == nil {
		err = g.streamInfer(ctx, vv, req, true, emit)
	}
	if err != nil && err != clientErr && ctx.Err() == nil {
		_ = emit(response{err: err, final: true})
	}
}

// encodedStreamResponse is a ModelStreamInferResponse already encoded, in
// parts (the wrapping's head, the executor's encoding, the parameter it
// gains); the gateway's gRPC codec sends them as they are.
type encodedStreamResponse struct {
	head, enc, tail []byte

	headBuf [11]byte
	// The parts as the codec hands them to gRPC: pointers into e, so
	// that making them allocates nothing.
	parts [3]mem.SliceBuffer
	bufs  [3]mem.Buffer
}

// buffers are e's non-empty parts for gRPC.
func (e *encodedStreamResponse) buffers() mem.BufferSlice {
	n := 0
	for _, p := range [...][]byte{e.head, e.enc, e.tail} {
		if len(p) > 0 {
			e.parts[n] = p
			e.bufs[n] = &e.parts[n]
			n++
		}
	}
	return e.bufs[:n]
}

// encodedResponse is a ModelInferResponse as its executor encoded it
// (forwardEncoded), which the codec sends as it is.
type encodedResponse struct {
	reply infercodec.Reply // as received
	enc   mem.SliceBuffer  // reply.Bytes
	bufs  [1]mem.Buffer    // &enc: the buffers for gRPC
}

// Field numbers of Triton's grpc_service.proto used to wrap an encoded
// response.
const (
	fieldStreamInferResponse = 2 // ModelStreamInferResponse.infer_response
	fieldResponseParameters  = 4 // ModelInferResponse.parameters
	fieldParamBool           = 1 // InferParameter.bool_param
)

// finalParams are the encoded parameter entries triton_final_response
// false and true, appended to a response's encoding (protobuf merges them
// into its parameters).
var finalParams = [2][]byte{finalParam(false), finalParam(true)}

func finalParam(final bool) []byte {
	var v []byte
	v = protowire.AppendTag(v, fieldParamBool, protowire.VarintType)
	v = protowire.AppendVarint(v, protowire.EncodeBool(final))
	var entry []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType) // map key
	entry = protowire.AppendString(entry, "triton_final_response")
	entry = protowire.AppendTag(entry, 2, protowire.BytesType) // map value
	entry = protowire.AppendBytes(entry, v)
	var param []byte
	param = protowire.AppendTag(param, fieldResponseParameters, protowire.BytesType)
	return protowire.AppendBytes(param, entry)
}

// wrapStreamResponse makes the encoded ModelInferResponse enc the
// infer_response of a stream response, without copying it; with the empty
// final response asked for, it also carries triton_final_response.
func wrapStreamResponse(enc []byte, emptyFinal, final bool) *encodedStreamResponse {
	e := &encodedStreamResponse{enc: enc}
	if emptyFinal {
		e.tail = finalParams[0]
		if final {
			e.tail = finalParams[1]
		}
	}
	n := len(enc) + len(e.tail)
	e.head = protowire.AppendVarint(protowire.AppendTag(e.headBuf[:0], fieldStreamInferResponse, protowire.BytesType), uint64(n))
	return e
}

// bytes joins the parts (tests).
func (e *encodedStreamResponse) bytes() []byte {
	return append(append(append([]byte(nil), e.head...), e.enc...), e.tail...)
}
