package ensemble

import (
	"slices"
	"strconv"
	"strings"
	"sync"

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
	// Decoupled: the model answers a request with any number of
	// responses, each a separate set of outputs.
	Decoupled bool
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
	inputs    []string
	outputs   []string

	// prunes are the pruned graphs of the sets of wanted outputs requests
	// asked for (Start), made once per set: at most maxPrunes of them.
	mu     sync.Mutex
	prunes map[string]*prune
}

// prune is the part of a plan a set of wanted outputs needs: the steps
// they depend on, and how many of those steps (plus one for a wanted
// output) read each tensor. Shared by the runs wanting that set: read
// only.
type prune struct {
	needed  []bool
	readers map[string]int
}

// maxPrunes bounds the pruned graphs a plan keeps: the orders in which
// requests may name their outputs are many, the sets clients use few.
const maxPrunes = 64

// Compile makes the plan of an ensemble's (validated) configuration;
// decoupled says which composing models are decoupled.
func Compile(cfg *inference.ModelConfig, decoupled func(model string) bool) *Plan {
	p := &Plan{Name: cfg.GetName(), producer: map[string]int{}, consumers: map[string][]int{}}
	for _, in := range cfg.GetInput() {
		p.inputs = append(p.inputs, in.GetName())
	}
	for i, s := range cfg.GetEnsembleScheduling().GetStep() {
		st := Step{Model: s.GetModelName(), Inputs: bindings(s.GetInputMap()), Outputs: bindings(s.GetOutputMap()),
			Decoupled: decoupled != nil && decoupled(s.GetModelName())}
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

// Run is the progress of one ensemble request through the plan, as
// Triton's EnsembleContext keeps it: every ensemble tensor holds values by
// iteration (the request's inputs are iteration 0); a step's request
// (a Launch) reads one iteration of each of its inputs, and each response
// of it writes a value of each of its outputs. A decoupled step's
// responses write successive iterations, each a separate set of tensors
// that the downstream steps run on separately; a step that is not
// decoupled writes the iteration it read (Triton counts its responses as
// they come, which can pair one response's tensor with another's when
// requests finish out of order; writing the iteration read cannot). The
// ensemble answers once per iteration for which every wanted output
// exists.
type Run struct {
	plan    *Plan
	wanted  []string
	needed  []bool
	readers map[string]int // needed steps reading each tensor, plus one for a wanted output (needed and readers: the plan's prune, read only)
	have    map[Key]bool   // values written, present or a placeholder
	refs    map[Key]int    // readers of a value not yet served
	next    map[string]int // a decoupled step's next iteration of each output
	started map[Launch]bool
	open    int // launches whose final response has not come
}

// Key names a value of an ensemble tensor: the tensor and its iteration.
type Key struct {
	Tensor string
	Iter   int
}

// Launch is one request of a step, reading iteration Iter of its inputs.
type Launch struct{ Step, Iter int }

// Progress is what a step's response changed.
type Progress struct {
	// Written are the values the response's outputs go to, in the order
	// of the step's Outputs (an output the response lacks is a
	// placeholder there, as in Triton: absent, but written).
	Written []Key
	// Launch are the steps' requests that can start now.
	Launch []Launch
	// Answer is the iteration of the ensemble response now complete, or
	// -1: every wanted output has a value of it.
	Answer int
	// Final: no request of the run is open any more; the ensemble's
	// last response (or its final flag alone) is due.
	Final bool
	// Drop are the values no launch or response will read again, to
	// free once the launches and the answer have been made.
	Drop []Key
}

// Start begins a request that provides the tensors given (the ensemble
// inputs it carries; inputs it leaves out count as written but absent,
// as Triton's optional inputs do) and wants the outputs given (none: all
// of them). It returns the run and the requests that can start at once,
// in step order.
func (p *Plan) Start(provided, wanted []string) (*Run, []Launch) {
	if len(wanted) == 0 {
		wanted = p.outputs
	}
	pr0 := p.pruned(wanted)
	r := &Run{plan: p, wanted: wanted, needed: pr0.needed, readers: pr0.readers,
		have: map[Key]bool{}, refs: map[Key]int{}, started: map[Launch]bool{}}
	var pr Progress
	for _, t := range slices.Concat(p.inputs, provided) {
		if k := (Key{t, 0}); !r.have[k] {
			r.write(k, &pr)
		}
	}
	r.launch(&pr)
	return r, pr.Launch
}

// pruned is the part of the plan the wanted outputs need.
func (p *Plan) pruned(wanted []string) *prune {
	key := strings.Join(wanted, "\x00")
	p.mu.Lock()
	pr, ok := p.prunes[key]
	p.mu.Unlock()
	if ok {
		return pr
	}
	pr = &prune{needed: make([]bool, len(p.Steps)), readers: map[string]int{}}
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
		if !ok || pr.needed[i] {
			continue
		}
		pr.needed[i] = true
		for _, b := range p.Steps[i].Inputs {
			queue = append(queue, b.Ensemble)
		}
	}
	for t, steps := range p.consumers {
		for _, i := range steps {
			if pr.needed[i] {
				pr.readers[t]++
			}
		}
	}
	for _, t := range wanted {
		pr.readers[t]++
	}
	p.mu.Lock()
	if p.prunes == nil {
		p.prunes = map[string]*prune{}
	}
	if len(p.prunes) < maxPrunes {
		p.prunes[key] = pr
	}
	p.mu.Unlock()
	return pr
}

// Response records a response of the request l: with outputs, the step's
// outputs are written (a response with none, such as a decoupled model's
// final flag alone, writes nothing); final, the request is over.
func (r *Run) Response(l Launch, outputs, final bool) Progress {
	pr := Progress{Answer: -1}
	if final {
		r.open--
	}
	if outputs {
		s := r.plan.Steps[l.Step]
		for _, b := range s.Outputs {
			it := l.Iter
			if s.Decoupled {
				if r.next == nil {
					r.next = map[string]int{}
				}
				it = r.next[b.Ensemble]
				r.next[b.Ensemble]++
			}
			k := Key{b.Ensemble, it}
			pr.Written = append(pr.Written, k)
			r.write(k, &pr)
		}
		r.launch(&pr)
		r.answer(&pr)
	}
	pr.Final = r.open == 0
	return pr
}

// Open reports whether some request of the run has not ended.
func (r *Run) Open() bool { return r.open > 0 }

func (r *Run) write(k Key, pr *Progress) {
	r.have[k] = true
	r.refs[k] = r.readers[k.Tensor]
	if r.refs[k] == 0 {
		delete(r.refs, k)
		pr.Drop = append(pr.Drop, k)
	}
}

func (r *Run) read(k Key, pr *Progress) {
	if r.refs[k]--; r.refs[k] == 0 {
		delete(r.refs, k)
		pr.Drop = append(pr.Drop, k)
	}
}

// launch adds to pr the requests whose inputs all have a value written of
// one iteration, the iterations in order, then the steps.
func (r *Run) launch(pr *Progress) {
	var cands []Launch
	for _, k := range pr.Written {
		for _, i := range r.plan.consumers[k.Tensor] {
			cands = append(cands, Launch{i, k.Iter})
		}
	}
	if pr.Written == nil { // the start: every needed step at iteration 0
		for i := range r.plan.Steps {
			cands = append(cands, Launch{i, 0})
		}
	}
	slices.SortFunc(cands, func(a, b Launch) int {
		if a.Iter != b.Iter {
			return a.Iter - b.Iter
		}
		return a.Step - b.Step
	})
	for _, l := range cands {
		if !r.needed[l.Step] || r.started[l] {
			continue
		}
		ok := true
		for _, b := range r.plan.Steps[l.Step].Inputs {
			if !r.have[Key{b.Ensemble, l.Iter}] {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		r.started[l] = true
		r.open++
		pr.Launch = append(pr.Launch, l)
		ins := r.plan.Steps[l.Step].Inputs
		for j, b := range ins {
			// A tensor two inputs of the step read is read once.
			if !slices.ContainsFunc(ins[:j], func(a Binding) bool { return a.Ensemble == b.Ensemble }) {
				r.read(Key{b.Ensemble, l.Iter}, pr)
			}
		}
	}
}

// answer sets pr.Answer when a value just written completes an iteration
// of the wanted outputs (Triton looks at one such iteration per response).
func (r *Run) answer(pr *Progress) {
	for _, k := range pr.Written {
		if !slices.Contains(r.wanted, k.Tensor) {
			continue
		}
		ok := true
		for _, t := range r.wanted {
			if !r.have[Key{t, k.Iter}] {
				ok = false
				break
			}
		}
		if ok {
			pr.Answer = k.Iter
		}
	}
	if pr.Answer < 0 {
		return
	}
	for j, t := range r.wanted {
		if !slices.Contains(r.wanted[:j], t) {
			r.read(Key{t, pr.Answer}, pr)
		}
	}
}
