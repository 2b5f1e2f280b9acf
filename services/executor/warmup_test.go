package executor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/executor/internal/cbackend"
)

// warmIdentity is an identity model of two instances that take 40 ms an
// execution, with three warmup samples: one of batch 4 run three times,
// one of batch 1 run once (count 0 runs once, as in Triton), one of
// batch 0 that Triton skips.
const warmIdentity = `name: "warm" backend: "identity" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "execute_delay_ms" value { string_value: "40" } }
model_warmup [
  { name: "zeros" batch_size: 4 count: 3 inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } } },
  { name: "random" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 3 ] random_data: true } } },
  { name: "skipped" batch_size: 0 inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } } }
]`

// stringModel is Triton's simple_string (the addsub backend on BYTES
// elements holding decimal integers) with the given warmup.
func stringModel(name, warmup string) string {
	return `name: "` + name + `" backend: "addsub" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]
model_warmup [ ` + warmup + ` ]`
}

// squareModel is Triton's decoupled square_int32 with a warmup sample of
// IN read from the file "n".
func squareModel(name string) string {
	return `name: "` + name + `" backend: "square" max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_warmup [ { name: "from file" batch_size: 1 inputs { key: "IN" value { data_type: TYPE_INT32 dims: [ 1 ] input_data_file: "n" } } } ]`
}

