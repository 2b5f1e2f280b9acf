package observability

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// Triton's trace mode: --trace-config triton,file=PATH writes the traced
// requests to PATH as Triton's JSON trace file (qa/L0_trace reads it with
// qa/common/trace_summary.py).

// tritonTraceFlags trace every request at TIMESTAMPS level into file, in
// trace mode triton as Triton selects it: by the triton,file setting
// alone.
func tritonTraceFileFlags(file string, extra ...string) []string {
	return append([]string{"--trace-config", "triton,file=" + file, "--trace-config", "level=TIMESTAMPS",
		"--trace-config", "rate=1"}, extra...)
}

// traceRecord is one record of a trace file.
type traceRecord struct {
	ID           *uint64 `json:"id"`
	ModelName    *string `json:"model_name"`
	ModelVersion *int64  `json:"model_version"`
	RequestID    *string `json:"request_id"`
	ParentID     *uint64 `json:"parent_id"`
	Timestamps   []struct {
		Name string `json:"name"`
		NS   int64  `json:"ns"`
	} `json:"timestamps"`
	Activity string `json:"activity"`
}

// fileTrace is one trace gathered from a file's records, as
// trace_summary.py groups them by id.
type fileTrace struct {
	model     string
	version   int64
	requestID string
	names     []string // timestamps in file order
	ns        []int64
}

func readTraceFile(t *testing.T, path string) (ids []uint64, traces map[uint64]*fileTrace) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []traceRecord
	if err := json.Unmarshal(raw, &recs); err != nil {
		t.Fatalf("%s is not a JSON array of records: %v\n%s", path, err, raw)
	}
	traces = map[uint64]*fileTrace{}
	for _, r := range recs {
		if r.ID == nil {
			t.Fatalf("record without an id in %s: %+v", path, r)
		}
		tr := traces[*r.ID]
		if tr == nil {
			tr = &fileTrace{}
			traces[*r.ID] = tr
			ids = append(ids, *r.ID)
		}
		if r.ModelName != nil {
			tr.model, tr.version = *r.ModelName, *r.ModelVersion
			if r.RequestID != nil {
				tr.requestID = *r.RequestID
			}
		}
		for _, ts := range r.Timestamps {
			tr.names = append(tr.names, ts.Name)
			tr.ns = append(tr.ns, ts.NS)
		}
	}
	return ids, traces
}

var (
	httpStamps = []string{"HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START", "COMPUTE_START",
		"COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END", "HTTP_SEND_START", "HTTP_SEND_END"}
	grpcStamps = []string{"GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "REQUEST_START", "QUEUE_START", "COMPUTE_START",
		"COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END", "GRPC_SEND_START", "GRPC_SEND_END"}
)

// checkTrace checks a trace's model, request id and timestamps: Triton's
// names in Triton's order, and the instants in that order too (one
// machine's wall clock here).
func checkTrace(t *testing.T, tr *fileTrace, requestID string, names []string) {
	t.Helper()
	if tr.model != "simple" || tr.version != 1 || tr.requestID != requestID {
		t.Fatalf("trace of model %q version %d request %q, want simple 1 %q", tr.model, tr.version, tr.requestID, requestID)
	}
	if !slices.Equal(tr.names, names) {
		t.Fatalf("timestamps %v, want %v", tr.names, names)
	}
	for i := 1; i < len(tr.ns); i++ {
		if tr.ns[i] < tr.ns[i-1] {
			t.Fatalf("%s (%d) before %s (%d)", tr.names[i], tr.ns[i], tr.names[i-1], tr.ns[i-1])
		}
	}
	if now := time.Now().UnixNano(); tr.ns[0] < now-int64(time.Hour) || tr.ns[0] > now {
		t.Fatalf("%s = %d is not a wall-clock time of the last hour", tr.names[0], tr.ns[0])
	}
}

// inferHTTP sends simple's request with an id and returns the response.
func inferHTTP(t *testing.T, base, id string) map[string]any {
	t.Helper()
	body := `{"id":"` + id + `",` + simpleBody[1:]
	resp, err := http.Post(base+"/v2/models/simple/infer", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("infer: %d %s", resp.StatusCode, raw)
	}
	if out["parameters"] != nil {
		t.Fatalf("the response has parameters %v: the executor's timestamps leaked", out["parameters"])
	}
	return out
}

func inferGRPC(t *testing.T, addr, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &inference.ModelInferRequest{ModelName: "simple", Id: id, Inputs: []*inference.ModelInferRequest_InferInputTensor{
		{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &inference.InferTensorContents{IntContents: make([]int32, 16)}},
		{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &inference.InferTensorContents{IntContents: make([]int32, 16)}},
	}}
	resp, err := grpcClient(t, addr).ModelInfer(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetParameters()) != 0 || len(resp.GetOutputs()) != 2 {
		t.Fatalf("response %v: want two outputs and no parameters", resp)
	}
}

