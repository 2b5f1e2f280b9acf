package executor

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/internal/testutil/leakcheck"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

const exampleRepo = "../../deploy/model_repository"

// startNATS runs a real nats-server on a random port.
func startNATS(t *testing.T) string {
	t.Helper()
	leakcheck.Check(t) // every test starts here: it must end with its goroutines gone
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

type harness struct {
	t      *testing.T
	url    string
	client *bus.Conn
	ex     *Executor
	stop   func() error
}

// start runs an executor over repo (restricted to models, if any) and
// returns a bus client next to it.
func start(t *testing.T, repo string, models ...string) *harness {
	t.Helper()
	url := startNATS(t)
	h := &harness{t: t, url: url}
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	h.client = client
	h.ex, h.stop = runExecutor(t, url, Config{RepositoryPath: repo, Models: models, ID: "ex-1", Node: "node-a"})
	return h
}

func runExecutor(t *testing.T, url string, cfg Config) (*Executor, func() error) {
	t.Helper()
	cfg.Conn = connect(t, url)
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	ex, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- ex.Run(ctx) }()
	select {
	case <-ex.Ready():
	case err := <-errc:
		cancel()
		t.Fatalf("executor did not start: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("executor not ready after 10s")
	}
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-errc:
			case <-time.After(20 * time.Second):
				t.Error("executor did not stop")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return ex, stop
}

func (h *harness) infer(model string, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req.ModelName = model
	if req.ModelVersion == "" {
		req.ModelVersion = "1"
	}
	resp := &inference.ModelInferResponse{}
	err := h.client.Request(ctx, bus.InferSubject(model, req.ModelVersion), req, resp)
	return resp, err
}

func (h *harness) stats(name, version string) *inference.ModelStatisticsResponse {
	h.t.Helper()
	resp := &inference.ModelStatisticsResponse{}
	if err := h.client.Request(context.Background(), bus.ExecutorStatsSubject(h.ex.ID()), &busv1.StatisticsRequest{Name: name, Version: version}, resp); err != nil {
		h.t.Fatal(err)
	}
	return resp
}

func (h *harness) catalog() *busv1.ExecutorCatalog {
	h.t.Helper()
	cat := &busv1.ExecutorCatalog{}
	if err := h.client.Request(context.Background(), bus.ExecutorCatalogSubject(h.ex.ID()), &busv1.CatalogRequest{}, cat); err != nil {
		h.t.Fatal(err)
	}
	return cat
}

type tin struct {
	name, dt string
	shape    []int64
	data     []byte
}

func request(id string, ins []tin, outs ...string) *inference.ModelInferRequest {
	req := &inference.ModelInferRequest{Id: id}
	for _, i := range ins {
		req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: i.name, Datatype: i.dt, Shape: i.shape})
		req.RawInputContents = append(req.RawInputContents, i.data)
	}
	for _, o := range outs {
		req.Outputs = append(req.Outputs, &inference.ModelInferRequest_InferRequestedOutputTensor{Name: o})
	}
	return req
}

func int32s(f func(i int) int32) []byte {
	var b []byte
	for i := range 16 {
		b = tensor.AppendInt32s(b, f(i))
	}
	return b
}

func outputData(t *testing.T, resp *inference.ModelInferResponse, name string) (*inference.ModelInferResponse_InferOutputTensor, []byte) {
	t.Helper()
	for i, o := range resp.GetOutputs() {
		if o.GetName() == name {
			return o, resp.GetRawOutputContents()[i]
		}
	}
	t.Fatalf("no output %s in %v", name, resp.GetOutputs())
	return nil, nil
}