// writeWarmModel writes a model directory (config and version 1) with the
// given files in its warmup folder.
func writeWarmModel(t *testing.T, repo, name, config string, warmup map[string][]byte) string {
	t.Helper()
	writeModel(t, repo, name, config)
	dir := filepath.Join(repo, name)
	for f, data := range warmup {
		if err := os.MkdirAll(filepath.Join(dir, warmupFolder), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, warmupFolder, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startRepo runs an executor in explicit model control over repo.
func startRepo(t *testing.T, repo string) *harness {
	t.Helper()
	url := startNATS(t)
	h := &harness{t: t, url: url}
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	h.client = client
	h.ex, h.stop = runExecutor(t, url, Config{RepositoryPath: repo, ControlMode: ControlExplicit, ID: "ex-1", Node: "node-a"})
	return h
}

// load asks the executor to load name, as a gateway's load request does.
func (h *harness) load(name string) *busv1.ModelControlReply {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reply := &busv1.ModelControlReply{}
	if err := h.client.Request(ctx, bus.ModelControlSubject, &busv1.ModelControlRequest{Name: name, Load: true}, reply); err != nil {
		h.t.Fatal(err)
	}
	return reply
}

// versionState is the state and reason the executor's catalog gives
// version 1 of name ("" when it lists none).
func versionState(cat *busv1.ExecutorCatalog, name string) (state, reason string) {
	for _, m := range cat.GetModels() {
		if m.GetName() == name && m.GetVersion() == "1" {
			return m.GetState(), m.GetReason()
		}
	}
	return "", ""
}

// TestWarmupRunsBeforeReady loads a model with warmup samples while
// watching the executor's catalog: the version reads LOADING while its
// instances warm up, and the first time it reads READY the backend has
// already reported every warmup execution (the statistics count them, as
// Triton's do): 2 instances x (3 executions of 4 requests + 1 of 1), the
// batch-0 sample skipped. A real request then runs as usual.
func TestWarmupRunsBeforeReady(t *testing.T) {
	repo := t.TempDir()
	writeWarmModel(t, repo, "warm", warmIdentity, nil)
	h := startRepo(t, repo)

	type seen struct {
		loading    bool
		ready      bool
		executions uint64 // at the first READY
		inferences uint64
	}
	var (
		obs seen
		wg  sync.WaitGroup
	)
	// Watches until the version first reads READY (or fails).
	wg.Go(func() {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			state, _ := versionState(h.catalog(), "warm")
			switch state {
			case StateLoading:
				obs.loading = true
			case StateReady:
				st := h.stats("warm", "1").GetModelStats()
				if len(st) == 1 {
					obs.ready, obs.executions, obs.inferences = true, st[0].GetExecutionCount(), st[0].GetInferenceCount()
				}
				return
			case StateUnavailable:
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	start := time.Now()
	reply := h.load("warm")
	took := time.Since(start)
	wg.Wait()
	if reply.GetError() != "" {
		t.Fatalf("load: %s %s", reply.GetErrorKind(), reply.GetError())
	}
	// 8 warmup executions of 40 ms each, one instance after the other.
	if took < 8*40*time.Millisecond {
		t.Errorf("the load returned after %s, before 8 warmup executions of 40 ms could have run", took)
	}
	if !obs.loading {
		t.Error("the catalog never showed the version LOADING while it warmed up")
	}
	if !obs.ready {
		t.Fatal("the catalog never showed the version READY")
	}
	if obs.executions != 8 || obs.inferences != 26 {
		t.Errorf("at the first READY the backend had reported %d executions of %d inferences, want all 8 of 26 warmup ones", obs.executions, obs.inferences)
	}

	st := h.stats("warm", "1").GetModelStats()[0]
	if st.GetExecutionCount() != 8 || st.GetInferenceCount() != 26 || !mapsEqual(sizesOf(st), map[uint64]uint64{4: 6, 1: 2}) {
		t.Errorf("after the load: %d executions of %d inferences, batches %v; want 8 of 26, batches {4: 6, 1: 2}",
			st.GetExecutionCount(), st.GetInferenceCount(), sizesOf(st))
	}
	data := tensor.AppendFloat32s(nil, 1, 2, 3)
	resp, err := h.infer("warm", request("r", []tin{{"INPUT0", "FP32", []int64{1, 3}, data}}))
	if err != nil {
		t.Fatal(err)
	}
	if _, out := outputData(t, resp, "OUTPUT0"); string(out) != string(data) {
		t.Errorf("OUTPUT0 %v, want the input back", tensor.Float32s(out))
	}
	if st := h.stats("warm", "1").GetModelStats()[0]; st.GetExecutionCount() != 9 {
		t.Errorf("after one request: %d executions, want 9", st.GetExecutionCount())
	}
}

// bytesElements frames decimal strings as BYTES elements.
func bytesElements(from, to int) []byte {
	var b []byte
	for i := from; i <= to; i++ {
		b = tensor.AppendBytesString(b, strconv.Itoa(i))
	}
	return b
}

// TestWarmupData runs samples whose data a real backend checks: STRING
// data from a file (already framed, used whole) that the addsub backend
// parses, a decoupled model's sample read from a file, whose responses
// the warmup waits for, and sequence models' samples with their control
// inputs (and initial implicit state).
func TestWarmupData(t *testing.T) {
	repo := t.TempDir()
	writeWarmModel(t, repo, "strings", stringModel("strings",
		`{ name: "from file" batch_size: 2 inputs { key: "INPUT0" value { data_type: TYPE_STRING dims: [ 16 ] input_data_file: "sixteen" } }
		   inputs { key: "INPUT1" value { data_type: TYPE_STRING dims: [ 16 ] input_data_file: "sixteen" } } }`),
		map[string][]byte{"sixteen": bytesElements(1, 16)})
	writeWarmModel(t, repo, "square", squareModel("square"), map[string][]byte{"n": tensor.AppendInt32s(nil, 3)})
	// Triton's QA warms its sequence models with a batch of 8 that sets
	// the control inputs too.
	control := func(name string) string {
		return `inputs { key: "` + name + `" value { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }`
	}
	writeWarmModel(t, repo, "sequence", `name: "sequence" backend: "sequence" max_batch_size: 8
sequence_batching { control_input [
  { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
  { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] } ] }
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_warmup [ { name: "sequence sample" batch_size: 8 `+control("INPUT")+control("START")+control("READY")+` } ]`, nil)
	// An implicit-state model gets its states' initial values.
	writeWarmModel(t, repo, "state", `name: "state" backend: "implicit_state" max_batch_size: 8
sequence_batching { direct {} control_input [
  { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
  { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ -1 ]
    initial_state { name: "zeros" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } ] }
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
model_warmup [ { name: "state sample" batch_size: 1 `+control("INPUT")+control("READY")+` } ]`, nil)
	h := startRepo(t, repo)

	for _, tc := range []struct {
		model                  string
		executions, inferences uint64
	}{
		{"strings", 1, 2},
		{"square", 1, 1},
		{"sequence", 1, 8},
		{"state", 1, 1},
	} {
		if reply := h.load(tc.model); reply.GetError() != "" {
			t.Fatalf("load %s: %s", tc.model, reply.GetError())
		}
		st := h.stats(tc.model, "1").GetModelStats()[0]
		if st.GetExecutionCount() != tc.executions || st.GetInferenceCount() != tc.inferences {
			t.Errorf("%s: %d executions of %d inferences after the load, want %d of %d",
				tc.model, st.GetExecutionCount(), st.GetInferenceCount(), tc.executions, tc.inferences)
		}
	}
}

// TestWarmupFailureFailsLoad: a sample the backend fails fails the load
// with Triton's message ("failed to run warmup sample '<name>': " and
// every response's error, each followed by "; "), reported as every
// failed load is (INTERNAL); the version is UNAVAILABLE with that reason
// and serves nothing. Both a model that
// answers with an error (zero-length strings are no integers to addsub)
// and a decoupled one whose Execute fails (square refuses a negative
// count).
func TestWarmupFailureFailsLoad(t *testing.T) {
	repo := t.TempDir()
	writeWarmModel(t, repo, "bad_strings", stringModel("bad_strings",
		`{ name: "zero sample" batch_size: 2 inputs { key: "INPUT0" value { data_type: TYPE_STRING dims: [ 16 ] zero_data: true } }
		   inputs { key: "INPUT1" value { data_type: TYPE_STRING dims: [ 16 ] random_data: true } } }`), nil)
	writeWarmModel(t, repo, "bad_square", squareModel("bad_square"), map[string][]byte{"n": tensor.AppendInt32s(nil, -1)})
	h := startRepo(t, repo)

	notInt := "addsub backend: element '' of input 'INPUT0' is not a decimal int32; "
	for _, tc := range []struct {
		model, reason string
	}{
		{"bad_strings", "failed to run warmup sample 'zero sample': " + notInt + notInt},
		{"bad_square", "failed to run warmup sample 'from file': square backend: IN must not be negative, got -1; "},
	} {
		reply := h.load(tc.model)
		if want := "failed to load '" + tc.model + "' version 1: " + tc.reason; reply.GetError() != want || reply.GetErrorKind() != tritonerr.Internal.String() {
			t.Errorf("load %s:\n got %s %q\nwant %s %q", tc.model, reply.GetErrorKind(), reply.GetError(), tritonerr.Internal, want)
		}
		if state, reason := versionState(reply.GetCatalog(), tc.model); state != StateUnavailable || reason != tc.reason {
			t.Errorf("%s is %s (%q), want UNAVAILABLE (%q)", tc.model, state, reason, tc.reason)
		}
	}
	if _, err := h.infer("bad_strings", request("r", []tin{
		{"INPUT0", "BYTES", []int64{1, 16}, bytesElements(1, 16)}, {"INPUT1", "BYTES", []int64{1, 16}, bytesElements(1, 16)}})); err == nil {
		t.Error("a model whose warmup failed answered a request")
	}
}

// TestWarmupSampleValidation: samples that could not run are refused when
// the model loads, before any instance exists, with what is wrong (in
// Triton's words where Triton has them).
func TestWarmupSampleValidation(t *testing.T) {
	const twoInputs = `name: "m" backend: "addsub" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 4 ] } ]
`
	in := func(name, value string) string {
		return `inputs { key: "` + name + `" value { ` + value + ` } }`
	}
	sample := func(inputs ...string) string {
		s := `model_warmup [ { name: "s" batch_size: 1 `
		for _, i := range inputs {
			s += i + " "
		}
		return s + `} ]`
	}
	ok := in("INPUT1", `data_type: TYPE_INT32 dims: [ 4 ] zero_data: true`)
	for _, tc := range []struct {
		name, warmup string
		kind         tritonerr.Kind
		want         string
	}{
		{"variable dims", sample(in("INPUT0", `data_type: TYPE_INT32 dims: [ -1 ] zero_data: true`), ok),
			tritonerr.InvalidArg, "warmup setting expects all variable-size dimensions are specified for input 'INPUT0'"},
		{"no data source", sample(in("INPUT0", `data_type: TYPE_INT32 dims: [ 4 ]`), ok),
			tritonerr.InvalidArg, "warmup setting expects input 'INPUT0' to have input_data_type set"},
		{"unknown input", sample(in("INPUT0", `data_type: TYPE_INT32 dims: [ 4 ] zero_data: true`), ok, in("INPUT9", `data_type: TYPE_INT32 dims: [ 4 ] zero_data: true`)),
			tritonerr.InvalidArg, "warmup sample 's' of model 'm' has input 'INPUT9', which is neither an input of the model nor one of its sequence control or state inputs"},
		{"missing file", sample(in("INPUT0", `data_type: TYPE_INT32 dims: [ 4 ] input_data_file: "absent"`), ok),
			tritonerr.Internal, "failed to open text file for read {dir}/warmup/absent: No such file or directory"},
		{"file too small", sample(in("INPUT0", `data_type: TYPE_INT32 dims: [ 4 ] input_data_file: "four"`), ok),
			tritonerr.InvalidArg, "warmup setting expects 16 bytes, but the data provided from fouronly has 4 bytes"},
		{"file outside the warmup folder", sample(in("INPUT0", `data_type: TYPE_INT32 dims: [ 4 ] input_data_file: "../config.pbtxt"`), ok),
			tritonerr.InvalidArg, "warmup setting of input 'INPUT0' names input_data_file '../config.pbtxt', which is not a file in the model's 'warmup' folder"},
		{"required input missing", sample(ok),
			tritonerr.InvalidArg, "expected 2 inputs but got 1 inputs for model 'm'. Got input(s) ['INPUT1'], but missing required input(s) ['INPUT0']. Please provide all required input(s)."},
		{"wrong datatype", sample(in("INPUT0", `data_type: TYPE_FP32 dims: [ 4 ] zero_data: true`), ok),
			tritonerr.InvalidArg, "inference input 'INPUT0' data-type is 'FP32', but model 'm' expects 'INT32'"},
		{"wrong dims", sample(in("INPUT0", `data_type: TYPE_INT32 dims: [ 5 ] zero_data: true`), ok),
			tritonerr.InvalidArg, "unexpected shape for input 'INPUT0' for model 'm'. Expected [-1,4], got [1,5]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeWarmModel(t, t.TempDir(), "m", twoInputs+tc.warmup, map[string][]byte{"four": tensor.AppendInt32s(nil, 7)})
			cfg, err := modelconfig.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			_, err = warmupSamples(cfg, dir)
			want := tritonerr.New(tc.kind, "%s", strings.ReplaceAll(tc.want, "{dir}", filepath.ToSlash(dir)))
			if got := tritonerr.From(err); got == nil || got.Kind != want.Kind || got.Msg != want.Msg {
				t.Errorf("\n got %v\nwant %v", err, want)
			}
		})
	}
}

// buildCBackends compiles the stub libtritonserver.so and the given C test
// backends of internal/cbackend (installed name: source file) as Triton's
// backend directory.
func buildCBackends(t *testing.T, backends map[string]string) (dir, stub string) {
	t.Helper()
	if !cbackend.Available {
		t.Skip("C backends need cgo")
	}
	_, file, _, _ := runtime.Caller(0)
	cb := filepath.Join(filepath.Dir(file), "internal", "cbackend")
	root := t.TempDir()
	stub = filepath.Join(root, "lib", "libtritonserver.so")
	dir = filepath.Join(root, "backends")
	cc := func(out string, args ...string) {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"-Wall", "-Werror", "-shared", "-fPIC", "-I" + filepath.Join(cb, "include"), "-o", out}, args...)
		if b, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
			t.Fatalf("cc %v: %v\n%s", args, err, b)
		}
	}
	cc(stub, filepath.Join(cb, "stub", "tritonserver_stub.c"), "-Wl,-soname,libtritonserver.so")
	for name, src := range backends {
		cc(filepath.Join(dir, name, "libtriton_"+name+".so"), filepath.Join(cb, "testdata", "backends", src),
			"-L"+filepath.Dir(stub), "-ltritonserver", "-lpthread")
	}
	return dir, stub
}

// TestWarmupCBackend warms Triton C backends: the identity test backend,
// which reports its statistics itself (TRITONBACKEND_ModelInstance
// ReportStatistics), and the decoupled one, which answers from a thread of
// its own after Execute has returned: the load waits for its responses.
func TestWarmupCBackend(t *testing.T) {
	backends, stub := buildCBackends(t, map[string]string{"nidentity": "identity.c", "ndecoupled": "decoupled.c"})
	repo := t.TempDir()
	writeWarmModel(t, repo, "cwarm", `name: "cwarm" backend: "nidentity" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
model_warmup [ { name: "random" batch_size: 2 count: 3 inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } } ]`, nil)
	writeWarmModel(t, repo, "cdec", `name: "cdec" backend: "ndecoupled" max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_warmup [ { name: "two" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 1 ] input_data_file: "two" } } } ]`,
		map[string][]byte{"two": tensor.AppendInt32s(nil, 2)})
	url := startNATS(t)
	h := &harness{t: t, url: url}
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	h.client = client
	h.ex, h.stop = runExecutor(t, url, Config{RepositoryPath: repo, ControlMode: ControlExplicit, ID: "ex-1", Node: "node-a",
		BackendDirectory: backends, ServerLibrary: stub})

	for _, tc := range []struct {
		model                  string
		executions, inferences uint64
	}{
		{"cwarm", 3, 6},
		{"cdec", 1, 1},
	} {
		if reply := h.load(tc.model); reply.GetError() != "" {
			t.Fatalf("load %s: %s", tc.model, reply.GetError())
		}
		st := h.stats(tc.model, "1").GetModelStats()[0]
		if st.GetExecutionCount() != tc.executions || st.GetInferenceCount() != tc.inferences {
			t.Errorf("%s: %d executions of %d inferences after the load, want %d of %d",
				tc.model, st.GetExecutionCount(), st.GetInferenceCount(), tc.executions, tc.inferences)
		}
	}
}
