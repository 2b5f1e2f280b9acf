package ensemble

import (
	"slices"
	"strings"
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
	// Models named dec* are decoupled.
	return Compile(cfg, func(m string) bool { return strings.HasPrefix(m, "dec") })
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
	steps := func(ls []Launch) []int {
		var out []int
		for _, l := range ls {
			if l.Iter != 0 {
				t.Fatalf("launch %v of a plan without decoupled steps", l)
			}
			out = append(out, l.Step)
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ready := tt.p.Start([]string{"X"}, tt.wanted)
			if got := steps(ready); !slices.Equal(got, tt.want[0]) {
				t.Fatalf("start: %v, want %v", got, tt.want[0])
			}
			answers := 0
			for i, s := range tt.done {
				if !r.Open() {
					t.Fatalf("over before step %d finished", s)
				}
				pr := r.Response(Launch{s, 0}, true, true)
				if got := steps(pr.Launch); !slices.Equal(got, tt.want[i+1]) {
					t.Fatalf("after step %d: %v, want %v", s, got, tt.want[i+1])
				}
				if pr.Answer == 0 {
					answers++
				}
				if pr.Final != (i == len(tt.done)-1) {
					t.Fatalf("after step %d: final %v", s, pr.Final)
				}
			}
			if r.Open() || answers != 1 {
				t.Errorf("open %v at the end, %d answers", r.Open(), answers)
			}
		})
	}
}

// TestDecoupledRun follows Triton's rules for a decoupled step: each of
// its responses is a separate set of tensors that the downstream steps run
// on separately, the ensemble answers once per set whose wanted outputs
// all exist (whatever order the downstream requests finish in), and the
// last response is due once every request, the decoupled one's final
// flag included, has ended. Every value is dropped once read.
func TestDecoupledRun(t *testing.T) {
	p := plan([]string{"OUT", "IDX"},
		step("pre", []string{"X"}, []string{"A"}),
		step("dec", []string{"A", "X2"}, []string{"B", "IDX"}),
		step("post", []string{"B"}, []string{"OUT"}))
	r, ready := p.Start([]string{"X", "X2"}, nil)
	if !slices.Equal(ready, []Launch{{0, 0}}) {
		t.Fatalf("start: %v", ready)
	}
	dropped := map[Key]bool{}
	check := func(pr Progress, launch []Launch, answer int, final bool) {
		t.Helper()
		if !slices.Equal(pr.Launch, launch) || pr.Answer != answer || pr.Final != final {
			t.Fatalf("progress %+v, want launch %v answer %d final %v", pr, launch, answer, final)
		}
		for _, k := range pr.Drop {
			if dropped[k] {
				t.Fatalf("%v dropped twice", k)
			}
			dropped[k] = true
		}
	}
	check(r.Response(Launch{0, 0}, true, true), []Launch{{1, 0}}, -1, false)
	// Three responses of dec: iterations 0, 1, 2 of B and IDX.
	for i := range 3 {
		pr := r.Response(Launch{1, 0}, true, false)
		if !slices.Equal(pr.Written, []Key{{"B", i}, {"IDX", i}}) {
			t.Fatalf("response %d written %v", i, pr.Written)
		}
		check(pr, []Launch{{2, i}}, -1, false)
	}
	// post finishes out of order: each answer pairs OUT with its own IDX.
	check(r.Response(Launch{2, 2}, true, true), nil, 2, false)
	check(r.Response(Launch{2, 0}, true, true), nil, 0, false)
	check(r.Response(Launch{2, 1}, true, true), nil, 1, false)
	// dec's final flag alone ends the run, with no answer of its own.
	check(r.Response(Launch{1, 0}, false, true), nil, -1, true)
	// (X, read at the start, is the request's own and stays with it.)
	for _, k := range []Key{{"X2", 0}, {"A", 0}, {"B", 0}, {"B", 2}, {"OUT", 1}, {"IDX", 2}} {
		if !dropped[k] {
			t.Errorf("%v not dropped", k)
		}
	}
	if r.Open() {
		t.Error("open at the end")
	}
}

// TestDecoupledNoResponse: a decoupled step that sends only its final flag
// ends the run with no answer and never starts the steps after it.
func TestDecoupledNoResponse(t *testing.T) {
	p := plan([]string{"OUT"},
		step("dec", []string{"X"}, []string{"B"}),
		step("post", []string{"B"}, []string{"OUT"}))
	r, ready := p.Start([]string{"X"}, nil)
	if !slices.Equal(ready, []Launch{{0, 0}}) {
		t.Fatalf("start: %v", ready)
	}
	if pr := r.Response(Launch{0, 0}, false, true); !pr.Final || pr.Launch != nil || pr.Answer != -1 {
		t.Errorf("progress %+v", pr)
	}
}

// TestOptionalInputLeftOut: an ensemble input the request leaves out is
// written but absent, so the step reading it starts (as Triton's
// placeholder for an optional input).
func TestOptionalInputLeftOut(t *testing.T) {
	ens := &inference.ModelEnsembling{Step: []*inference.ModelEnsembling_Step{
		{ModelName: "m", InputMap: map[string]string{"A": "X", "B": "OPT"}, OutputMap: map[string]string{"O": "OUT"}}}}
	cfg := &inference.ModelConfig{Name: "e", SchedulingChoice: &inference.ModelConfig_EnsembleScheduling{EnsembleScheduling: ens},
		Input:  []*inference.ModelInput{{Name: "X"}, {Name: "OPT", Optional: true}},
		Output: []*inference.ModelOutput{{Name: "OUT"}}}
	if _, ready := Compile(cfg, nil).Start([]string{"X"}, nil); !slices.Equal(ready, []Launch{{0, 0}}) {
		t.Errorf("start: %v", ready)
	}
}

func TestCompile(t *testing.T) {
	cfg := &inference.ModelConfig{Name: "e", SchedulingChoice: &inference.ModelConfig_EnsembleScheduling{EnsembleScheduling: &inference.ModelEnsembling{Step: []*inference.ModelEnsembling_Step{
		{ModelName: "a", ModelVersion: 2, InputMap: map[string]string{"Z": "X", "A": "Y"}, OutputMap: map[string]string{"O": "T"}},
		{ModelName: "b", ModelVersion: -1, InputMap: map[string]string{"I": "T"}, OutputMap: map[string]string{"O": "OUT"}},
	}}}, Output: []*inference.ModelOutput{{Name: "OUT"}}}
	p := Compile(cfg, func(m string) bool { return m == "b" })
	if p.Steps[0].Version != "2" || p.Steps[1].Version != "" {
		t.Errorf("versions %q %q", p.Steps[0].Version, p.Steps[1].Version)
	}
	if !slices.Equal(p.Steps[0].Inputs, []Binding{{"A", "Y"}, {"Z", "X"}}) {
		t.Errorf("inputs %v", p.Steps[0].Inputs)
	}
	if p.Steps[0].Decoupled || !p.Steps[1].Decoupled {
		t.Error("decoupled")
	}
	if !p.Consumed("T") || p.Consumed("OUT") {
		t.Error("consumed")
	}
}
