package gateway

import (
	"context"
	"errors"
	"io"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/nereid-io/nereid/api/health"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/handoff"
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
	_, err := s.g.resolveRequest(req.GetName(), req.GetVersion())
	return &inference.ModelReadyResponse{Ready: err == nil}, nil
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

func (s *grpcService) RepositoryIndex(_ context.Context, req *inference.RepositoryIndexRequest) (*inference.RepositoryIndexResponse, error) {
	resp := &inference.RepositoryIndexResponse{}
	for _, e := range s.g.cat.current().index(req.GetReady()) {
		resp.Models = append(resp.Models, &inference.RepositoryIndexResponse_ModelIndex{
			Name: e.Name, Version: e.Version, State: e.State, Reason: e.Reason})
	}
	return resp, nil
}

func (s *grpcService) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	return s.g.inferGRPC(ctx, req, "ModelInfer RPC")
}

// inferGRPC resolves the model, normalises typed contents to raw bytes and
// forwards the request to an executor.
func (g *Gateway) inferGRPC(ctx context.Context, req *inference.ModelInferRequest, what string) (*inference.ModelInferResponse, error) {
	// Large inputs the codec decoded, when forwarding did not take them (a
	// request refused before it is sent).
	defer func() { handoff.TakeRegion(req).Release() }()
	vv, err := g.resolveRequest(req.GetModelName(), req.GetModelVersion())
	if err != nil {
		return nil, err
	}
	if vv.config.GetModelTransactionPolicy().GetDecoupled() {
		return nil, tritonerr.Unsupportedf("%s doesn't support models with decoupled transaction policy", what)
	}
	for k := range req.GetParameters() {
		if strings.HasPrefix(k, "triton_") && !allowedTritonParams[k] {
			return nil, tritonerr.InvalidArgf("parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.")
		}
	}
	if err := checkGRPCShm(req); err != nil { // shm.go: gRPC's shared_memory_* parameter rules
		return nil, err
	}
	if err := kserve.ContentsToRaw(req); err != nil {
		return nil, err
	}
	return g.forwardInfer(ctx, vv, req)
}

// ModelStreamInfer answers each request of the stream in order. A failed
// request gets its message in error_message and the stream stays open, as in
// Triton; a stream opened with the header "triton_grpc_error: true" ends
// with the failed request's gRPC status instead. Requests run concurrently
// (up to streamWindow at a time) while their answers keep request order.
func (s *grpcService) ModelStreamInfer(stream grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]) error {
	ctx := stream.Context()
	grpcErrors := false
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for _, v := range md.Get("triton_grpc_error") {
			if v == "true" {
				grpcErrors = true
			}
		}
	}

	type pending struct {
		done chan struct{}
		req  *inference.ModelInferRequest
		resp *inference.ModelInferResponse
		err  error
	}
	queue := make(chan *pending, streamWindow)
	var order streamOrder // numbers the requests of each sequence (sequence.go)
	var recvErr error
	go func() {
		defer close(queue)
		for {
			req, err := stream.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					recvErr = err
				}
				return
			}
			p := &pending{done: make(chan struct{}), req: req}
			// Queue first: the queue's capacity is what bounds the window.
			select {
			case queue <- p:
			case <-ctx.Done():
				return
			}
			wait, done := order.enter(req)
			go func() {
				if wait != nil {
					select {
					case <-wait:
					case <-ctx.Done():
					}
				}
				p.resp, p.err = s.g.inferGRPC(order.context(ctx, req), req, "ModelStreamInfer RPC")
				done()
				close(p.done)
			}()
		}
	}()
	for p := range queue {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		out := &inference.ModelStreamInferResponse{InferResponse: p.resp}
		if p.err != nil {
			if grpcErrors {
				return p.err
			}
			out.ErrorMessage = tritonerr.From(p.err).Msg
			out.InferResponse = &inference.ModelInferResponse{
				ModelName: p.req.GetModelName(), ModelVersion: p.req.GetModelVersion(), Id: p.req.GetId()}
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
	// The queue is closed only after the receiver stored recvErr.
	return recvErr
}

// allowedTritonParams are the reserved "triton_" request parameters a gRPC
// client may send (Triton's TRITON_RESERVED_REQUEST_PARAMS).
var allowedTritonParams = map[string]bool{"triton_enable_empty_final_response": true}

// streamWindow bounds the requests of one stream in flight at once.
const streamWindow = 64

// The RPCs of features not built yet say which feature is missing.

func (s *grpcService) RepositoryModelLoad(context.Context, *inference.RepositoryModelLoadRequest) (*inference.RepositoryModelLoadResponse, error) {
	return nil, tritonerr.Unsupportedf("model loading is not supported yet")
}

func (s *grpcService) RepositoryModelUnload(context.Context, *inference.RepositoryModelUnloadRequest) (*inference.RepositoryModelUnloadResponse, error) {
	return nil, tritonerr.Unsupportedf("model unloading is not supported yet")
}

func (s *grpcService) TraceSetting(context.Context, *inference.TraceSettingRequest) (*inference.TraceSettingResponse, error) {
	return nil, tritonerr.Unsupportedf("trace setting is not supported yet")
}

func (s *grpcService) LogSettings(context.Context, *inference.LogSettingsRequest) (*inference.LogSettingsResponse, error) {
	return nil, tritonerr.Unsupportedf("log settings are not supported yet")
}

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
