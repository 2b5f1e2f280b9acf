package kserve

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/infercodec"
)

// encodedResponses are responses as executors send them, and some that
// EncodeInferResponseEncoded must leave to the decoded path.
func encodedResponses() map[string]*inference.ModelInferResponse {
	out := func(name, dt string, shape ...int64) *inference.ModelInferResponse_InferOutputTensor {
		return &inference.ModelInferResponse_InferOutputTensor{Name: name, Datatype: dt, Shape: shape}
	}
	fp32 := []byte{0, 0, 128, 63, 0, 0, 0, 64} // 1, 2
	many := &inference.ModelInferResponse{ModelName: "m"}
	for i := range maxEncodedOutputs + 1 {
		many.Outputs = append(many.Outputs, out(fmt.Sprintf("O%d", i), "INT8", 1))
		many.RawOutputContents = append(many.RawOutputContents, []byte{byte(i)})
	}
	return map[string]*inference.ModelInferResponse{
		"identity": {ModelName: "identity_fp32", ModelVersion: "1", Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("OUTPUT0", "FP32", 1, 2)},
			RawOutputContents: [][]byte{fp32}},
		"with id, two outputs": {ModelName: "simple", ModelVersion: "1", Id: "req \"7\"",
			Outputs:           []*inference.ModelInferResponse_InferOutputTensor{out("OUTPUT0", "INT32", 1, 2), out("OUTPUT1", "INT32", 1, 2)},
			RawOutputContents: [][]byte{{1, 0, 0, 0, 2, 0, 0, 0}, {3, 0, 0, 0, 4, 0, 0, 0}}},
		"no version": {ModelName: "m", Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("O", "BOOL", 2)}, RawOutputContents: [][]byte{{1, 0}}},
		"output parameters": {ModelName: "m", Outputs: []*inference.ModelInferResponse_InferOutputTensor{{Name: "O", Datatype: "UINT8", Shape: []int64{1},
			Parameters: map[string]*inference.InferParameter{"p": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 3}}}}},
			RawOutputContents: [][]byte{{9}}},
		"bytes": {ModelName: "m", Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("O", "BYTES", 2)},
			RawOutputContents: [][]byte{{2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0}}},
		"fewer raw than outputs": {ModelName: "m", Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("A", "FP32", 0), out("B", "FP32", 0)},
			RawOutputContents: [][]byte{{}}},
		"scalar": {ModelName: "m", Outputs: []*inference.ModelInferResponse_InferOutputTensor{{Name: "S", Datatype: "INT64"}},
			RawOutputContents: [][]byte{{5, 0, 0, 0, 0, 0, 0, 0}}},
		"bad datatype": {ModelName: "m", Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("O", "FP99", 1)}, RawOutputContents: [][]byte{{1}}},
		"short data":   {ModelName: "m", Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("O", "FP32", 4)}, RawOutputContents: [][]byte{{1}}},
		"response parameters": {ModelName: "m", Parameters: map[string]*inference.InferParameter{
			"sequence_id": {ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: 1}}}},
		"too many outputs": many,
		"too many dims":    {ModelName: "m", Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("O", "INT8", 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)}, RawOutputContents: [][]byte{{1}}},
	}
}

// encodedOptions are ways a request asks for its outputs.
func encodedOptions() map[string]*OutputOptions {
	return map[string]*OutputOptions{
		"none (JSON)":   nil,
		"binary output": {BinaryDefault: true},
		"some binary":   {Requested: []RequestedOutput{{Name: "OUTPUT1", Binary: true}, {Name: "O", Binary: true}, {Name: "A", Binary: true}}},
		"shared memory": {BinaryDefault: true, Requested: []RequestedOutput{
			{Name: "OUTPUT0", SharedMemory: &SharedMemoryRef{Region: "r", ByteSize: 8}}, {Name: "O", SharedMemory: &SharedMemoryRef{Region: "r"}}}},
	}
}

