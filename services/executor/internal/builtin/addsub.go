package builtin

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func init() {
	backend.Register("addsub", func(context.Context) (backend.Backend, error) { return addSub{}, nil })
}

type addSub struct{}

func (addSub) Finalize() error { return nil }

func (addSub) NewModel(_ context.Context, m backend.ModelInfo) (backend.Model, error) {
	cfg := m.Config
	if len(cfg.GetInput()) != 2 || len(cfg.GetOutput()) != 2 {
		return nil, tritonerr.InvalidArgf("addsub backend: model '%s' must have 2 inputs and 2 outputs, has %d and %d",
			m.Name, len(cfg.GetInput()), len(cfg.GetOutput()))
	}
	dt := cfg.GetInput()[0].GetDataType()
	for _, t := range []inference.DataType{cfg.GetInput()[1].GetDataType(), cfg.GetOutput()[0].GetDataType(), cfg.GetOutput()[1].GetDataType()} {
		if t != dt {
			return nil, tritonerr.InvalidArgf("addsub backend: model '%s' inputs and outputs must all have the same datatype", m.Name)
		}
	}
	model := &addSubModel{
		dt:   tensor.FromConfig(dt),
		in0:  cfg.GetInput()[0].GetName(),
		in1:  cfg.GetInput()[1].GetName(),
		out0: cfg.GetOutput()[0].GetName(),
		out1: cfg.GetOutput()[1].GetName(),
	}
	if model.kernel = addSubKernel(model.dt); model.kernel == nil && model.dt != tensor.Bytes {
		return nil, tritonerr.Unsupportedf("addsub backend: model '%s': datatype %s is not supported", m.Name, model.dt)
	}
	return model, nil
}

type addSubModel struct {
	dt                   tensor.DataType
	in0, in1, out0, out1 string
	// kernel writes a+b into sum and a-b into diff, element-wise, for one
	// fixed-size datatype; nil for BYTES.
	kernel func(a, b, sum, diff []byte)
}

func (m *addSubModel) Finalize() error { return nil }

func (m *addSubModel) NewInstance(_ context.Context, i backend.InstanceInfo) (backend.Instance, error) {
	return &addSubInstance{m: m, stats: i.Stats}, nil
}

type addSubInstance struct {
	m     *addSubModel
	stats backend.StatsReporter
}

func (i *addSubInstance) Finalize() error { return nil }

func (i *addSubInstance) Execute(_ context.Context, reqs []*backend.Request) error {
	start := time.Now()
	total := 0
	var computeStart, computeEnd time.Time
	for _, r := range reqs {
		cs := time.Now()
		outs, err := i.m.compute(r)
		ce := time.Now()
		if computeStart.IsZero() {
			computeStart = cs
		}
		computeEnd = ce
		i.stats.ReportStatistics(r, err == nil, backend.Timestamps{ExecStart: start, ComputeStart: cs, ComputeEnd: ce, ExecEnd: time.Now()})
		total += max(1, r.BatchSize)
		if err != nil {
			r.RespondError(err)
			continue
		}
		r.Respond(outs...)
	}
	i.stats.ReportBatchStatistics(total, backend.Timestamps{ExecStart: start, ComputeStart: computeStart, ComputeEnd: computeEnd, ExecEnd: time.Now()})
	return nil
}

func (m *addSubModel) compute(r *backend.Request) ([]backend.Output, error) {
	a, b := r.Input(m.in0), r.Input(m.in1)
	if a == nil || b == nil {
		return nil, tritonerr.InvalidArgf("addsub backend: request must have inputs '%s' and '%s'", m.in0, m.in1)
	}
	if len(a.Shape) != len(b.Shape) {
		return nil, tritonerr.InvalidArgf("addsub backend: inputs '%s' and '%s' must have the same shape", m.in0, m.in1)
	}
	for k := range a.Shape {
		if a.Shape[k] != b.Shape[k] {
			return nil, tritonerr.InvalidArgf("addsub backend: inputs '%s' and '%s' must have the same shape", m.in0, m.in1)
		}
	}
	var sum, diff []byte
	if m.dt == tensor.Bytes {
		var err error
		if sum, diff, err = addSubStrings(m.in0, m.in1, a.Data, b.Data); err != nil {
			return nil, err
		}
	} else {
		sum, diff = make([]byte, len(a.Data)), make([]byte, len(a.Data))
		m.kernel(a.Data, b.Data, sum, diff)
	}
	var outs []backend.Output
	if r.OutputRequested(m.out0) {
		outs = append(outs, backend.Output{Name: m.out0, DataType: m.dt, Shape: a.Shape, Data: sum})
	}
	if r.OutputRequested(m.out1) {
		outs = append(outs, backend.Output{Name: m.out1, DataType: m.dt, Shape: a.Shape, Data: diff})
	}
	return outs, nil
}

