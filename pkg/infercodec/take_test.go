package infercodec

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/internal/testutil/racebuild"
)

const takenKey = "nereid_handoff"

func stringParam(s string) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: s}}
}

// smallRequest is a 64-byte request as a gateway forwards it: one input,
// one output, its raw contents and the hand-off descriptor.
func smallRequest(params map[string]*inference.InferParameter) *inference.ModelInferRequest {
	return &inference.ModelInferRequest{
		ModelName: "m", ModelVersion: "1", Id: "1",
		Parameters:       params,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "FP32", Shape: []int64{1, 16}}},
		Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUT"}},
		RawInputContents: [][]byte{big(64, 3)},
	}
}

// checkTaking decodes b with UnmarshalRequestTaking and with
// UnmarshalRequestIn, and fails unless both accept it or both refuse it,
// the value taken is the one UnmarshalRequestIn reads as the parameter,
// and the rest reads the same.
func checkTaking(t *testing.T, b []byte) (taken string) {
	t.Helper()
	var got, want inference.ModelInferRequest
	var room, room2 RequestRoom
	v, errG := UnmarshalRequestTaking(b, &got, &room, takenKey)
	errW := UnmarshalRequestIn(b, &want, &room2)
	if (errG == nil) != (errW == nil) {
		t.Fatalf("taking decoder error %v, without taking %v", errG, errW)
	}
	if errW != nil {
		return ""
	}
	if v != "" {
		if p, ok := want.Parameters[takenKey]; !ok || p.GetStringParam() != v {
			t.Fatalf("took %q, the parameter reads %v", v, p)
		}
		if _, ok := got.Parameters[takenKey]; ok {
			t.Fatal("the parameter taken is in the parameters too")
		}
		delete(want.Parameters, takenKey)
	}
	if !proto.Equal(&got, &want) {
		t.Fatalf("decoders disagree:\n%v\n%v", &got, &want)
	}
	if (got.Inputs == nil) != (want.Inputs == nil) || (got.Outputs == nil) != (want.Outputs == nil) || (got.RawInputContents == nil) != (want.RawInputContents == nil) {
		t.Fatal("a list left empty rather than nil")
	}
	return v
}

// TestUnmarshalRequestTaking: the descriptor is taken out when it is a
// string parameter written as protobuf writes it, and left in the map
// otherwise; everything else reads as protobuf reads it.
func TestUnmarshalRequestTaking(t *testing.T) {
	for _, tc := range []struct {
		name   string
		params map[string]*inference.InferParameter
		taken  string
	}{
		{"alone", map[string]*inference.InferParameter{takenKey: stringParam("p;0123-1")}, "p;0123-1"},
		{"with others", map[string]*inference.InferParameter{"a": stringParam("x"), takenKey: stringParam("f;;0"), "z": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 7}}}, "f;;0"},
		{"not a string", map[string]*inference.InferParameter{takenKey: {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}, ""},
		{"empty", map[string]*inference.InferParameter{takenKey: stringParam("")}, ""},
		{"absent", map[string]*inference.InferParameter{"a": stringParam("x")}, ""},
		{"none", nil, ""},
	} {
		b, err := proto.Marshal(smallRequest(tc.params))
		if err != nil {
			t.Fatal(err)
		}
		if got := checkTaking(t, b); got != tc.taken {
			t.Errorf("%s: took %q, want %q", tc.name, got, tc.taken)
		}
	}
	// Two entries of the key (protobuf keeps the last): left to the map.
	one, _ := proto.Marshal(&inference.ModelInferRequest{Parameters: map[string]*inference.InferParameter{takenKey: stringParam("first")}})
	two, _ := proto.Marshal(smallRequest(map[string]*inference.InferParameter{takenKey: stringParam("second")}))
	if got := checkTaking(t, append(one, two...)); got != "" {
		t.Errorf("twice: took %q", got)
	}
}

func FuzzUnmarshalRequestTaking(f *testing.F) {
	for _, params := range []map[string]*inference.InferParameter{
		{takenKey: stringParam("p;0123-1")},
		{"a": stringParam("x"), takenKey: stringParam("f;x;10;0:f:0:4")},
		nil,
	} {
		b, _ := proto.Marshal(smallRequest(params))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkTaking(t, b) })
}

// TestUnmarshalRequestTakingAllocs: the request a gateway forwards, its
// descriptor taken, costs the input tensor, its shape and the output: no
// parameters map.
func TestUnmarshalRequestTakingAllocs(t *testing.T) {
	if racebuild.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	b, err := proto.Marshal(smallRequest(map[string]*inference.InferParameter{takenKey: stringParam("p;0123456789abcdef-1")}))
	if err != nil {
		t.Fatal(err)
	}
	var req inference.ModelInferRequest
	var room RequestRoom
	n := testing.AllocsPerRun(100, func() {
		if v, err := UnmarshalRequestTaking(b, &req, &room, takenKey); err != nil || v == "" {
			t.Fatal(v, err)
		}
	})
	if n > 3 {
		t.Fatalf("%v allocations, want 3 (the input tensor, its shape and the output)", n)
	}
	if req.Parameters != nil {
		t.Fatal("a parameters map was made")
	}
}
