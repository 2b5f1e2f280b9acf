package infer

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/internal/testutil/racebuild"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func config(t *testing.T, text string) *inference.ModelConfig {
	t.Helper()
	cfg := &inference.ModelConfig{}
	if err := prototext.Unmarshal([]byte(text), cfg); err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

const simpleCfg = `name: "simple" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]`

const stringCfg = `name: "simple_string" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]`

const noBatchCfg = `name: "nobatch" max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]`

const reshapeCfg = `name: "reshaped" max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1, 4 ] reshape: { shape: [ 2, -1, 2 ] } } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]`

const optionalCfg = `name: "opt" max_batch_size: 0
input [ { name: "A" data_type: TYPE_INT8 dims: [ 1 ] }, { name: "B" data_type: TYPE_INT8 dims: [ 1 ] },
        { name: "C" data_type: TYPE_INT8 dims: [ 1 ] optional: true } ]
output [ { name: "OUT" data_type: TYPE_INT8 dims: [ 1 ] } ]`

type in struct {
	name, dt string
	shape    []int64
	data     []byte
}

func request(id string, ins []in, outs ...string) *inference.ModelInferRequest {
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

func zeros(n int) []byte { return make([]byte, n) }

func strs(n int, s string) []byte {
	var b []byte
	for range n {
		b = tensor.AppendBytesString(b, s)
	}
	return b
}

func TestNormalizeErrors(t *testing.T) {
	good0 := in{"INPUT0", "INT32", []int64{1, 16}, zeros(64)}
	good1 := in{"INPUT1", "INT32", []int64{1, 16}, zeros(64)}
	tests := []struct {
		name string
		cfg  string
		req  *inference.ModelInferRequest
		want string
	}{
		{"unknown input", simpleCfg, request("", []in{good0, {"X", "INT32", []int64{1, 16}, zeros(64)}}),
			"unexpected inference input 'X' for model 'simple'"},
		{"missing input", simpleCfg, request("", []in{good0}),
			"expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s)."},
		{"no inputs", simpleCfg, request("", nil),
			"expected 2 inputs but got 0 inputs for model 'simple'. Got input(s) [], but missing required input(s) ['INPUT0','INPUT1']. Please provide all required input(s)."},
		{"too many inputs", simpleCfg, request("", []in{good0, good1, {"X", "INT32", []int64{1}, zeros(4)}}),
			"expected 2 inputs but got 3 inputs for model 'simple'. Got input(s) ['X','INPUT1','INPUT0'], but missing required input(s) []. Please provide all required input(s)."},
		{"optional missing", optionalCfg, request("", []in{{"A", "INT8", []int64{1}, zeros(1)}}),
			"expected number of inputs between 2 and 3 but got 1 inputs for model 'opt'. Got input(s) ['A'], but missing required input(s) ['B']. Please provide all required input(s)."},
		{"required replaced by optional", optionalCfg, request("", []in{{"A", "INT8", []int64{1}, zeros(1)}, {"C", "INT8", []int64{1}, zeros(1)}}),
			"expected number of inputs between 2 and 3 but got 2 inputs for model 'opt'. Got input(s) ['C','A'], but missing required input(s) ['B']. Please provide all required input(s)."},
		{"duplicate input", simpleCfg, request("", []in{good0, good0}), "input 'INPUT0' already exists in request"},
		{"datatype", simpleCfg, request("", []in{{"INPUT0", "FP32", []int64{1, 16}, zeros(64)}, good1}),
			"inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'"},
		{"bad datatype name", simpleCfg, request("", []in{{"INPUT0", "FLOAT", []int64{1, 16}, zeros(64)}, good1}),
			"inference input 'INPUT0' data-type is 'INVALID', but model 'simple' expects 'INT32'"},
		{"shape", simpleCfg, request("", []in{{"INPUT0", "INT32", []int64{1, 8}, zeros(32)}, good1}),
			"unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]"},
		// Triton's L0_input_validation: both inputs bad, the message names INPUT1.
		{"shape both bad", simpleCfg, request("", []in{{"INPUT0", "INT32", []int64{2, 8}, zeros(64)}, {"INPUT1", "INT32", []int64{2, 8}, zeros(64)}}),
			"unexpected shape for input 'INPUT1' for model 'simple'. Expected [-1,16], got [2,8]"},
		{"rank", simpleCfg, request("", []in{{"INPUT0", "INT32", []int64{1, 16, 1}, zeros(64)}, good1}),
			"unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,16,1]"},
		{"batch size", simpleCfg, request("", []in{{"INPUT0", "INT32", []int64{9, 16}, zeros(9 * 64)}, {"INPUT1", "INT32", []int64{9, 16}, zeros(9 * 64)}}),
			"inference request batch-size must be <= 8 for 'simple'"},
		{"batch mismatch", simpleCfg, request("", []in{{"INPUT0", "INT32", []int64{2, 16}, zeros(128)}, good1}),
			"input 'INPUT0' batch size does not match other inputs for 'simple'"},
		{"negative batch dim", simpleCfg, request("", []in{{"INPUT0", "INT32", []int64{-1, 16}, zeros(64)}, good1}),
			"All input dimensions should be specified for input 'INPUT0' for model 'simple', got [-1,16]"},
		{"negative dim", simpleCfg, request("", []in{{"INPUT0", "INT32", []int64{1, -5}, zeros(64)}, good1}),
			"invalid shape for input 'INPUT0': shape [1,-5] contains one or more invalid dimensions for model 'simple'"},
		{"overflowing dims", simpleCfg, request("", []in{{"INPUT0", "INT32", []int64{1, 1 << 62, 16}, zeros(64)}, good1}),
			"invalid shape for input 'INPUT0': shape [1,4611686018427387904,16] causes total element count to exceed maximum size of 9223372036854775807 for model 'simple'"},
		{"no batch dim", simpleCfg, request("", []in{{"INPUT0", "INT32", nil, zeros(4)}, good1}),
			"input 'INPUT0' has no shape but model requires batch dimension for 'simple'"},
		{"byte size", simpleCfg, request("", []in{{"INPUT0", "INT32", []int64{1, 16}, zeros(60)}, good1}),
			"input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60"},
		{"byte size with id", simpleCfg, request("req-7", []in{good0, {"INPUT1", "INT32", []int64{1, 16}, zeros(128)}}),
			"[request id: req-7] input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 128"},
		{"id prefix", simpleCfg, request("abc", []in{good0}),
			"[request id: abc] expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s)."},
		{"unknown output", simpleCfg, request("", []in{good0, good1}, "OUTPUT0", "OUTPUT9"),
			"unexpected inference output 'OUTPUT9' for model 'simple'"},
		{"duplicate output", simpleCfg, request("r1", []in{good0, good1}, "OUTPUT1", "OUTPUT9", "OUTPUT1"),
			"[request id: r1] output 'OUTPUT1' already exists in request"},
		{"wildcard in request", noBatchCfg, request("", []in{{"IN", "FP32", []int64{-1, 4}, zeros(16)}}),
			"All input dimensions should be specified for input 'IN' for model 'nobatch', got [-1,4]"},
		{"no batch shape", noBatchCfg, request("", []in{{"IN", "FP32", []int64{1, 2, 4}, zeros(32)}}),
			"unexpected shape for input 'IN' for model 'nobatch'. Expected [-1,4], got [1,2,4]"},
		{"bytes too few", stringCfg, request("", []in{{"INPUT0", "BYTES", []int64{1, 16}, strs(14, "1")}, {"INPUT1", "BYTES", []int64{1, 16}, strs(16, "1")}}),
			"expected 16 string elements for inference input 'INPUT0' for model 'simple_string', got 14"},
		{"bytes too many", stringCfg, request("", []in{{"INPUT0", "BYTES", []int64{1, 16}, strs(16, "1")}, {"INPUT1", "BYTES", []int64{1, 16}, strs(17, "1")}}),
			"unexpected number of string elements 17 for inference input 'INPUT1' for model 'simple_string', expecting 16"},
		{"bytes truncated length", stringCfg, request("", []in{{"INPUT0", "BYTES", []int64{1, 16}, append(strs(15, "1"), 1, 0)}, {"INPUT1", "BYTES", []int64{1, 16}, strs(16, "1")}}),
			"incomplete string length indicator for inference input 'INPUT0' for model 'simple_string', expecting 4 bytes but only 2 bytes available. Please make sure the string length indicator is in one buffer."},
		{"raw count", simpleCfg, &inference.ModelInferRequest{Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}}}},
			"expected 1 raw input contents, one per input, got 0 for model 'simple'"},
		{"sequence_id type", simpleCfg, func() *inference.ModelInferRequest {
			r := request("", []in{good0, good1})
			r.Parameters = map[string]*inference.InferParameter{"sequence_id": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}
			return r
		}(), "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."},
		{"sequence_start type", simpleCfg, func() *inference.ModelInferRequest {
			r := request("", []in{good0, good1})
			r.Parameters = map[string]*inference.InferParameter{"sequence_start": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 1}}}
			return r
		}(), "invalid value type for 'sequence_start' parameter, expected bool_param."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Normalize(config(t, tt.cfg), tt.req, backend.NewRequest(nil, nil))
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if k := tritonerr.KindOf(err); k != tritonerr.InvalidArg {
				t.Errorf("kind %v, want INVALID_ARG", k)
			}
			if err.Error() != tt.want {
				t.Errorf("message\n got: %s\nwant: %s", err.Error(), tt.want)
			}
		})
	}
}

