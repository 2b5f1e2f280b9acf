package infer

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func f32(v ...float32) []byte {
	var b []byte
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

func i64(v ...int64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

func classStrings(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	for len(b) > 0 {
		n := binary.LittleEndian.Uint32(b)
		out = append(out, string(b[4:4+n]))
		b = b[4+n:]
	}
	return out
}

func TestClassify(t *testing.T) {
	labels := Labels{"OUT": {"zero", "one", ""}}
	for _, tc := range []struct {
		name      string
		dt        tensor.DataType
		shape     []int64
		data      []byte
		k         uint64
		batching  bool
		wantShape []int64
		want      []string
	}{
		{"unbatched, labels where present", tensor.FP32, []int64{4}, f32(0.25, 0.5, 0.125, 1), 3, false,
			[]int64{3}, []string{"1.000000:3", "0.500000:1:one", "0.250000:0:zero"}},
		{"batched rows classified apart", tensor.FP32, []int64{2, 3}, f32(1, 2, 3, 6, 5, 4), 2, true,
			[]int64{2, 2}, []string{"3.000000:2", "2.000000:1:one", "6.000000:0:zero", "5.000000:1:one"}},
		{"k above the class count gives every class", tensor.Int64, []int64{1, 2}, i64(-3, 7), 10, true,
			[]int64{1, 2}, []string{"7:1:one", "-3:0:zero"}},
		{"ties keep index order", tensor.Int64, []int64{3}, i64(2, 2, 2), 2, false,
			[]int64{2}, []string{"2:0:zero", "2:1:one"}},
		{"batching model, unbatched dims", tensor.Uint8, []int64{1, 3}, []byte{9, 200, 1}, 1, true,
			[]int64{1, 1}, []string{"200:1:one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shape, out, err := Classify("OUT", tc.dt, tc.shape, tc.data, tc.k, tc.batching, labels)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(shape, tc.wantShape) || !reflect.DeepEqual(classStrings(t, out), tc.want) {
				t.Fatalf("got %v %q, want %v %q", shape, classStrings(t, out), tc.wantShape, tc.want)
			}
		})
	}
	// Triton's bound on the values of one batch entry: at it, classified;
	// one more, refused. A batch of entries each within it is classified.
	for _, tc := range []struct {
		shape    []int64
		batching bool
		err      bool
	}{
		{[]int64{MaxClassificationElements}, false, false},
		{[]int64{MaxClassificationElements + 1}, false, true},
		{[]int64{1, MaxClassificationElements + 1}, true, true},
		{[]int64{2, MaxClassificationElements / 2}, true, false},
		{[]int64{2, MaxClassificationElements / 2}, false, false},
		{[]int64{4, MaxClassificationElements / 2}, false, true},
	} {
		n := int(tc.shape[0])
		if len(tc.shape) > 1 {
			n *= int(tc.shape[1])
		}
		_, _, err := Classify("OUT", tensor.Uint8, tc.shape, make([]byte, n), 1, tc.batching, nil)
		if !tc.err && err != nil {
			t.Errorf("shape %v (batching %v): %v", tc.shape, tc.batching, err)
		}
		if te := tritonerr.From(err); tc.err && (err == nil || te.Kind != tritonerr.InvalidArg || te.Msg != "classification output tensor too large") {
			t.Errorf("shape %v (batching %v): %v, want 'classification output tensor too large'", tc.shape, tc.batching, err)
		}
	}
	for _, dt := range []tensor.DataType{tensor.Bool, tensor.Bytes, tensor.FP16, tensor.BF16} {
		_, _, err := Classify("OUT", dt, []int64{1}, []byte{0, 0, 0, 0, 0}, 1, false, nil)
		want := "class result not available for output due to unsupported type '" + dt.String() + "'"
		if te := tritonerr.From(err); err == nil || te.Kind != tritonerr.InvalidArg || te.Msg != want {
			t.Errorf("%s: %v, want %q", dt, err, want)
		}
	}
}

func TestClassificationCounts(t *testing.T) {
	out := func(p *inference.InferParameter) []*inference.ModelInferRequest_InferRequestedOutputTensor {
		return []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "RAW"}, {Name: "OUT", Parameters: map[string]*inference.InferParameter{ParamClassification: p}}}
	}
	got, err := ClassificationCounts(out(&inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 3}}))
	if err != nil || !reflect.DeepEqual(got, map[string]uint64{"OUT": 3}) {
		t.Fatalf("%v %v", got, err)
	}
	for _, tc := range []struct {
		p    *inference.InferParameter
		want string
	}{
		{&inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: "3"}}, "invalid value type for 'classification' parameter, expected int64_param"},
		{&inference.InferParameter{ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: 3}}, "invalid value type for 'classification' parameter, expected int64_param"},
		{&inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 0}}, "invalid value for 'classification' parameter, expected >= 1"},
		{&inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: -1}}, "invalid value for 'classification' parameter, expected >= 1"},
	} {
		if _, err := ClassificationCounts(out(tc.p)); err == nil || tritonerr.From(err).Msg != tc.want || tritonerr.KindOf(err) != tritonerr.InvalidArg {
			t.Errorf("%v: %v, want %q", tc.p, err, tc.want)
		}
	}
}

func TestReadLabels(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "labels.txt"), []byte("cat\ndog\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := &inference.ModelConfig{Name: "m", Output: []*inference.ModelOutput{{Name: "OUT", LabelFilename: "labels.txt"}, {Name: "RAW"}}}
	l, err := ReadLabels(dir, cfg)
	if err != nil || !reflect.DeepEqual(l, Labels{"OUT": {"cat", "dog"}}) {
		t.Fatalf("%v %v", l, err)
	}
	cfg.Output[0].LabelFilename = "missing.txt"
	if _, err := ReadLabels(dir, cfg); err == nil {
		t.Fatal("a missing label file loaded")
	}
}
