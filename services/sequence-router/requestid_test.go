package seqrouter

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

func TestRequestID(t *testing.T) {
	enc := func(r *inference.ModelInferRequest) []byte {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	full := enc(&inference.ModelInferRequest{ModelName: "m", ModelVersion: "1", Id: "req-7",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1}}},
		RawInputContents: [][]byte{{1, 2, 3, 4}}})
	tests := []struct {
		name string
		body []byte
		want string
	}{
		{"with id", full, "req-7"},
		{"id after the tensors", append(enc(&inference.ModelInferRequest{RawInputContents: [][]byte{{9}}}), enc(&inference.ModelInferRequest{Id: "late"})...), "late"},
		{"without id", enc(&inference.ModelInferRequest{ModelName: "m"}), ""},
		{"empty", nil, ""},
		{"truncated", full[:len(full)-2], "req-7"},
		{"garbage", []byte{0xff, 0xff, 0xff}, ""},
		{"truncated id", enc(&inference.ModelInferRequest{Id: "abcdef"})[:4], ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := requestID(tt.body); got != tt.want {
				t.Errorf("requestID = %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzRequestID(f *testing.F) {
	f.Add([]byte{0x1a, 0x02, 'i', 'd'})
	f.Add([]byte{0x0a, 0x01, 'm', 0x1a, 0x03, 'a', 'b', 'c'})
	f.Fuzz(func(t *testing.T, body []byte) {
		got := requestID(body)
		var r inference.ModelInferRequest
		if err := proto.Unmarshal(body, &r); err == nil && len(r.ProtoReflect().GetUnknown()) == 0 && got != r.GetId() {
			// The first id wins here, the last in proto's merge rules:
			// only single-id bodies must agree.
			if countIDs(body) == 1 {
				t.Fatalf("requestID = %q, proto says %q", got, r.GetId())
			}
		}
	})
}

// countIDs counts field 3 occurrences at the top level of body.
func countIDs(body []byte) int {
	n := 0
	for len(body) > 0 {
		num, typ, k := protowire.ConsumeTag(body)
		if k < 0 {
			return n
		}
		body = body[k:]
		if num == 3 {
			n++
		}
		m := protowire.ConsumeFieldValue(num, typ, body)
		if m < 0 {
			return n
		}
		body = body[m:]
	}
	return n
}
