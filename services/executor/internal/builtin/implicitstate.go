package builtin

import (
	"context"
	"encoding/binary"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// "implicit_state": an accumulator kept in the server's implicit state
// (sequence_batching.state with one state of the input's type), like the
// backend of Triton's implicit-state tests; INT32 adds, BYTES concatenates
// element-wise:
//
//	OUTPUT_STATE = INPUT + INPUT_STATE;  OUTPUT = OUTPUT_STATE
//
// where INPUT_STATE is the state's input_name and OUTPUT_STATE its
// output_name. The state takes INPUT's shape (variable dims); an element
// the previous state lacks counts as 0, so a sequence that starts from a
// zero state starts with OUTPUT = INPUT, and one that starts from an
// initial_state data file adds to it. An optional INT32 input TEST_CASE
// selects Triton's test cases: 0 (or absent) the above, 1 no state update
// (OUTPUT = INPUT + INPUT_STATE, the state stays). The model parameter
// "state_name" makes the backend ask for a state of that name instead,
// for testing the backend API's errors. A model without state and without
// that parameter keeps no state (OUTPUT = INPUT): the same model, stateless,
// for comparisons. INPUT is the config's first input.
func init() {
	backend.Register("implicit_state", func(context.Context) (backend.Backend, error) { return implicitState{}, nil })
}

type implicitState struct{}

func (implicitState) Finalize() error { return nil }

type implicitStateModel struct {
	name, in        string // the model, its (first) input
	stateIn, output string // state input, and the name asked of StateNew
	out             string // the model's output
}

func (implicitState) NewModel(_ context.Context, m backend.ModelInfo) (backend.Model, error) {
	cfg := m.Config
	if len(cfg.GetInput()) == 0 || len(cfg.GetOutput()) == 0 {
		return nil, tritonerr.InvalidArgf("implicit_state backend: model '%s' needs an input and an output", m.Name)
	}
	im := &implicitStateModel{name: m.Name, in: cfg.GetInput()[0].GetName(), out: cfg.GetOutput()[0].GetName(), stateIn: "INPUT_STATE", output: "OUTPUT_STATE"}
	if st := cfg.GetSequenceBatching().GetState(); len(st) == 0 {
		im.output = "" // no state: OUTPUT = INPUT
	} else {
		im.stateIn, im.output = st[0].GetInputName(), st[0].GetOutputName()
		if im.out == im.output && len(cfg.GetOutput()) > 1 {
			im.out = cfg.GetOutput()[1].GetName()
		}
	}
	if p, ok := cfg.GetParameters()["state_name"]; ok {
		im.output = p.GetStringValue()
	}
	return im, nil
}

func (im *implicitStateModel) NewInstance(context.Context, backend.InstanceInfo) (backend.Instance, error) {
	return &implicitStateInstance{m: im}, nil
}

func (im *implicitStateModel) Finalize() error { return nil }

type implicitStateInstance struct{ m *implicitStateModel }

func (in *implicitStateInstance) Finalize() error { return nil }

// Execute answers each request on its own; the executor reports the
// statistics.
func (in *implicitStateInstance) Execute(_ context.Context, reqs []*backend.Request) error {
	for _, r := range reqs {
		if err := in.one(r); err != nil {
			r.RespondError(err)
		}
	}
	return nil
}

func (in *implicitStateInstance) one(r *backend.Request) error {
	m := in.m
	x := r.Input(m.in)
	if x == nil || (x.DataType != tensor.Int32 && x.DataType != tensor.Bytes) {
		return tritonerr.InvalidArgf("implicit_state backend: model '%s' needs an INT32 or BYTES input '%s'", m.name, m.in)
	}
	testCase := int32(0)
	if tc := r.Input("TEST_CASE"); tc != nil && len(tc.Data) >= 4 {
		testCase = int32(binary.LittleEndian.Uint32(tc.Data))
	}
	var prev []byte
	if s := r.Input(m.stateIn); s != nil && s.DataType == x.DataType {
		prev = s.Data
	}
	var sum []byte
	if x.DataType == tensor.Bytes {
		var err error
		if sum, err = concat(m.name, x, prev); err != nil {
			return err
		}
	} else {
		sum = make([]byte, len(x.Data))
		for i := 0; i+4 <= len(x.Data); i += 4 {
			v := int32(binary.LittleEndian.Uint32(x.Data[i:]))
			if i+4 <= len(prev) {
				v += int32(binary.LittleEndian.Uint32(prev[i:]))
			}
			binary.LittleEndian.PutUint32(sum[i:], uint32(v))
		}
	}
	if testCase != 1 && m.output != "" {
		st, err := r.StateNew(m.output, x.DataType, x.Shape)
		if err != nil {
			return err
		}
		copy(st.Buffer(len(sum)), sum)
		if err := st.Update(); err != nil {
			return err
		}
	}
	return r.Respond(backend.Output{Name: m.out, DataType: x.DataType, Shape: x.Shape, Data: sum})
}

// concat is the accumulator for BYTES: element i of the new state is
// element i of the previous state (empty when it has none) followed by
// element i of the input.
func concat(model string, x *backend.Input, prev []byte) ([]byte, error) {
	n, err := tensor.ElementCount(x.Name, x.Shape)
	if err != nil {
		return nil, err
	}
	in, err := tensor.SplitBytes(x.Name, model, x.Data, n)
	if err != nil {
		return nil, err
	}
	var old [][]byte
	it := tensor.BytesIter{Buf: prev}
	for it.Next() {
		old = append(old, it.Elem())
	}
	var out []byte
	for i, e := range in {
		var joined []byte
		if i < len(old) {
			joined = append(joined, old[i]...)
		}
		out = tensor.AppendBytesElement(out, append(joined, e...))
	}
	return out, nil
}
