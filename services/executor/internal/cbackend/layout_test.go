//go:build cgo

package cbackend

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"unsafe"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// TestLayoutReuse runs the C identity on a sequence of requests that
// share the last one's layout or differ from it in each part that decides
// it, and checks each response, what the backend was given, and that an
// execution lays its request out again in place (without newLayout)
// exactly when the layout is the same.
func TestLayoutReuse(t *testing.T) {
	in := cInstance64B(t, identityConfig("id", "nidentity")).(*cInstance)
	data := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	tests := []struct {
		name   string
		same   bool // as the request before
		id     string
		corr   backend.CorrelationID
		shape  []int64
		data   []byte
		params map[string]any
	}{
		{name: "first", id: "a", shape: []int64{1, 2}, data: data(8, 1)},
		{name: "new bytes", same: true, id: "a", shape: []int64{1, 2}, data: data(8, 2)},
		{name: "new dimensions", same: true, id: "a", shape: []int64{2, 1}, data: data(8, 3)},
		{name: "new numeric correlation id", same: true, id: "a", corr: backend.CorrelationUint(7), shape: []int64{2, 1}, data: data(8, 4)},
		{name: "longer id", id: "bb", shape: []int64{2, 1}, data: data(8, 5)},
		{name: "other id of that length", id: "cc", shape: []int64{2, 1}, data: data(8, 6)},
		{name: "string correlation id", id: "cc", corr: backend.CorrelationString("s"), shape: []int64{2, 1}, data: data(8, 7)},
		{name: "same string correlation id", same: true, id: "cc", corr: backend.CorrelationString("s"), shape: []int64{2, 1}, data: data(8, 8)},
		{name: "more bytes", id: "cc", shape: []int64{1, 4}, data: data(16, 9)},
		{name: "more dimensions", id: "cc", shape: []int64{1, 2, 2}, data: data(16, 10)},
		{name: "large input, not copied", id: "cc", shape: []int64{1, smallInput/4 + 1}, data: data(smallInput+4, 11)},
		{name: "large input again", same: true, id: "cc", shape: []int64{1, smallInput/4 + 1}, data: data(smallInput+4, 12)},
		// Neither lies in the request's memory: the layout is the same.
		{name: "empty input", same: true, id: "cc", shape: []int64{1, 0}, data: []byte{}},
		{name: "a parameter", id: "cc", shape: []int64{1, 2}, data: data(8, 13), params: map[string]any{"p": int64(1)}},
		{name: "the parameter again", id: "cc", shape: []int64{1, 2}, data: data(8, 14), params: map[string]any{"p": int64(1)}},
		{name: "none", id: "cc", shape: []int64{1, 2}, data: data(8, 15)},
		{name: "empty id", id: "", shape: []int64{1, 2}, data: data(8, 16)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *backend.Response
			r := backend.NewRequest(context.Background(), func(_ *backend.Request, resp *backend.Response) { got = resp })
			r.ID, r.CorrelationID, r.Parameters = tt.id, tt.corr, tt.params
			r.Inputs = []backend.Input{{Name: "INPUT0", DataType: tensor.FP32, Shape: tt.shape, Data: tt.data}}
			r.RequestedOutputs = []string{"OUTPUT0"}
			in.layouts = in.layouts[:0] // a fresh layout fills it again
			if err := in.Execute(context.Background(), []*backend.Request{r}); err != nil {
				t.Fatal(err)
			}
			if got == nil || got.Err != nil || len(got.Outputs) != 1 {
				t.Fatalf("response %+v", got)
			}
			if o := got.Outputs[0]; o.Name != "OUTPUT0" || !bytes.Equal(o.Data, tt.data) || !slices.Equal(o.Shape, tt.shape) {
				t.Fatalf("output %s %v of %d bytes, want OUTPUT0 %v of the input's %d", o.Name, o.Shape, len(o.Data), tt.shape, len(tt.data))
			}
			c := in.laid[0]
			if reused := len(in.layouts) == 0; reused != tt.same {
				t.Errorf("laid out again in place: %v, want %v", reused, tt.same)
			}
			// What the backend was given, still in the instance's arena.
			if id := cString(unsafe.Pointer(c.id)); id != tt.id {
				t.Errorf("request id %q, want %q", id, tt.id)
			}
			if s, _ := tt.corr.StringID(); tt.corr.IsString() && (!bool(c.correlation_is_string) || cString(unsafe.Pointer(c.correlation_id_string)) != s) {
				t.Errorf("correlation id not the string %q", s)
			}
			if u, _ := tt.corr.Uint64(); !tt.corr.IsString() && (bool(c.correlation_is_string) || uint64(c.correlation_id) != u) {
				t.Errorf("correlation id %d, want %d", c.correlation_id, u)
			}
			if int(c.n_params) != len(tt.params) {
				t.Errorf("%d parameters, want %d", c.n_params, len(tt.params))
			}
		})
	}
}

// TestLayoutReuseBatch checks a batch laid out again in place: each
// request's response is its own.
func TestLayoutReuseBatch(t *testing.T) {
	in := cInstance64B(t, identityConfig("id", "nidentity")).(*cInstance)
	for round := range 3 {
		got := make([]*backend.Response, 3)
		reqs := make([]*backend.Request, 3)
		for i := range reqs {
			r := backend.NewRequest(context.Background(), func(_ *backend.Request, resp *backend.Response) { got[i] = resp })
			r.ID = "r"
			r.Inputs = []backend.Input{{Name: "INPUT0", DataType: tensor.FP32, Shape: []int64{1, int64(i + 1)}, Data: bytes.Repeat([]byte{byte(10*round + i)}, 4*(i+1))}}
			r.RequestedOutputs = []string{"OUTPUT0"}
			reqs[i] = r
		}
		in.layouts = in.layouts[:0]
		if err := in.Execute(context.Background(), reqs); err != nil {
			t.Fatal(err)
		}
		if reused := len(in.layouts) == 0; reused != (round > 0) {
			t.Errorf("round %d: laid out again in place: %v", round, reused)
		}
		for i, resp := range got {
			if resp == nil || resp.Err != nil || len(resp.Outputs) != 1 || !bytes.Equal(resp.Outputs[0].Data, reqs[i].Inputs[0].Data) {
				t.Fatalf("round %d: request %d's response %+v", round, i, resp)
			}
		}
	}
}

// cString reads the NUL-terminated string at p.
func cString(p unsafe.Pointer) string {
	n := 0
	for *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}
