package kserve

import (
	"bytes"
	"slices"
	"testing"

	"github.com/nereid-io/nereid/internal/testutil/racebuild"
)

// TestDecodeInferRequestAllocs: a small request of one binary input, as
// clients send them, decodes into the request's one allocation with its
// shape (no slice of its own for it), its datatype's and parameters' names
// (no strings of their own), and a later decoding, which reuses the parser the shape was
// read into, leaves it alone.
func TestDecodeInferRequestAllocs(t *testing.T) {
	header := []byte(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,16],"parameters":{"binary_data_size":64}}],` +
		`"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`)
	body := append(slices.Clone(header), bytes.Repeat([]byte{1}, 64)...)
	req, _, err := DecodeInferRequest(body, len(header), "m", "1", DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := []byte(`{"inputs":[{"name":"B","datatype":"INT8","shape":[1,1,1,1],"data":[3]}]}`)
	if _, _, err := DecodeInferRequest(other, -1, "m", "1", DecodeOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := req.Inputs[0].Shape; !slices.Equal(got, []int64{1, 16}) {
		t.Fatalf("the first request's shape became %v with the next decoding", got)
	}
	if racebuild.Enabled {
		return
	}
	n := testing.AllocsPerRun(100, func() {
		if _, _, err := DecodeInferRequest(body, len(header), "m", "1", DecodeOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	// The request (with its lists, output options and shape), the
	// input's and output's names, copied out of the JSON, and the
	// output's binary_data flag; the datatype and the parameters' names
	// are the protocol's own strings, not copies.
	if n > 4 {
		t.Fatalf("%v allocations, want at most 4", n)
	}
	if dt := req.Inputs[0].Datatype; dt != "FP32" {
		t.Fatalf("datatype %q", dt)
	}
}