// A traced HTTP request and a traced gRPC request, in the standalone
// server and in a constellation of gateway and executor processes, give
// a trace file that parses, with both traces in Triton's form.
func TestTritonTraceFile(t *testing.T) {
	repo := constellation.RepoPath(t, "deploy/model_repository")
	setups := []struct {
		name  string
		start func(t *testing.T, file string) *constellation.Gateway
	}{
		{"standalone", func(t *testing.T, file string) *constellation.Gateway {
			return constellation.Standalone(t, repo, append(tritonTraceFileFlags(file), "--model-control-mode", "explicit", "--load-model", "simple")...)
		}},
		{"constellation", func(t *testing.T, file string) *constellation.Gateway {
			c := constellation.NewCluster(t)
			// The executor is started without tracing flags: the gateway
			// asks for its timestamps with the request.
			c.Executor(repo, "ex-1", "--load-model", "simple")
			gw := c.Gateway(tritonTraceFileFlags(file)...)
			waitReady(t, gw.HTTP()+"/v2/models/simple/ready")
			return gw
		}},
	}
	for _, setup := range setups {
		t.Run(setup.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "trace.json")
			gw := setup.start(t, file)
			inferHTTP(t, gw.HTTP(), "http-1")
			inferGRPC(t, gw.GRPC(), "grpc-1")
			if _, err := os.Stat(file); err == nil {
				t.Fatal("trace file written before shutdown with log_frequency 0")
			}
			gw.Stop() // SIGTERM: what is gathered is written, and the file closed
			if !gw.Exited() {
				t.Fatalf("the server did not exit:\n%s", gw.Output())
			}
			ids, traces := readTraceFile(t, file)
			if !slices.Equal(ids, []uint64{1, 2}) {
				t.Fatalf("trace ids %v, want [1 2]", ids)
			}
			checkTrace(t, traces[1], "http-1", httpStamps)
			checkTrace(t, traces[2], "grpc-1", grpcStamps)
		})
	}
}

