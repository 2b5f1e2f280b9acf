package ensemble

import (
	"context"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/shm"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// TestOutputsInSharedMemory: an ensemble output requested in shared
// memory is requested so of the step that produces it, and a step that
// reads it gets it as an input in that region, of the size its datatype
// and shape give; a BYTES one, whose size is not known, fails the request.
func TestOutputsInSharedMemory(t *testing.T) {
	p := plan([]string{"x", "y"}, step("a", []string{"in"}, []string{"x"}), step("b", []string{"x"}, []string{"y"}))
	region := shm.Ref{Region: "out", Offset: 8, ByteSize: 64}
	req := &inference.ModelInferRequest{ModelName: "e",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "in", Datatype: "FP32", Shape: []int64{1, 4}}},
		RawInputContents: [][]byte{make([]byte, 16)},
		Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{
			{Name: "x", Parameters: shm.Params(region)}, {Name: "y"}},
	}
	for _, dt := range []string{"FP32", "BYTES"} {
		t.Run(dt, func(t *testing.T) {
			var readX shm.Ref
			run := func(_ context.Context, s Step, sreq *inference.ModelInferRequest, _ func(*inference.ModelInferResponse, error)) (*inference.ModelInferResponse, error) {
				switch s.Model {
				case "a":
					ref, ok, err := shm.FromParams("OUT0", sreq.GetOutputs()[0].GetParameters(), false)
					if !ok || err != nil || ref != region {
						t.Errorf("step a's output: %v %v %v, want it in %v", ref, ok, err, region)
					}
					return &inference.ModelInferResponse{
						Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "OUT0", Datatype: dt, Shape: []int64{1, 4}}},
						RawOutputContents: [][]byte{{}},
					}, nil
				case "b":
					ref, ok, err := shm.FromParams("IN0", sreq.GetInputs()[0].GetParameters(), false)
					if !ok || err != nil {
						t.Errorf("step b's input: %v %v %v", ref, ok, err)
					}
					readX = ref
					return &inference.ModelInferResponse{
						Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "OUT0", Datatype: "FP32", Shape: []int64{1, 4}}},
						RawOutputContents: [][]byte{make([]byte, 16)},
					}, nil
				}
				return nil, tritonerr.Internalf("no model %s", s.Model)
			}
			var out *inference.ModelInferResponse
			_, err := p.Drive(context.Background(), req, "1", nil, run, func(resp *inference.ModelInferResponse, _ bool) error {
				if resp != nil {
					out = resp
				}
				return nil
			})
			if dt == "BYTES" {
				if tritonerr.KindOf(err) != tritonerr.Unsupported {
					t.Fatalf("a BYTES output in shared memory read by a step: %v, want UNSUPPORTED", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := (shm.Ref{Region: "out", Offset: 8, ByteSize: 16}); readX != want {
				t.Errorf("step b read x at %v, want %v", readX, want)
			}
			if len(out.GetOutputs()) != 2 || len(out.GetRawOutputContents()[0]) != 0 || len(out.GetRawOutputContents()[1]) != 16 {
				t.Errorf("response: %v", out)
			}
		})
	}
}
