package builtin

import (
	"context"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func init() {
	backend.Register("sequence_repeat", func(context.Context) (backend.Backend, error) { return seqRepeat{}, nil })
}

// seqRepeat is a decoupled sequence backend: a running sum over the
// sequence, streamed. For a request with IN (INT32, n elements) it sends n
// responses, the i'th with OUT = the sum of every IN element of the
// sequence so far (this request's up to i included) and IDX = i, then the
// final flag. The optional DELAY (UINT32, one element, milliseconds) paces
// the responses. START resets the sum; END forgets it; a request that is
// not READY (padding) gets nothing.
//
// The sums are computed in Execute, and the responses go out from a
// goroutine after Execute has returned: the instance takes the sequence's
// next request while the previous one still streams, as Triton's sequence
// batcher schedules a decoupled model's next request once the previous one
// is released.
type seqRepeat struct{}

func (seqRepeat) Finalize() error { return nil }

func (seqRepeat) NewModel(_ context.Context, m backend.ModelInfo) (backend.Model, error) {
	if err := requireDecoupled(m, "sequence_repeat"); err != nil {
		return nil, err
	}
	sb := m.Config.GetSequenceBatching()
	if sb == nil {
		return nil, tritonerr.InvalidArgf("sequence_repeat backend: model '%s' needs sequence_batching", m.Name)
	}
	sm := &seqRepeatModel{}
	for kind, dst := range map[inference.ModelSequenceBatching_Control_Kind]*string{
		inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START: &sm.start,
		inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END:   &sm.end,
		inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY: &sm.ready,
	} {
		c, err := modelconfig.BooleanControl(sb, m.Name, kind)
		if err != nil {
			return nil, err
		}
		if c != nil {
			*dst = c.Input
		}
	}
	return sm, nil
}

type seqRepeatModel struct{ start, end, ready string }

func (*seqRepeatModel) Finalize() error { return nil }

func (m *seqRepeatModel) NewInstance(context.Context, backend.InstanceInfo) (backend.Instance, error) {
	return &seqRepeatInstance{m: m, p: newProducers(), sums: map[backend.CorrelationID]int32{}}, nil
}

type seqRepeatInstance struct {
	m    *seqRepeatModel
	p    *producers
	sums map[backend.CorrelationID]int32 // by sequence; only Execute uses it
}

func (i *seqRepeatInstance) Finalize() error { return i.p.finalize() }

func (i *seqRepeatInstance) Execute(_ context.Context, reqs []*backend.Request) error {
	for _, r := range reqs {
		if err := i.execute(r); err != nil {
			_ = r.RespondError(err)
		}
	}
	return nil
}

func (i *seqRepeatInstance) execute(r *backend.Request) error {
	if i.m.ready != "" && !flag(r, i.m.ready) {
		return r.ResponseSender().SendFlags(backend.ResponseFinal) // padding
	}
	in := r.Input("IN")
	if in == nil {
		return tritonerr.InvalidArgf("sequence_repeat backend: the request needs input IN")
	}
	var delay time.Duration
	if d := r.Input("DELAY"); d != nil {
		v := uint32s(d.Data)
		if len(v) != 1 {
			return tritonerr.InvalidArgf("sequence_repeat backend: expected DELAY to have one element, got %d", len(v))
		}
		delay = time.Duration(v[0]) * time.Millisecond
	}
	id := r.CorrelationID
	if flag(r, i.m.start) {
		i.sums[id] = 0
	}
	values := tensor.Int32s(in.Data)
	sums := make([]int32, len(values))
	sum := i.sums[id]
	for k, v := range values {
		sum += v
		sums[k] = sum
	}
	i.sums[id] = sum
	if flag(r, i.m.end) {
		delete(i.sums, id)
	}
	shape := []int64{1}
	if r.BatchSize > 0 {
		shape = []int64{1, 1} // a batching model's outputs keep the batch dimension
	}
	i.p.run(r, func(s *backend.ResponseSender) {
		for k, v := range sums {
			if k > 0 && !i.p.sleep(r, delay) {
				return
			}
			err := s.Send(0,
				backend.Output{Name: "OUT", DataType: tensor.Int32, Shape: shape, Data: tensor.AppendInt32s(nil, v)},
				backend.Output{Name: "IDX", DataType: tensor.Uint32, Shape: shape, Data: appendUint32(nil, uint32(k))})
			if err != nil {
				return // the client is gone
			}
		}
	})
	return nil
}
