//go:build cgo

package cbackend

import (
	"context"
	"runtime"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// BenchmarkExecute64B is one 64-byte request through the C identity
// backend, without transport: the bridge's own cost per execution.
func BenchmarkExecute64B(b *testing.B) {
	dir, stub := buildBackends(b)
	l := NewLoader(Config{Directory: dir, ServerLibrary: stub})
	f, _ := l.Find("nidentity", b.TempDir(), 1)
	be, err := l.Factory(f)(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer be.Finalize()
	m, err := be.NewModel(context.Background(), backend.ModelInfo{Name: "id", Version: 1, Dir: b.TempDir(), Config: identityConfig("id", "nidentity")})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Finalize()
	in, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "id_0", Kind: inference.ModelInstanceGroup_KIND_CPU, Stats: &statsRecorder{}})
	if err != nil {
		b.Fatal(err)
	}
	defer in.Finalize()
	data := make([]byte, 64)
	b.ResetTimer()
	calls := runtime.NumCgoCall()
	for range b.N {
		r := backend.NewRequest(context.Background(), func(*backend.Request, *backend.Response) {})
		r.BatchSize = 1
		r.Inputs = []backend.Input{{Name: "INPUT0", DataType: tensor.FP32, Shape: []int64{1, 16}, Data: data}}
		r.RequestedOutputs = []string{"OUTPUT0"}
		if err := in.Execute(context.Background(), []*backend.Request{r}); err != nil {
			b.Fatal(err)
		}
	}
	// Calls from Go into C, callbacks' included: a steadier measure of the
	// bridge's cost than time on a busy machine.
	b.ReportMetric(float64(runtime.NumCgoCall()-calls)/float64(b.N), "cgo-calls/op")
}
