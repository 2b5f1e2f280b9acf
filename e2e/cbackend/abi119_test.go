package cbackend

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// compileBackends builds the named test backends (installed name -> source in the
// bridge's testdata) into backendDir/<name>/libtriton_<name>.so.
func compileBackends(t *testing.T, backendDir string, sources map[string]string) {
	t.Helper()
	bin, err := constellation.Build()
	if err != nil {
		t.Fatal(err)
	}
	src := constellation.RepoPath(t, "services/executor/internal/cbackend")
	for name, file := range sources {
		out := filepath.Join(backendDir, name, "libtriton_"+name+".so")
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("cc", "-Wall", "-Werror", "-shared", "-fPIC", "-I"+filepath.Join(src, "include"), "-o", out,
			filepath.Join(src, "testdata", "backends", file), "-L"+bin.Dir, "-ltritonserver", "-lpthread")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cc %s: %v\n%s", file, err, b)
		}
	}
}

func putModel(t *testing.T, repo, name, config string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(repo, name, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
}

const respStatsConfig = `
name: "crs"
backend: "nrespstats"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "INPUT0", data_type: TYPE_INT32, dims: [1] }]
output [{ name: "OUTPUT0", data_type: TYPE_INT32, dims: [1] }]
`

// TestResponseStatisticsCBackend runs a decoupled C backend that reports
// each response's statistics with Triton's API 1.19 calls (one
// TRITONBACKEND_ModelInstanceResponseStatistics object per response,
// TRITONBACKEND_ModelInstanceReportResponseStatistics with it alone)
// behind a gateway and an executor: response_stats, read over HTTP and
// gRPC, count by response index exactly what it reported (success, fail
// with outputs, empty, with its synthetic 2 ms + 1 ms times), nothing of
// the executor's own timing, and nv_inference_first_response_histogram_ms
// counts one first response per request.
func TestResponseStatisticsCBackend(t *testing.T) {
	root := t.TempDir()
	backendDir, repo := filepath.Join(root, "backends"), filepath.Join(root, "models")
	compileBackends(t, backendDir, map[string]string{"nrespstats": "respstats.c"})
	putModel(t, repo, "crs", respStatsConfig)
	c := constellation.NewCluster(t)
	x := c.Executor(repo, "exec-a", "--backend-directory", backendDir, "--load-model", "crs")
	gw := c.Gateway("--metrics-config", "histogram_latencies=true")
	if err := constellation.WaitHTTP(gw.HTTP()+"/v2/models/crs/ready", 200, 30*time.Second); err != nil {
		t.Fatalf("crs: %v\n%s", err, x.Output())
	}
	cc, err := grpc.NewClient(gw.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := inference.NewGRPCInferenceServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	stream, err := client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const requests, n = 2, 4
	for i := range requests {
		if err := stream.Send(&inference.ModelInferRequest{ModelName: "crs", Id: fmt.Sprint("r", i),
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1}}},
			RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, n)}}); err != nil {
			t.Fatal(err)
		}
	}
	// Per request: responses 0 and 3, the failure of response 1 (the
	// empty response 2 sends nothing).
	var ok, failed int
	for range requests * 3 {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetErrorMessage() != "" {
			if !strings.Contains(r.GetErrorMessage(), "simulated failure") {
				t.Errorf("error response: %s", r.GetErrorMessage())
			}
			failed++
		} else {
			ok++
		}
	}
	stream.CloseSend()
	if ok != 2*requests || failed != requests {
		t.Fatalf("got %d responses and %d failures, want %d and %d", ok, failed, 2*requests, requests)
	}

	type dur struct{ Count, Ns uint64 }
	const ms = 1_000_000
	zero := dur{}
	want := map[string]map[string]dur{
		"0": {"compute_infer": {2, 4 * ms}, "compute_output": {2, 2 * ms}, "success": {2, 6 * ms}, "fail": zero, "empty_response": zero, "cancel": zero},
		"1": {"compute_infer": {2, 4 * ms}, "compute_output": {2, 2 * ms}, "success": zero, "fail": {2, 6 * ms}, "empty_response": zero, "cancel": zero},
		"2": {"compute_infer": {2, 6 * ms}, "compute_output": zero, "success": zero, "fail": zero, "empty_response": {2, 6 * ms}, "cancel": zero},
		"3": {"compute_infer": {2, 4 * ms}, "compute_output": {2, 2 * ms}, "success": {2, 6 * ms}, "fail": zero, "empty_response": zero, "cancel": zero},
	}
	// HTTP: the statistics arrive with the reports, after the sends.
	var got map[string]map[string]dur
	constellation.WaitFor(10*time.Second, func() bool {
		resp, err := http.Get(gw.HTTP() + "/v2/models/crs/stats")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct {
			ModelStats []struct {
				ResponseStats map[string]map[string]struct {
					Count uint64 `json:"count"`
					Ns    uint64 `json:"ns"`
				} `json:"response_stats"`
			} `json:"model_stats"`
		}
		if json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.ModelStats) != 1 {
			return false
		}
		got = map[string]map[string]dur{}
		for k, kinds := range body.ModelStats[0].ResponseStats {
			got[k] = map[string]dur{}
			for kind, d := range kinds {
				got[k][kind] = dur{d.Count, d.Ns}
			}
		}
		return fmt.Sprint(got) == fmt.Sprint(want)
	})
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("HTTP response_stats:\n got %v\nwant %v", got, want)
	}

	// gRPC: the same.
	st, err := client.ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: "crs"})
	if err != nil || len(st.GetModelStats()) != 1 {
		t.Fatalf("gRPC statistics: %v %v", st, err)
	}
	gotGRPC := map[string]map[string]dur{}
	for k, rs := range st.GetModelStats()[0].GetResponseStats() {
		d := func(s *inference.StatisticDuration) dur { return dur{s.GetCount(), s.GetNs()} }
		gotGRPC[k] = map[string]dur{"compute_infer": d(rs.GetComputeInfer()), "compute_output": d(rs.GetComputeOutput()),
			"success": d(rs.GetSuccess()), "fail": d(rs.GetFail()), "empty_response": d(rs.GetEmptyResponse()), "cancel": d(rs.GetCancel())}
	}
	if fmt.Sprint(gotGRPC) != fmt.Sprint(want) {
		t.Errorf("gRPC response_stats:\n got %v\nwant %v", gotGRPC, want)
	}

	// Triton's first-response histogram: one observation per request.
	resp, err := http.Get(gw.Metrics() + "/constellation")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var text strings.Builder
	buf := make([]byte, 32<<10)
	for {
		k, err := resp.Body.Read(buf)
		text.Write(buf[:k])
		if err != nil {
			break
		}
	}
	line := fmt.Sprintf(`nv_inference_first_response_histogram_ms_count{model="crs",version="1"} %d`, requests)
	if !strings.Contains(text.String(), line) {
		t.Errorf("metrics lack %q:\n%s", line, text.String())
	}
}

