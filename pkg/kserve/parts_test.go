package kserve

import (
	"bytes"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// TestEncodeInferResponseParts: the parts are the body of
// EncodeInferResponse, cut at the JSON header, and the binary parts alias
// the response's raw outputs (no copy).
func TestEncodeInferResponseParts(t *testing.T) {
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i)
	}
	resp := &inference.ModelInferResponse{
		ModelName: "m", ModelVersion: "1",
		Outputs: []*inference.ModelInferResponse_InferOutputTensor{
			{Name: "A", Datatype: "UINT8", Shape: []int64{1 << 20}},
			{Name: "B", Datatype: "INT32", Shape: []int64{2}},
			{Name: "C", Datatype: "UINT8", Shape: []int64{0}},
		},
		RawOutputContents: [][]byte{big, tensor.AppendInt32s(nil, 1, 2), {}},
	}
	for _, tc := range []struct {
		name string
		opts *OutputOptions
		n    int
	}{
		{"json only", &OutputOptions{}, 0},
		{"all binary", &OutputOptions{BinaryDefault: true}, 3},
		{"per-output override", &OutputOptions{Requested: []RequestedOutput{{Name: "A", Binary: true}, {Name: "B"}, {Name: "C", Binary: true}}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, jsonLen, err := EncodeInferResponse(resp, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			header, blobs, err := EncodeInferResponseParts(resp, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(blobs) != tc.n || (tc.n == 0) != (blobs == nil) || (jsonLen < 0) != (blobs == nil) {
				t.Fatalf("%d blobs (nil %v), jsonLen %d", len(blobs), blobs == nil, jsonLen)
			}
			joined := append([]byte{}, header...)
			for _, b := range blobs {
				joined = append(joined, b...)
			}
			if !bytes.Equal(joined, body) || (jsonLen >= 0 && jsonLen != len(header)) {
				t.Fatal("parts differ from the body")
			}
			if tc.n > 0 && &blobs[0][0] != &big[0] {
				t.Fatal("the binary output was copied")
			}
		})
	}
}
