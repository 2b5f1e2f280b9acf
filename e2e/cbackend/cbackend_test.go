// Package cbackend tests Triton C backends in a constellation of real
// processes: backends written in C against Nereid's own declarations of the
// API, compiled here with the system compiler, loaded by two executors from
// a backend directory, and called over HTTP and gRPC through a gateway.
package cbackend

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/pkg/shm"
)

// backends are the C test backends, by installed name.
var backends = map[string]string{
	"nidentity":     "identity.c",
	"nautocomplete": "autocomplete.c",
	"nfail":         "failinit.c",
	"nbls":          "bls.c",
	"nstate":        "state.c",
	"ndecoupled":    "decoupled.c",
	"ncontrol":      "control.c",
	"ngpu":          "gpu.c",
}

const identityConfig = `
name: "cid"
backend: "nidentity"
max_batch_size: 8
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [-1] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [-1] }]
instance_group [{ kind: KIND_CPU, count: 1 }]
`

const failConfig = `
name: "cfail"
backend: "nfail"
max_batch_size: 0
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [1] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [1] }]
`

const blsConfig = `
name: "cbls"
backend: "nbls"
max_batch_size: 8
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [-1] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [-1] }]
`

// gpuConfig serves the backend that asks for GPU memory everywhere.
const gpuConfig = `
name: "cgpu"
backend: "ngpu"
max_batch_size: 8
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [-1] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [-1] }]
`