const pathsConfig = `
name: "cpaths"
backend: "npaths"
max_batch_size: 0
input [{ name: "INPUT0", data_type: TYPE_INT32, dims: [1] }]
output [{ name: "OUTPUT0", data_type: TYPE_STRING, dims: [1] }]
`

// TestBackendDirectoryRelativeWithDotDot starts an executor whose
// --backend-directory is relative, goes through "..", and ends in a
// slash: the backend sees its "backend-directory" setting, its artifacts
// and its model's location absolute and clean, its artifacts exactly
// <backend-directory>/<name> (the comparison Triton's Python backend
// makes), over HTTP and gRPC inference.
func TestBackendDirectoryRelativeWithDotDot(t *testing.T) {
	root := t.TempDir()
	backendDir, repo := filepath.Join(root, "backends"), filepath.Join(root, "models")
	compileBackends(t, backendDir, map[string]string{"npaths": "paths.c"})
	putModel(t, repo, "cpaths", pathsConfig)
	if err := os.MkdirAll(filepath.Join(root, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, root)
	if err != nil {
		t.Fatal(err)
	}
	// e.g. ../../tmp/TestX/001/other/../backends/
	flagDir := rel + "/other/../backends/"
	relRepo := rel + "/other/../models/"
	c := constellation.NewCluster(t)
	x := c.Executor(relRepo, "exec-a", "--backend-directory", flagDir, "--load-model", "cpaths")
	gw := c.Gateway()
	if err := constellation.WaitHTTP(gw.HTTP()+"/v2/models/cpaths/ready", 200, 30*time.Second); err != nil {
		t.Fatalf("cpaths: %v\n%s", err, x.Output())
	}
	want := strings.Join([]string{backendDir, filepath.Join(backendDir, "npaths"), filepath.Join(repo, "cpaths"), "same"}, "|")

	code, body := post(t, gw.HTTP()+"/v2/models/cpaths/infer", `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1],"data":[1]}]}`)
	var hr struct {
		Outputs []struct {
			Data []string `json:"data"`
		} `json:"outputs"`
	}
	if code != 200 || json.Unmarshal(body, &hr) != nil || len(hr.Outputs) != 1 || len(hr.Outputs[0].Data) != 1 {
		t.Fatalf("HTTP infer: %d %s", code, body)
	}
	if hr.Outputs[0].Data[0] != want {
		t.Errorf("HTTP: the backend saw\n %s\nwant\n %s", hr.Outputs[0].Data[0], want)
	}

	cc, err := grpc.NewClient(gw.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := inference.NewGRPCInferenceServiceClient(cc).ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "cpaths",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1}}},
		RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, 1)}})
	if err != nil || len(r.GetRawOutputContents()) != 1 || len(r.GetRawOutputContents()[0]) < 4 {
		t.Fatalf("gRPC infer: %v %v", r, err)
	}
	raw := r.GetRawOutputContents()[0]
	if got := string(raw[4 : 4+binary.LittleEndian.Uint32(raw)]); got != want {
		t.Errorf("gRPC: the backend saw\n %s\nwant\n %s", got, want)
	}
}
