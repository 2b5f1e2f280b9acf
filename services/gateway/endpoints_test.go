package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	health "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
)

// jsonEqual compares JSON documents after parsing.
func jsonEqual(t testing.TB, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("JSON mismatch\n got: %s\nwant: %s", got, want)
	}
}

type httpResult struct {
	status int
	header http.Header
	body   []byte
}

func do(t testing.TB, method, url string, body []byte, header map[string]string) httpResult {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	// Send Accept-Encoding ourselves so that the transport does not
	// decompress behind our back.
	if req.Header.Get("Accept-Encoding") == "" {
		req.Header.Set("Accept-Encoding", "identity")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return httpResult{resp.StatusCode, resp.Header, b}
}

func grpcClient(t testing.TB, g *Gateway) (inference.GRPCInferenceServiceClient, health.HealthClient) {
	t.Helper()
	cc, err := grpc.NewClient(g.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return inference.NewGRPCInferenceServiceClient(cc), health.NewHealthClient(cc)
}

func TestMetadataEndpoints(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	base := "http://" + g.HTTPAddr()

	// Before any executor: live, not ready.
	if r := do(t, "GET", base+"/v2/health/live", nil, nil); r.status != 200 {
		t.Fatalf("live: %d", r.status)
	}
	if r := do(t, "GET", base+"/v2/health/ready", nil, nil); r.status != 400 {
		t.Fatalf("ready without executors: %d", r.status)
	}

	ex := newFakeExecutor(t, ns, "ex1",
		&busv1.ModelVersionState{Name: "simple", Version: "1", State: "READY", Config: simpleConfig("simple")},
		&busv1.ModelVersionState{Name: "simple", Version: "2", State: "UNAVAILABLE", Reason: "version 2 failed", Config: simpleConfig("simple")},
		&busv1.ModelVersionState{Name: "broken", State: "UNAVAILABLE", Reason: "config.pbtxt: bad"},
		&busv1.ModelVersionState{Name: "decoupled", Version: "1", State: "READY", Config: decoupledConfig()},
	)
	ex.start()
	waitFor(t, "server ready", 5*time.Second, func() bool {
		return do(t, "GET", base+"/v2/health/ready", nil, nil).status == 200
	})

	simpleMeta := `{"name":"simple","versions":["1"],"platform":"simple",
		"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[-1,16]},{"name":"INPUT1","datatype":"INT32","shape":[-1,16]}],
		"outputs":[{"name":"OUTPUT0","datatype":"INT32","shape":[-1,16]},{"name":"OUTPUT1","datatype":"INT32","shape":[-1,16]}]}`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		want                     string // JSON; "" = empty body
	}{
		{"server metadata", "GET", "/v2", "", 200, `{"name":"triton","version":"test","extensions":["classification","binary_tensor_data","cuda_shared_memory","system_shared_memory","model_configuration","model_repository","model_repository(unload_dependents)","schedule_policy","statistics","sequence","sequence(string_id)","trace","logging"]}`},
		{"model metadata", "GET", "/v2/models/simple", "", 200, simpleMeta},
		{"model metadata version", "GET", "/v2/models/simple/versions/1", "", 200, simpleMeta},
		{"model ready", "GET", "/v2/models/simple/ready", "", 200, ""},
		{"model version ready", "GET", "/v2/models/simple/versions/1/ready", "", 200, ""},
		{"model version not ready", "GET", "/v2/models/simple/versions/2/ready", "", 400, `{"error":"Model version not ready"}`},
		{"unknown model ready", "GET", "/v2/models/nope/ready", "", 400, `{"error":"Model version not ready"}`},
		{"unknown model", "GET", "/v2/models/nope", "", 404, `{"error":"Request for unknown model: 'nope' is not found"}`},
		{"unknown version", "GET", "/v2/models/simple/versions/7", "", 404, `{"error":"Request for unknown model: 'simple' version 7 is not found"}`},
		{"version not ready", "GET", "/v2/models/simple/versions/2", "", 503, `{"error":"Request for unknown model: 'simple' version 2 is not at ready state"}`},
		{"failed model", "GET", "/v2/models/broken", "", 404, `{"error":"Request for unknown model: 'broken' has no available versions"}`},
		{"version overflow", "GET", "/v2/models/simple/versions/99999999999999999999", "", 400, `{"error":"failed to get model version from specified version string '99999999999999999999' (details: stol), version should be an integral value > 0"}`},
		{"version not digits", "GET", "/v2/models/simple/versions/x1", "", 404, `{"error":"Not Found"}`},
		{"unknown route", "GET", "/v2/nothing", "", 404, `{"error":"Not Found"}`},
		{"unknown model kind", "GET", "/v2/models/simple/whatever", "", 404, `{"error":"Not Found"}`},
		{"wrong method", "POST", "/v2/models/simple", "", 405, `{"error":"Method Not Allowed"}`},
		{"infer wrong method", "GET", "/v2/models/simple/infer", "", 405, `{"error":"Method Not Allowed"}`},
		{"index", "POST", "/v2/repository/index", "", 200, `[
			{"name":"broken","state":"UNAVAILABLE","reason":"config.pbtxt: bad"},
			{"name":"decoupled","version":"1","state":"READY"},
			{"name":"simple","version":"1","state":"READY"},
			{"name":"simple","version":"2","state":"UNAVAILABLE","reason":"version 2 failed"}]`},
		{"index ready", "POST", "/v2/repository/index", `{"ready":true}`, 200, `[{"name":"decoupled","version":"1","state":"READY"},{"name":"simple","version":"1","state":"READY"}]`},
		{"index not ready", "POST", "/v2/repository/index", `{"ready":false}`, 200, `[
			{"name":"broken","state":"UNAVAILABLE","reason":"config.pbtxt: bad"},
			{"name":"decoupled","version":"1","state":"READY"},
			{"name":"simple","version":"1","state":"READY"},
			{"name":"simple","version":"2","state":"UNAVAILABLE","reason":"version 2 failed"}]`},
		{"index malformed", "POST", "/v2/repository/index", `{"ready":`, 400, ""},
		{"index ready not bool", "POST", "/v2/repository/index", `{"ready":"yes"}`, 400, `{"error":"Invalid value for 'ready': expected a boolean"}`},
		{"index ready nested past the depth limit", "POST", "/v2/repository/index", `{"ready":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`, 400,
			`{"error":"Invalid value for 'ready': expected a boolean"}`},
		{"index other member nested past the depth limit", "POST", "/v2/repository/index", `{"x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `,"ready":true}`, 400,
			`{"error":"JSON nesting depth exceeds maximum allowed limit (100)"}`},
		{"index wrong method", "GET", "/v2/repository/index", "", 405, `{"error":"Method Not Allowed"}`},
		{"load in mode none", "POST", "/v2/repository/models/simple/load", "", 503, `{"error":"explicit model load / unload is not allowed if polling is enabled"}`},
		{"unload in mode none", "POST", "/v2/repository/models/simple/unload", "", 503, `{"error":"explicit model load / unload is not allowed if polling is enabled"}`},
		{"load bad parameters", "POST", "/v2/repository/models/simple/load", `{"parameters":{"config":5}}`, 400, `{"error":"Unable to parse 'config', expect string"}`},
		{"load bad file", "POST", "/v2/repository/models/simple/load", `{"parameters":{"file:1/x":"@@"}}`, 400, `{"error":"Unable to decode 'file:1/x': illegal base64 data at input byte 0"}`},
		{"repository unknown action", "POST", "/v2/repository/models/simple/reload", "", 404, `{"error":"Not Found"}`},
		{"shm status without a registry", "GET", "/v2/systemsharedmemory/status", "", 503, `{"error":"shared memory is unavailable: no shm-registry is running"}`},
		{"cuda shm register disabled", "POST", "/v2/cudasharedmemory/region/r/register", "{}", 501, `{"error":"Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."}`},
		{"decoupled infer", "POST", "/v2/models/decoupled/infer", "{}", 501, `{"error":"HTTP end point doesn't support models with decoupled transaction policy"}`},
		{"stats unknown model", "GET", "/v2/models/nope/stats", "", 400, `{"error":"requested model 'nope' is not available"}`},
		{"stats unknown version", "GET", "/v2/models/simple/versions/2/stats", "", 400, `{"error":"requested model version is not available for model 'simple'"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.method, base+tc.path, []byte(tc.body), nil)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			switch {
			case tc.want != "":
				jsonEqual(t, r.body, tc.want)
				if ct := r.header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
			case tc.status >= 400:
				var e struct{ Error string }
				if json.Unmarshal(r.body, &e) != nil || e.Error == "" {
					t.Fatalf("error body %s", r.body)
				}
			case len(r.body) != 0:
				t.Fatalf("unexpected body %s", r.body)
			}
		})
	}

	// The same over gRPC.
	c, hc := grpcClient(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := c.ServerLive(ctx, &inference.ServerLiveRequest{}); err != nil || !r.Live {
		t.Fatalf("ServerLive: %v %v", r, err)
	}
	if r, err := c.ServerReady(ctx, &inference.ServerReadyRequest{}); err != nil || !r.Ready {
		t.Fatalf("ServerReady: %v %v", r, err)
	}
	if r, err := hc.Check(ctx, &health.HealthCheckRequest{}); err != nil || r.Status != health.HealthCheckResponse_SERVING {
		t.Fatalf("Health.Check: %v %v", r, err)
	}
	sm, err := c.ServerMetadata(ctx, &inference.ServerMetadataRequest{})
	if err != nil || sm.Name != "triton" || sm.Version != "test" || !reflect.DeepEqual(sm.Extensions, g.exts) {
		t.Fatalf("ServerMetadata: %v %v", sm, err)
	}
	md, err := c.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "simple"})
	if err != nil || md.Platform != "simple" || len(md.Inputs) != 2 || !reflect.DeepEqual(md.Inputs[0].Shape, []int64{-1, 16}) || md.Inputs[0].Datatype != "INT32" || !reflect.DeepEqual(md.Versions, []string{"1"}) {
		t.Fatalf("ModelMetadata: %v %v", md, err)
	}
	mc, err := c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "simple", Version: "1"})
	if err != nil || mc.Config.GetName() != "simple" || mc.Config.GetMaxBatchSize() != 8 {
		t.Fatalf("ModelConfig: %v %v", mc, err)
	}
	for _, tc := range []struct {
		name, version string
		ready         bool
	}{{"simple", "", true}, {"simple", "1", true}, {"simple", "2", false}, {"nope", "", false}} {
		r, err := c.ModelReady(ctx, &inference.ModelReadyRequest{Name: tc.name, Version: tc.version})
		if err != nil || r.Ready != tc.ready {
			t.Errorf("ModelReady(%s,%s) = %v, %v", tc.name, tc.version, r, err)
		}
	}
	idx, err := c.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{Ready: true})
	if err != nil || len(idx.Models) != 2 || idx.Models[1].Name != "simple" || idx.Models[1].State != "READY" {
		t.Fatalf("RepositoryIndex: %v %v", idx, err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"ModelReady bad version", func() error {
			_, err := c.ModelReady(ctx, &inference.ModelReadyRequest{Name: "simple", Version: "one"})
			return err
		}, codes.InvalidArgument, "failed to get model version from specified version string 'one' (details: stol), version should be an integral value > 0"},
		{"ModelMetadata unknown", func() error {
			_, err := c.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "nope"})
			return err
		}, codes.NotFound, "Request for unknown model: 'nope' is not found"},
		{"ModelConfig unknown version", func() error {
			_, err := c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "simple", Version: "3"})
			return err
		}, codes.NotFound, "Request for unknown model: 'simple' version 3 is not found"},
		{"ModelConfig negative version", func() error {
			_, err := c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "simple", Version: "-3"})
			return err
		}, codes.InvalidArgument, "invalid model version specified '-3' , version should be an integral value > 0"},
		{"ModelInfer unknown model", func() error {
			_, err := c.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "nope"})
			return err
		}, codes.NotFound, "Request for unknown model: 'nope' is not found"},
		{"ModelInfer bad version", func() error {
			_, err := c.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "simple", ModelVersion: "v1"})
			return err
		}, codes.InvalidArgument, "failed to get model version from specified version string 'v1' (details: stol), version should be an integral value > 0"},
		{"ModelInfer version not ready", func() error {
			_, err := c.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "simple", ModelVersion: "2"})
			return err
		}, codes.Unavailable, "Request for unknown model: 'simple' version 2 is not at ready state"},
		{"ModelInfer decoupled", func() error {
			_, err := c.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "decoupled"})
			return err
		}, codes.Unimplemented, "ModelInfer RPC doesn't support models with decoupled transaction policy"},
		{"ModelStatistics unknown", func() error {
			_, err := c.ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: "nope"})
			return err
		}, codes.InvalidArgument, "requested model 'nope' is not available"},
		{"SystemSharedMemoryStatus", func() error {
			_, err := c.SystemSharedMemoryStatus(ctx, &inference.SystemSharedMemoryStatusRequest{})
			return err
		}, codes.Unavailable, "shared memory is unavailable: no shm-registry is running"},
		{"CudaSharedMemoryRegister", func() error {
			_, err := c.CudaSharedMemoryRegister(ctx, &inference.CudaSharedMemoryRegisterRequest{})
			return err
		}, codes.Unimplemented, "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."},
		{"RepositoryModelLoad", func() error {
			_, err := c.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "simple"})
			return err
		}, codes.Unavailable, "explicit model load / unload is not allowed if polling is enabled"},
		{"TraceSetting unknown model", func() error {
			_, err := c.TraceSetting(ctx, &inference.TraceSettingRequest{ModelName: "nope"})
			return err
		}, codes.InvalidArgument, "Request for unknown model : nope"},
	} {
		t.Run("grpc "+tc.name, func(t *testing.T) {
			s := status.Convert(tc.call())
			if s.Code() != tc.code || s.Message() != tc.msg {
				t.Fatalf("got %s %q, want %s %q", s.Code(), s.Message(), tc.code, tc.msg)
			}
		})
	}
}