// checkEncoded compares EncodeInferResponseEncoded on msg with
// EncodeInferResponseParts on msg decoded as the gateway decodes it, and
// reports whether the encoded path took msg.
func checkEncoded(t *testing.T, msg []byte, opts *OutputOptions) bool {
	t.Helper()
	header, blobs, ok := EncodeInferResponseEncoded(msg, opts, nil)
	if !ok {
		return false
	}
	var resp inference.ModelInferResponse
	if err := infercodec.UnmarshalResponse(msg, &resp); err != nil {
		t.Fatalf("the encoded path took a response that does not decode: %v", err)
	}
	wantHeader, wantBlobs, err := EncodeInferResponseParts(&resp, opts)
	if err != nil {
		t.Fatalf("the encoded path wrote a response the decoded path refuses (%v): %s", err, header)
	}
	if !bytes.Equal(header, wantHeader) {
		t.Fatalf("header:\n%s\nwant\n%s", header, wantHeader)
	}
	if len(blobs) != len(wantBlobs) || (blobs == nil) != (wantBlobs == nil) {
		t.Fatalf("blobs %q, want %q", blobs, wantBlobs)
	}
	for i := range blobs {
		if !bytes.Equal(blobs[i], wantBlobs[i]) {
			t.Fatalf("blob %d: %q, want %q", i, blobs[i], wantBlobs[i])
		}
	}
	return true
}

func TestEncodeInferResponseEncodedMatchesDecoded(t *testing.T) {
	declined := map[string]bool{"response parameters": true, "too many outputs": true, "too many dims": true}
	// Data that cannot be written in JSON: the decoded path gives the error.
	unwritable := map[string]bool{"bad datatype": true, "short data": true}
	for name, resp := range encodedResponses() {
		msg, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if !infercodec.Canonical(msg) {
			t.Fatalf("%s: not canonical", name)
		}
		for oname, opts := range encodedOptions() {
			t.Run(name+"/"+oname, func(t *testing.T) {
				want := !declined[name] && !(unwritable[name] && opts == nil)
				if took := checkEncoded(t, msg, opts); took != want {
					t.Fatalf("encoded path took the response: %v, want %v", took, want)
				}
			})
		}
	}
}

func TestEncodeInferResponseEncodedAllocations(t *testing.T) {
	msg, err := proto.Marshal(encodedResponses()["identity"])
	if err != nil {
		t.Fatal(err)
	}
	opts := &OutputOptions{BinaryDefault: true}
	// The header only: the list of binary outputs goes into the buffer.
	var buf [4][]byte
	if n := testing.AllocsPerRun(100, func() { EncodeInferResponseEncoded(msg, opts, buf[:0]) }); n > 1 {
		t.Fatalf("%v allocations per response, want at most 1", n)
	}
	// Into the caller's memory: none, and the same header.
	want, _, _ := EncodeInferResponseEncoded(msg, opts, buf[:0])
	dst := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { EncodeInferResponseEncodedTo(dst, msg, opts, buf[:0]) }); n > 0 {
		t.Fatalf("%v allocations per response into the caller's memory, want 0", n)
	}
	if got, _, ok := EncodeInferResponseEncodedTo(dst, msg, opts, buf[:0]); !ok || !bytes.Equal(got, want) || &got[0] != &dst[:1][0] {
		t.Fatalf("into the caller's memory: %q (ok %v), want %q in it", got, ok, want)
	}
}

// FuzzEncodeInferResponseEncoded checks that whatever canonical response
// the encoded path takes, it answers exactly as decoding it and encoding
// the decoded response does.
func FuzzEncodeInferResponseEncoded(f *testing.F) {
	for _, resp := range encodedResponses() {
		msg, err := proto.Marshal(resp)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msg, false, uint8(0))
		f.Add(msg, true, uint8(5))
	}
	f.Fuzz(func(t *testing.T, msg []byte, binaryDefault bool, sel uint8) {
		if !infercodec.Canonical(msg) {
			return
		}
		opts := &OutputOptions{BinaryDefault: binaryDefault}
		var resp inference.ModelInferResponse
		if infercodec.UnmarshalResponse(msg, &resp) == nil {
			// Requested outputs from sel's bits: binary, JSON or shared memory.
			for i, o := range resp.GetOutputs() {
				switch (sel >> (2 * (i % 4))) & 3 {
				case 1:
					opts.Requested = append(opts.Requested, RequestedOutput{Name: o.GetName(), Binary: true})
				case 2:
					opts.Requested = append(opts.Requested, RequestedOutput{Name: o.GetName()})
				case 3:
					opts.Requested = append(opts.Requested, RequestedOutput{Name: o.GetName(), SharedMemory: &SharedMemoryRef{Region: "r"}})
				}
			}
		}
		checkEncoded(t, msg, opts)
	})
}
