package placement

import (
	"strings"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
)

func TestParseCapacity(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Capacity
		err  bool
	}{
		{in: "4GiB", want: Capacity{Bytes: 4 << 30}},
		{in: "512M", want: Capacity{Bytes: 512 << 20}},
		{in: "1.5GB", want: Capacity{Bytes: 1_500_000_000}},
		{in: "1048576", want: Capacity{Bytes: 1 << 20}},
		{in: "slots=3", want: Capacity{Slots: 3}},
		{in: "slots=3,4GiB", want: Capacity{Slots: 3, Bytes: 4 << 30}},
		{in: "slots=0", err: true},
		{in: "slots=x", err: true},
		{in: "0", err: true},
		{in: "lots", err: true},
		{in: "-1GiB", err: true},
	} {
		got, err := ParseCapacity(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseCapacity(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.err)
		}
		if err == nil {
			back, err := ParseCapacity(got.String())
			if err != nil || back != got {
				t.Errorf("ParseCapacity(%q) does not read back %q: %+v, %v", got.String(), tc.in, back, err)
			}
		}
	}
	if s := (Capacity{}).String(); s != "unbounded" {
		t.Errorf("zero capacity = %q", s)
	}
}

func TestModelFrom(t *testing.T) {
	params := func(kv ...string) map[string]*inference.ModelParameter {
		out := map[string]*inference.ModelParameter{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = &inference.ModelParameter{StringValue: kv[i+1]}
		}
		return out
	}
	cfg := &inference.ModelConfig{Name: "m",
		InstanceGroup: []*inference.ModelInstanceGroup{{Kind: inference.ModelInstanceGroup_KIND_CPU}, {Kind: inference.ModelInstanceGroup_KIND_GPU}},
		Parameters:    params(ParamFootprint, "2GiB", ParamGPUFootprint, "6GiB", ParamMinReplicas, "2", ParamMaxReplicas, "4", ParamPinned, "true")}
	m, err := ModelFrom(cfg)
	want := Model{Name: "m", FootprintHint: 2 << 30, GPUFootprintHint: 6 << 30, MinReplicas: 2, MaxReplicas: 4, GPU: true, Pinned: true}
	if err != nil || m != want {
		t.Fatalf("ModelFrom = %+v, %v; want %+v", m, err, want)
	}
	m, err = ModelFrom(&inference.ModelConfig{Name: "s", SchedulingChoice: &inference.ModelConfig_SequenceBatching{SequenceBatching: &inference.ModelSequenceBatching{}}})
	if err != nil || m != (Model{Name: "s", Sequence: true}) {
		t.Fatalf("sequence model = %+v, %v", m, err)
	}
	for _, bad := range [][]string{
		{ParamFootprint, "big"},
		{ParamGPUFootprint, "most of it"},
		{ParamGPUFootprint, "-2GiB"},
		{ParamMinReplicas, "-1"},
		{ParamMinReplicas, "3", ParamMaxReplicas, "2"},
		{ParamPinned, "perhaps"},
	} {
		_, err := ModelFrom(&inference.ModelConfig{Name: "m", Parameters: params(bad...)})
		if err == nil {
			t.Errorf("parameters %v: no error", bad)
		} else if !strings.Contains(err.Error(), bad[0]) || !strings.Contains(err.Error(), "'m'") {
			t.Errorf("parameters %v: error %q names neither the parameter nor the model", bad, err)
		}
	}
}