func decoupledConfig() *inference.ModelConfig {
	cfg := simpleConfig("decoupled")
	cfg.ModelTransactionPolicy = &inference.ModelTransactionPolicy{Decoupled: true}
	return cfg
}

// TestWithdraw: an executor that shuts down cleanly withdraws, and its
// models are unavailable at once rather than after the heartbeat expiry.
func TestWithdraw(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	ex := newFakeExecutor(t, ns, "ex1",
		&busv1.ModelVersionState{Name: "simple", Version: "1", State: "READY", Config: simpleConfig("simple")})
	ex.start()
	waitModelReady(t, g, "simple")
	ex.kill()
	ex.heartbeat(true)
	start := time.Now()
	waitFor(t, "withdrawal", 2*time.Second, func() bool {
		_, err := g.resolveRequest("simple", "")
		return err != nil
	})
	if d := time.Since(start); d > time.Second {
		t.Errorf("withdrawal took %v", d)
	}
	if ids := g.cat.executorIDs(); len(ids) != 0 {
		t.Errorf("executors after withdrawal: %v", ids)
	}
	r := do(t, "GET", "http://"+g.MetricsAddr()+"/nothing", nil, nil)
	if r.status != 404 {
		t.Errorf("metrics unknown path: %d", r.status)
	}
}
