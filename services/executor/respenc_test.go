package executor

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// The hand encoding of a response decodes to the message response builds.
func TestEncodeResponse(t *testing.T) {
	mv := &modelVersion{name: "square_int32", vstr: "1"}
	outs := []backend.Output{
		{Name: "OUT", DataType: tensor.Int32, Shape: []int64{2}, Data: tensor.AppendInt32s(nil, 3, -4)},
		{Name: "IDX", DataType: tensor.Uint32, Shape: []int64{1, 1}, Data: []byte{1, 0, 0, 0}},
		{Name: "EMPTY", DataType: tensor.Bytes, Shape: []int64{0}},
		{Name: "SCALAR", DataType: tensor.FP32, Data: []byte{0, 0, 128, 63}},
		{Name: "UNASKED", DataType: tensor.Int32, Shape: []int64{1}, Data: []byte{9, 9, 9, 9}},
	}
	for _, tc := range []struct {
		name      string
		id        string
		requested []string
	}{
		{"all in order", "r1", []string{"OUT", "IDX", "EMPTY", "SCALAR"}},
		{"reordered subset, no id", "", []string{"IDX", "OUT"}},
		{"one missing", "x", []string{"NOPE", "SCALAR"}},
		{"none", "y", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &inference.ModelInferRequest{Id: tc.id}
			r := &backend.Request{RequestedOutputs: tc.requested}
			resp := &backend.Response{Outputs: outs}
			want, err := mv.response(req, r, resp)
			if err != nil {
				t.Fatal(err)
			}
			enc, ok := mv.encodeResponse(nil, req, r, resp)
			if !ok {
				t.Fatal("not encoded")
			}
			var got inference.ModelInferResponse
			if err := proto.Unmarshal(enc, &got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got, want) {
				t.Errorf("\n got %v\nwant %v", &got, want)
			}
		})
	}
	// Response parameters take the general path.
	if _, ok := mv.encodeResponse(nil, &inference.ModelInferRequest{}, &backend.Request{}, &backend.Response{Parameters: map[string]any{"p": true}}); ok {
		t.Error("a response with parameters was hand-encoded")
	}
}
