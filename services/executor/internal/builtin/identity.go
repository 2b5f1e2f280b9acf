package builtin

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func init() {
	backend.Register("identity", func(context.Context) (backend.Backend, error) { return identity{}, nil })
}

type identity struct{}

func (identity) Finalize() error { return nil }

func (identity) NewModel(_ context.Context, m backend.ModelInfo) (backend.Model, error) {
	cfg := m.Config
	ins, outs := cfg.GetInput(), cfg.GetOutput()
	if len(ins) != len(outs) || len(ins) == 0 {
		return nil, tritonerr.InvalidArgf("identity backend: model '%s' must have as many outputs as inputs (at least one), has %d inputs and %d outputs",
			m.Name, len(ins), len(outs))
	}
	model := &identityModel{}
	for k := range ins {
		if ins[k].GetDataType() != outs[k].GetDataType() {
			return nil, tritonerr.InvalidArgf("identity backend: model '%s': input '%s' and output '%s' must have the same datatype",
				m.Name, ins[k].GetName(), outs[k].GetName())
		}
		model.pairs = append(model.pairs, [2]string{ins[k].GetName(), outs[k].GetName()})
	}
	if p, ok := cfg.GetParameters()["execute_delay_ms"]; ok {
		ms, err := strconv.ParseUint(p.GetStringValue(), 10, 32)
		if err != nil {
			return nil, tritonerr.InvalidArgf("identity backend: model '%s': parameter 'execute_delay_ms' must be a number of milliseconds, got '%s'",
				m.Name, p.GetStringValue())
		}
		model.delay = time.Duration(ms) * time.Millisecond
	}
	model.repeat = 1
	if p, ok := cfg.GetParameters()["output_repeat"]; ok {
		n, err := strconv.ParseUint(p.GetStringValue(), 10, 31)
		if err != nil || n == 0 {
			return nil, tritonerr.InvalidArgf("identity backend: model '%s': parameter 'output_repeat' must be a positive number, got '%s'",
				m.Name, p.GetStringValue())
		}
		for _, in := range ins {
			if n > 1 && in.GetDataType() == inference.DataType_TYPE_STRING {
				return nil, tritonerr.InvalidArgf("identity backend: model '%s': parameter 'output_repeat' does not take the BYTES input '%s'",
					m.Name, in.GetName())
			}
		}
		model.repeat = int(n)
	}
	return model, nil
}

type identityModel struct {
	pairs  [][2]string // input name, output name
	delay  time.Duration
	repeat int // output_repeat: each row of an input, this many times
}

func (m *identityModel) Finalize() error { return nil }

// outputs are r's outputs: each input as it is or, with output_repeat,
// each of its rows (the last dimension) repeated.
func (m *identityModel) outputs(r *backend.Request) ([]backend.Output, error) {
	var outs []backend.Output
	for _, p := range m.pairs {
		in := r.Input(p[0])
		if in == nil || !r.OutputRequested(p[1]) {
			continue // an optional input not given, or an output not wanted
		}
		if m.repeat == 1 {
			// The input's bytes are the output's: no copy. They stay valid
			// until the executor has encoded the response.
			outs = append(outs, backend.Output{Name: p[1], DataType: in.DataType, Shape: in.Shape, Data: in.Data})
			continue
		}
		out, err := repeatRows(in, m.repeat)
		if err != nil {
			return nil, err
		}
		out.Name = p[1]
		outs = append(outs, out)
	}
	return outs, nil
}

// repeatMaxBytes bounds an output that output_repeat makes, so that a large
// input cannot make the executor allocate without bound.
const repeatMaxBytes = 1 << 30

// repeatRows is in with its last dimension n times longer: each row (the
// elements of the last dimension) written n times in a row, so [[1 2]]
// repeated 3 times is [[1 2 1 2 1 2]]. A small input makes a large output
// this way, at the cost of writing it.
func repeatRows(in *backend.Input, n int) (backend.Output, error) {
	if len(in.Shape) == 0 {
		return backend.Output{}, tritonerr.InvalidArgf("identity backend: input '%s' has no dimension to repeat (output_repeat)", in.Name)
	}
	shape := slices.Clone(in.Shape)
	last := shape[len(shape)-1]
	shape[len(shape)-1] = last * int64(n)
	rows := int64(1)
	for _, d := range in.Shape[:len(in.Shape)-1] {
		rows *= d
	}
	if rows == 0 || last == 0 {
		return backend.Output{DataType: in.DataType, Shape: shape, Data: []byte{}}, nil
	}
	if int64(len(in.Data))*int64(n) > repeatMaxBytes {
		return backend.Output{}, tritonerr.InvalidArgf("identity backend: input '%s' repeated %d times would be %d bytes, more than %d (output_repeat)",
			in.Name, n, int64(len(in.Data))*int64(n), int64(repeatMaxBytes))
	}
	row := len(in.Data) / int(rows)
	data := make([]byte, len(in.Data)*n)
	w := 0
	for k := range int(rows) {
		src := in.Data[k*row : (k+1)*row]
		// Doubling copies: log(n) calls instead of n.
		start := w
		w += copy(data[w:], src)
		for w-start < row*n {
			w += copy(data[w:start+row*n], data[start:w])
		}
	}
	return backend.Output{DataType: in.DataType, Shape: shape, Data: data}, nil
}

func (m *identityModel) NewInstance(_ context.Context, i backend.InstanceInfo) (backend.Instance, error) {
	inst := &identityInstance{m: m, stats: i.Stats}
	if m.delay > 0 {
		inst.clock = newComputeClock()
	}
	return inst, nil
}

type identityInstance struct {
	m     *identityModel
	stats backend.StatsReporter
	clock *computeClock // times the delay, when there is one
}

func (i *identityInstance) Finalize() error {
	i.clock.close()
	return nil
}

func (i *identityInstance) Execute(ctx context.Context, reqs []*backend.Request) error {
	start := time.Now()
	// The delay stands for the model's compute: once per execution, however
	// many requests the batch holds, so that batching pays off as it does
	// on a real accelerator.
	if i.m.delay > 0 {
		if err := compute(ctx, i.clock, i.m.delay); err != nil {
			return err
		}
	}
	computeEnd := time.Now()
	total := 0
	for _, r := range reqs {
		outs, err := i.m.outputs(r)
		end := time.Now()
		ts := backend.Timestamps{ExecStart: start, ComputeStart: start, ComputeEnd: computeEnd, ExecEnd: end}
		if i.m.repeat > 1 {
			ts.ComputeEnd = end // writing the repeated rows is the compute
		}
		i.stats.ReportStatistics(r, err == nil, ts)
		total += max(1, r.BatchSize)
		if err != nil {
			r.RespondError(err)
			continue
		}
		r.Respond(outs...)
	}
	i.stats.ReportBatchStatistics(total, backend.Timestamps{ExecStart: start, ComputeStart: start, ComputeEnd: computeEnd, ExecEnd: time.Now()})
	return nil
}
