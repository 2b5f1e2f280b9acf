// Package seqstate is implicit state management (sequence_batching.state):
// the state tensors a sequence model's requests pass from one to the next,
// with their initial values as Triton makes them (SequenceStates and
// GenerateInitialStateData in Triton's core). It is pure: the executor
// keeps one Slot per sequence it runs, feeds a request its input states
// (Slot.Inputs) and records the states the backend updated (Slot.Update).
//
// Durable state (durable.go) is the same states kept in a store as well:
// Encode and Decode give a Slot's bytes, Save and MayDrop are the store's
// fenced rules for writing and deleting them, and Resume picks the input
// state of a sequence that moved to another executor.
package seqstate

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Folder is the model directory's folder that holds initial_state data
// files (Triton's kInitialStateFolder).
const Folder = "initial_state"

// Tensor is one state tensor: data in Triton's binary layout.
type Tensor struct {
	DataType tensor.DataType
	Shape    []int64
	Data     []byte
}

// State is one configured state.
type State struct {
	Input, Output string
	DataType      tensor.DataType
	// initial is the state of a START request: its shape is the state's
	// dims with every -1 as 1 (and the batch dimension), its data the
	// initial_state's, or zeros.
	initial Tensor
}

// Config is a model's implicit states, ready to start sequences.
type Config struct {
	Model  string
	States []State
}

// Load builds a model's states from its config and, for data_file initial
// states, the files under dir/initial_state. It returns nil for a model
// without states. Errors are Triton's load-time errors (the model fails to
// load); the checks that need no file run in modelconfig.Validate too.
func Load(cfg *inference.ModelConfig, dir string) (*Config, error) {
	sb := cfg.GetSequenceBatching()
	if len(sb.GetState()) == 0 {
		return nil, nil
	}
	c := &Config{Model: cfg.GetName()}
	inputs, outputs := map[string]bool{}, map[string]bool{}
	for _, st := range sb.GetState() {
		// Triton ignores a state whose input or output name repeats an
		// earlier one (with a warning).
		if inputs[st.GetInputName()] || outputs[st.GetOutputName()] {
			continue
		}
		inputs[st.GetInputName()], outputs[st.GetOutputName()] = true, true
		s := State{Input: st.GetInputName(), Output: st.GetOutputName(), DataType: tensor.FromConfig(st.GetDataType())}
		var shape []int64
		if cfg.GetMaxBatchSize() > 0 {
			shape = append(shape, 1)
		}
		for _, d := range st.GetDims() {
			shape = append(shape, max(d, 1))
		}
		s.initial = Tensor{DataType: s.DataType, Shape: shape}
		switch len(st.GetInitialState()) {
		case 0:
			data, err := zeros(s.Input, s.DataType, shape)
			if err != nil {
				return nil, err
			}
			s.initial.Data = data
		case 1:
			is := st.GetInitialState()[0]
			data, err := initialData(st, is, dir)
			if err != nil {
				return nil, err
			}
			// The initial state's own dims (fixed, checked against the
			// state's) give its shape, so shape and data agree.
			s.initial.Shape = append(shape[:len(shape)-len(st.GetDims())], is.GetDims()...)
			s.initial.Data = data
		default:
			return nil, tritonerr.InvalidArgf("initial_state field for state input '%s' must contain exactly one or zero element. Found '%d' elements.", s.Input, len(st.GetInitialState()))
		}
		c.States = append(c.States, s)
	}
	return c, nil
}

// zeros is a state of the given shape with every element zero; a BYTES
// state gets empty strings (a zero 4-byte length per element).
func zeros(name string, dt tensor.DataType, shape []int64) ([]byte, error) {
	if dt == tensor.Bytes {
		n, err := tensor.ElementCount(name, shape)
		if err != nil {
			return nil, err
		}
		return make([]byte, 4*n), nil
	}
	n, err := tensor.ByteSize(name, dt, shape)
	if err != nil {
		return nil, err
	}
	return make([]byte, n), nil
}

