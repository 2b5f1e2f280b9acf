//go:build cgo

package cbackend

import (
	"context"
	"testing"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// TestRequestObjectReuse checks that an instance reuses a request's Go
// object only when nothing but its execution can hold it: never after a
// call into Go found it by its handle.
func TestRequestObjectReuse(t *testing.T) {
	for _, looked := range []bool{false, true} {
		cr := &cRequest{}
		cr.h = register(cr)
		if looked {
			objects.get(cr.h) // as a call into Go on the request does
		}
		cr.disposeGo()
		var in cInstance
		in.keepRequests([]*cRequest{cr})
		if kept := len(in.spare) == 1; kept == looked {
			t.Fatalf("found by a lookup: %v; kept for reuse: %v", looked, kept)
		}
	}

	in := cInstance64B(t, identityConfig("id", "nidentity")).(*cInstance)
	execute := func() {
		t.Helper()
		r := backend.NewRequest(context.Background(), func(*backend.Request, *backend.Response) {})
		r.Inputs = []backend.Input{{Name: "INPUT0", DataType: tensor.FP32, Shape: []int64{1, 2}, Data: make([]byte, 8)}}
		r.RequestedOutputs = []string{"OUTPUT0"}
		if err := in.Execute(context.Background(), []*backend.Request{r}); err != nil {
			t.Fatal(err)
		}
	}
	execute()
	if len(in.spare) != 1 {
		t.Fatalf("after an execution answered in C, %d request objects kept, want 1", len(in.spare))
	}
	kept := in.spare[0]
	if *kept != (cRequest{}) {
		t.Fatal("a kept request object still refers to its request")
	}
	execute()
	if len(in.spare) != 1 || in.spare[0] != kept {
		t.Fatal("the next execution did not reuse the kept request object")
	}
}