// The trace settings in triton mode, over HTTP and gRPC: Triton's names
// and order, trace_file and log_frequency reported, trace_file refused,
// log_frequency changed per model.
func TestTritonTraceSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "global_trace.log")
	srv := constellation.Standalone(t, constellation.RepoPath(t, "deploy/model_repository"),
		"--trace-config", "triton,file="+file, "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=6",
		"--model-control-mode", "explicit", "--load-model", "simple")

	resp, err := http.Get(srv.HTTP() + "/v2/trace/setting")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Triton's JSON, member for member and in its order.
	want := `{"trace_level":["TIMESTAMPS"],"trace_rate":"6","trace_count":"-1","log_frequency":"0","trace_file":` + quote(file) + `,"trace_mode":"triton"}`
	if resp.StatusCode != 200 || string(raw) != want {
		t.Fatalf("GET: %d %s\nwant %s", resp.StatusCode, raw, want)
	}

	code, got := call(t, http.MethodPost, srv.HTTP()+"/v2/models/simple/trace/setting", `{"trace_file":"other.log"}`)
	if code != http.StatusNotImplemented || got["error"] != "trace file location can not be updated through network protocol" {
		t.Fatalf("POST trace_file: %d %v", code, got)
	}
	code, got = call(t, http.MethodPost, srv.HTTP()+"/v2/models/simple/trace/setting", `{"log_frequency":"2"}`)
	wantModel := map[string][]string{"trace_level": {"TIMESTAMPS"}, "trace_rate": {"6"}, "trace_count": {"-1"},
		"log_frequency": {"2"}, "trace_file": {file}, "trace_mode": {"triton"}}
	if code != 200 || !reflect.DeepEqual(jsonSettings(t, got), wantModel) {
		t.Fatalf("POST log_frequency: %d %v, want %v", code, got, wantModel)
	}

	g := grpcClient(t, srv.GRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := g.TraceSetting(ctx, &inference.TraceSettingRequest{ModelName: "simple"})
	if err != nil || !reflect.DeepEqual(settingsOf(r), wantModel) {
		t.Fatalf("gRPC GET simple: %v %v, want %v", settingsOf(r), err, wantModel)
	}
	_, err = g.TraceSetting(ctx, &inference.TraceSettingRequest{Settings: map[string]*inference.TraceSettingRequest_SettingValue{
		"trace_file": {Value: []string{"other.log"}}}})
	if st, _ := status.FromError(err); st.Code() != codes.Unimplemented || st.Message() != "trace file location can not be updated through network protocol" {
		t.Fatalf("gRPC trace_file: %v", err)
	}
	r, err = g.TraceSetting(ctx, &inference.TraceSettingRequest{ModelName: "simple", Settings: map[string]*inference.TraceSettingRequest_SettingValue{
		"log_frequency": {Value: []string{}}, "trace_count": {Value: []string{"3"}}}})
	wantModel["log_frequency"], wantModel["trace_count"] = []string{"0"}, []string{"3"}
	if err != nil || !reflect.DeepEqual(settingsOf(r), wantModel) {
		t.Fatalf("gRPC clear log_frequency, set trace_count: %v %v, want %v", settingsOf(r), err, wantModel)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Rate, log_frequency and trace_count, as qa/L0_trace checks them: at rate
// 2 and log_frequency 2, eight requests give four traces in FILE.0 and
// FILE.1 as they fill; with trace_count 1 the next trace goes to FILE.2 as
// soon as it ends, and trace_count then reads 0; FILE itself is never
// written.
func TestTritonTraceLogFrequencyAndCount(t *testing.T) {
	file := filepath.Join(t.TempDir(), "trace.json")
	srv := constellation.Standalone(t, constellation.RepoPath(t, "deploy/model_repository"),
		"--trace-config", "triton,file="+file, "--trace-config", "triton,log-frequency=2",
		"--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=2",
		"--model-control-mode", "explicit", "--load-model", "simple")
	for i := range 8 {
		if i%2 == 0 {
			inferHTTP(t, srv.HTTP(), "r")
		} else {
			inferGRPC(t, srv.GRPC(), "r")
		}
	}
	for i, want := range [][]uint64{{1, 2}, {3, 4}} {
		path := file + "." + string(rune('0'+i))
		ids, traces := readTraceFile(t, path)
		if !slices.Equal(ids, want) {
			t.Fatalf("%s holds traces %v, want %v", path, ids, want)
		}
		// Requests 2, 4, 6, 8 were traced: all of them gRPC ones.
		for _, id := range ids {
			checkTrace(t, traces[id], "r", grpcStamps)
		}
	}
	code, got := call(t, http.MethodPost, srv.HTTP()+"/v2/trace/setting", `{"trace_rate":"1","trace_count":"1","log_frequency":"0"}`)
	if code != 200 || got["trace_count"] != "1" {
		t.Fatalf("POST: %d %v", code, got)
	}
	for range 3 {
		inferHTTP(t, srv.HTTP(), "counted")
	}
	ids, traces := readTraceFile(t, file+".2")
	if !slices.Equal(ids, []uint64{5}) {
		t.Fatalf("%s.2 holds %v, want [5]", file, ids)
	}
	checkTrace(t, traces[5], "counted", httpStamps)
	if _, got := call(t, http.MethodGet, srv.HTTP()+"/v2/trace/setting", ""); got["trace_count"] != "0" {
		t.Fatalf("trace_count after the count ran out: %v", got["trace_count"])
	}
	srv.Stop()
	if _, err := os.Stat(file); err == nil {
		t.Fatalf("%s written though every trace went to a numbered file", file)
	}
	if _, err := os.Stat(file + ".3"); err == nil {
		t.Fatalf("%s.3 written", file)
	}
}

// At level TENSORS the trace holds the request's inputs as they entered
// the queue and the outputs the backend produced, as Triton formats them.
func TestTritonTraceTensors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "trace.json")
	srv := constellation.Standalone(t, constellation.RepoPath(t, "deploy/model_repository"),
		append(tritonTraceFileFlags(file, "--trace-config", "level=TENSORS"), "--model-control-mode", "explicit", "--load-model", "simple")...)
	inferHTTP(t, srv.HTTP(), "tensors")
	srv.Stop()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	if err := json.Unmarshal(raw, &recs); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, raw)
	}
	got := map[string]any{}
	for _, r := range recs {
		if a, ok := r["activity"].(string); ok {
			tensor := r["tensor"].(map[string]any)
			got[a+" "+tensor["name"].(string)] = tensor
		}
	}
	seq := func(from int) string {
		s := ""
		for i := range 16 {
			if i > 0 {
				s += ","
			}
			s += strconv.Itoa(from + i)
		}
		return s
	}
	tensor := func(name, data string) map[string]any {
		return map[string]any{"name": name, "data": data, "shape": "1,16", "dtype": "INT32"}
	}
	want := map[string]any{
		"TENSOR_QUEUE_INPUT INPUT0":     tensor("INPUT0", seq(0)),
		"TENSOR_QUEUE_INPUT INPUT1":     tensor("INPUT1", "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1"),
		"TENSOR_BACKEND_OUTPUT OUTPUT0": tensor("OUTPUT0", seq(1)),
		"TENSOR_BACKEND_OUTPUT OUTPUT1": tensor("OUTPUT1", seq(-1)),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tensor records %v, want %v", got, want)
	}
}
