package builtin

import (
	"context"
	"encoding/binary"
	"strconv"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// The sequence backends of Triton's examples and QA models, for models with
// a sequence batcher, one INT32 input and one INT32 output of the same
// shape:
//
//   - "sequence" (simple_sequence, QA custom_sequence_int32):
//     OUTPUT = READY x (INPUT + START);
//   - "dyna_sequence" (simple_dyna_sequence, custom_dyna_sequence_int32)
//     with a numeric CORRID: OUTPUT = READY x (INPUT + START + END x CORRID);
//     with a STRING CORRID (simple_string_dyna_sequence) an accumulator per
//     sequence: START sets it to INPUT, later requests add INPUT, END adds
//     the id's numeric value (0 when it is not a number).
//
// Control inputs may use any *_false_true form; a value counts as true when
// it is not zero. The parameter "execute_delay_ms" delays each execution,
// once per batch, for tests.
func init() {
	backend.Register("sequence", func(context.Context) (backend.Backend, error) { return seqBackend{dyna: false}, nil })
	backend.Register("dyna_sequence", func(context.Context) (backend.Backend, error) { return seqBackend{dyna: true}, nil })
}

type seqBackend struct{ dyna bool }

func (seqBackend) Finalize() error { return nil }

type seqModel struct {
	dyna                      bool
	input, output             string
	start, end, ready, corrid string
	corridType                tensor.DataType
	delay                     time.Duration
}

func (b seqBackend) NewModel(_ context.Context, m backend.ModelInfo) (backend.Model, error) {
	cfg := m.Config
	sb := cfg.GetSequenceBatching()
	if sb == nil || len(cfg.GetInput()) != 1 || len(cfg.GetOutput()) != 1 {
		return nil, tritonerr.InvalidArgf("sequence backend: model '%s' needs sequence_batching, one input and one output", m.Name)
	}
	sm := &seqModel{dyna: b.dyna, input: cfg.GetInput()[0].GetName(), output: cfg.GetOutput()[0].GetName()}
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
	c, err := modelconfig.CorrIDControl(sb, m.Name)
	if err != nil {
		return nil, err
	}
	if c != nil {
		sm.corrid, sm.corridType = c.Input, tensor.FromConfig(c.DataType)
	}
	if p, ok := cfg.GetParameters()["execute_delay_ms"]; ok {
		ms, err := strconv.ParseUint(p.GetStringValue(), 10, 32)
		if err != nil {
			return nil, tritonerr.InvalidArgf("sequence backend: model '%s': parameter 'execute_delay_ms' must be a number of milliseconds, got '%s'", m.Name, p.GetStringValue())
		}
		sm.delay = time.Duration(ms) * time.Millisecond
	}
	return sm, nil
}

func (m *seqModel) Finalize() error { return nil }

func (m *seqModel) NewInstance(context.Context, backend.InstanceInfo) (backend.Instance, error) {
	inst := &seqInstance{m: m, acc: map[string]int32{}}
	if m.delay > 0 {
		inst.clock = newComputeClock()
	}
	return inst, nil
}

type seqInstance struct {
	m     *seqModel
	acc   map[string]int32 // string-id accumulators, by sequence
	clock *computeClock    // times the delay, when there is one
}

func (i *seqInstance) Finalize() error {
	i.clock.close()
	return nil
}

// flag reads a boolean control: true when its first element is not zero.
func flag(r *backend.Request, name string) bool {
	if name == "" {
		return false
	}
	in := r.Input(name)
	if in == nil {
		return false
	}
	for _, b := range in.Data {
		if b != 0 {
			return true
		}
	}
	return false
}

func (i *seqInstance) corrid(r *backend.Request) (num int64, str string) {
	in := r.Input(i.m.corrid)
	if in == nil {
		return 0, ""
	}
	switch i.m.corridType {
	case tensor.Bytes:
		if len(in.Data) >= 4 {
			n := binary.LittleEndian.Uint32(in.Data)
			if int(n) <= len(in.Data)-4 {
				str = string(in.Data[4 : 4+n])
			}
		}
		v, _ := strconv.ParseInt(str, 10, 64)
		return v, str
	case tensor.Int32:
		if len(in.Data) >= 4 {
			return int64(int32(binary.LittleEndian.Uint32(in.Data))), ""
		}
	case tensor.Uint32:
		if len(in.Data) >= 4 {
			return int64(binary.LittleEndian.Uint32(in.Data)), ""
		}
	default:
		if len(in.Data) >= 8 {
			return int64(binary.LittleEndian.Uint64(in.Data)), ""
		}
	}
	return 0, ""
}

func (i *seqInstance) Execute(ctx context.Context, reqs []*backend.Request) error {
	if i.m.delay > 0 {
		if err := compute(ctx, i.clock, i.m.delay); err != nil {
			return err
		}
	}
	for _, r := range reqs {
		in := r.Input(i.m.input)
		if in == nil || len(in.Data) < 4 {
			r.RespondError(tritonerr.InvalidArgf("sequence backend: request has no INT32 input '%s'", i.m.input))
			continue
		}
		x := int32(binary.LittleEndian.Uint32(in.Data))
		start, end := flag(r, i.m.start), flag(r, i.m.end)
		ready := i.m.ready == "" || flag(r, i.m.ready)
		var out int32
		switch {
		case !ready:
		case i.m.dyna && i.m.corridType == tensor.Bytes:
			num, key := i.corrid(r)
			if start {
				i.acc[key] = x
			} else {
				i.acc[key] += x
			}
			if end {
				i.acc[key] += int32(num)
			}
			out = i.acc[key]
			if end {
				delete(i.acc, key)
			}
		case i.m.dyna:
			num, _ := i.corrid(r)
			out = x + b2i(start)
			if end {
				out += int32(num)
			}
		default:
			out = x + b2i(start)
		}
		data := make([]byte, len(in.Data))
		for k := 0; k+4 <= len(data); k += 4 {
			binary.LittleEndian.PutUint32(data[k:], uint32(out))
		}
		if r.OutputRequested(i.m.output) {
			r.Respond(backend.Output{Name: i.m.output, DataType: tensor.Int32, Shape: in.Shape, Data: data})
		} else {
			r.Respond()
		}
	}
	return nil
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}
