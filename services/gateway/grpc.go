package gateway

import (
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	health "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/infercodec"
	"github.com/nereid-io/nereid/pkg/kserve"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// grpcService implements Triton's GRPCInferenceService. Errors are
// *tritonerr.Error, whose GRPCStatus gives Triton's code mapping.
type grpcService struct {
	inference.UnimplementedGRPCInferenceServiceServer
	g *Gateway
}

func (s *grpcService) ServerLive(context.Context, *inference.ServerLiveRequest) (*inference.ServerLiveResponse, error) {
	return &inference.ServerLiveResponse{Live: true}, nil
}

func (s *grpcService) ServerReady(context.Context, *inference.ServerReadyRequest) (*inference.ServerReadyResponse, error) {
	return &inference.ServerReadyResponse{Ready: s.g.serverReady()}, nil
}

// ModelReady answers false for unknown or unready models, as Triton does;
// only a bad version string is an error.
func (s *grpcService) ModelReady(_ context.Context, req *inference.ModelReadyRequest) (*inference.ModelReadyResponse, error) {
	if _, err := parseVersion(req.GetVersion()); err != nil {
		return nil, err
	}
	return &inference.ModelReadyResponse{Ready: modelReady(s.g.resolveRequest(req.GetName(), req.GetVersion()))}, nil
}

func (s *grpcService) ServerMetadata(context.Context, *inference.ServerMetadataRequest) (*inference.ServerMetadataResponse, error) {
	return &inference.ServerMetadataResponse{Name: s.g.cfg.ServerID, Version: s.g.cfg.Version, Extensions: s.g.exts}, nil
}

func (s *grpcService) ModelMetadata(_ context.Context, req *inference.ModelMetadataRequest) (*inference.ModelMetadataResponse, error) {
	return s.g.modelMetadata(req.GetName(), req.GetVersion())
}

func (s *grpcService) ModelConfig(_ context.Context, req *inference.ModelConfigRequest) (*inference.ModelConfigResponse, error) {
	cfg, err := s.g.modelConfig(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	return &inference.ModelConfigResponse{Config: cfg}, nil
}

func (s *grpcService) ModelStatistics(ctx context.Context, req *inference.ModelStatisticsRequest) (*inference.ModelStatisticsResponse, error) {
	return s.g.statistics(ctx, req.GetName(), req.GetVersion())
}

func (s *grpcService) RepositoryIndex(ctx context.Context, req *inference.RepositoryIndexRequest) (*inference.RepositoryIndexResponse, error) {
	s.g.cat.refresh(ctx)
	resp := &inference.RepositoryIndexResponse{}
	for _, e := range s.g.cat.current().index(req.GetReady()) {
		resp.Models = append(resp.Models, &inference.RepositoryIndexResponse_ModelIndex{
			Name: e.Name, Version: e.Version, State: e.State, Reason: e.Reason})
	}
	return resp, nil
}

func (s *grpcService) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	resp, _, err := s.g.inferGRPC(ctx, req, "ModelInfer RPC", false, nil)
	return resp, err
}

// modelInfer is ModelInfer as the server calls it (grpcServiceDesc): the
// answer may be the executor's encoding, which the codec sends as it is.
func (s *grpcService) modelInfer(ctx context.Context, req *inference.ModelInferRequest, fw *forwarding) (any, error) {
	resp, enc, err := s.g.inferGRPC(ctx, req, "ModelInfer RPC", true, fw)
	switch {
	case err != nil:
		return nil, err
	case enc != nil:
		return enc, nil
	}
	return resp, nil
}

// grpcServiceDesc is GRPCInferenceService as generated but for ModelInfer's
// handler, whose answer need not be a *inference.ModelInferResponse: the
// executor's encoding of one goes to the client without being decoded and
// encoded again.
func grpcServiceDesc() *grpc.ServiceDesc {
	d := inference.GRPCInferenceService_ServiceDesc
	d.Methods = slices.Clone(d.Methods)
	for i := range d.Methods {
		if d.Methods[i].MethodName == "ModelInfer" {
			d.Methods[i].Handler = modelInferHandler
		}
	}
	return &d
}

// modelInferHandler is the generated handler of ModelInfer calling
// modelInfer.
// The request is decoded into a grpcRequest (the codec's Unmarshal), which
// holds what forwarding it takes too.
//
// In Triton's trace mode the request's reading (GRPC_WAITREAD_START to
// _END) is its decoding here, and its send the encoding of its answer
// (tracedReply).
func modelInferHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*grpcService)
	var start time.Time
	if s.g.traceFile != nil {
		start = time.Now()
	}
	r := new(grpcRequest)
	if err := dec(r); err != nil {
		return nil, err
	}
	if r.bad != nil {
		return nil, r.bad // the message did not decode (the codec's Unmarshal)
	}
	in := &r.req
	var front *fileFront
	if s.g.traceFile != nil {
		if front = s.g.fileFront(in.GetModelName(), true, start); front != nil {
			front.readDone()
			ctx = withFileFront(ctx, front)
		}
	}
	if interceptor == nil {
		out, err := s.modelInfer(ctx, in, &r.fw)
		return s.g.grpcReply(front, out, err)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: inference.GRPCInferenceService_ModelInfer_FullMethodName}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		m := req.(*inference.ModelInferRequest)
		if m != in {
			out, err := s.modelInfer(ctx, m, nil) // an interceptor's own request
			return s.g.grpcReply(front, out, err)
		}
		out, err := s.modelInfer(ctx, m, &r.fw)
		return s.g.grpcReply(front, out, err)
	})
}

