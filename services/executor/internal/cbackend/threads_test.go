//go:build cgo

package cbackend

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// TestWhereInstancesRun checks the thread policy of runnerFor: a GPU or
// MODEL instance runs every call on the one thread that initialized it; a
// CPU instance runs on its callers' threads; no instance ever runs two
// executions at once, however many goroutines call Execute together.
func TestWhereInstancesRun(t *testing.T) {
	cfg := &inference.ModelConfig{
		Name: "threads", Backend: "nthreads", MaxBatchSize: 8,
		Input:  []*inference.ModelInput{{Name: "INPUT0", DataType: inference.DataType_TYPE_INT64, Dims: []int64{-1}}},
		Output: []*inference.ModelOutput{{Name: "OUTPUT0", DataType: inference.DataType_TYPE_INT64, Dims: []int64{3}}},
	}
	m := testModel(t, "nthreads", cfg, nil)
	for _, tc := range []struct {
		kind      inference.ModelInstanceGroup_Kind
		dedicated bool
	}{
		{inference.ModelInstanceGroup_KIND_CPU, false},
		{inference.ModelInstanceGroup_KIND_GPU, true},
		{inference.ModelInstanceGroup_KIND_MODEL, true},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			in, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "threads_0", Kind: tc.kind, Stats: &statsRecorder{}})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Finalize()
			var mu sync.Mutex
			var outs [][3]int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 10 {
						r := backend.NewRequest(context.Background(), func(_ *backend.Request, resp *backend.Response) {
							if resp.Err != nil || len(resp.Outputs) != 1 || len(resp.Outputs[0].Data) != 24 {
								t.Errorf("response: %+v", resp)
								return
							}
							var o [3]int64
							for i := range o {
								o[i] = int64(binary.LittleEndian.Uint64(resp.Outputs[0].Data[8*i:]))
							}
							mu.Lock()
							outs = append(outs, o)
							mu.Unlock()
						})
						r.BatchSize = 1
						r.Inputs = []backend.Input{{Name: "INPUT0", DataType: tensor.Int64, Shape: []int64{1, 1}, Data: make([]byte, 8)}}
						r.RequestedOutputs = []string{"OUTPUT0"}
						if err := in.Execute(context.Background(), []*backend.Request{r}); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			if len(outs) != 80 {
				t.Fatalf("%d responses, want 80", len(outs))
			}
			for _, o := range outs {
				if o[2] != 0 {
					t.Fatalf("%d executions of one instance overlapped another", o[2])
				}
				if tc.dedicated && o[1] != o[0] {
					t.Fatalf("Execute ran on thread %d, the instance was initialized on thread %d", o[1], o[0])
				}
			}
		})
	}
}