// setup compiles the backends into a backend directory and writes a model
// repository using them.
func setup(t *testing.T) (backendDir, repo string) {
	t.Helper()
	bin, err := constellation.Build()
	if err != nil {
		t.Fatal(err)
	}
	src := constellation.RepoPath(t, "services/executor/internal/cbackend")
	root := t.TempDir()
	backendDir = filepath.Join(root, "backends")
	for name, file := range backends {
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
	repo = filepath.Join(root, "models")
	for name, cfg := range map[string]string{"cid": identityConfig, "cfail": failConfig, "cauto": "backend: \"nautocomplete\"\n", "cbls": blsConfig, "cgpu": gpuConfig} {
		if err := os.MkdirAll(filepath.Join(repo, name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return backendDir, repo
}

func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestCBackendsThroughTheConstellation(t *testing.T) {
	backendDir, repo := setup(t)
	c := constellation.NewCluster(t)
	// cfail refuses to load on purpose: the executors list it and serve the others.
	served := []string{"--load-model", "cid", "--load-model", "cauto", "--load-model", "cfail", "--load-model", "cgpu", "--exit-on-error", "false"}
	probeA, probeB := constellation.Addr(constellation.FreePort(t)), constellation.Addr(constellation.FreePort(t))
	a := c.Executor(repo, "exec-a", append([]string{"--backend-directory", backendDir, "--backend-config", "nidentity,greeting=hello", "--probe-addr", probeA}, served...)...)
	b := c.Executor(repo, "exec-b", append([]string{"--backend-directory", backendDir, "--probe-addr", probeB}, served...)...)
	// The BLS model runs alone on a third executor: its calls to cid must
	// cross to another one.
	blsExec := c.Executor(repo, "exec-bls", "--backend-directory", backendDir, "--load-model", "cbls")
	constellation.Start(t, "shm-registry", c.Bin.Path("nereid-shm-registry"), "--nats-url", c.NATSURL)
	gw := c.Gateway("--allow-client-shm", "true")
	for _, m := range []string{"cid", "cauto", "cbls", "cgpu"} {
		if err := constellation.WaitHTTP(gw.HTTP()+"/v2/models/"+m+"/ready", 200, 30*time.Second); err != nil {
			t.Fatalf("model %s: %v\n%s\n%s", m, err, a.Output(), b.Output())
		}
	}

	t.Run("HTTP", func(t *testing.T) {
		code, body := post(t, gw.HTTP()+"/v2/models/cid/infer",
			`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,3],"data":[1.5,2.5,-3]}]}`)
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		var r struct {
			Outputs []struct {
				Name     string    `json:"name"`
				Datatype string    `json:"datatype"`
				Shape    []int64   `json:"shape"`
				Data     []float32 `json:"data"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), `"parameters":{"backend":"nereid-test-identity"}`) {
			t.Fatalf("the backend's response parameter is missing: %s", body)
		}
		if len(r.Outputs) != 1 || r.Outputs[0].Name != "OUTPUT0" || r.Outputs[0].Datatype != "FP32" ||
			len(r.Outputs[0].Data) != 3 || r.Outputs[0].Data[0] != 1.5 || r.Outputs[0].Data[2] != -3 {
			t.Fatalf("response %s", body)
		}
	})

	client := func(t *testing.T) inference.GRPCInferenceServiceClient {
		cc, err := grpc.NewClient(gw.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return inference.NewGRPCInferenceServiceClient(cc)
	}
	grpcInfer := func(t *testing.T, g inference.GRPCInferenceServiceClient, model string, vals []float32, params map[string]*inference.InferParameter) (*inference.ModelInferResponse, error) {
		raw := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return g.ModelInfer(ctx, &inference.ModelInferRequest{
			ModelName:        model,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1, int64(len(vals))}}},
			RawInputContents: [][]byte{raw},
			Parameters:       params,
		})
	}

	t.Run("gRPC", func(t *testing.T) {
		g := client(t)
		for _, model := range []string{"cid", "cauto"} {
			resp, err := grpcInfer(t, g, model, []float32{4, 5, 6, 7}, nil)
			if err != nil {
				t.Fatalf("%s: %v", model, err)
			}
			if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "OUTPUT0" || len(resp.RawOutputContents) != 1 ||
				math.Float32frombits(binary.LittleEndian.Uint32(resp.RawOutputContents[0][12:])) != 7 {
				t.Fatalf("%s: %v", model, resp)
			}
		}
	})

	t.Run("SharedMemory", func(t *testing.T) {
		const size = 1 << 16
		key := "/nereid-e2e-cbackend-" + strconv.Itoa(os.Getpid())
		m, err := shm.Create(key, size)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = m.Close(); _ = shm.Unlink(key) }()
		for i := range 16 {
			binary.LittleEndian.PutUint32(m.Data[4*i:], math.Float32bits(float32(i)+0.25))
		}
		var code int
		var body []byte
		if !constellation.WaitFor(20*time.Second, func() bool { // until the registry is up
			code, body = post(t, gw.HTTP()+"/v2/systemsharedmemory/region/creg/register", `{"key":"`+key+`","offset":0,"byte_size":65536}`)
			return code == 200
		}) {
			t.Fatalf("register: %d %s", code, body)
		}
		req := `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,16],"parameters":{"shared_memory_region":"creg","shared_memory_offset":0,"shared_memory_byte_size":64}}],` +
			`"outputs":[{"name":"OUTPUT0","parameters":{"shared_memory_region":"creg","shared_memory_offset":4096,"shared_memory_byte_size":64}}]}`
		code, body = post(t, gw.HTTP()+"/v2/models/cid/infer", req)
		if code != 200 || strings.Contains(string(body), `"data"`) {
			t.Fatalf("%d %s", code, body)
		}
		if !bytes.Equal(m.Data[4096:4096+64], m.Data[:64]) {
			t.Fatalf("output region holds % x, want % x", m.Data[4096:4096+64], m.Data[:64])
		}
		// A client that truncates its object fails its own request and the
		// executors live (TestTruncatingShmClientUnderACBackend truncates
		// it while the backend reads it in place).
		if err := os.Truncate("/dev/shm"+key, 0); err != nil {
			t.Fatal(err)
		}
		if code, body := post(t, gw.HTTP()+"/v2/models/cid/infer", req); code == 200 {
			t.Fatalf("a request reading a truncated region succeeded: %s", body)
		}
		if a.Exited() || b.Exited() {
			t.Fatal("an executor died reading a truncated region")
		}
		post(t, gw.HTTP()+"/v2/systemsharedmemory/region/creg/unregister", "")
	})

	t.Run("Statistics", func(t *testing.T) {
		type stats struct {
			ModelStats []struct {
				InferenceCount int64 `json:"inference_count"`
				ExecutionCount int64 `json:"execution_count"`
				InferenceStats struct {
					Success struct {
						Count int64 `json:"count"`
					} `json:"success"`
				} `json:"inference_stats"`
			} `json:"model_stats"`
		}
		// An executor serves requests from the moment it subscribes, and
		// the gateway asks it for statistics from its first heartbeat on:
		// one that joined while the requests ran is counted a moment later.
		var body []byte
		counted := func() bool {
			var code int
			code, body = get(t, gw.HTTP()+"/v2/models/cid/stats")
			if code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			var s stats
			if err := json.Unmarshal(body, &s); err != nil {
				t.Fatal(err)
			}
			return len(s.ModelStats) == 1 && s.ModelStats[0].InferenceCount == 3 && s.ModelStats[0].ExecutionCount == 3 && s.ModelStats[0].InferenceStats.Success.Count == 3
		}
		if !constellation.WaitFor(10*time.Second, counted) {
			t.Fatalf("statistics after three successful requests: %s", body)
		}
	})

	t.Run("CustomMetric", func(t *testing.T) {
		// The identity backend counts its requests in a metric family of its
		// own; each executor serves it on its probe port.
		total := 0.0
		for _, addr := range []string{probeA, probeB} {
			code, body := get(t, "http://"+addr+"/metrics")
			if code != 200 || !strings.Contains(string(body), "# TYPE nereid_test_identity_requests counter") {
				t.Fatalf("%s: %d %s", addr, code, body)
			}
			for _, line := range strings.Split(string(body), "\n") {
				if v, ok := strings.CutPrefix(line, `nereid_test_identity_requests{model="cid"} `); ok {
					f, err := strconv.ParseFloat(v, 64)
					if err != nil {
						t.Fatal(err)
					}
					total += f
				}
			}
		}
		if total != 3 {
			t.Fatalf("the executors counted %v requests of cid, want 3", total)
		}
	})

	t.Run("BLSOnAnotherExecutor", func(t *testing.T) {
		g := client(t)
		resp, err := grpcInfer(t, g, "cbls", []float32{8, 9}, nil)
		if err != nil {
			t.Fatalf("%v\n%s", err, blsExec.Output())
		}
		if resp.ModelName != "cbls" || len(resp.RawOutputContents) != 1 ||
			math.Float32frombits(binary.LittleEndian.Uint32(resp.RawOutputContents[0][4:])) != 9 {
			t.Fatalf("%v", resp)
		}
		code, body := post(t, gw.HTTP()+"/v2/models/cbls/infer", `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,1],"data":[0.5]}]}`)
		if code != 200 || !strings.Contains(string(body), `"data":[0.5]`) {
			t.Fatalf("%d %s", code, body)
		}
		// The called model counted the calls.
		_, stats := get(t, gw.HTTP()+"/v2/models/cid/stats")
		if !strings.Contains(string(stats), `"inference_count":5`) {
			t.Fatalf("cid statistics after two BLS calls: %s", stats)
		}
	})

	t.Run("AutoCompletedConfig", func(t *testing.T) {
		code, body := get(t, gw.HTTP()+"/v2/models/cauto/config")
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		var cfg struct {
			MaxBatchSize int `json:"max_batch_size"`
			Input        []struct {
				Name string  `json:"name"`
				Dims []int64 `json:"dims"`
			} `json:"input"`
		}
		if err := json.Unmarshal(body, &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.MaxBatchSize != 8 || len(cfg.Input) != 1 || cfg.Input[0].Name != "INPUT0" || len(cfg.Input[0].Dims) != 1 || cfg.Input[0].Dims[0] != -1 {
			t.Fatalf("config %s", body)
		}
	})

	t.Run("FailedLoadInIndex", func(t *testing.T) {
		code, body := post(t, gw.HTTP()+"/v2/repository/index", "")
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		var idx []struct {
			Name, State, Reason string
		}
		if err := json.Unmarshal(body, &idx); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, m := range idx {
			if m.Name == "cfail" {
				found = true
				if m.State != "UNAVAILABLE" || m.Reason != "nfail refuses to load this model: weights.bin is missing" {
					t.Fatalf("cfail in index: %+v", m)
				}
			}
		}
		if !found {
			t.Fatalf("cfail missing from the index: %s", body)
		}
	})

	t.Run("Logging", func(t *testing.T) {
		out := strings.ReplaceAll(a.Output(), `\"`, `"`) // the log quotes the message
		if !strings.Contains(out, `"greeting":"hello"`) || !strings.Contains(out, "backend nidentity initialized") || !strings.Contains(out, "source=backend") {
			t.Fatalf("the backend's log line with its --backend-config is not in the executor's log:\n%s", a.Output())
		}
	})

	t.Run("MemoryNegotiation", func(t *testing.T) {
		// Without CUDA shared memory a backend asking for GPU memory is
		// given host memory and told so, as Triton's frontends do.
		code, body := post(t, gw.HTTP()+"/v2/models/cgpu/infer", `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,2],"data":[1.5,2]}]}`)
		var r struct {
			Parameters map[string]any `json:"parameters"`
			Outputs    []struct {
				Data []float32 `json:"data"`
			} `json:"outputs"`
		}
		if code != 200 || json.Unmarshal(body, &r) != nil || len(r.Outputs) != 1 || len(r.Outputs[0].Data) != 2 || r.Outputs[0].Data[0] != 1.5 {
			t.Fatalf("HTTP: %d %s", code, body)
		}
		resp, err := grpcInfer(t, client(t), "cgpu", []float32{1.5, 2}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetRawOutputContents()) != 1 || len(resp.GetRawOutputContents()[0]) != 8 {
			t.Fatalf("gRPC: %v", resp)
		}
		for _, k := range []string{"properties", "input", "output"} {
			if r.Parameters[k] != "CPU:0" || resp.GetParameters()[k].GetStringParam() != "CPU:0" {
				t.Fatalf("%s memory: HTTP %v, gRPC %v; want CPU:0", k, r.Parameters[k], resp.GetParameters()[k])
			}
		}
	})

	t.Run("RescheduleRefused", func(t *testing.T) {
		// Outside Triton's iterative sequence scheduler a backend's
		// TRITONSERVER_REQUEST_RELEASE_RESCHEDULE gets Triton's error; the
		// backend keeps the request and answers it.
		const want = "Invalid argument: Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag."
		code, body := post(t, gw.HTTP()+"/v2/models/cid/infer",
			`{"parameters":{"reschedule":true},"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,2],"data":[1,2]}]}`)
		var r struct {
			Parameters map[string]any `json:"parameters"`
			Outputs    []struct {
				Data []float32 `json:"data"`
			} `json:"outputs"`
		}
		if code != 200 || json.Unmarshal(body, &r) != nil || r.Parameters["reschedule_error"] != want || len(r.Outputs) != 1 || len(r.Outputs[0].Data) != 2 {
			t.Fatalf("HTTP: %d %s", code, body)
		}
		resp, err := grpcInfer(t, client(t), "cid", []float32{1, 2}, map[string]*inference.InferParameter{
			"reschedule": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetParameters()["reschedule_error"].GetStringParam(); got != want || len(resp.GetRawOutputContents()) != 1 {
			t.Fatalf("gRPC: %v", resp)
		}
	})

	t.Run("CrashTakesDownOnlyItsExecutor", func(t *testing.T) {
		g := client(t)
		crash := map[string]*inference.InferParameter{"crash": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}
		if _, err := grpcInfer(t, g, "cid", []float32{1}, crash); err == nil {
			t.Fatal("a request that crashes its backend succeeded")
		}
		if !constellation.WaitFor(20*time.Second, func() bool { return a.Exited() || b.Exited() }) {
			t.Fatal("no executor died")
		}
		if a.Exited() && b.Exited() {
			t.Fatal("both executors died")
		}
		// The constellation keeps serving from the executor left.
		ok := constellation.WaitFor(30*time.Second, func() bool {
			_, err := grpcInfer(t, g, "cid", []float32{2, 3}, nil)
			return err == nil
		})
		if !ok {
			t.Fatal("the surviving executor does not serve")
		}
		for i := range 5 {
			resp, err := grpcInfer(t, g, "cid", []float32{float32(i)}, nil)
			if err != nil || !bytes.Equal(resp.RawOutputContents[0], binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(i)))) {
				t.Fatalf("after the crash, request %d: %v %v", i, resp, err)
			}
		}
	})
}