// grpcSmallBody is the size up to which a unary infer request's message is
// copied out of gRPC's buffers into its grpcRequest rather than a buffer
// of its own: a few small tensors and their names.
const grpcSmallBody = 256

// grpcRequest is a unary infer request in one allocation with what its
// decoding and forwarding would otherwise allocate apart: its message's
// bytes, which its strings and raw contents alias, when small; its lists
// of inputs and raw contents (for one input); its forwarding (forward).
type grpcRequest struct {
	req  inference.ModelInferRequest
	room infercodec.RequestRoom
	fw   forwarding
	bad  error // set, and req unusable, when the message did not decode (badRequest)
	body [grpcSmallBody]byte
}

// inferGRPC resolves the model, normalises typed contents to raw bytes and
// forwards the request to an executor. With passOn the answer may be enc,
// the executor's encoding of the response (forwardInfer).
func (g *Gateway) inferGRPC(ctx context.Context, req *inference.ModelInferRequest, what string, passOn bool, fw *forwarding) (*inference.ModelInferResponse, *encodedResponse, error) {
	// Large inputs the codec decoded, when forwarding did not take them (a
	// request refused before it is sent).
	defer func() { handoff.TakeRegion(req).Release() }()
	vv, err := g.resolveInfer(ctx, req.GetModelName(), req.GetModelVersion())
	if err != nil {
		return nil, nil, err
	}
	if vv.config.GetModelTransactionPolicy().GetDecoupled() {
		return nil, nil, tritonerr.Unsupportedf("%s doesn't support models with decoupled transaction policy", what)
	}
	if err := checkGRPCParams(req.GetParameters()); err != nil {
		return nil, nil, err
	}
	if err := checkGRPCShm(req); err != nil { // shm.go: gRPC's shared_memory_* parameter rules
		return nil, nil, err
	}
	if err := kserve.ContentsToRaw(req); err != nil {
		return nil, nil, err
	}
	return g.forwardInfer(ctx, vv, req, passOn, fw)
}

// ModelStreamInfer answers each request of the stream in order. A failed
// request gets its message in error_message and the stream stays open, as in
// Triton; a stream opened with the header "triton_grpc_error: true" ends
// with the failed request's gRPC status instead. Requests run concurrently
// (up to streamWindow at a time) while their answers keep request order:
// the goroutine that completes the oldest request sends its answer and any
// later ones already complete, so an answer goes out from the goroutine
// that received the executor's reply rather than after one more wake-up.
func (s *grpcService) ModelStreamInfer(stream grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]) error {
	ctx := stream.Context()
	st := &streamState{stream: stream, end: make(chan error, 1), window: make(chan struct{}, streamWindow)}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for _, v := range md.Get("triton_grpc_error") {
			if v == "true" {
				st.grpcErrors = true
			}
		}
	}
	var order streamOrder // numbers the requests of each sequence (sequence.go)
	go func() {
		for {
			in := new(streamRequest) // one allocation, as stream.Recv's
			// In Triton's trace mode a request's GRPC_WAITREAD is its wait
			// for the stream's next message and its reading.
			var waitStart time.Time
			if s.g.traceFile != nil {
				waitStart = time.Now()
			}
			err := stream.RecvMsg(in)
			req := &in.req
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				st.closeRecv(err)
				return
			}
			// The window's capacity bounds the requests in flight.
			select {
			case st.window <- struct{}{}:
			case <-ctx.Done():
				return // the handler returns ctx's error
			}
			if in.bad != nil {
				// A message that did not decode is answered in its turn,
				// as the client's mistake, and the stream goes on.
				p := st.push(undecoded(req))
				p.err = in.bad
				st.complete(p)
				continue
			}
			var front *fileFront // nil unless traced into Triton's trace file (tritontrace.go)
			if s.g.traceFile != nil {
				if front = s.g.fileFront(req.GetModelName(), true, waitStart); front != nil {
					front.readDone()
				}
			}
			if vv, err := s.g.resolveRequest(req.GetModelName(), req.GetModelVersion()); err == nil && isDecoupled(vv) {
				st.begin()
				_, done := order.enter(req) // a decoupled sequence model's requests keep their order too
				if front != nil {
					front.perResponse = true // a send per response
				}
				go func() {
					defer st.end1()
					s.g.streamDecoupledGRPC(withFileFront(order.context(ctx, req), front), st, vv, req)
					done()
				}()
				continue
			}
			p := st.push(req)
			p.front = front
			wait, done := order.enter(req)
			s.g.streamWork.Go(func() {
				if wait != nil {
					select {
					case <-wait:
					case <-ctx.Done():
					}
				}
				p.resp, p.enc, p.err = s.g.inferGRPC(withFileFront(order.context(ctx, req), front), req, "ModelStreamInfer RPC", true, nil)
				done()
				st.complete(p)
			})
		}
	}()
	select {
	case err := <-st.end:
		st.stop()
		return err
	case <-ctx.Done():
		st.stop()
		return ctx.Err()
	}
}

