//go:build cgo

package cbackend

import (
	"bytes"
	"context"
	"debug/elf"
	"io"
	"log/slog"
	"os"
	"regexp"
	"sync"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/executor/internal/seqstate"
)

type statsRecorder struct {
	mu       sync.Mutex
	requests []bool
	batches  []int
}

func (s *statsRecorder) ReportStatistics(r *backend.Request, ok bool, t backend.Timestamps) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok && t.ComputeEnd.Before(t.ComputeStart) {
		panic("timestamps out of order")
	}
	s.requests = append(s.requests, ok)
}

func (s *statsRecorder) ReportBatchStatistics(n int, t backend.Timestamps) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, n)
}

func identityConfig(name, backendName string) *inference.ModelConfig {
	return &inference.ModelConfig{
		Name: name, Backend: backendName, MaxBatchSize: 8,
		Input:  []*inference.ModelInput{{Name: "INPUT0", DataType: inference.DataType_TYPE_FP32, Dims: []int64{-1}}},
		Output: []*inference.ModelOutput{{Name: "OUTPUT0", DataType: inference.DataType_TYPE_FP32, Dims: []int64{-1}}},
	}
}

func loader(t *testing.T) *Loader {
	dir, stub := buildBackends(t)
	return NewLoader(Config{Directory: dir, ServerLibrary: stub})
}

