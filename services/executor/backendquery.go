package executor

import (
	"bytes"
	"context"
	"net/http"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
)

// The server API's queries of Triton backends (TRITONSERVER_ServerMetadata,
// ...ModelMetadata, ...ModelConfig, ...ModelStatistics, ...ModelIndex) are
// a client's questions about the constellation: any gateway answers them
// over the bus as its gRPC API would (services/gateway/serverquery.go), so
// a backend sees a model wherever it is served, its statistics summed
// over the executors, routers and gateways that count them.

func (s *backendServer) ask(ctx context.Context, subject string, req, resp proto.Message) error {
	return s.bus.Request(ctx, subject, req, resp)
}

// versionString is a version as the protocol names it: "" for -1, the
// version the server's policy picks.
func versionString(v int64) string {
	if v < 0 {
		return ""
	}
	return strconv.FormatInt(v, 10)
}

func (s *backendServer) ServerMetadata(ctx context.Context) (*inference.ServerMetadataResponse, error) {
	resp := &inference.ServerMetadataResponse{}
	return resp, s.ask(ctx, bus.ServerMetadataSubject, &inference.ServerMetadataRequest{}, resp)
}

func (s *backendServer) ModelMetadata(ctx context.Context, name string, v int64) (*inference.ModelMetadataResponse, error) {
	resp := &inference.ModelMetadataResponse{}
	return resp, s.ask(ctx, bus.ModelMetadataSubject, &inference.ModelMetadataRequest{Name: name, Version: versionString(v)}, resp)
}

func (s *backendServer) ModelConfig(ctx context.Context, name string, v int64) (*inference.ModelConfig, error) {
	resp := &inference.ModelConfigResponse{}
	if err := s.ask(ctx, bus.ModelConfigSubject, &inference.ModelConfigRequest{Name: name, Version: versionString(v)}, resp); err != nil {
		return nil, err
	}
	return resp.GetConfig(), nil
}

func (s *backendServer) ModelStatistics(ctx context.Context, name string, v int64) (*inference.ModelStatisticsResponse, error) {
	resp := &inference.ModelStatisticsResponse{}
	return resp, s.ask(ctx, bus.ModelStatisticsSubject, &inference.ModelStatisticsRequest{Name: name, Version: versionString(v)}, resp)
}

func (s *backendServer) ModelIndex(ctx context.Context, readyOnly bool) (*inference.RepositoryIndexResponse, error) {
	resp := &inference.RepositoryIndexResponse{}
	return resp, s.ask(ctx, bus.RepositoryIndexSubject, &inference.RepositoryIndexRequest{Ready: readyOnly}, resp)
}

// Metrics is this executor's /metrics page: Triton's TRITONSERVER_ServerMetrics
// is the metrics of the process the backend runs in.
func (s *backendServer) Metrics() []byte {
	w := &textResponse{header: http.Header{}}
	req, _ := http.NewRequest(http.MethodGet, "/metrics", nil)
	(*Executor)(s).MetricsHandler().ServeHTTP(w, req)
	return w.body.Bytes()
}

// textResponse keeps what a handler writes.
type textResponse struct {
	header http.Header
	body   bytes.Buffer
}

func (w *textResponse) Header() http.Header         { return w.header }
func (w *textResponse) Write(b []byte) (int, error) { return w.body.Write(b) }
func (w *textResponse) WriteHeader(int)             {}