// undecoded is what an error answer to a request that did not decode can
// name of it: the model, version and id that were read, where UTF-8.
func undecoded(req *inference.ModelInferRequest) *inference.ModelInferRequest {
	named := new(inference.ModelInferRequest)
	for _, f := range [...]struct {
		dst *string
		src string
	}{{&named.ModelName, req.GetModelName()}, {&named.ModelVersion, req.GetModelVersion()}, {&named.Id, req.GetId()}} {
		if utf8.ValidString(f.src) {
			*f.dst = f.src
		}
	}
	return named
}

// streamState orders one stream's answers.
type streamState struct {
	stream     grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]
	grpcErrors bool
	window     chan struct{} // one token per request in flight
	end        chan error    // the handler's result, sent once

	sendMu sync.Mutex // held while sending: stop waits for it

	mu       sync.Mutex
	queue    []*streamPending // requests in stream order, answers not yet sent
	active   int              // decoupled requests still streaming (decoupled.go)
	sending  bool             // a goroutine is sending answers
	recvDone bool             // the receiver stopped
	recvErr  error
	stopped  bool // the handler returned or is about to: send nothing more
	ended    bool // end has its value
}

type streamPending struct {
	req      *inference.ModelInferRequest
	resp     *inference.ModelInferResponse
	enc      *encodedResponse // the response as its executor encoded it, instead of resp
	err      error
	finished bool
	front    *fileFront // traced into Triton's trace file: its send is stamped
}

func (st *streamState) push(req *inference.ModelInferRequest) *streamPending {
	p := &streamPending{req: req}
	st.mu.Lock()
	st.queue = append(st.queue, p)
	st.mu.Unlock()
	return p
}

// closeRecv records that the receiver stopped (err: why, nil at the
// stream's end); the handler returns once every answer is out.
func (st *streamState) closeRecv(err error) {
	st.mu.Lock()
	st.recvDone, st.recvErr = true, err
	st.mu.Unlock()
	st.drain()
}

// complete records p's outcome and sends what is now in order.
func (st *streamState) complete(p *streamPending) {
	st.mu.Lock()
	p.finished = true
	st.mu.Unlock()
	st.drain()
}

// drain sends the completed answers at the head of the queue, one
// goroutine at a time, and ends the handler when nothing more can come.
func (st *streamState) drain() {
	st.mu.Lock()
	if st.sending {
		st.mu.Unlock()
		return
	}
	st.sending = true
	for !st.stopped && len(st.queue) > 0 && st.queue[0].finished {
		p := st.queue[0]
		// Shifted down rather than resliced, so that the queue keeps its
		// array (at most streamWindow entries).
		n := copy(st.queue, st.queue[1:])
		st.queue[n] = nil
		st.queue = st.queue[:n]
		st.mu.Unlock()
		st.sendMu.Lock()
		st.mu.Lock()
		stopped := st.stopped
		st.mu.Unlock()
		var err error
		var start time.Time
		if p.front.traced() {
			start = time.Now()
		}
		if !stopped {
			err = st.send(p)
		}
		p.front.sent(start)
		st.sendMu.Unlock()
		<-st.window
		st.mu.Lock()
		if err != nil {
			st.finish(err)
		}
	}
	if st.recvDone && len(st.queue) == 0 && st.active == 0 {
		st.finish(st.recvErr)
	}
	st.sending = false
	st.mu.Unlock()
}