func TestNormalizeOK(t *testing.T) {
	d0, d1 := bytes.Repeat([]byte{1}, 128), bytes.Repeat([]byte{2}, 128)
	req := request("id-1", []in{{"INPUT1", "INT32", []int64{2, 16}, d1}, {"INPUT0", "INT32", []int64{2, 16}, d0}}, "OUTPUT1")
	req.Parameters = map[string]*inference.InferParameter{
		"sequence_id":    {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "seq"}},
		"sequence_start": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}},
		"priority":       {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 1}},
		"custom":         {ParameterChoice: &inference.InferParameter_DoubleParam{DoubleParam: 0.5}},
	}
	r := backend.NewRequest(nil, nil)
	if err := Normalize(config(t, simpleCfg), req, r); err != nil {
		t.Fatal(err)
	}
	if r.ID != "id-1" || r.BatchSize != 2 {
		t.Errorf("id %q batch %d", r.ID, r.BatchSize)
	}
	if got := r.Input("INPUT0"); got == nil || got.DataType != tensor.Int32 || !slices.Equal(got.Shape, []int64{2, 16}) || &got.Data[0] != &d0[0] {
		t.Errorf("INPUT0 = %+v (data must alias the request)", got)
	}
	if !slices.Equal(r.RequestedOutputs, []string{"OUTPUT1"}) {
		t.Errorf("requested %v", r.RequestedOutputs)
	}
	if s, err := r.CorrelationID.StringID(); err != nil || s != "seq" {
		t.Errorf("correlation %v %v", s, err)
	}
	if _, err := r.CorrelationID.Uint64(); err == nil || err.Error() != "correlation ID in request is not an unsigned int" {
		t.Errorf("Uint64 of a string id: %v", err)
	}
	if r.Flags != backend.SequenceStart {
		t.Errorf("flags %v", r.Flags)
	}
	if len(r.Parameters) != 1 || r.Parameters["custom"] != 0.5 {
		t.Errorf("parameters %v", r.Parameters)
	}

	// No outputs named: all of them, in config order.
	r = backend.NewRequest(nil, nil)
	if err := Normalize(config(t, simpleCfg), request("", []in{{"INPUT0", "INT32", []int64{1, 16}, zeros(64)}, {"INPUT1", "INT32", []int64{1, 16}, zeros(64)}}), r); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.RequestedOutputs, []string{"OUTPUT0", "OUTPUT1"}) {
		t.Errorf("requested %v", r.RequestedOutputs)
	}
}

