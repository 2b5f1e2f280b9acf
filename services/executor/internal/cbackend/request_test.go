//go:build cgo

package cbackend

import (
	"context"
	"testing"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// TestLayoutSize checks that size, which executions use to size their
// arena, ends where place's own pass over the request ends, from every
// alignment of the offset the request starts at.
func TestLayoutSize(t *testing.T) {
	small := make([]byte, 13)
	large := make([]byte, smallInput+1)
	in := func(name string, data []byte, shape ...int64) backend.Input {
		return backend.Input{Name: name, DataType: tensor.Uint8, Shape: shape, Data: data}
	}
	tests := []struct {
		name string
		gpu  bool
		set  func(r *backend.Request)
	}{
		{"empty", false, func(*backend.Request) {}},
		{"id and one small input", false, func(r *backend.Request) {
			r.ID = "req-7"
			r.Inputs = []backend.Input{in("INPUT0", small, 1, 13)}
			r.RequestedOutputs = []string{"OUTPUT0"}
		}},
		{"string correlation id", false, func(r *backend.Request) {
			r.CorrelationID = backend.CorrelationString("sequence-a")
			r.Inputs = []backend.Input{in("A", small, 13)}
		}},
		{"scalar, empty and large inputs", false, func(r *backend.Request) {
			r.Inputs = []backend.Input{in("S", small[:1]), in("EMPTY", nil, 0), in("LARGE", large, int64(len(large)))}
			r.RequestedOutputs = []string{"z", "a", "mm"}
		}},
		{"device input on a GPU instance", true, func(r *backend.Request) {
			x := in("DEV", small, 13)
			x.Device = &backend.Device{Ptr: 1 << 20}
			r.Inputs = []backend.Input{x, in("HOST", small, 13)}
		}},
		{"device input on a CPU instance", false, func(r *backend.Request) {
			x := in("DEV", small, 13)
			x.Device = &backend.Device{Ptr: 1 << 20}
			r.Inputs = []backend.Input{x}
		}},
		{"parameters", false, func(r *backend.Request) {
			r.Parameters = map[string]any{"b": true, "i": int64(3), "s": "text", "f": 1.5}
			r.Inputs = []backend.Input{in("INPUT0", small, 13)}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := backend.NewRequest(context.Background(), nil)
			tt.set(r)
			l := newLayout(r, tt.gpu)
			for off := uintptr(16); off < 32; off++ {
				a := arena{off: off}
				l.place(&a)
				if got := l.size(off); got != a.off {
					t.Fatalf("size(%d) = %d, place ends at %d", off, got, a.off)
				}
			}
		})
	}
}
