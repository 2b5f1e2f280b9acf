//go:build cgo

package cbackend

import (
	"context"
	"runtime"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
	_ "github.com/nereid-io/nereid/services/executor/internal/builtin" // the built-in Go identity, the yardstick
)

// BenchmarkExecute64B is one 64-byte request through the C identity
// backend in its plain mode (the Go identity's work: no response
// parameter, no custom metric), without transport: the bridge's own cost
// per execution. BenchmarkExecute64BGo runs the built-in Go identity in the
// same loop, so that the two are compared side by side (instructions under
// callgrind, allocations per op).
func BenchmarkExecute64B(b *testing.B) {
	cfg := identityConfig("id", "nidentity")
	cfg.Parameters = map[string]*inference.ModelParameter{"plain": {StringValue: "true"}}
	benchExecute(b, cInstance64B(b, cfg))
}

// BenchmarkExecute64BFull is BenchmarkExecute64B with the C identity's
// response parameter and custom metric (a call into Go per execution).
func BenchmarkExecute64BFull(b *testing.B) {
	benchExecute(b, cInstance64B(b, identityConfig("id", "nidentity")))
}

// BenchmarkExecute64BGo is the built-in Go identity in
// BenchmarkExecute64B's loop.
func BenchmarkExecute64BGo(b *testing.B) {
	cfg := identityConfig("id", "identity")
	f, ok := backend.Lookup("identity")
	if !ok {
		b.Fatal("the built-in identity backend is not registered")
	}
	be, err := f(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	m, err := be.NewModel(context.Background(), backend.ModelInfo{Name: "id", Version: 1, Dir: b.TempDir(), Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	in, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "id_0", Kind: inference.ModelInstanceGroup_KIND_CPU, Stats: discardStats{}})
	if err != nil {
		b.Fatal(err)
	}
	benchExecute(b, in)
}

func cInstance64B(b testing.TB, cfg *inference.ModelConfig) backend.Instance {
	dir, stub := buildBackends(b)
	l := NewLoader(Config{Directory: dir, ServerLibrary: stub})
	f, _ := l.Find("nidentity", b.TempDir(), 1)
	be, err := l.Factory(f)(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Finalize() })
	m, err := be.NewModel(context.Background(), backend.ModelInfo{Name: "id", Version: 1, Dir: b.TempDir(), Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Finalize() })
	in, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "id_0", Kind: inference.ModelInstanceGroup_KIND_CPU, Stats: discardStats{}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Finalize() })
	return in
}

// discardStats takes statistics and keeps nothing: the loops measure the
// backends, not a recorder's growing slices. It takes SteadyStamps, as the
// executor's statistics do.
type discardStats struct{}

func (discardStats) ReportStatistics(*backend.Request, bool, backend.Timestamps)         {}
func (discardStats) ReportBatchStatistics(int, backend.Timestamps)                       {}
func (discardStats) ReportSteadyStatistics(*backend.Request, bool, backend.SteadyStamps) {}
func (discardStats) ReportSteadyBatchStatistics(int, backend.SteadyStamps)               {}

func benchExecute(b *testing.B, in backend.Instance) {
	data := make([]byte, 64)
	b.ReportAllocs()
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
	// Calls from Go into C (callbacks from C into Go are not counted:
	// callgrind's call counts of runtime.cgocallbackg show those): a
	// steadier measure of the bridge's cost than time on a busy machine.
	b.ReportMetric(float64(runtime.NumCgoCall()-calls)/float64(b.N), "cgo-calls/op")
}