// addSubStrings is Triton's simple_string model: BYTES elements holding
// decimal int32s in, their sum and difference as decimal strings out.
func addSubStrings(in0, in1 string, a, b []byte) (sum, diff []byte, err error) {
	ia, ib := tensor.BytesIter{Buf: a}, tensor.BytesIter{Buf: b}
	for ia.Next() {
		if !ib.Next() {
			return nil, nil, tritonerr.InvalidArgf("addsub backend: inputs '%s' and '%s' must have the same number of elements", in0, in1)
		}
		x, err := parseInt32(in0, ia.Elem())
		if err != nil {
			return nil, nil, err
		}
		y, err := parseInt32(in1, ib.Elem())
		if err != nil {
			return nil, nil, err
		}
		sum = appendDecimal(sum, int64(x+y))
		diff = appendDecimal(diff, int64(x-y))
	}
	return sum, diff, nil
}

func parseInt32(input string, s []byte) (int32, error) {
	v, err := strconv.ParseInt(string(s), 10, 32)
	if err != nil {
		return 0, tritonerr.InvalidArgf("addsub backend: element '%s' of input '%s' is not a decimal int32", s, input)
	}
	return int32(v), nil
}

// appendDecimal appends one BYTES element holding v in decimal.
func appendDecimal(dst []byte, v int64) []byte {
	var buf [20]byte
	return tensor.AppendBytesElement(dst, strconv.AppendInt(buf[:0], v, 10))
}

func addSubKernel(dt tensor.DataType) func(a, b, sum, diff []byte) {
	le := binary.LittleEndian
	switch dt {
	case tensor.Int8, tensor.Uint8:
		// Computed in int32 and cast back, like Triton's simple_int8: the
		// low byte of the wide result is the wrapped 8-bit result.
		return func(a, b, sum, diff []byte) {
			for k := range a {
				x, y := int32(int8(a[k])), int32(int8(b[k]))
				sum[k], diff[k] = byte(x+y), byte(x-y)
			}
		}
	case tensor.Int16, tensor.Uint16:
		return func(a, b, sum, diff []byte) {
			for k := 0; k+2 <= len(a); k += 2 {
				x, y := le.Uint16(a[k:]), le.Uint16(b[k:])
				le.PutUint16(sum[k:], x+y)
				le.PutUint16(diff[k:], x-y)
			}
		}
	case tensor.Int32, tensor.Uint32:
		return func(a, b, sum, diff []byte) {
			for k := 0; k+4 <= len(a); k += 4 {
				x, y := le.Uint32(a[k:]), le.Uint32(b[k:])
				le.PutUint32(sum[k:], x+y)
				le.PutUint32(diff[k:], x-y)
			}
		}
	case tensor.Int64, tensor.Uint64:
		return func(a, b, sum, diff []byte) {
			for k := 0; k+8 <= len(a); k += 8 {
				x, y := le.Uint64(a[k:]), le.Uint64(b[k:])
				le.PutUint64(sum[k:], x+y)
				le.PutUint64(diff[k:], x-y)
			}
		}
	case tensor.FP32:
		return func(a, b, sum, diff []byte) {
			for k := 0; k+4 <= len(a); k += 4 {
				x, y := math.Float32frombits(le.Uint32(a[k:])), math.Float32frombits(le.Uint32(b[k:]))
				le.PutUint32(sum[k:], math.Float32bits(x+y))
				le.PutUint32(diff[k:], math.Float32bits(x-y))
			}
		}
	case tensor.FP64:
		return func(a, b, sum, diff []byte) {
			for k := 0; k+8 <= len(a); k += 8 {
				x, y := math.Float64frombits(le.Uint64(a[k:])), math.Float64frombits(le.Uint64(b[k:]))
				le.PutUint64(sum[k:], math.Float64bits(x+y))
				le.PutUint64(diff[k:], math.Float64bits(x-y))
			}
		}
	}
	return nil
}
