package builtin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/infer"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// recorder is a StatsReporter that keeps what it is told.
type recorder struct {
	mu      sync.Mutex
	reqs    []bool
	batches []int
}

func (r *recorder) ReportStatistics(_ *backend.Request, ok bool, t backend.Timestamps) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok && (t.ComputeStart.Before(t.ExecStart) || t.ComputeEnd.Before(t.ComputeStart) || t.ExecEnd.Before(t.ComputeEnd)) {
		panic("timestamps out of order")
	}
	r.reqs = append(r.reqs, ok)
}

func (r *recorder) ReportBatchStatistics(n int, _ backend.Timestamps) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, n)
}

// repoConfig reads a model's config from the example repository, so these
// tests also prove deploy/model_repository parses.
func repoConfig(t *testing.T, model string) *inference.ModelConfig {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "model_repository", model, "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	return parseConfig(t, string(data))
}

func parseConfig(t *testing.T, text string) *inference.ModelConfig {
	t.Helper()
	cfg := &inference.ModelConfig{}
	if err := prototext.Unmarshal([]byte(text), cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// load runs the backend life cycle up to one instance.
func load(t *testing.T, cfg *inference.ModelConfig) (backend.Instance, *recorder, error) {
	t.Helper()
	name, factory, err := backend.Resolve(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := factory(context.Background())
	if err != nil {
		t.Fatalf("init %s: %v", name, err)
	}
	m, err := b.NewModel(context.Background(), backend.ModelInfo{Name: cfg.GetName(), Version: 1, Config: cfg})
	if err != nil {
		return nil, nil, err
	}
	rec := &recorder{}
	infos := backend.Instances(cfg)
	infos[0].Stats = rec
	inst, err := m.NewInstance(context.Background(), infos[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		inst.Finalize()
		m.Finalize()
		b.Finalize()
	})
	return inst, rec, nil
}

type tin struct {
	name, dt string
	shape    []int64
	data     []byte
}

// run normalizes one request per input set, executes them as one batch and
// returns the responses in order.
func run(t *testing.T, cfg *inference.ModelConfig, inst backend.Instance, batch [][]tin, outputs ...string) []*backend.Response {
	t.Helper()
	resps := make([]*backend.Response, len(batch))
	var reqs []*backend.Request
	for k, ins := range batch {
		mreq := &inference.ModelInferRequest{}
		for _, i := range ins {
			mreq.Inputs = append(mreq.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: i.name, Datatype: i.dt, Shape: i.shape})
			mreq.RawInputContents = append(mreq.RawInputContents, i.data)
		}
		for _, o := range outputs {
			mreq.Outputs = append(mreq.Outputs, &inference.ModelInferRequest_InferRequestedOutputTensor{Name: o})
		}
		r := backend.NewRequest(context.Background(), func(_ *backend.Request, resp *backend.Response) { resps[k] = resp })
		if err := infer.Normalize(cfg, mreq, r); err != nil {
			t.Fatalf("normalize: %v", err)
		}
		reqs = append(reqs, r)
	}
	if err := inst.Execute(context.Background(), reqs); err != nil {
		t.Fatalf("execute: %v", err)
	}
	for k, r := range resps {
		if r == nil {
			t.Fatalf("request %d got no response", k)
		}
	}
	return resps
}

func output(t *testing.T, r *backend.Response, name string) backend.Output {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("response error: %v", r.Err)
	}
	for _, o := range r.Outputs {
		if o.Name == name {
			return o
		}
	}
	t.Fatalf("no output %s in %v", name, r.Outputs)
	return backend.Output{}
}

func int32s(f func(i int) int32) []byte {
	var b []byte
	for i := range 16 {
		b = tensor.AppendInt32s(b, f(i))
	}
	return b
}

func TestSimple(t *testing.T) {
	cfg := repoConfig(t, "simple")
	inst, rec, err := load(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in0 := int32s(func(i int) int32 { return int32(i) })
	in1 := int32s(func(int) int32 { return 1 })
	resps := run(t, cfg, inst, [][]tin{
		{{"INPUT0", "INT32", []int64{1, 16}, in0}, {"INPUT1", "INT32", []int64{1, 16}, in1}},
		{{"INPUT0", "INT32", []int64{2, 16}, append(slices.Clone(in0), in0...)}, {"INPUT1", "INT32", []int64{2, 16}, append(slices.Clone(in1), in1...)}},
	})
	sum, diff := output(t, resps[0], "OUTPUT0"), output(t, resps[0], "OUTPUT1")
	if sum.DataType != tensor.Int32 || !slices.Equal(sum.Shape, []int64{1, 16}) {
		t.Errorf("OUTPUT0 %v %v", sum.DataType, sum.Shape)
	}
	for i, v := range tensor.Int32s(sum.Data) {
		if v != int32(i)+1 {
			t.Fatalf("sum[%d] = %d", i, v)
		}
	}
	for i, v := range tensor.Int32s(diff.Data) {
		if v != int32(i)-1 {
			t.Fatalf("diff[%d] = %d", i, v)
		}
	}
	if got := output(t, resps[1], "OUTPUT0"); !slices.Equal(got.Shape, []int64{2, 16}) || len(got.Data) != 128 {
		t.Errorf("batch-2 output %v, %d bytes", got.Shape, len(got.Data))
	}
	if !slices.Equal(rec.reqs, []bool{true, true}) || !slices.Equal(rec.batches, []int{3}) {
		t.Errorf("stats: requests %v batches %v", rec.reqs, rec.batches)
	}

	// Only the requested output comes back.
	resps = run(t, cfg, inst, [][]tin{{{"INPUT0", "INT32", []int64{1, 16}, in0}, {"INPUT1", "INT32", []int64{1, 16}, in1}}}, "OUTPUT1")
	if len(resps[0].Outputs) != 1 || resps[0].Outputs[0].Name != "OUTPUT1" {
		t.Errorf("outputs %v", resps[0].Outputs)
	}
}

func TestSimpleInt8Wraps(t *testing.T) {
	cfg := repoConfig(t, "simple_int8")
	inst, _, err := load(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in0 := make([]byte, 16)
	in1 := make([]byte, 16)
	for i := range 16 {
		v := int8(120 + i) // wraps past 127 from i = 8
		in0[i], in1[i] = byte(v), byte(int8(10))
	}
	resps := run(t, cfg, inst, [][]tin{{{"INPUT0", "INT8", []int64{1, 16}, in0}, {"INPUT1", "INT8", []int64{1, 16}, in1}}})
	sum, diff := output(t, resps[0], "OUTPUT0"), output(t, resps[0], "OUTPUT1")
	for i := range 16 {
		x := int32(int8(in0[i]))
		if int8(sum.Data[i]) != int8(x+10) || int8(diff.Data[i]) != int8(x-10) {
			t.Fatalf("element %d: %d %d", i, int8(sum.Data[i]), int8(diff.Data[i]))
		}
	}
	if int8(sum.Data[0]) != -126 { // 120 + 10 = 130 wraps to -126
		t.Errorf("sum[0] = %d", int8(sum.Data[0]))
	}
}

func decimals(f func(i int) string) []byte {
	var b []byte
	for i := range 16 {
		b = tensor.AppendBytesString(b, f(i))
	}
	return b
}

func TestSimpleString(t *testing.T) {
	cfg := repoConfig(t, "simple_string")
	inst, rec, err := load(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in0 := decimals(strconv.Itoa)
	in1 := decimals(func(int) string { return "1" })
	bad := decimals(func(i int) string {
		if i == 3 {
			return "x3"
		}
		return "1"
	})
	resps := run(t, cfg, inst, [][]tin{
		{{"INPUT0", "BYTES", []int64{1, 16}, in0}, {"INPUT1", "BYTES", []int64{1, 16}, in1}},
		{{"INPUT0", "BYTES", []int64{1, 16}, in0}, {"INPUT1", "BYTES", []int64{1, 16}, bad}},
	})
	sum, err := tensor.SplitBytes("OUTPUT0", "simple_string", output(t, resps[0], "OUTPUT0").Data, 16)
	if err != nil {
		t.Fatal(err)
	}
	diff, err := tensor.SplitBytes("OUTPUT1", "simple_string", output(t, resps[0], "OUTPUT1").Data, 16)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		if string(sum[i]) != strconv.Itoa(i+1) || string(diff[i]) != strconv.Itoa(i-1) {
			t.Fatalf("element %d: %q %q", i, sum[i], diff[i])
		}
	}
	// A bad element fails its own request only.
	if e := resps[1].Err; e == nil || e.Kind != tritonerr.InvalidArg || e.Msg != "addsub backend: element 'x3' of input 'INPUT1' is not a decimal int32" {
		t.Errorf("bad request: %v", e)
	}
	if !slices.Equal(rec.reqs, []bool{true, false}) {
		t.Errorf("stats %v", rec.reqs)
	}
}

func TestSimpleIdentityKeepsNUL(t *testing.T) {
	cfg := repoConfig(t, "simple_identity")
	inst, _, err := load(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	for range 3 {
		data = tensor.AppendBytesString(data, "he\x00llo")
	}
	data = tensor.AppendBytesElement(data, []byte{0, 1, 2, 3})
	resps := run(t, cfg, inst, [][]tin{{{"INPUT0", "BYTES", []int64{1, 4}, data}}})
	out := output(t, resps[0], "OUTPUT0")
	if out.DataType != tensor.Bytes || !slices.Equal(out.Shape, []int64{1, 4}) || !bytes.Equal(out.Data, data) {
		t.Errorf("OUTPUT0 %v %v %q", out.DataType, out.Shape, out.Data)
	}
}

func TestIdentityAnyDatatypeAndDelay(t *testing.T) {
	cfg := parseConfig(t, `name: "id" backend: "identity" max_batch_size: 0
		input [ { name: "INPUT0" data_type: TYPE_FP16 dims: [ 2 ] }, { name: "INPUT1" data_type: TYPE_BOOL dims: [ 3 ] } ]
		output [ { name: "OUTPUT0" data_type: TYPE_FP16 dims: [ 2 ] }, { name: "OUTPUT1" data_type: TYPE_BOOL dims: [ 3 ] } ]
		parameters { key: "execute_delay_ms" value { string_value: "50" } }`)
	inst, rec, err := load(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	one := [][]tin{{{"INPUT0", "FP16", []int64{2}, []byte{1, 2, 3, 4}}, {"INPUT1", "BOOL", []int64{3}, []byte{1, 0, 1}}}}
	resps := run(t, cfg, inst, append(one, one...))
	if d := time.Since(start); d < 50*time.Millisecond || d > 2*time.Second {
		t.Errorf("two requests in one execution took %v, want one 50ms delay", d)
	}
	for _, r := range resps {
		if o := output(t, r, "OUTPUT1"); o.DataType != tensor.Bool || !bytes.Equal(o.Data, []byte{1, 0, 1}) {
			t.Errorf("OUTPUT1 %+v", o)
		}
		if o := output(t, r, "OUTPUT0"); o.DataType != tensor.FP16 || !bytes.Equal(o.Data, []byte{1, 2, 3, 4}) {
			t.Errorf("OUTPUT0 %+v", o)
		}
	}
	if !slices.Equal(rec.batches, []int{2}) {
		t.Errorf("batch stats %v (a model without batching counts 1 per request)", rec.batches)
	}
}

func TestIdentityFP32Repo(t *testing.T) {
	cfg := repoConfig(t, "identity_fp32")
	if cfg.GetDynamicBatching() == nil || len(backend.Instances(cfg)) != 2 {
		t.Fatalf("identity_fp32 must batch dynamically with 2 instances")
	}
	inst, _, err := load(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	data := tensor.AppendFloat32s(nil, 1.5, -2, 3)
	resps := run(t, cfg, inst, [][]tin{{{"INPUT0", "FP32", []int64{1, 3}, data}}})
	if o := output(t, resps[0], "OUTPUT0"); !slices.Equal(tensor.Float32s(o.Data), []float32{1.5, -2, 3}) {
		t.Errorf("OUTPUT0 %v", tensor.Float32s(o.Data))
	}
}

// output_repeat makes a small input a large output: each row of the last
// dimension repeated, shapes and batches kept apart.
func TestIdentityOutputRepeat(t *testing.T) {
	cfg := parseConfig(t, `name: "big" backend: "identity" max_batch_size: 4
		input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1, -1 ] } ]
		output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1, -1 ] } ]
		parameters { key: "output_repeat" value { string_value: "3" } }`)
	inst, rec, err := load(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	resps := run(t, cfg, inst, [][]tin{
		{{"INPUT0", "INT32", []int64{1, 2, 2}, tensor.AppendInt32s(nil, 1, 2, 3, 4)}},
		{{"INPUT0", "INT32", []int64{1, 1, 1}, tensor.AppendInt32s(nil, 7)}},
		{{"INPUT0", "INT32", []int64{1, 0, 5}, nil}},
	})
	want := []struct {
		shape  []int64
		values []int32
	}{
		{[]int64{1, 2, 6}, []int32{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}},
		{[]int64{1, 1, 3}, []int32{7, 7, 7}},
		{[]int64{1, 0, 15}, nil},
	}
	for k, w := range want {
		o := output(t, resps[k], "OUTPUT0")
		if o.DataType != tensor.Int32 || !slices.Equal(o.Shape, w.shape) || !slices.Equal(tensor.Int32s(o.Data), w.values) {
			t.Errorf("request %d: OUTPUT0 %v %v %v, want %v %v", k, o.DataType, o.Shape, tensor.Int32s(o.Data), w.shape, w.values)
		}
	}
	if !slices.Equal(rec.reqs, []bool{true, true, true}) {
		t.Errorf("stats %v", rec.reqs)
	}

	// 64 bytes in, 16 MiB out: the response cache's benchmark model.
	big := parseConfig(t, `name: "big" backend: "identity" max_batch_size: 8
		input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
		output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
		parameters { key: "output_repeat" value { string_value: "262144" } }`)
	if inst, _, err = load(t, big); err != nil {
		t.Fatal(err)
	}
	in := tensor.AppendFloat32s(nil, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
	o := output(t, run(t, big, inst, [][]tin{{{"INPUT0", "FP32", []int64{1, 16}, in}}})[0], "OUTPUT0")
	if !slices.Equal(o.Shape, []int64{1, 16 * 262144}) || !bytes.Equal(o.Data, bytes.Repeat(in, 262144)) {
		t.Errorf("16 MiB OUTPUT0: shape %v, %d bytes", o.Shape, len(o.Data))
	}
	// An output past the bound is refused, not allocated.
	r := run(t, big, inst, [][]tin{{{"INPUT0", "FP32", []int64{1, 1025}, make([]byte, 4100)}}})[0]
	if r.Err == nil || r.Err.Kind != tritonerr.InvalidArg ||
		r.Err.Msg != "identity backend: input 'INPUT0' repeated 262144 times would be 1074790400 bytes, more than 1073741824 (output_repeat)" {
		t.Errorf("an output of 1 GiB: %v", r.Err)
	}
}

func TestModelLoadErrors(t *testing.T) {
	tests := []struct {
		name, cfg, want string
		kind            tritonerr.Kind
	}{
		{"addsub mixed types", `name: "m" backend: "addsub" input [ { name: "A" data_type: TYPE_INT32 dims: [1] }, { name: "B" data_type: TYPE_FP32 dims: [1] } ]
			output [ { name: "C" data_type: TYPE_INT32 dims: [1] }, { name: "D" data_type: TYPE_INT32 dims: [1] } ]`,
			"addsub backend: model 'm' inputs and outputs must all have the same datatype", tritonerr.InvalidArg},
		{"addsub one input", `name: "m" backend: "addsub" input [ { name: "A" data_type: TYPE_INT32 dims: [1] } ] output [ { name: "C" data_type: TYPE_INT32 dims: [1] } ]`,
			"addsub backend: model 'm' must have 2 inputs and 2 outputs, has 1 and 1", tritonerr.InvalidArg},
		{"addsub fp16", `name: "m" backend: "addsub" input [ { name: "A" data_type: TYPE_FP16 dims: [1] }, { name: "B" data_type: TYPE_FP16 dims: [1] } ]
			output [ { name: "C" data_type: TYPE_FP16 dims: [1] }, { name: "D" data_type: TYPE_FP16 dims: [1] } ]`,
			"addsub backend: model 'm': datatype FP16 is not supported", tritonerr.Unsupported},
		{"identity counts", `name: "m" backend: "identity" input [ { name: "A" data_type: TYPE_INT32 dims: [1] } ]`,
			"identity backend: model 'm' must have as many outputs as inputs (at least one), has 1 inputs and 0 outputs", tritonerr.InvalidArg},
		{"identity types", `name: "m" backend: "identity" input [ { name: "A" data_type: TYPE_INT32 dims: [1] } ] output [ { name: "B" data_type: TYPE_INT64 dims: [1] } ]`,
			"identity backend: model 'm': input 'A' and output 'B' must have the same datatype", tritonerr.InvalidArg},
		{"identity delay", `name: "m" backend: "identity" input [ { name: "A" data_type: TYPE_INT32 dims: [1] } ] output [ { name: "B" data_type: TYPE_INT32 dims: [1] } ]
			parameters { key: "execute_delay_ms" value { string_value: "soon" } }`,
			"identity backend: model 'm': parameter 'execute_delay_ms' must be a number of milliseconds, got 'soon'", tritonerr.InvalidArg},
		{"identity repeat zero", `name: "m" backend: "identity" input [ { name: "A" data_type: TYPE_INT32 dims: [1] } ] output [ { name: "B" data_type: TYPE_INT32 dims: [-1] } ]
			parameters { key: "output_repeat" value { string_value: "0" } }`,
			"identity backend: model 'm': parameter 'output_repeat' must be a positive number, got '0'", tritonerr.InvalidArg},
		{"identity repeat bytes", `name: "m" backend: "identity" input [ { name: "A" data_type: TYPE_STRING dims: [1] } ] output [ { name: "B" data_type: TYPE_STRING dims: [-1] } ]
			parameters { key: "output_repeat" value { string_value: "2" } }`,
			"identity backend: model 'm': parameter 'output_repeat' does not take the BYTES input 'A'", tritonerr.InvalidArg},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := load(t, parseConfig(t, tt.cfg))
			if err == nil || err.Error() != tt.want || tritonerr.KindOf(err) != tt.kind {
				t.Errorf("got %v (%v), want %q (%v)", err, tritonerr.KindOf(err), tt.want, tt.kind)
			}
		})
	}
}

func TestRegistry(t *testing.T) {
	if !slices.Contains(backend.Names(), "addsub") || !slices.Contains(backend.Names(), "identity") {
		t.Fatalf("registered: %v", backend.Names())
	}
	_, _, err := backend.Resolve(parseConfig(t, `name: "m" platform: "onnxruntime_onnx"`))
	if err == nil || tritonerr.KindOf(err) != tritonerr.Unavailable {
		t.Errorf("onnxruntime: %v", err)
	}
	if n := backend.Name(parseConfig(t, `name: "m" platform: "tensorflow_savedmodel"`)); n != "tensorflow" {
		t.Errorf("platform mapping: %s", n)
	}
	infos := backend.Instances(parseConfig(t, `name: "m" instance_group [ { count: 2 kind: KIND_CPU }, { name: "g" count: 1 kind: KIND_GPU gpus: [ 0, 1 ] } ]`))
	var names []string
	for _, i := range infos {
		names = append(names, i.Name+"@"+strconv.Itoa(int(i.DeviceID)))
	}
	if want := []string{"m_0_0@0", "m_0_1@0", "g_0@0", "g_1@1"}; !slices.Equal(names, want) {
		t.Errorf("instances %v, want %v", names, want)
	}
}