func TestIdentityExecutes(t *testing.T) {
	dir, stub := buildBackends(t)
	var logs bytes.Buffer
	var logMu sync.Mutex
	l := NewLoader(Config{Directory: dir, ServerLibrary: stub, Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))})
	f, ok := l.Find("nidentity", t.TempDir(), 1)
	if !ok {
		t.Fatal("nidentity not found in the backend directory")
	}
	b, err := l.Factory(f)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Finalize()
	m, err := b.NewModel(context.Background(), backend.ModelInfo{Name: "id", Version: 1, Dir: t.TempDir(), Config: identityConfig("id", "nidentity")})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Finalize()
	stats := &statsRecorder{}
	in, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "id_0", Kind: inference.ModelInstanceGroup_KIND_CPU, Stats: stats})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Finalize()

	var got []*backend.Response
	var mu sync.Mutex
	mk := func(data []byte) *backend.Request {
		r := backend.NewRequest(context.Background(), func(_ *backend.Request, resp *backend.Response) {
			mu.Lock()
			got = append(got, resp)
			mu.Unlock()
		})
		r.BatchSize = 1
		r.Inputs = []backend.Input{{Name: "INPUT0", DataType: tensor.FP32, Shape: []int64{1, int64(len(data) / 4)}, Data: data}}
		r.RequestedOutputs = []string{"OUTPUT0"}
		return r
	}
	a, c := []byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte{9, 9, 9, 9}
	if err := in.Execute(context.Background(), []*backend.Request{mk(a), mk(c)}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d responses, want 2", len(got))
	}
	for i, want := range [][]byte{a, c} {
		if got[i].Err != nil {
			t.Fatalf("response %d: %v", i, got[i].Err)
		}
		o := got[i].Outputs
		if len(o) != 1 || o[0].Name != "OUTPUT0" || o[0].DataType != tensor.FP32 || !bytes.Equal(o[0].Data, want) {
			t.Fatalf("response %d: %+v", i, o)
		}
		if got[i].Parameters["backend"] != "nereid-test-identity" {
			t.Fatalf("response %d parameters: %v", i, got[i].Parameters)
		}
	}
	if len(stats.requests) != 2 || !stats.requests[0] || !stats.requests[1] || len(stats.batches) != 1 || stats.batches[0] != 2 {
		t.Fatalf("statistics: requests %v batches %v", stats.requests, stats.batches)
	}
	var buf bytes.Buffer
	if err := WriteMetrics(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`nereid_test_identity_requests{model="id"} 2`)) {
		t.Fatalf("custom metric missing:\n%s", buf.String())
	}
	logMu.Lock()
	defer logMu.Unlock()
	// No GPU here: Triton's answer for a server without GPU support. On a
	// GPU, the CUDA driver allocates.
	if !bytes.Contains(logs.Bytes(), []byte(`msg="GPU memory: Unsupported: GPU memory allocation not supported"`)) &&
		!bytes.Contains(logs.Bytes(), []byte(`msg="GPU memory: allocated"`)) {
		t.Fatalf("GPU allocation outcome not logged:\n%s", logs.String())
	}
	if !bytes.Contains(logs.Bytes(), []byte("source=backend")) {
		t.Fatalf("backend log lines lack their source:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestAutoCompleteSetsConfig(t *testing.T) {
	l := loader(t)
	f, _ := l.Find("nautocomplete", t.TempDir(), 1)
	b, err := l.Factory(f)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Finalize()
	m, err := b.NewModel(context.Background(), backend.ModelInfo{Name: "ac", Version: 1, Dir: t.TempDir(),
		Config: &inference.ModelConfig{Name: "ac", Backend: "nautocomplete"}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Finalize()
	cfg := m.(*cModel).CompletedConfig()
	if cfg == nil || cfg.GetMaxBatchSize() != 8 || len(cfg.GetInput()) != 1 || cfg.GetInput()[0].GetName() != "INPUT0" || len(cfg.GetOutput()) != 1 {
		t.Fatalf("completed config: %v", cfg)
	}
}

func TestModelInitializeErrorFailsLoad(t *testing.T) {
	l := loader(t)
	f, _ := l.Find("nfail", t.TempDir(), 1)
	b, err := l.Factory(f)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Finalize()
	_, err = b.NewModel(context.Background(), backend.ModelInfo{Name: "f", Version: 1, Dir: t.TempDir(), Config: identityConfig("f", "nfail")})
	if err == nil || err.Error() != "nfail refuses to load this model: weights.bin is missing" || tritonerr.KindOf(err) != tritonerr.InvalidArg {
		t.Fatalf("got %v", err)
	}
}

func TestFindSearchOrder(t *testing.T) {
	dir, _ := buildBackends(t)
	l := NewLoader(Config{Directory: dir})
	model := t.TempDir()
	if f, ok := l.Find("nidentity", model, 3); !ok || f.Location != dir+"/nidentity" {
		t.Fatalf("backend directory: %+v %v", f, ok)
	}
	lib, _ := os.ReadFile(dir + "/nidentity/libtriton_nidentity.so")
	os.WriteFile(model+"/libtriton_nidentity.so", lib, 0o755)
	if f, _ := l.Find("nidentity", model, 3); f.Location != model {
		t.Fatalf("model directory first: %+v", f)
	}
	os.MkdirAll(model+"/3", 0o755)
	os.WriteFile(model+"/3/libtriton_nidentity.so", lib, 0o755)
	if f, _ := l.Find("nidentity", model, 3); f.Location != model+"/3" {
		t.Fatalf("version directory first: %+v", f)
	}
	if _, ok := l.Find("nosuch", model, 3); ok {
		t.Fatal("found a backend that is not there")
	}
	// A Python-based backend: <dir>/<name>/model.py, run by the python
	// backend's library.
	os.MkdirAll(dir+"/pyecho", 0o755)
	os.WriteFile(dir+"/pyecho/model.py", []byte("class TritonPythonModel: pass\n"), 0o644)
	if _, ok := l.Find("pyecho", model, 3); ok {
		t.Fatal("a Python-based backend was found without the python backend")
	}
	os.MkdirAll(dir+"/python", 0o755)
	os.WriteFile(dir+"/python/libtriton_python.so", lib, 0o755)
	f, ok := l.Find("pyecho", model, 3)
	if !ok || f.Library != dir+"/python/libtriton_python.so" || f.Location != dir+"/pyecho" || f.Name != "pyecho" {
		t.Fatalf("Python-based backend: %+v %v", f, ok)
	}
}

// Every server-side function of the ABI is exported by the binary that
// links this package, so backends bind to it and never to the stub.
func TestEveryServerFunctionExported(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			exported[s.Name] = true
		}
	}
	src, err := os.ReadFile("stub/tritonserver_stub.c")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`(?m)^NEREID_STUB\((\w+)\)`).FindAllSubmatch(src, -1)
	if len(names) < 133 {
		t.Fatalf("stub lists %d functions", len(names))
	}
	for _, n := range names {
		if !exported[string(n[1])] {
			t.Errorf("%s is not exported by the executor", n[1])
		}
	}
}

