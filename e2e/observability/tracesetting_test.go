package observability

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// call sends an HTTP request and returns the status and the parsed body.
func call(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: body %q is not a JSON object: %v", method, url, raw, err)
	}
	return resp.StatusCode, out
}

func grpcClient(t *testing.T, addr string) inference.GRPCInferenceServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return inference.NewGRPCInferenceServiceClient(conn)
}

func settingsOf(r *inference.TraceSettingResponse) map[string][]string {
	out := map[string][]string{}
	for k, v := range r.GetSettings() {
		out[k] = v.GetValue()
	}
	return out
}

// jsonSettings turns an HTTP trace setting response into the gRPC shape
// (every value a list) to compare the two.
func jsonSettings(t *testing.T, m map[string]any) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for k, v := range m {
		switch x := v.(type) {
		case string:
			out[k] = []string{x}
		case []any:
			for _, e := range x {
				out[k] = append(out[k], e.(string))
			}
			if out[k] == nil {
				out[k] = []string{}
			}
		default:
			t.Fatalf("setting %s has JSON type %T", k, v)
		}
	}
	return out
}

func TestTraceSettingAcrossConstellation(t *testing.T) {
	c := constellation.NewCluster(t)
	repo := constellation.RepoPath(t, "deploy/model_repository")
	c.Executor(repo, "ex-1", "--load-model", "simple", "--load-model", "simple_sequence")
	gw1 := c.Gateway()
	gw2 := c.Gateway("--trace-config", "opentelemetry,url=localhost:4317")
	waitReady(t, gw1.HTTP()+"/v2/models/simple/ready")
	waitReady(t, gw2.HTTP()+"/v2/models/simple/ready")

	// Server metadata lists the extension.
	_, md := call(t, http.MethodGet, gw1.HTTP()+"/v2", "")
	exts, _ := md["extensions"].([]any)
	if !slices.Contains(exts, any("trace")) {
		t.Fatalf("server metadata extensions %v lack \"trace\"", exts)
	}

	// Triton's defaults, and the mode's options where given.
	defaults := map[string][]string{"trace_level": {"OFF"}, "trace_rate": {"1000"}, "trace_count": {"-1"}, "trace_mode": {"opentelemetry"}}
	code, got := call(t, http.MethodGet, gw1.HTTP()+"/v2/trace/setting", "")
	if code != http.StatusOK || !reflect.DeepEqual(jsonSettings(t, got), defaults) {
		t.Fatalf("GET defaults: %d %v, want %v", code, got, defaults)
	}
	withURL := map[string][]string{"url": {"localhost:4317"}}
	for k, v := range defaults {
		withURL[k] = v
	}
	if _, got := call(t, http.MethodGet, gw2.HTTP()+"/v2/trace/setting", ""); !reflect.DeepEqual(jsonSettings(t, got), withURL) {
		t.Fatalf("GET on the gateway with an OpenTelemetry url: %v, want %v", got, withURL)
	}

	// A change on one gateway is the setting of the others.
	code, got = call(t, http.MethodPost, gw1.HTTP()+"/v2/trace/setting", `{"trace_level":["TIMESTAMPS"],"trace_rate":"1","trace_count":"5"}`)
	want := map[string][]string{"trace_level": {"TIMESTAMPS"}, "trace_rate": {"1"}, "trace_count": {"5"}, "trace_mode": {"opentelemetry"}}
	if code != http.StatusOK || !reflect.DeepEqual(jsonSettings(t, got), want) {
		t.Fatalf("POST: %d %v, want %v", code, got, want)
	}
	g2 := grpcClient(t, gw2.GRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitSettings(t, "the second gateway to take the change", func() map[string][]string {
		r, err := g2.TraceSetting(ctx, &inference.TraceSettingRequest{})
		if err != nil {
			t.Fatal(err)
		}
		s := settingsOf(r)
		delete(s, "url")
		return s
	}, want)

	// A per-model override over gRPC; the fields it leaves out follow the
	// global setting.
	r, err := g2.TraceSetting(ctx, &inference.TraceSettingRequest{ModelName: "simple", Settings: map[string]*inference.TraceSettingRequest_SettingValue{
		"trace_rate": {Value: []string{"3"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if s := settingsOf(r); !reflect.DeepEqual(s["trace_rate"], []string{"3"}) || !reflect.DeepEqual(s["trace_level"], []string{"TIMESTAMPS"}) {
		t.Fatalf("model override: %v", s)
	}
	modelWant := map[string][]string{"trace_level": {"TIMESTAMPS", "TENSORS"}, "trace_rate": {"3"}, "trace_count": {"5"}, "trace_mode": {"opentelemetry"}}
	if code, _ := call(t, http.MethodPost, gw2.HTTP()+"/v2/trace/setting", `{"trace_level":["TIMESTAMPS","TENSORS"]}`); code != http.StatusOK {
		t.Fatalf("POST global level: %d", code)
	}
	waitSettings(t, "the first gateway to see the model follow the global level", func() map[string][]string {
		_, got := call(t, http.MethodGet, gw1.HTTP()+"/v2/models/simple/trace/setting", "")
		return jsonSettings(t, got)
	}, modelWant)
	// The other model keeps following the global setting.
	if _, got := call(t, http.MethodGet, gw1.HTTP()+"/v2/models/simple_sequence/trace/setting", ""); jsonSettings(t, got)["trace_rate"][0] != "1" {
		t.Fatalf("simple_sequence: %v", got)
	}

	// A gateway started after the changes starts with them.
	gw3 := c.Gateway()
	_, got = call(t, http.MethodGet, gw3.HTTP()+"/v2/models/simple/trace/setting", "")
	if !reflect.DeepEqual(jsonSettings(t, got), modelWant) {
		t.Fatalf("new gateway: %v, want %v", got, modelWant)
	}

	// Clearing the model's only field returns it to the global setting.
	code, got = call(t, http.MethodPost, gw1.HTTP()+"/v2/models/simple/trace/setting", `{"trace_rate":null}`)
	if code != http.StatusOK || jsonSettings(t, got)["trace_rate"][0] != "1" {
		t.Fatalf("clear: %d %v", code, got)
	}
}

func TestTraceSettingErrors(t *testing.T) {
	c := constellation.NewCluster(t)
	c.Executor(constellation.RepoPath(t, "deploy/model_repository"), "ex-1", "--load-model", "simple")
	gw := c.Gateway()
	waitReady(t, gw.HTTP()+"/v2/models/simple/ready")
	g := grpcClient(t, gw.GRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	httpCases := []struct {
		name, path, body string
		code             int
		msg              string
	}{
		{"unknown model", "/v2/models/nope/trace/setting", `{}`, 400, "Request for unknown model : nope"},
		{"trace file", "/v2/trace/setting", `{"trace_file":"/tmp/x"}`, 501, "trace file location can not be updated through network protocol"},
		{"two levels with OFF", "/v2/trace/setting", `{"trace_level":["OFF","TIMESTAMPS"]}`, 400, "Expect only one trace level 'OFF' is specified"},
		{"rate not a number", "/v2/trace/setting", `{"trace_rate":"fast"}`, 400, "Unable to parse 'trace_rate', got: fast"},
		{"rate out of range", "/v2/trace/setting", `{"trace_rate":"99999999999"}`, 400, "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: 99999999999"},
		{"count below -1", "/v2/trace/setting", `{"trace_count":"-2"}`, 400, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"},
		{"log frequency not a number", "/v2/trace/setting", `{"log_frequency":"often"}`, 400, "Unable to parse 'log_frequency', got: often"},
		{"rate zero while tracing", "/v2/trace/setting", `{"trace_level":["TIMESTAMPS"],"trace_rate":"0"}`, 400, "Attempting to set invalid trace setting :sample rate must be non-zero"},
		{"not JSON", "/v2/trace/setting", `{"trace_rate":`, 400, "failed to parse the request JSON buffer: unexpected end of JSON input"},
	}
	for _, tc := range httpCases {
		t.Run("http/"+tc.name, func(t *testing.T) {
			code, got := call(t, http.MethodPost, gw.HTTP()+tc.path, tc.body)
			if code != tc.code || got["error"] != tc.msg {
				t.Fatalf("%d %v, want %d %q", code, got, tc.code, tc.msg)
			}
		})
	}
	sv := func(v ...string) *inference.TraceSettingRequest_SettingValue {
		return &inference.TraceSettingRequest_SettingValue{Value: v}
	}
	grpcCases := []struct {
		name string
		req  *inference.TraceSettingRequest
		code codes.Code
		msg  string
	}{
		{"unknown model", &inference.TraceSettingRequest{ModelName: "nope"}, codes.InvalidArgument, "Request for unknown model : nope"},
		{"trace file", &inference.TraceSettingRequest{Settings: map[string]*inference.TraceSettingRequest_SettingValue{"trace_file": sv("x")}}, codes.Unimplemented, "trace file location can not be updated through network protocol"},
		{"two rates", &inference.TraceSettingRequest{Settings: map[string]*inference.TraceSettingRequest_SettingValue{"trace_rate": sv("1", "2")}}, codes.InvalidArgument, "expect only 1 value for 'trace_rate'"},
		{"count below -1", &inference.TraceSettingRequest{Settings: map[string]*inference.TraceSettingRequest_SettingValue{"trace_count": sv("-3")}}, codes.InvalidArgument, "Unable to parse 'trace_count'. Expecting value >= -1, got: -3"},
	}
	for _, tc := range grpcCases {
		t.Run("grpc/"+tc.name, func(t *testing.T) {
			_, err := g.TraceSetting(ctx, tc.req)
			st, _ := status.FromError(err)
			if st.Code() != tc.code || st.Message() != tc.msg {
				t.Fatalf("%v, want %v %q", err, tc.code, tc.msg)
			}
		})
	}
	// None of that changed anything, and the gateway still serves.
	code, got := call(t, http.MethodGet, gw.HTTP()+"/v2/trace/setting", "")
	if code != 200 || jsonSettings(t, got)["trace_level"][0] != "OFF" || jsonSettings(t, got)["trace_rate"][0] != "1000" {
		t.Fatalf("after refused changes: %d %v", code, got)
	}
	if code, _ := call(t, http.MethodPut, gw.HTTP()+"/v2/trace/setting", ""); code != http.StatusMethodNotAllowed {
		t.Fatalf("PUT: %d, want 405", code)
	}
}

func waitReady(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready", url)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSettings polls get until it returns want.
func waitSettings(t *testing.T, what string, get func() map[string][]string, want map[string][]string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := get()
		if reflect.DeepEqual(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v, want %v", what, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
