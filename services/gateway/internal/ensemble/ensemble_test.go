package ensemble

import (
	"slices"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
)

// plan builds a configuration whose steps are given as "model: in,in -> out,out".
func plan(outputs []string, steps ...[3][]string) *Plan {
	ens := &inference.ModelEnsembling{}
	cfg := &inference.ModelConfig{Name: "e", SchedulingChoice: &inference.ModelConfig_EnsembleScheduling{EnsembleScheduling: ens}}
	for _, o := range outputs {
		cfg.Output = append(cfg.Output, &inference.ModelOutput{Name: o})
	}
	for _, s := range steps {
		st := &inference.ModelEnsembling_Step{ModelName: s[0][0], ModelVersion: -1, InputMap: map[string]string{}, OutputMap: map[string]string{}}
		for i, t := range s[1] {
			st.InputMap["IN"+string(rune('0'+i))] = t
		}
		for i, t := range s[2] {
			st.OutputMap["OUT"+string(rune('0'+i))] = t
		}
		ens.Step = append(ens.Step, st)
	}
	return Compile(cfg)
}

func step(model string, in, out []string) [3][]string { return [3][]string{{model}, in, out} }

// TestRunOrder drives runs through their plans: a step starts once all its
// inputs exist, independent steps start together, steps no wanted output
// needs never start.
func TestRunOrder(t *testing.T) {
	diamond := plan([]string{"Y"},
		step("pre", []string{"X"}, []string{"A", "B"}),
		step("left", []string{"A"}, []string{"L"}),
		step("right", []string{"B"}, []string{"R"}),
		step("join", []string{"L", "R"}, []string{"Y"}))
	two := plan([]string{"O1", "O2"},
		step("m1", []string{"X"}, []string{"O1"}),
		step("m2", []string{"X"}, []string{"T"}),
		step("m3", []string{"T"}, []string{"O2"}))
	tests := []struct {
		name   string
		p      *Plan
		wanted []string
		// done lists the steps finishing, in order; want the steps
		// started at the start and after each.
		done []int
		want [][]int
	}{
		{"diamond", diamond, nil, []int{0, 1, 2, 3}, [][]int{{0}, {1, 2}, nil, {3}, nil}},
		{"diamond other order", diamond, nil, []int{0, 2, 1, 3}, [][]int{{0}, {1, 2}, nil, {3}, nil}},
		{"independent", two, nil, []int{1, 0, 2}, [][]int{{0, 1}, {2}, nil, nil}},
		{"pruned", two, []string{"O1"}, []int{0}, [][]int{{0}, nil}},
		{"pruned chain", two, []string{"O2"}, []int{1, 2}, [][]int{{1}, {2}, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ready := tt.p.Start([]string{"X"}, tt.wanted)
			if !slices.Equal(ready, tt.want[0]) {
				t.Fatalf("start: %v, want %v", ready, tt.want[0])
			}
			for i, s := range tt.done {
				if r.Complete() {
					t.Fatalf("complete before step %d finished", s)
				}
				if got := r.Done(s); !slices.Equal(got, tt.want[i+1]) {
					t.Fatalf("after step %d: %v, want %v", s, got, tt.want[i+1])
				}
			}
			if !r.Complete() {
				t.Error("not complete at the end")
			}
		})
	}
}

func TestCompile(t *testing.T) {
	cfg := &inference.ModelConfig{Name: "e", SchedulingChoice: &inference.ModelConfig_EnsembleScheduling{EnsembleScheduling: &inference.ModelEnsembling{Step: []*inference.ModelEnsembling_Step{
		{ModelName: "a", ModelVersion: 2, InputMap: map[string]string{"Z": "X", "A": "Y"}, OutputMap: map[string]string{"O": "T"}},
		{ModelName: "b", ModelVersion: -1, InputMap: map[string]string{"I": "T"}, OutputMap: map[string]string{"O": "OUT"}},
	}}}, Output: []*inference.ModelOutput{{Name: "OUT"}}}
	p := Compile(cfg)
	if p.Steps[0].Version != "2" || p.Steps[1].Version != "" {
		t.Errorf("versions %q %q", p.Steps[0].Version, p.Steps[1].Version)
	}
	if !slices.Equal(p.Steps[0].Inputs, []Binding{{"A", "Y"}, {"Z", "X"}}) {
		t.Errorf("inputs %v", p.Steps[0].Inputs)
	}
	if !p.Consumed("T") || p.Consumed("OUT") {
		t.Error("consumed")
	}
}
