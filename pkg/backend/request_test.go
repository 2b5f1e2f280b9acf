package backend

import (
	"context"
	"errors"
	"testing"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func TestRespondOnce(t *testing.T) {
	tests := []struct {
		name  string
		first func(r *Request) error
		want  *Response
	}{
		{"outputs", func(r *Request) error { return r.Respond(Output{Name: "OUT"}) }, &Response{Outputs: []Output{{Name: "OUT"}}}},
		{"triton error keeps kind", func(r *Request) error { return r.RespondError(tritonerr.InvalidArgf("bad")) },
			&Response{Err: &tritonerr.Error{Kind: tritonerr.InvalidArg, Msg: "bad"}}},
		{"plain error is internal", func(r *Request) error { return r.RespondError(errors.New("boom")) },
			&Response{Err: &tritonerr.Error{Kind: tritonerr.Internal, Msg: "boom"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []*Response
			r := NewRequest(context.Background(), func(_ *Request, resp *Response) { got = append(got, resp) })
			if err := tt.first(r); err != nil {
				t.Fatal(err)
			}
			if err := r.Respond(); err != ErrAlreadyResponded {
				t.Errorf("second Respond: %v", err)
			}
			if err := r.RespondError(errors.New("again")); err != ErrAlreadyResponded {
				t.Errorf("second RespondError: %v", err)
			}
			if len(got) != 1 || !r.Responded() {
				t.Fatalf("%d completions", len(got))
			}
			if (got[0].Err == nil) != (tt.want.Err == nil) || (got[0].Err != nil && *got[0].Err != *tt.want.Err) ||
				len(got[0].Outputs) != len(tt.want.Outputs) {
				t.Errorf("got %+v, want %+v", got[0], tt.want)
			}
		})
	}
}

func TestCorrelationID(t *testing.T) {
	u := CorrelationUint(42)
	if v, err := u.Uint64(); v != 42 || err != nil || u.IsString() || u.IsZero() || u.String() != "42" {
		t.Errorf("uint id: %v %v", v, err)
	}
	if _, err := u.StringID(); err == nil || err.Error() != "correlation ID in request is not a string" {
		t.Errorf("StringID of uint: %v", err)
	}
	s := CorrelationString("abc")
	if v, err := s.StringID(); v != "abc" || err != nil || !s.IsString() {
		t.Errorf("string id: %v %v", v, err)
	}
	if _, err := s.Uint64(); err == nil || err.Error() != "correlation ID in request is not an unsigned int" {
		t.Errorf("Uint64 of string: %v", err)
	}
	if !(CorrelationID{}).IsZero() || !CorrelationString("").IsZero() {
		t.Error("zero ids")
	}
}

func TestRequestAccessors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := NewRequest(ctx, nil)
	r.Inputs = []Input{{Name: "A"}, {Name: "B"}}
	r.RequestedOutputs = []string{"OUT"}
	if r.Input("B") != &r.Inputs[1] || r.Input("C") != nil {
		t.Error("Input lookup")
	}
	if !r.OutputRequested("OUT") || r.OutputRequested("X") {
		t.Error("OutputRequested")
	}
	if r.IsCancelled() {
		t.Error("cancelled early")
	}
	cancel()
	if !r.IsCancelled() {
		t.Error("not cancelled")
	}
}

func TestRegisterPanics(t *testing.T) {
	f := func(context.Context) (Backend, error) { return nil, nil }
	Register("test-dup", f)
	defer func() {
		if recover() == nil {
			t.Error("duplicate Register did not panic")
		}
	}()
	Register("test-dup", f)
}
