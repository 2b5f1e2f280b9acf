// Package ensemble is the step graph of Triton's ensemble scheduler, as
// pure decisions: which steps an ensemble request needs (Triton prunes the
// steps no requested output depends on), which of them can start once the
// tensors they read exist, and when the request is complete. The gateway
// runs the steps (each an inference request routed like a client's) and
// tells a Run what finished; a Run does no I/O and starts no goroutine.
package ensemble

import (
	"slices"
	"strconv"

	"github.com/nereid-io/nereid/api/inference"
)

// Step is one step of an ensemble: a request to Model (Version, or the
// latest ready one when Version is ""), its inputs read from ensemble
// tensors and its outputs written to ensemble tensors.
type Step struct {
	Model   string
	Version string
	// Inputs maps a model input to the ensemble tensor it reads, Outputs a
	// model output to the ensemble tensor it writes; both sorted by the
	// model's tensor name.
	Inputs  []Binding
	Outputs []Binding
}

// Binding ties a composing model's tensor to an ensemble tensor.
type Binding struct{ Model, Ensemble string }

// Plan is an ensemble's step graph, made once per configuration.
type Plan struct {
	Name  string
	Steps []Step
	// producer is the step writing each tensor; consumers the steps
	// reading it.
	producer  map[string]int
	consumers map[string][]int
	outputs   []string
}

// Compile makes the plan of an ensemble's (validated) configuration.
func Compile(cfg *inference.ModelConfig) *Plan {
	p := &Plan{Name: cfg.GetName(), producer: map[string]int{}, consumers: map[string][]int{}}
	for i, s := range cfg.GetEnsembleScheduling().GetStep() {
		st := Step{Model: s.GetModelName(), Inputs: bindings(s.GetInputMap()), Outputs: bindings(s.GetOutputMap())}
		if v := s.GetModelVersion(); v >= 0 {
			st.Version = strconv.FormatInt(v, 10)
		}
		for _, b := range st.Inputs {
			if !slices.Contains(p.consumers[b.Ensemble], i) {
				p.consumers[b.Ensemble] = append(p.consumers[b.Ensemble], i)
			}
		}
		for _, b := range st.Outputs {
			p.producer[b.Ensemble] = i
		}
		p.Steps = append(p.Steps, st)
	}
	for _, o := range cfg.GetOutput() {
		p.outputs = append(p.outputs, o.GetName())
	}
	return p
}

func bindings(m map[string]string) []Binding {
	out := make([]Binding, 0, len(m))
	for k, v := range m {
		out = append(out, Binding{Model: k, Ensemble: v})
	}
	slices.SortFunc(out, func(a, b Binding) int {
		if a.Model < b.Model {
			return -1
		}
		if a.Model > b.Model {
			return 1
		}
		return 0
	})
	return out
}

// Outputs are the ensemble's outputs, in configuration order.
func (p *Plan) Outputs() []string { return p.outputs }

// Consumed reports whether some step reads tensor.
func (p *Plan) Consumed(tensor string) bool { return len(p.consumers[tensor]) > 0 }

// Run is the progress of one ensemble request through the plan.
type Run struct {
	plan    *Plan
	have    map[string]bool
	needed  []bool
	started []bool
	left    int // needed steps not finished
}

// Start begins a request that provides the tensors given (the ensemble
// inputs it carries) and wants the outputs given (none: all of them). It
// returns the run and the steps that can start at once, ascending.
func (p *Plan) Start(provided, wanted []string) (*Run, []int) {
	r := &Run{plan: p, have: map[string]bool{}, needed: make([]bool, len(p.Steps)), started: make([]bool, len(p.Steps))}
	for _, t := range provided {
		r.have[t] = true
	}
	if len(wanted) == 0 {
		wanted = p.outputs
	}
	// The steps the wanted outputs depend on, walking back from them.
	queue := slices.Clone(wanted)
	seen := map[string]bool{}
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		if seen[t] {
			continue
		}
		seen[t] = true
		i, ok := p.producer[t]
		if !ok || r.needed[i] {
			continue
		}
		r.needed[i] = true
		r.left++
		for _, b := range p.Steps[i].Inputs {
			queue = append(queue, b.Ensemble)
		}
	}
	return r, r.ready()
}

// Done records that step finished and wrote its outputs, and returns the
// steps that can start now, ascending.
func (r *Run) Done(step int) []int {
	r.left--
	for _, b := range r.plan.Steps[step].Outputs {
		r.have[b.Ensemble] = true
	}
	return r.ready()
}

// Complete reports whether every needed step has finished.
func (r *Run) Complete() bool { return r.left == 0 }

func (r *Run) ready() []int {
	var out []int
	for i, s := range r.plan.Steps {
		if !r.needed[i] || r.started[i] {
			continue
		}
		ok := true
		for _, b := range s.Inputs {
			if !r.have[b.Ensemble] {
				ok = false
				break
			}
		}
		if ok {
			r.started[i] = true
			out = append(out, i)
		}
	}
	return out
}