func TestDecoupledSendsFromItsOwnThread(t *testing.T) {
	l := loader(t)
	f, _ := l.Find("ndecoupled", t.TempDir(), 1)
	b, err := l.Factory(f)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Finalize()
	cfg := &inference.ModelConfig{
		Name: "dec", Backend: "ndecoupled",
		ModelTransactionPolicy: &inference.ModelTransactionPolicy{Decoupled: true},
		Input:                  []*inference.ModelInput{{Name: "INPUT0", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}},
		Output:                 []*inference.ModelOutput{{Name: "OUTPUT0", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}},
	}
	m, err := b.NewModel(context.Background(), backend.ModelInfo{Name: "dec", Version: 1, Dir: t.TempDir(), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Finalize()
	in, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "dec_0", Stats: &statsRecorder{}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Finalize()
	for _, n := range []int32{0, 1, 5} {
		var got []*backend.Response
		done := make(chan struct{})
		r := backend.NewRequest(context.Background(), func(_ *backend.Request, resp *backend.Response) {
			got = append(got, resp)
			if resp.Final {
				close(done)
			}
		})
		r.Decoupled = true
		r.Inputs = []backend.Input{{Name: "INPUT0", DataType: tensor.Int32, Shape: []int64{1}, Data: []byte{byte(n), 0, 0, 0}}}
		r.RequestedOutputs = []string{"OUTPUT0"}
		if err := in.Execute(context.Background(), []*backend.Request{r}); err != nil {
			t.Fatal(err)
		}
		<-done
		if len(got) != int(n)+1 || !got[n].FlagOnly || !got[n].Final {
			t.Fatalf("n=%d: %d responses, last %+v", n, len(got), got[len(got)-1])
		}
		for i := range n {
			if got[i].Err != nil || got[i].Final || len(got[i].Outputs) != 1 || !bytes.Equal(got[i].Outputs[0].Data, []byte{byte(i), 0, 0, 0}) {
				t.Fatalf("n=%d response %d: %+v", n, i, got[i])
			}
		}
	}
}

func TestImplicitStatePerSequence(t *testing.T) {
	l := loader(t)
	f, _ := l.Find("nstate", t.TempDir(), 1)
	b, err := l.Factory(f)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Finalize()
	cfg := &inference.ModelConfig{
		Name: "acc", Backend: "nstate",
		Input:  []*inference.ModelInput{{Name: "INPUT0", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}},
		Output: []*inference.ModelOutput{{Name: "OUTPUT0", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}},
		SchedulingChoice: &inference.ModelConfig_SequenceBatching{SequenceBatching: &inference.ModelSequenceBatching{State: []*inference.ModelSequenceBatching_State{{
			InputName: "INPUT_STATE", OutputName: "OUTPUT_STATE", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1},
			InitialState: []*inference.ModelSequenceBatching_InitialState{{Name: "zero", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1},
				StateData: &inference.ModelSequenceBatching_InitialState_ZeroData{ZeroData: true}}},
		}}}},
	}
	m, err := b.NewModel(context.Background(), backend.ModelInfo{Name: "acc", Version: 1, Dir: t.TempDir(), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Finalize()
	in, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "acc_0", Stats: &statsRecorder{}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Finalize()
	// The executor's part: each sequence's state, given to its requests as
	// inputs and updated from what the backend stored.
	states, err := seqstate.Load(cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	slots := map[backend.CorrelationID]*seqstate.Slot{}
	step := func(seq backend.CorrelationID, flags backend.Flags, x int32) int32 {
		t.Helper()
		var resp *backend.Response
		r := backend.NewRequest(context.Background(), func(_ *backend.Request, rs *backend.Response) { resp = rs })
		r.CorrelationID, r.Flags = seq, flags
		r.SetStates("acc", []string{"OUTPUT_STATE"})
		if flags&backend.SequenceStart != 0 {
			slots[seq] = states.Start()
		}
		r.Inputs = append([]backend.Input{{Name: "INPUT0", DataType: tensor.Int32, Shape: []int64{1}, Data: []byte{byte(x), 0, 0, 0}}}, states.Inputs(slots[seq])...)
		r.RequestedOutputs = []string{"OUTPUT0"}
		if err := in.Execute(context.Background(), []*backend.Request{r}); err != nil {
			t.Fatal(err)
		}
		if resp == nil || resp.Err != nil || len(resp.Outputs) != 1 {
			t.Fatalf("response %+v", resp)
		}
		states.Update(slots[seq], r.UpdatedStates())
		return int32(resp.Outputs[0].Data[0])
	}
	a, c := backend.CorrelationUint(7), backend.CorrelationString("seq-b")
	for _, tc := range []struct {
		seq   backend.CorrelationID
		flags backend.Flags
		x     int32
		want  int32
	}{
		{a, backend.SequenceStart, 1, 1},
		{c, backend.SequenceStart, 10, 10},
		{a, 0, 2, 3},
		{c, 0, 5, 15},
		{a, backend.SequenceEnd, 3, 6},
		{a, backend.SequenceStart, 4, 4}, // a new sequence starts from the initial state
		{c, backend.SequenceEnd, 1, 16},
	} {
		if got := step(tc.seq, tc.flags, tc.x); got != tc.want {
			t.Fatalf("sequence %v flags %d input %d: sum %d, want %d", tc.seq, tc.flags, tc.x, got, tc.want)
		}
	}
}

// TestRescheduleIsRefused: a request released with
// TRITONSERVER_REQUEST_RELEASE_RESCHEDULE outside Triton's iterative
// sequence scheduler gets Triton's error and stays the backend's, which
// answers and releases it as usual.
func TestRescheduleIsRefused(t *testing.T) {
	m := testModel(t, "nidentity", identityConfig("id", "nidentity"), nil)
	stats := &statsRecorder{}
	in, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "id_0", Kind: inference.ModelInstanceGroup_KIND_CPU, Stats: stats})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Finalize()
	var got *backend.Response
	r := backend.NewRequest(context.Background(), func(_ *backend.Request, resp *backend.Response) { got = resp })
	r.BatchSize = 1
	r.Parameters = map[string]any{"reschedule": true}
	r.Inputs = []backend.Input{{Name: "INPUT0", DataType: tensor.FP32, Shape: []int64{1, 1}, Data: []byte{1, 2, 3, 4}}}
	r.RequestedOutputs = []string{"OUTPUT0"}
	if err := in.Execute(context.Background(), []*backend.Request{r}); err != nil {
		t.Fatal(err)
	}
	const want = "Invalid argument: Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag."
	if got == nil || got.Err != nil || got.Parameters["reschedule_error"] != want {
		t.Fatalf("response %+v: want the parameter reschedule_error %q", got, want)
	}
	if len(got.Outputs) != 1 || !bytes.Equal(got.Outputs[0].Data, []byte{1, 2, 3, 4}) {
		t.Fatalf("outputs %+v", got.Outputs)
	}
	if len(stats.requests) != 1 || !stats.requests[0] {
		t.Fatalf("statistics %v", stats.requests)
	}
}

// testModel loads model name of the test backend backendName with cfg,
// through a loader over the compiled test backends (cfg.Server serves
// their BLS calls); the model and its backend are finalized at the end
// of the test.
func testModel(t *testing.T, backendName string, cfg *inference.ModelConfig, srv Server) backend.Model {
	t.Helper()
	dir, stub := buildBackends(t)
	l := NewLoader(Config{Directory: dir, ServerLibrary: stub, Server: srv})
	f, ok := l.Find(backendName, t.TempDir(), 1)
	if !ok {
		t.Fatalf("%s not found in the backend directory", backendName)
	}
	b, err := l.Factory(f)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Finalize() })
	m, err := b.NewModel(context.Background(), backend.ModelInfo{Name: cfg.GetName(), Version: 1, Dir: t.TempDir(), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Finalize() })
	return m
}
