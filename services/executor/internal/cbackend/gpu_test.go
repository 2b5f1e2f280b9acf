//go:build cgo

package cbackend

import (
	"bytes"
	"context"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// TestMemoryTypeNegotiation runs the ngpu test backend, which asks for
// GPU memory everywhere, through Triton's negotiation: without CUDA
// shared memory it is given host memory and told so; with an output bound
// for a CUDA region and an input that came in one (a GPU the machine does
// not have: the device address is never dereferenced, by the executor or
// the backend) it is given the region's device memory, the input's only
// on a GPU instance, and the output goes in the response with its shape
// and no data, as the region holds it.
func TestMemoryTypeNegotiation(t *testing.T) {
	m := testModel(t, "ngpu", identityConfig("g", "ngpu"), nil)
	// A device address as CUDA's unified addressing hands them out: no
	// host memory there.
	const region = uintptr(0x7f0000000000)
	in := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	for _, tc := range []struct {
		name                       string
		kind                       inference.ModelInstanceGroup_Kind
		cudaInput, cudaOutput      bool
		props, input, output, data string
	}{
		{"host memory only", inference.ModelInstanceGroup_KIND_GPU, false, false, "CPU:0", "CPU:0", "CPU:0", string(in)},
		{"CUDA regions, GPU instance", inference.ModelInstanceGroup_KIND_GPU, true, true, "GPU:3", "GPU:3", "GPU:3", ""},
		{"CUDA regions, CPU instance", inference.ModelInstanceGroup_KIND_CPU, true, true, "GPU:3", "CPU:0", "GPU:3", ""},
		{"CUDA input, host output", inference.ModelInstanceGroup_KIND_CPU, true, false, "CPU:0", "CPU:0", "CPU:0", string(in)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "g_0", Kind: tc.kind, Stats: &statsRecorder{}})
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Finalize()
			var got *backend.Response
			r := backend.NewRequest(context.Background(), func(_ *backend.Request, resp *backend.Response) { got = resp })
			r.BatchSize = 1
			r.Inputs = []backend.Input{{Name: "INPUT0", DataType: tensor.FP32, Shape: []int64{1, 2}, Data: in}}
			if tc.cudaInput {
				r.Inputs[0].Device = &backend.Device{Ptr: region, ID: 3}
			}
			if tc.cudaOutput {
				r.OutputDevice = func(name string, size int) (backend.Device, bool) {
					if name != "OUTPUT0" || size > 64 {
						return backend.Device{}, false
					}
					return backend.Device{Ptr: region + 4096, ID: 3}, true
				}
			}
			r.RequestedOutputs = []string{"OUTPUT0"}
			if err := inst.Execute(context.Background(), []*backend.Request{r}); err != nil {
				t.Fatal(err)
			}
			if got == nil || got.Err != nil {
				t.Fatalf("response %+v", got)
			}
			for k, want := range map[string]string{"properties": tc.props, "input": tc.input, "output": tc.output} {
				if got.Parameters[k] != want {
					t.Errorf("%s memory: %v, want %s", k, got.Parameters[k], want)
				}
			}
			if len(got.Outputs) != 1 || got.Outputs[0].Name != "OUTPUT0" || len(got.Outputs[0].Shape) != 2 || got.Outputs[0].Shape[1] != 2 ||
				!bytes.Equal(got.Outputs[0].Data, []byte(tc.data)) {
				t.Fatalf("outputs %+v, want data %v", got.Outputs, []byte(tc.data))
			}
		})
	}
}