// initialData is the data of an initial_state: zeros, or the bytes of its
// data file (checked against the size its dims call for).
func initialData(st *inference.ModelSequenceBatching_State, is *inference.ModelSequenceBatching_InitialState, dir string) ([]byte, error) {
	dt := tensor.FromConfig(is.GetDataType())
	switch d := is.GetStateData().(type) {
	case *inference.ModelSequenceBatching_InitialState_ZeroData:
		return zeros(st.GetInputName(), dt, is.GetDims())
	case *inference.ModelSequenceBatching_InitialState_DataFile:
		path := filepath.Join(dir, Folder, d.DataFile)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, tritonerr.InvalidArgf("failed to open text file for read %s: %v", path, err)
		}
		if dt == tensor.Bytes {
			return data, nil // as Triton: the whole file, in BYTES framing
		}
		n, err := tensor.ByteSize(st.GetInputName(), dt, is.GetDims())
		if err != nil {
			return nil, err
		}
		if int64(len(data)) < n {
			// Triton's message has no space before "only".
			return nil, tritonerr.InvalidArgf("initial_state setting expects %d bytes, but the data provided from %sonly has %d bytes.", n, d.DataFile, len(data))
		}
		return data[:n], nil
	default:
		return nil, tritonerr.InvalidArgf("initial_state setting expects state'%s' to have state_data set", st.GetInputName())
	}
}

// Slot is the state of one sequence: the tensors its next request receives.
type Slot struct {
	tensors map[string]Tensor // by input name
}

// Start returns the state of a sequence's START request: each state's
// initial tensor, copied, so no state is ever shared between sequences.
func (c *Config) Start() *Slot {
	s := &Slot{tensors: make(map[string]Tensor, len(c.States))}
	for _, st := range c.States {
		t := st.initial
		s.tensors[st.Input] = Tensor{DataType: t.DataType, Shape: slices.Clone(t.Shape), Data: bytes.Clone(t.Data)}
	}
	return s
}

// Inputs returns the slot's states as backend inputs (they alias the
// slot's tensors, which are never written in place).
func (c *Config) Inputs(s *Slot) []backend.Input {
	in := make([]backend.Input, 0, len(c.States))
	for _, st := range c.States {
		t := s.tensors[st.Input]
		in = append(in, backend.Input{Name: st.Input, DataType: t.DataType, Shape: t.Shape, Data: t.Data})
	}
	return in
}

// Update makes the states the backend updated for a request the slot's
// states for the next request. States not updated stay as they were.
func (c *Config) Update(s *Slot, updated []*backend.State) {
	for _, u := range updated {
		for _, st := range c.States {
			if st.Output == u.Name {
				s.tensors[st.Input] = Tensor{DataType: u.DataType, Shape: u.Shape, Data: u.Data}
			}
		}
	}
}

// Output returns the slot's current value of the state whose output name
// is name, for a client that asked for it.
func (c *Config) Output(s *Slot, name string) (backend.Output, bool) {
	for _, st := range c.States {
		if st.Output == name {
			t := s.tensors[st.Input]
			return backend.Output{Name: name, DataType: t.DataType, Shape: t.Shape, Data: t.Data}, true
		}
	}
	return backend.Output{}, false
}

// Key is the shapes of the slot's states, for keeping requests whose states
// differ in shape out of one batch (as for inputs without ragged batching).
func (c *Config) Key(s *Slot) string {
	var b []byte
	for _, st := range c.States {
		b = fmt.Appendf(b, "%s%v;", st.Input, s.tensors[st.Input].Shape)
	}
	return string(b)
}

// Tensors returns the slot's tensors by input name (for saving them).
func (s *Slot) Tensors() map[string]Tensor { return s.tensors }

// Restore makes a slot from saved tensors.
func Restore(t map[string]Tensor) *Slot { return &Slot{tensors: t} }
