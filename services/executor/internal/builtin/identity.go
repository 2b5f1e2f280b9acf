package builtin

import (
	"context"
	"strconv"
	"time"

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
	return model, nil
}

type identityModel struct {
	pairs [][2]string // input name, output name
	delay time.Duration
}

func (m *identityModel) Finalize() error { return nil }

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
		var outs []backend.Output
		for _, p := range i.m.pairs {
			in := r.Input(p[0])
			if in == nil || !r.OutputRequested(p[1]) {
				continue // an optional input not given, or an output not wanted
			}
			// The input's bytes are the output's: no copy. They stay valid
			// until the executor has encoded the response.
			outs = append(outs, backend.Output{Name: p[1], DataType: in.DataType, Shape: in.Shape, Data: in.Data})
		}
		i.stats.ReportStatistics(r, true, backend.Timestamps{ExecStart: start, ComputeStart: start, ComputeEnd: computeEnd, ExecEnd: time.Now()})
		total += max(1, r.BatchSize)
		r.Respond(outs...)
	}
	i.stats.ReportBatchStatistics(total, backend.Timestamps{ExecStart: start, ComputeStart: start, ComputeEnd: computeEnd, ExecEnd: time.Now()})
	return nil
}
