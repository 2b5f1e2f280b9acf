package builtin

import (
	"context"
	"strconv"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func init() {
	backend.Register("square", func(context.Context) (backend.Backend, error) { return square{}, nil })
}

// square is Triton's square example backend: a request whose IN (INT32,
// one element) holds n gets n responses, each with OUT = n, then the final
// flag; n = 0 gets the final flag alone. The model parameter out_elements
// (default 1) makes OUT that many copies of n, for models that stream
// large responses (OUT's dims must then allow it, e.g. [ -1 ]).
type square struct{}

func (square) Finalize() error { return nil }

func (square) NewModel(_ context.Context, m backend.ModelInfo) (backend.Model, error) {
	if err := requireDecoupled(m, "square"); err != nil {
		return nil, err
	}
	elems := 1
	if p, ok := m.Config.GetParameters()["out_elements"]; ok {
		n, err := strconv.Atoi(p.GetStringValue())
		if err != nil || n < 1 {
			return nil, tritonerr.InvalidArgf("square backend: model '%s': parameter 'out_elements' must be a positive number, got '%s'", m.Name, p.GetStringValue())
		}
		elems = n
	}
	return decoupledModel{execute: func(p *producers, ctx context.Context, r *backend.Request) error {
		return squareExecute(p, r, elems)
	}}, nil
}

func squareExecute(p *producers, r *backend.Request, elems int) error {
	in := r.Input("IN")
	if in == nil {
		return tritonerr.InvalidArgf("square backend: the request needs input IN")
	}
	v := tensor.Int32s(in.Data)
	if len(v) != 1 {
		return tritonerr.InvalidArgf("square backend: expected IN to have one element, got %d", len(v))
	}
	n := v[0]
	if n < 0 {
		return tritonerr.InvalidArgf("square backend: IN must not be negative, got %d", n)
	}
	p.run(r, func(s *backend.ResponseSender) {
		for range n {
			out := make([]byte, 0, 4*elems)
			for range elems {
				out = tensor.AppendInt32s(out, n)
			}
			if err := s.Send(0, backend.Output{Name: "OUT", DataType: tensor.Int32, Shape: []int64{int64(elems)}, Data: out}); err != nil {
				return // the client is gone
			}
		}
	})
	return nil
}
