package seqbatch

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/modelconfig"
)

const controlCfg = `
name: "m"
max_batch_size: 4
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: %s } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
`

func parse(t *testing.T, corrid string) *inference.ModelConfig {
	t.Helper()
	cfg, err := modelconfig.Parse("config.pbtxt", []byte(fmt.Sprintf(controlCfg, corrid)))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestControls(t *testing.T) {
	for _, tc := range []struct {
		corrid string
		id     ID
		want   []byte
	}{
		{"TYPE_UINT64", UintID(0x1_0000_0002), []byte{2, 0, 0, 0, 1, 0, 0, 0}},
		{"TYPE_INT64", UintID(7), []byte{7, 0, 0, 0, 0, 0, 0, 0}},
		{"TYPE_UINT32", UintID(0x1_0000_0002), []byte{2, 0, 0, 0}}, // truncated, as Triton
		{"TYPE_INT32", UintID(3), []byte{3, 0, 0, 0}},
		{"TYPE_STRING", StringID("ab"), []byte{2, 0, 0, 0, 'a', 'b'}},
	} {
		cfg := parse(t, tc.corrid)
		c, err := NewControls(cfg)
		if err != nil {
			t.Fatal(err)
		}
		in := c.Inputs(Entry{Req: &Request{}, ID: tc.id, Start: true, End: false, Ready: true})
		if len(in) != 4 {
			t.Fatalf("%d inputs", len(in))
		}
		want := map[string][]byte{
			"START": {1, 0, 0, 0}, "END": {0, 0, 0, 0}, "READY": {1}, "CORRID": tc.want,
		}
		for _, i := range in {
			if !bytes.Equal(i.Data, want[i.Name]) || len(i.Shape) != 2 {
				t.Fatalf("%s %s = %v %v, want %v", tc.corrid, i.Name, i.Data, i.Shape, want[i.Name])
			}
		}
		// Padding: READY false, CORRID 0.
		for _, i := range c.Inputs(Entry{}) {
			if i.Name == "READY" && i.Data[0] != 0 || i.Name == "CORRID" && bytes.ContainsFunc(i.Data, func(r rune) bool { return r != 0 }) {
				t.Fatalf("padding %s = %v", i.Name, i.Data)
			}
		}
		// END true as fp32 1.0.
		for _, i := range c.Inputs(Entry{Req: &Request{}, End: true}) {
			if i.Name == "END" && !bytes.Equal(i.Data, []byte{0, 0, 0x80, 0x3f}) {
				t.Fatalf("END = %v", i.Data)
			}
		}
	}
}

func TestValidateCorrelationID(t *testing.T) {
	err := ValidateCorrelationID(parse(t, "TYPE_UINT64"), StringID("a"))
	if err == nil || err.Error() != "sequence batching control 'CORRID' data-type is 'BYTES', but model 'm' expects 'UINT64'" {
		t.Fatalf("got %v", err)
	}
	err = ValidateCorrelationID(parse(t, "TYPE_STRING"), UintID(1))
	if err == nil || err.Error() != "sequence batching control 'CORRID' data-type is 'UINT64', but model 'm' expects 'BYTES'" {
		t.Fatalf("got %v", err)
	}
	for _, ty := range []string{"TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32"} {
		if err := ValidateCorrelationID(parse(t, ty), UintID(1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ValidateCorrelationID(parse(t, "TYPE_STRING"), StringID("x")); err != nil {
		t.Fatal(err)
	}
}
