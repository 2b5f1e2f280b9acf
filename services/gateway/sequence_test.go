package gateway

import (
	"strings"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/seqbatch"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func TestSequenceParams(t *testing.T) {
	i64 := func(v int64) *inference.InferParameter {
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: v}}
	}
	u64 := func(v uint64) *inference.InferParameter {
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: v}}
	}
	str := func(v string) *inference.InferParameter {
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: v}}
	}
	boolean := func(v bool) *inference.InferParameter {
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: v}}
	}
	for _, tc := range []struct {
		name   string
		params map[string]*inference.InferParameter
		want   seqParams
		kind   tritonerr.Kind
		msg    string
	}{
		{"int64 id", map[string]*inference.InferParameter{"sequence_id": i64(42), "sequence_start": boolean(true)}, seqParams{id: seqbatch.UintID(42), start: true}, 0, ""},
		{"int64 id read as uint64", map[string]*inference.InferParameter{"sequence_id": i64(-1)}, seqParams{id: seqbatch.UintID(1<<64 - 1)}, 0, ""},
		{"string id", map[string]*inference.InferParameter{"sequence_id": str("42"), "sequence_end": boolean(true)}, seqParams{id: seqbatch.StringID("42"), end: true}, 0, ""},
		{"128 chars", map[string]*inference.InferParameter{"sequence_id": str(strings.Repeat("x", 128))}, seqParams{id: seqbatch.StringID(strings.Repeat("x", 128))}, 0, ""},
		{"129 chars", map[string]*inference.InferParameter{"sequence_id": str(strings.Repeat("x", 129))}, seqParams{}, tritonerr.Unsupported, "string correlation ID cannot be longer than 128 characters"},
		{"uint64 id", map[string]*inference.InferParameter{"sequence_id": u64(1)}, seqParams{}, tritonerr.InvalidArg, "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."},
		{"start not bool", map[string]*inference.InferParameter{"sequence_start": i64(1)}, seqParams{}, tritonerr.InvalidArg, "invalid value type for 'sequence_start' parameter, expected bool_param."},
		{"end not bool", map[string]*inference.InferParameter{"sequence_end": str("true")}, seqParams{}, tritonerr.InvalidArg, "invalid value type for 'sequence_end' parameter, expected bool_param."},
		{"timeout", map[string]*inference.InferParameter{"timeout": i64(5000)}, seqParams{timeoutUs: 5000}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sequenceParams(&inference.ModelInferRequest{Parameters: tc.params})
			if tc.msg != "" {
				if tritonerr.KindOf(err) != tc.kind || err.Error() != tc.msg {
					t.Fatalf("got %v", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