func TestExampleModels(t *testing.T) {
	h := start(t, exampleRepo)

	t.Run("simple", func(t *testing.T) {
		resp, err := h.infer("simple", request("r1", []tin{
			{"INPUT0", "INT32", []int64{1, 16}, int32s(func(i int) int32 { return int32(i) })},
			{"INPUT1", "INT32", []int64{1, 16}, int32s(func(int) int32 { return 1 })},
		}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetModelName() != "simple" || resp.GetModelVersion() != "1" || resp.GetId() != "r1" || len(resp.GetOutputs()) != 2 {
			t.Fatalf("response header %v", resp)
		}
		o0, d0 := outputData(t, resp, "OUTPUT0")
		_, d1 := outputData(t, resp, "OUTPUT1")
		if o0.GetDatatype() != "INT32" || !slices.Equal(o0.GetShape(), []int64{1, 16}) {
			t.Errorf("OUTPUT0 %v", o0)
		}
		for i, v := range tensor.Int32s(d0) {
			if v != int32(i+1) || tensor.Int32s(d1)[i] != int32(i-1) {
				t.Fatalf("element %d: %d %d", i, v, tensor.Int32s(d1)[i])
			}
		}
	})

	t.Run("simple requested output only", func(t *testing.T) {
		resp, err := h.infer("simple", request("", []tin{
			{"INPUT0", "INT32", []int64{2, 16}, make([]byte, 128)},
			{"INPUT1", "INT32", []int64{2, 16}, make([]byte, 128)},
		}, "OUTPUT1"))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetOutputs()) != 1 || resp.GetOutputs()[0].GetName() != "OUTPUT1" || len(resp.GetRawOutputContents()) != 1 ||
			!slices.Equal(resp.GetOutputs()[0].GetShape(), []int64{2, 16}) {
			t.Errorf("outputs %v", resp.GetOutputs())
		}
	})

	t.Run("simple_int8", func(t *testing.T) {
		a, b := make([]byte, 16), make([]byte, 16)
		for i := range a {
			a[i], b[i] = byte(int8(120)), byte(int8(i))
		}
		resp, err := h.infer("simple_int8", request("", []tin{{"INPUT0", "INT8", []int64{1, 16}, a}, {"INPUT1", "INT8", []int64{1, 16}, b}}))
		if err != nil {
			t.Fatal(err)
		}
		_, sum := outputData(t, resp, "OUTPUT0")
		_, diff := outputData(t, resp, "OUTPUT1")
		for i := range 16 {
			if int8(sum[i]) != int8(int32(120)+int32(i)) || int8(diff[i]) != int8(120-i) {
				t.Fatalf("element %d: %d %d", i, int8(sum[i]), int8(diff[i]))
			}
		}
	})

	t.Run("simple_string", func(t *testing.T) {
		var a, b []byte
		for i := range 16 {
			a = tensor.AppendBytesString(a, strconv.Itoa(i))
			b = tensor.AppendBytesString(b, "1")
		}
		resp, err := h.infer("simple_string", request("", []tin{{"INPUT0", "BYTES", []int64{1, 16}, a}, {"INPUT1", "BYTES", []int64{1, 16}, b}}))
		if err != nil {
			t.Fatal(err)
		}
		o, sumData := outputData(t, resp, "OUTPUT0")
		_, diffData := outputData(t, resp, "OUTPUT1")
		sum, err := tensor.SplitBytes("OUTPUT0", "simple_string", sumData, 16)
		if err != nil {
			t.Fatal(err)
		}
		diff, err := tensor.SplitBytes("OUTPUT1", "simple_string", diffData, 16)
		if err != nil {
			t.Fatal(err)
		}
		if o.GetDatatype() != "BYTES" {
			t.Errorf("datatype %s", o.GetDatatype())
		}
		for i := range 16 {
			if string(sum[i]) != strconv.Itoa(i+1) || string(diff[i]) != strconv.Itoa(i-1) {
				t.Fatalf("element %d: %q %q", i, sum[i], diff[i])
			}
		}
	})

	t.Run("simple_identity", func(t *testing.T) {
		var data []byte
		for range 16 {
			data = tensor.AppendBytesString(data, "he\x00llo")
		}
		resp, err := h.infer("simple_identity", request("", []tin{{"INPUT0", "BYTES", []int64{2, 8}, data}}))
		if err != nil {
			t.Fatal(err)
		}
		o, got := outputData(t, resp, "OUTPUT0")
		if !bytes.Equal(got, data) || !slices.Equal(o.GetShape(), []int64{2, 8}) || o.GetDatatype() != "BYTES" {
			t.Errorf("OUTPUT0 %v %q", o, got)
		}
	})

	t.Run("identity_fp32", func(t *testing.T) {
		data := tensor.AppendFloat32s(nil, 1, 2, 3, 4.5)
		resp, err := h.infer("identity_fp32", request("", []tin{{"INPUT0", "FP32", []int64{1, 4}, data}}))
		if err != nil {
			t.Fatal(err)
		}
		if _, got := outputData(t, resp, "OUTPUT0"); !bytes.Equal(got, data) {
			t.Errorf("OUTPUT0 %v", tensor.Float32s(got))
		}
	})

	t.Run("large tensor is chunked", func(t *testing.T) {
		// Three times NATS's default max payload (1 MiB).
		data := make([]byte, 3<<20)
		for i := range data {
			data[i] = byte(i)
		}
		resp, err := h.infer("identity_fp32", request("", []tin{{"INPUT0", "FP32", []int64{1, int64(len(data) / 4)}, data}}))
		if err != nil {
			t.Fatal(err)
		}
		if _, got := outputData(t, resp, "OUTPUT0"); !bytes.Equal(got, data) {
			t.Error("3 MiB tensor did not come back intact")
		}
	})
}

func TestValidationErrors(t *testing.T) {
	h := start(t, exampleRepo, "simple", "simple_string")
	good := tin{"INPUT1", "INT32", []int64{1, 16}, make([]byte, 64)}
	tests := []struct {
		name  string
		model string
		req   *inference.ModelInferRequest
		kind  tritonerr.Kind
		want  string
	}{
		{"unknown input", "simple", request("", []tin{{"INPUT0", "INT32", []int64{1, 16}, make([]byte, 64)}, {"X", "INT32", []int64{1, 16}, make([]byte, 64)}}),
			tritonerr.InvalidArg, "unexpected inference input 'X' for model 'simple'"},
		{"missing input", "simple", request("", []tin{good}), tritonerr.InvalidArg,
			"expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT1'], but missing required input(s) ['INPUT0']. Please provide all required input(s)."},
		{"datatype", "simple", request("", []tin{{"INPUT0", "FP32", []int64{1, 16}, make([]byte, 64)}, good}), tritonerr.InvalidArg,
			"inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'"},
		{"shape", "simple", request("", []tin{{"INPUT0", "INT32", []int64{1, 8}, make([]byte, 32)}, good}), tritonerr.InvalidArg,
			"unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]"},
		{"batch size", "simple", request("", []tin{{"INPUT0", "INT32", []int64{9, 16}, make([]byte, 576)}, {"INPUT1", "INT32", []int64{9, 16}, make([]byte, 576)}}),
			tritonerr.InvalidArg, "inference request batch-size must be <= 8 for 'simple'"},
		{"byte size", "simple", request("7", []tin{{"INPUT0", "INT32", []int64{1, 16}, make([]byte, 63)}, good}), tritonerr.InvalidArg,
			"[request id: 7] input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 63"},
		{"unknown output", "simple", request("", []tin{{"INPUT0", "INT32", []int64{1, 16}, make([]byte, 64)}, good}, "OUTPUT2"), tritonerr.InvalidArg,
			"unexpected inference output 'OUTPUT2' for model 'simple'"},
		{"not a number", "simple_string", func() *inference.ModelInferRequest {
			var a []byte
			for range 16 {
				a = tensor.AppendBytesString(a, "one")
			}
			return request("", []tin{{"INPUT0", "BYTES", []int64{1, 16}, a}, {"INPUT1", "BYTES", []int64{1, 16}, a}})
		}(), tritonerr.InvalidArg, "addsub backend: element 'one' of input 'INPUT0' is not a decimal int32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.infer(tt.model, tt.req)
			e := tritonerr.From(err)
			if e == nil || e.Kind != tt.kind || e.Msg != tt.want {
				t.Errorf("got %v, want %v %q", e, tt.kind, tt.want)
			}
		})
	}
	// The executor keeps serving, and counts the failures.
	if _, err := h.infer("simple", request("", []tin{{"INPUT0", "INT32", []int64{1, 16}, make([]byte, 64)}, good})); err != nil {
		t.Fatal(err)
	}
	st := h.stats("simple", "1").GetModelStats()[0]
	if is := st.GetInferenceStats(); is.GetFail().GetCount() != 7 || is.GetSuccess().GetCount() != 1 || st.GetInferenceCount() != 1 || st.GetExecutionCount() != 1 {
		t.Errorf("stats after 7 bad and 1 good request: %v", st)
	}
	// A version that is not served has no responders.
	if _, err := h.infer("simple", &inference.ModelInferRequest{ModelVersion: "2"}); tritonerr.KindOf(err) != tritonerr.Unavailable {
		t.Errorf("version 2: %v", err)
	}
}