func TestNormalizeShapes(t *testing.T) {
	tests := []struct {
		name      string
		cfg       string
		in        in
		wantShape []int64
		wantBatch int
	}{
		{"no batching keeps shape", noBatchCfg, in{"IN", "FP32", []int64{3, 4}, zeros(48)}, []int64{3, 4}, 0},
		{"reshape fills variable dims", reshapeCfg, in{"IN", "FP32", []int64{2, 3, 4}, zeros(96)}, []int64{2, 2, 3, 2}, 2},
		{"zero batch", reshapeCfg, in{"IN", "FP32", []int64{0, 3, 4}, nil}, []int64{0, 2, 3, 2}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := backend.NewRequest(nil, nil)
			if err := Normalize(config(t, tt.cfg), request("", []in{tt.in}), r); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Inputs[0].Shape, tt.wantShape) || r.BatchSize != tt.wantBatch {
				t.Errorf("shape %v batch %d, want %v %d", r.Inputs[0].Shape, r.BatchSize, tt.wantShape, tt.wantBatch)
			}
		})
	}
}

// TestNormalizeShm: inputs in shared memory have no data here; a fixed-size
// one's declared byte size must be exact, a BYTES one is not looked at.
func TestNormalizeShm(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   string
		ins   []in
		sizes map[int]uint64
		err   string
	}{
		{"exact", simpleCfg, []in{{"INPUT0", "INT32", []int64{1, 16}, nil}, {"INPUT1", "INT32", []int64{1, 16}, zeros(64)}}, map[int]uint64{0: 64}, ""},
		{"too big", simpleCfg, []in{{"INPUT0", "INT32", []int64{1, 16}, nil}, {"INPUT1", "INT32", []int64{1, 16}, zeros(64)}}, map[int]uint64{0: 128},
			"input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 128"},
		{"raw input still checked", simpleCfg, []in{{"INPUT0", "INT32", []int64{1, 16}, nil}, {"INPUT1", "INT32", []int64{1, 16}, zeros(4)}}, map[int]uint64{0: 64},
			"input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 4"},
		{"bytes not looked at", stringCfg, []in{{"INPUT0", "BYTES", []int64{1, 16}, nil}, {"INPUT1", "BYTES", []int64{1, 16}, strs(16, "x")}}, map[int]uint64{0: 3}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := backend.NewRequest(nil, nil)
			err := NormalizeShm(config(t, tc.cfg), request("", tc.ins), r, tc.sizes)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if r.BatchSize != 1 {
					t.Fatalf("batch size %d", r.BatchSize)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want %q", err, tc.err)
			}
		})
	}
}