// send writes p's answer; an error ends the stream.
func (st *streamState) send(p *streamPending) error {
	if p.err == nil && p.enc != nil {
		return st.stream.SendMsg(wrapStreamResponse(p.enc.enc, false, false))
	}
	out := &inference.ModelStreamInferResponse{InferResponse: p.resp}
	if p.err != nil {
		if st.grpcErrors {
			return p.err
		}
		out.ErrorMessage = tritonerr.From(p.err).Msg
		out.InferResponse = &inference.ModelInferResponse{
			ModelName: p.req.GetModelName(), ModelVersion: p.req.GetModelVersion(), Id: p.req.GetId()}
	}
	return st.stream.Send(out)
}

// finish gives the handler its result (the first one counts) and stops
// further sends; st.mu is held.
func (st *streamState) finish(err error) {
	st.stopped = true
	if !st.ended {
		st.ended = true
		st.end <- err
	}
}

// stop, as the handler returns, lets no send begin and waits for one in
// progress: the stream may not be written after its handler returned.
func (st *streamState) stop() {
	st.mu.Lock()
	st.stopped = true
	st.mu.Unlock()
	st.sendMu.Lock()
	st.sendMu.Unlock()
}

// allowedTritonParams are the reserved "triton_" request parameters a gRPC
// client may send (Triton's TRITON_RESERVED_REQUEST_PARAMS).
var allowedTritonParams = map[string]bool{"triton_enable_empty_final_response": true}

// checkGRPCParams applies the gRPC front end's rules to a request's
// parameters (SetInferenceRequestMetadata), with its messages: the
// parameters Triton turns into request fields need their own types, other
// "triton_" keys are reserved, and the rest must be int64, bool or string.
// Keys are checked in sorted order so that the answer does not depend on
// map order.
func checkGRPCParams(params map[string]*inference.InferParameter) error {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := params[k].GetParameterChoice()
		switch k {
		case "sequence_id":
			switch p.(type) {
			case *inference.InferParameter_Int64Param, *inference.InferParameter_StringParam:
			default:
				return tritonerr.InvalidArgf("invalid value type for 'sequence_id' parameter, expected int64_param or string_param.")
			}
		case "sequence_start", "sequence_end":
			if _, ok := p.(*inference.InferParameter_BoolParam); !ok {
				return tritonerr.InvalidArgf("invalid value type for '%s' parameter, expected bool_param.", k)
			}
		case "priority":
			switch c := p.(type) {
			case *inference.InferParameter_Int64Param:
				if c.Int64Param < 0 {
					return tritonerr.InvalidArgf("invalid value for 'priority', expected value >= 0.")
				}
			case *inference.InferParameter_Uint64Param:
			default:
				return tritonerr.InvalidArgf("invalid value type for 'priority' parameter, expected int64_param or uint64_param.")
			}
		case "timeout":
			if _, ok := p.(*inference.InferParameter_Int64Param); !ok {
				return tritonerr.InvalidArgf("invalid value type for 'timeout' parameter, expected int64_param.")
			}
		default:
			if strings.HasPrefix(k, "triton_") {
				if !allowedTritonParams[k] {
					return tritonerr.InvalidArgf("parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: %s",
						strings.Join(slices.Sorted(maps.Keys(allowedTritonParams)), " "))
				}
				if _, ok := p.(*inference.InferParameter_BoolParam); !ok {
					return tritonerr.InvalidArgf("invalid value type for '%s' parameter, expected bool_param.", k)
				}
				continue
			}
			switch p.(type) {
			case *inference.InferParameter_Int64Param, *inference.InferParameter_BoolParam, *inference.InferParameter_StringParam:
			default:
				return tritonerr.InvalidArgf("invalid value type for '%s' parameter, expected int64_param, bool_param, or string_param.", k)
			}
		}
	}
	return nil
}

// streamWindow bounds the requests of one stream in flight at once.
const streamWindow = 64

// healthService is grpc.health.v1 as Triton serves it: SERVING when the
// server is ready.
type healthService struct {
	health.UnimplementedHealthServer
	g *Gateway
}

func (h *healthService) Check(context.Context, *health.HealthCheckRequest) (*health.HealthCheckResponse, error) {
	if h.g.serverReady() {
		return &health.HealthCheckResponse{Status: health.HealthCheckResponse_SERVING}, nil
	}
	return &health.HealthCheckResponse{Status: health.HealthCheckResponse_NOT_SERVING}, nil
}