// writeModel writes a model with one version into repo.
func writeModel(t *testing.T, repo, name, config string) {
	t.Helper()
	dir := filepath.Join(repo, name)
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.pbtxt"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
}

func batchingModel(name string, delayMs int, maxDelayUs int, instances int) string {
	return `name: "` + name + `" backend: "identity" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { max_queue_delay_microseconds: ` + strconv.Itoa(maxDelayUs) + ` }
instance_group [ { count: ` + strconv.Itoa(instances) + ` kind: KIND_CPU } ]
parameters { key: "execute_delay_ms" value { string_value: "` + strconv.Itoa(delayMs) + `" } }`
}

// concurrently sends one FP32 request of the given batch size per entry and
// checks every answer is its own input.
func (h *harness) concurrently(t *testing.T, model string, batches []int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(batches))
	for k, b := range batches {
		wg.Go(func() {
			var data []byte
			for i := range b * 2 {
				data = tensor.AppendFloat32s(data, float32(k*100+i))
			}
			resp, err := h.infer(model, request(strconv.Itoa(k), []tin{{"INPUT0", "FP32", []int64{int64(b), 2}, data}}))
			if err != nil {
				errs <- err
				return
			}
			if resp.GetId() != strconv.Itoa(k) || !bytes.Equal(resp.GetRawOutputContents()[0], data) {
				errs <- tritonerr.Internalf("request %d got someone else's answer", k)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func sizesOf(ms *inference.ModelStatistics) map[uint64]uint64 {
	out := map[uint64]uint64{}
	for _, b := range ms.GetBatchStats() {
		out[b.GetBatchSize()] = b.GetComputeInfer().GetCount()
	}
	return out
}

func TestDynamicBatching(t *testing.T) {
	repo := t.TempDir()
	// Full batches: 16 requests, one instance, a queue delay longer than
	// the test: only a full batch of 8 is ever sent.
	writeModel(t, repo, "full", batchingModel("full", 50, 30_000_000, 1))
	// Mixed sizes: 3+3 fit, the third 3 does not (never above 8); it waits
	// out the queue delay alone.
	writeModel(t, repo, "mixed", batchingModel("mixed", 0, 300_000, 1))
	// No dynamic batching: one request per execution.
	writeModel(t, repo, "single", `name: "single" backend: "identity" max_batch_size: 8
		input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
		output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]`)
	h := start(t, repo)

	h.concurrently(t, "full", slices.Repeat([]int{1}, 16))
	st := h.stats("full", "1").GetModelStats()[0]
	if st.GetInferenceCount() != 16 || st.GetExecutionCount() != 2 || !mapsEqual(sizesOf(st), map[uint64]uint64{8: 2}) {
		t.Errorf("full: inference %d execution %d batches %v", st.GetInferenceCount(), st.GetExecutionCount(), sizesOf(st))
	}
	if is := st.GetInferenceStats(); is.GetSuccess().GetCount() != 16 || is.GetQueue().GetCount() != 16 || is.GetComputeInfer().GetCount() != 16 ||
		is.GetComputeInfer().GetNs() < uint64(16*50*time.Millisecond) || st.GetLastInference() == 0 {
		t.Errorf("full: inference stats %v", is)
	}

	h.concurrently(t, "mixed", []int{3, 3, 3})
	st = h.stats("mixed", "1").GetModelStats()[0]
	if st.GetInferenceCount() != 9 || st.GetExecutionCount() != 2 || !mapsEqual(sizesOf(st), map[uint64]uint64{6: 1, 3: 1}) {
		t.Errorf("mixed: inference %d execution %d batches %v", st.GetInferenceCount(), st.GetExecutionCount(), sizesOf(st))
	}

	h.concurrently(t, "single", []int{1, 2, 1, 2, 1, 2})
	st = h.stats("single", "1").GetModelStats()[0]
	if st.GetInferenceCount() != 9 || st.GetExecutionCount() != 6 || !mapsEqual(sizesOf(st), map[uint64]uint64{1: 3, 2: 3}) {
		t.Errorf("single: inference %d execution %d batches %v", st.GetInferenceCount(), st.GetExecutionCount(), sizesOf(st))
	}
}

func TestBatchingWhileBusy(t *testing.T) {
	// Zero queue delay: batches form only from what queued up while the
	// single instance was busy, so 12 concurrent requests take fewer than
	// 12 executions.
	repo := t.TempDir()
	writeModel(t, repo, "busy", batchingModel("busy", 100, 0, 1))
	h := start(t, repo)
	h.concurrently(t, "busy", slices.Repeat([]int{1}, 12))
	st := h.stats("busy", "1").GetModelStats()[0]
	if st.GetInferenceCount() != 12 || st.GetExecutionCount() >= 12 {
		t.Errorf("inference %d execution %d batches %v", st.GetInferenceCount(), st.GetExecutionCount(), sizesOf(st))
	}
	for size := range sizesOf(st) {
		if size > 8 {
			t.Errorf("batch of %d above max_batch_size", size)
		}
	}
}

func mapsEqual(a, b map[uint64]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestAnnouncements(t *testing.T) {
	url := startNATS(t)
	watcher := connect(t, url)
	beats := make(chan *busv1.ExecutorHeartbeat, 100)
	if _, err := watcher.Subscribe(bus.HeartbeatSubject, func(m *nats.Msg) {
		hb := &busv1.ExecutorHeartbeat{}
		if proto.Unmarshal(m.Data, hb) == nil {
			beats <- hb
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}

	repo := t.TempDir()
	writeModel(t, repo, "good", batchingModel("good", 0, 0, 2))
	writeModel(t, repo, "broken", `name: "broken" backend: "identity" max_batch_size: 8 input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ] output [ `)
	writeModel(t, repo, "nobackend", `name: "nobackend" backend: "no_such_backend"
		input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ] output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]`)
	writeModel(t, repo, "badparam", `name: "badparam" backend: "identity"
		input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ] output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
		parameters { key: "execute_delay_ms" value { string_value: "later" } }`)
	ex, stop := runExecutor(t, url, Config{RepositoryPath: repo, ID: "ex/announce", Node: "node-b"})

	next := func() *busv1.ExecutorHeartbeat {
		t.Helper()
		select {
		case hb := <-beats:
			return hb
		case <-time.After(3 * bus.HeartbeatInterval):
			t.Fatal("no heartbeat")
			return nil
		}
	}
	hb := next()
	if hb.GetExecutorId() != "ex/announce" || hb.GetNode() != "node-b" || hb.GetWithdraw() || hb.GetGeneration() == 0 {
		t.Fatalf("heartbeat %v", hb)
	}
	// Periodic.
	if hb2 := next(); hb2.GetGeneration() != hb.GetGeneration() {
		t.Errorf("generation changed: %v", hb2)
	}
	// Solicited: at once, well before the next period.
	for len(beats) > 0 {
		<-beats
	}
	sent := time.Now()
	if err := client.Publish(bus.SolicitSubject, &busv1.CatalogRequest{}); err != nil {
		t.Fatal(err)
	}
	next()
	if d := time.Since(sent); d > bus.HeartbeatInterval/2 {
		t.Logf("solicited heartbeat took %v (may have been a periodic one)", d)
	}

	cat := &busv1.ExecutorCatalog{}
	if err := client.Request(context.Background(), bus.ExecutorCatalogSubject(ex.ID()), &busv1.CatalogRequest{}, cat); err != nil {
		t.Fatal(err)
	}
	if cat.GetExecutorId() != "ex/announce" || cat.GetNode() != "node-b" || cat.GetGeneration() != hb.GetGeneration() {
		t.Errorf("catalog header %v", cat)
	}
	states := map[string]*busv1.ModelVersionState{}
	for _, m := range cat.GetModels() {
		states[m.GetName()] = m
	}
	if g := states["good"]; g == nil || g.GetState() != StateReady || g.GetVersion() != "1" || g.GetConfig().GetName() != "good" ||
		g.GetConfig().GetDynamicBatching() == nil {
		t.Errorf("good: %v", g)
	}
	for name, want := range map[string]string{
		"broken":    "broken",
		"nobackend": "unable to find backend 'no_such_backend' for model 'nobackend'",
		"badparam":  "identity backend: model 'badparam': parameter 'execute_delay_ms' must be a number of milliseconds, got 'later'",
	} {
		s := states[name]
		if s == nil || s.GetState() != StateUnavailable || !bytes.Contains([]byte(s.GetReason()), []byte(want)) {
			t.Errorf("%s: %v, want UNAVAILABLE with %q", name, s, want)
		}
	}
	// The good model serves; the broken ones have no responders.
	resp := &inference.ModelInferResponse{}
	data := tensor.AppendFloat32s(nil, 7)
	if err := client.Request(context.Background(), bus.InferSubject("good", "1"), request("", []tin{{"INPUT0", "FP32", []int64{1, 1}, data}}), resp); err != nil {
		t.Fatal(err)
	}
	err = client.Request(context.Background(), bus.InferSubject("badparam", "1"), request("", nil), resp)
	if tritonerr.KindOf(err) != tritonerr.Unavailable {
		t.Errorf("badparam infer: %v", err)
	}
	// Stats list only the ready version.
	sresp := &inference.ModelStatisticsResponse{}
	if err := client.Request(context.Background(), bus.ExecutorStatsSubject(ex.ID()), &busv1.StatisticsRequest{}, sresp); err != nil {
		t.Fatal(err)
	}
	if len(sresp.GetModelStats()) != 1 || sresp.GetModelStats()[0].GetName() != "good" || sresp.GetModelStats()[0].GetInferenceCount() != 1 {
		t.Errorf("stats %v", sresp)
	}

	// Shutdown withdraws.
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case hb := <-beats:
			if hb.GetWithdraw() {
				if hb.GetExecutorId() != "ex/announce" {
					t.Errorf("withdraw %v", hb)
				}
				return
			}
		case <-deadline:
			t.Fatal("no withdraw heartbeat")
		}
	}
}

func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	repo := t.TempDir()
	writeModel(t, repo, "slow", batchingModel("slow", 300, 0, 1))
	h := start(t, repo)
	done := make(chan error, 1)
	go func() {
		_, err := h.infer("slow", request("", []tin{{"INPUT0", "FP32", []int64{1, 1}, tensor.AppendFloat32s(nil, 1)}}))
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // the request is executing
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("in-flight request failed on shutdown: %v", err)
	}
}

func TestSubsetAndUnknownModel(t *testing.T) {
	h := start(t, exampleRepo, "simple", "nope")
	var names, listed []string
	for _, m := range h.catalog().GetModels() {
		if m.GetState() == "" {
			listed = append(listed, m.GetName()) // not loaded: for the repository index
			continue
		}
		names = append(names, m.GetName()+":"+m.GetState())
	}
	if want := []string{"nope:UNAVAILABLE", "simple:READY"}; !slices.Equal(names, want) {
		t.Errorf("catalog %v, want %v", names, want)
	}
	if !slices.Contains(listed, "identity_fp32") || slices.Contains(listed, "simple") {
		t.Errorf("models listed as not loaded: %v", listed)
	}
}

// TestNodeSubject checks that an executor also serves its models on its
// node's subject, and only there: requests pinned to another node find no
// responder.
func TestNodeSubject(t *testing.T) {
	h := start(t, exampleRepo, "simple")
	req := request("n1", []tin{
		{"INPUT0", "INT32", []int64{1, 16}, int32s(func(i int) int32 { return int32(i) })},
		{"INPUT1", "INT32", []int64{1, 16}, int32s(func(int) int32 { return 1 })},
	})
	req.ModelName, req.ModelVersion = "simple", "1"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp := &inference.ModelInferResponse{}
	if err := h.client.Request(ctx, bus.InferNodeSubject("simple", "1", "node-a"), req, resp); err != nil {
		t.Fatalf("infer on node-a: %v", err)
	}
	if resp.GetId() != "n1" || len(resp.GetRawOutputContents()) != 2 {
		t.Fatalf("response = %v", resp)
	}
	err := h.client.Request(ctx, bus.InferNodeSubject("simple", "1", "node-b"), req, resp)
	if tritonerr.KindOf(err) != tritonerr.Unavailable {
		t.Fatalf("infer on node-b = %v, want UNAVAILABLE (no responders)", err)
	}
}