func TestCheckUTF8(t *testing.T) {
	str := func(s string) *inference.InferParameter {
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: s}}
	}
	for _, tc := range []struct {
		name string
		req  *inference.ModelInferRequest
		err  string
	}{
		{"valid", &inference.ModelInferRequest{ModelName: "m", Id: "é", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "FP32"}}}, ""},
		{"input name", &inference.ModelInferRequest{Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "IN\xff", Datatype: "FP32"}}}, `input name "IN\xff" is not valid UTF-8`},
		{"output name", &inference.ModelInferRequest{Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "\xc3"}}}, `output name "\xc3" is not valid UTF-8`},
		{"request id", &inference.ModelInferRequest{Id: "\xfe"}, `request id "\xfe" is not valid UTF-8`},
		{"parameter value", &inference.ModelInferRequest{Parameters: map[string]*inference.InferParameter{"p": str("\xff")}}, `value of parameter 'p' "\xff" is not valid UTF-8`},
		{"input parameter name", &inference.ModelInferRequest{Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Parameters: map[string]*inference.InferParameter{"\xff": str("")}}}},
			`parameter name of input 'IN' "\xff" is not valid UTF-8`},
		{"datatype", &inference.ModelInferRequest{Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "FP\xff"}}}, `datatype of input 'IN' "FP\xff" is not valid UTF-8`},
		{"output parameter value", &inference.ModelInferRequest{Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUT", Parameters: map[string]*inference.InferParameter{"q": str("\xfe")}}}},
			`value of parameter 'q' of output 'OUT' "\xfe" is not valid UTF-8`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckUTF8(tc.req)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if tritonerr.KindOf(err) != tritonerr.InvalidArg || err.Error() != tc.err {
				t.Fatalf("got %v, want INVALID_ARG %s", err, tc.err)
			}
		})
	}
}

// TestCheckUTF8Allocs: a valid request is checked without allocating (the
// gateway checks every request it forwards).
func TestCheckUTF8Allocs(t *testing.T) {
	req := &inference.ModelInferRequest{ModelName: "m", Id: "1",
		Parameters: map[string]*inference.InferParameter{"p": {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "v"}}},
		Inputs:     []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Parameters: map[string]*inference.InferParameter{"binary_data_size": {}}}},
		Outputs:    []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0"}},
	}
	if n := testing.AllocsPerRun(100, func() { _ = CheckUTF8(req) }); n != 0 {
		t.Fatalf("CheckUTF8 of a valid request: %v allocations, want 0", n)
	}
}

// TestNormalizeRoomAllocs: with room lent for the inputs and the requested
// outputs, a request of one input whose shape needs no reshaping costs
// nothing: its shape is the request's own.
func TestNormalizeRoomAllocs(t *testing.T) {
	if racebuild.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	cfg := config(t, noBatchCfg)
	req := request("", []in{{"IN", "FP32", []int64{3, 4}, zeros(48)}}, "OUT")
	var inputs [1]backend.Input
	var outputs [1]string
	var r backend.Request
	n := testing.AllocsPerRun(100, func() {
		r.Inputs, r.RequestedOutputs = inputs[:0], outputs[:0]
		if err := Normalize(cfg, req, &r); err != nil {
			t.Fatal(err)
		}
	})
	if n > 0 {
		t.Fatalf("%v allocations, want none", n)
	}
	if &r.Inputs[0] != &inputs[0] || &r.RequestedOutputs[0] != &outputs[0] || !slices.Equal(r.Inputs[0].Shape, []int64{3, 4}) || r.RequestedOutputs[0] != "OUT" {
		t.Fatalf("inputs %+v, outputs %v: not in the room lent", r.Inputs, r.RequestedOutputs)
	}
}
