package seqstate

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func config(t *testing.T, text string) *inference.ModelConfig {
	t.Helper()
	cfg := &inference.ModelConfig{}
	if err := prototext.Unmarshal([]byte(text), cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestLoadInitial(t *testing.T) {
	tests := []struct {
		name      string
		cfg       string
		wantShape []int64
		wantData  []byte
	}{
		{"variable dims become 1, batch dim added",
			`name: "m" max_batch_size: 4 sequence_batching { state { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ -1, 2 ] } }`,
			[]int64{1, 1, 2}, make([]byte, 8)},
		{"no batch dim without batching",
			`name: "m" sequence_batching { state { input_name: "I" output_name: "O" data_type: TYPE_FP32 dims: [ 3 ] } }`,
			[]int64{3}, make([]byte, 12)},
		{"zero_data takes the initial_state dims",
			`name: "m" max_batch_size: 2 sequence_batching { state { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ -1 ] initial_state { name: "z" data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } } }`,
			[]int64{1, 3}, make([]byte, 12)},
		{"data_file read from initial_state/, cut to size",
			`name: "m" sequence_batching { state { input_name: "I" output_name: "O" data_type: TYPE_INT8 dims: [ 2 ] initial_state { name: "f" data_type: TYPE_INT8 dims: [ 2 ] data_file: "data" } } }`,
			[]int64{2}, []byte("ab")},
		{"string state without initial_state: empty strings",
			`name: "m" sequence_batching { state { input_name: "I" output_name: "O" data_type: TYPE_STRING dims: [ 2 ] } }`,
			[]int64{2}, make([]byte, 8)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(config(t, tt.cfg), "testdata/short")
			if err != nil {
				t.Fatal(err)
			}
			in := c.Inputs(c.Start())
			if len(in) != 1 || in[0].Name != "I" {
				t.Fatalf("inputs %+v", in)
			}
			if !slices.Equal(in[0].Shape, tt.wantShape) || !bytes.Equal(in[0].Data, tt.wantData) {
				t.Errorf("got shape %v data %v, want %v %v", in[0].Shape, in[0].Data, tt.wantShape, tt.wantData)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct{ name, cfg, want string }{
		{"file too short",
			`name: "m" sequence_batching { state { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ 2 ] initial_state { name: "f" data_type: TYPE_INT32 dims: [ 2 ] data_file: "data" } } }`,
			"initial_state setting expects 8 bytes, but the data provided from dataonly has 3 bytes."},
		{"file missing",
			`name: "m" sequence_batching { state { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ 2 ] initial_state { name: "f" data_type: TYPE_INT32 dims: [ 2 ] data_file: "nope" } } }`,
			"failed to open text file for read testdata/short/initial_state/nope"},
		{"no state data",
			`name: "m" sequence_batching { state { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ 2 ] initial_state { name: "f" data_type: TYPE_INT32 dims: [ 2 ] } } }`,
			"initial_state setting expects state'I' to have state_data set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(config(t, tt.cfg), "testdata/short")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if tritonerr.KindOf(err) != tritonerr.InvalidArg {
				t.Errorf("kind %v", tritonerr.KindOf(err))
			}
		})
	}
}

// TestSlotLifecycle: each START is fresh (never another sequence's data),
// an update replaces the state (its shape may change), no update keeps it.
func TestSlotLifecycle(t *testing.T) {
	c, err := Load(config(t, `name: "m" max_batch_size: 8 sequence_batching { state { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ -1 ] } }`), "")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Start()
	r := backend.NewRequest(nil, nil)
	r.SetStates("m", []string{"O"})
	st, err := r.StateNew("O", tensor.Int32, []int64{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	copy(st.Buffer(8), tensor.AppendInt32s(nil, 5, 6))
	if err := st.Update(); err != nil {
		t.Fatal(err)
	}
	c.Update(s, r.UpdatedStates())
	got := c.Inputs(s)[0]
	if !slices.Equal(got.Shape, []int64{1, 2}) || !slices.Equal(tensor.Int32s(got.Data), []int32{5, 6}) {
		t.Fatalf("after update %+v", got)
	}
	c.Update(s, nil) // a request that updated nothing
	if got := c.Inputs(s)[0]; !slices.Equal(tensor.Int32s(got.Data), []int32{5, 6}) {
		t.Fatalf("no update changed the state: %+v", got)
	}
	if o, ok := c.Output(s, "O"); !ok || !slices.Equal(tensor.Int32s(o.Data), []int32{5, 6}) {
		t.Fatalf("output %+v %v", o, ok)
	}
	fresh := c.Inputs(c.Start())[0]
	if !slices.Equal(fresh.Shape, []int64{1, 1}) || !bytes.Equal(fresh.Data, make([]byte, 4)) {
		t.Fatalf("a new START sees %+v", fresh)
	}
	if c.Key(s) == c.Key(c.Start()) {
		t.Error("states of different shapes share a batch key")
	}
}
