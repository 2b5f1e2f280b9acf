package gateway

import (
	"testing"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
)

// TestWholeEnsembleRerun: a request whose executor was lost while it ran
// an ensemble whole runs again from the gateway only when every step,
// nested ensembles' steps included, may run again (reruns): not when a
// step runs in a Triton C backend (its fault may be the request's doing)
// unless the model opts in, nor when a step's model opts out.
func TestWholeEnsembleRerun(t *testing.T) {
	identity := func(name, rerun string) *inference.ModelConfig {
		cfg := &inference.ModelConfig{Name: name, Backend: "identity",
			Input:  []*inference.ModelInput{{Name: "INPUT0", DataType: inference.DataType_TYPE_INT32, Dims: []int64{-1}}},
			Output: []*inference.ModelOutput{{Name: "OUTPUT0", DataType: inference.DataType_TYPE_INT32, Dims: []int64{-1}}}}
		if rerun != "" {
			cfg.Parameters = map[string]*inference.ModelParameter{"rerun_on_executor_loss": {StringValue: rerun}}
		}
		return cfg
	}
	chain := func(name string, steps ...string) *inference.ModelConfig {
		ens := &inference.ModelEnsembling{}
		for i, m := range steps {
			in, out := "t"+string(rune('0'+i)), "t"+string(rune('1'+i))
			if i == 0 {
				in = "INPUT0"
			}
			if i == len(steps)-1 {
				out = "OUTPUT0"
			}
			ens.Step = append(ens.Step, &inference.ModelEnsembling_Step{ModelName: m, ModelVersion: -1,
				InputMap: map[string]string{"INPUT0": in}, OutputMap: map[string]string{"OUTPUT0": out}})
		}
		return &inference.ModelConfig{Name: name, Platform: "ensemble",
			Input:            []*inference.ModelInput{{Name: "INPUT0", DataType: inference.DataType_TYPE_INT32, Dims: []int64{-1}}},
			Output:           []*inference.ModelOutput{{Name: "OUTPUT0", DataType: inference.DataType_TYPE_INT32, Dims: []int64{-1}}},
			SchedulingChoice: &inference.ModelConfig_EnsembleScheduling{EnsembleScheduling: ens}}
	}
	for _, tc := range []struct {
		name         string
		rerun        string // the second step's rerun_on_executor_loss
		native       bool   // the second step runs in a C backend
		nested, want bool
	}{
		{"Go steps", "", false, false, true},
		{"a C backend step", "", true, false, false},
		{"a C backend step, opted in", "true", true, false, true},
		{"a Go step, opted out", "false", false, false, false},
		{"nested, Go steps", "", false, true, true},
		{"nested, a C backend step", "", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			models := []*busv1.ModelVersionState{
				{Name: "s1", Version: "1", State: "READY", Config: identity("s1", ""), FaultsContained: true},
				{Name: "s2", Version: "1", State: "READY", Config: identity("s2", tc.rerun), FaultsContained: !tc.native},
				{Name: "ens", Version: "1", State: "READY", Config: chain("ens", "s1", "s2")},
				{Name: "outer", Version: "1", State: "READY", Config: chain("outer", "s1", "ens")},
			}
			c := newCatalog(nil, discardLogger())
			c.execs["a"] = &executorState{id: "a", node: "n", haveCat: true, models: models}
			c.mu.Lock()
			c.publishLocked()
			c.mu.Unlock()
			name := "ens"
			if tc.nested {
				name = "outer"
			}
			vv, err := c.current().resolve(name, latestVersion)
			if err != nil {
				t.Fatal(err)
			}
			if len(vv.wholeOn) != 1 || vv.wholeOn[0].id != "a" {
				t.Fatalf("%s goes whole to %+v, want executor a", name, vv.wholeOn)
			}
			if vv.wholeRerun != tc.want {
				t.Fatalf("%s: whole-run requests run again after a loss: %v, want %v", name, vv.wholeRerun, tc.want)
			}
		})
	}
}
