package builtin

import (
	"context"
	"time"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func init() {
	backend.Register("repeat", func(context.Context) (backend.Backend, error) { return repeat{}, nil })
}

// repeat is Triton's repeat example backend: for a request with IN (INT32,
// n elements), DELAY (UINT32, n elements, milliseconds) and WAIT (UINT32,
// one element, milliseconds) it sends n responses, the i'th after waiting
// DELAY[i], with OUT = IN[i] and IDX = i, then the final flag. Execute
// returns WAIT milliseconds after taking the request, so with WAIT shorter
// than the delays one instance streams several requests at once and their
// responses interleave.
type repeat struct{}

func (repeat) Finalize() error { return nil }

func (repeat) NewModel(_ context.Context, m backend.ModelInfo) (backend.Model, error) {
	if err := requireDecoupled(m, "repeat"); err != nil {
		return nil, err
	}
	return decoupledModel{execute: repeatExecute}, nil
}

func repeatExecute(p *producers, ctx context.Context, r *backend.Request) error {
	in, delay, wait := r.Input("IN"), r.Input("DELAY"), r.Input("WAIT")
	if in == nil || delay == nil || wait == nil {
		return tritonerr.InvalidArgf("repeat backend: the request needs inputs IN, DELAY and WAIT")
	}
	values, delays, waits := tensor.Int32s(in.Data), uint32s(delay.Data), uint32s(wait.Data)
	if len(delays) != len(values) {
		return tritonerr.InvalidArgf("repeat backend: expected DELAY to have as many elements as IN (%d), got %d", len(values), len(delays))
	}
	if len(waits) != 1 {
		return tritonerr.InvalidArgf("repeat backend: expected WAIT to have one element, got %d", len(waits))
	}
	p.run(r, func(s *backend.ResponseSender) {
		for i, v := range values {
			if !p.sleep(r, time.Duration(delays[i])*time.Millisecond) {
				return
			}
			err := s.Send(0,
				backend.Output{Name: "OUT", DataType: tensor.Int32, Shape: []int64{1}, Data: tensor.AppendInt32s(nil, v)},
				backend.Output{Name: "IDX", DataType: tensor.Uint32, Shape: []int64{1}, Data: appendUint32(nil, uint32(i))})
			if err != nil {
				return
			}
		}
	})
	// WAIT holds the instance, as Triton's backend holds the request.
	t := time.NewTimer(time.Duration(waits[0]) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-r.Context().Done():
	}
	return nil
}
