package modelconfig

import (
	"slices"
	"strconv"
	"strings"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// ensembleTensor is a node of an ensemble's data-flow graph as Triton's
// BuildEnsembleGraph makes it: a tensor, the tensors it is computed from
// and those computed from it.
type ensembleTensor struct {
	isOutput bool
	ready    bool
	prev     []*ensembleTensor
	next     []*ensembleTensor
}

// validateEnsembleFlow is the part of Triton's ValidateEnsembleSchedulingConfig
// that needs only the ensemble's own configuration: every step names a model,
// maps inputs and outputs, a tensor is written by one step only, every
// ensemble input is used, every output written, and no tensor is left over
// (which is also how a cycle shows: its tensors never become ready).
func validateEnsembleFlow(cfg *inference.ModelConfig, ens *inference.ModelEnsembling) error {
	name := cfg.Name
	tensors := map[string]*ensembleTensor{}
	get := func(t string, output bool) *ensembleTensor {
		n := tensors[t]
		if n == nil {
			n = &ensembleTensor{isOutput: output}
			tensors[t] = n
		}
		return n
	}
	for i, s := range ens.Step {
		switch {
		case s.ModelName == "":
			return invalid("must specify 'model_name' in step %d of ensemble '%s'", i, name)
		case len(s.InputMap) == 0:
			return invalid("must specify 'input_map' in step %d of ensemble '%s'", i, name)
		case len(s.OutputMap) == 0:
			return invalid("must specify 'output_map' in step %d of ensemble '%s'", i, name)
		}
		var outs []*ensembleTensor
		for _, k := range sortedKeys(s.OutputMap) {
			t := s.OutputMap[k]
			n := tensors[t]
			if n != nil {
				if n.isOutput {
					return invalid("ensemble tensor '%s' can appear in an output map only once for ensemble '%s' step %d", t, name, i)
				}
				n.isOutput = true
			} else {
				n = get(t, true)
			}
			outs = append(outs, n)
		}
		for _, k := range sortedKeys(s.InputMap) {
			in := get(s.InputMap[k], false)
			for _, o := range outs {
				o.prev = append(o.prev, in)
				in.next = append(in.next, o)
			}
		}
	}

	var queue []*ensembleTensor
	for _, in := range cfg.Input {
		n := tensors[in.Name]
		if n == nil {
			// Triton's message, unbalanced quote included.
			return invalid("ensemble input '%s' for ensemble %s' is not used", in.Name, name)
		}
		n.ready = true
		queue = append(queue, n)
	}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, next := range n.next {
			if next.ready {
				continue
			}
			ready := true
			for _, p := range next.prev {
				if !p.ready {
					ready = false
					break
				}
			}
			if ready {
				next.ready = true
				queue = append(queue, next)
			}
		}
	}
	outputs := map[string]bool{}
	for _, out := range cfg.Output {
		n := tensors[out.Name]
		if n == nil {
			return invalid("ensemble output '%s' for ensemble %s' is not used", out.Name, name)
		}
		if !n.ready {
			return invalid("output '%s' for ensemble '%s' is not written", out.Name, name)
		}
		outputs[out.Name] = true
	}
	for _, t := range sortedKeys(tensors) {
		if outputs[t] {
			continue
		}
		if n := tensors[t]; !n.ready || len(n.next) == 0 {
			return invalid("ensemble tensor '%s' is unused in ensemble '%s'", t, name)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Composing is what validating an ensemble needs to know of one of its
// composing models, as the repository (or a gateway's catalog) has it.
type Composing struct {
	// Config is the model's configuration as loaded (completed); nil when
	// the model has no loaded version.
	Config *inference.ModelConfig
	// Versions are its loaded (READY) versions.
	Versions []int64
	// Err is why the model failed to load, if it did.
	Err error
	// Invalid: Err is about the model's configuration, which is not valid.
	Invalid bool
}

// IsEnsemble reports whether cfg is an ensemble's configuration.
func IsEnsemble(cfg *inference.ModelConfig) bool { return cfg.GetEnsembleScheduling() != nil }

// ValidateComposition checks an ensemble against its composing models once
// they are known, as Triton's model repository manager does before it loads
// an ensemble (CheckNode, then ValidateEnsembleConfig), with its messages:
// every composing model exists and has the versions the steps ask for, the
// ensemble's max_batch_size is within each batching model's, each input_map
// and output_map names a real input or output, and a tensor's datatype and
// shape agree wherever it is produced or consumed (a non-batching model's
// [-1, dims...] matching a batching model's [dims...]). lookup says what the
// caller knows of a model; false: nothing (missing). It returns whether the
// ensemble is decoupled (a step on its data path is); a decoupled one with
// response_cache enabled is refused.
func ValidateComposition(cfg *inference.ModelConfig, lookup func(model string) (Composing, bool)) (decoupled bool, err error) {
	ens := cfg.GetEnsembleScheduling()
	if ens == nil {
		return false, nil
	}
	name := cfg.Name
	var missing []string
	for _, s := range ens.Step {
		if _, ok := lookup(s.ModelName); !ok && !slices.Contains(missing, s.ModelName) {
			missing = append(missing, s.ModelName)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return false, invalid("ensemble %s contains models that are not available or ambiguous: %s", name, strings.Join(missing, ", "))
	}
	if err := ensembleCycle(name, cfg, lookup, map[string]bool{}); err != nil {
		return false, err
	}
	configs := map[string]*inference.ModelConfig{}
	for _, s := range ens.Step {
		c, _ := lookup(s.ModelName)
		dep := s.ModelName
		switch {
		case c.Invalid && c.Err != nil:
			return false, invalid("ensemble '%s' depends on '%s' which is not valid. Model '%s' failed with error: %s", name, dep, dep, tritonerr.From(c.Err).Msg)
		case len(c.Versions) == 0 && c.Err != nil:
			return false, invalid("ensemble '%s' depends on '%s' which has no loaded version. Model '%s' loading failed with error: %s", name, dep, dep, tritonerr.From(c.Err).Msg)
		case len(c.Versions) == 0 || c.Config == nil:
			return false, invalid("ensemble '%s' depends on '%s' which has no loaded version.", name, dep)
		case s.ModelVersion >= 0 && !slices.Contains(c.Versions, s.ModelVersion):
			return false, invalid("ensemble '%s' depends on '%s' whose required version %d is not loaded.", name, dep, s.ModelVersion)
		}
		configs[dep] = c.Config
	}
	if cfg.GetResponseCache().GetEnable() {
		if seq := sequenceStep(cfg, lookup, map[string]bool{}); seq != "" {
			// Triton caches such an ensemble, keyed without the
			// sequence: a stateful step's answer depends on the requests
			// of its sequence before, so a cached one would be wrong.
			return false, invalid("Response Cache does not support ensemble %s, whose step model %s has a sequence batching scheduler (its responses depend on the sequence's earlier requests). Please disable the response cache.", name, seq)
		}
	}

	batching := cfg.MaxBatchSize > 0
	tensors := map[string]*tensorNode{}
	for _, in := range cfg.Input {
		dims := in.Dims
		if in.Reshape != nil {
			dims = in.Reshape.Shape
		}
		tensors[in.Name] = newTensorNode(name, batching, in.DataType, dims)
	}
	sink := &tensorNode{model: name}
	for _, out := range cfg.Output {
		dims := out.Dims
		if out.Reshape != nil {
			dims = out.Reshape.Shape
		}
		n := newTensorNode(name, batching, out.DataType, dims)
		tensors[out.Name] = n
		n.next = append(n.next, sink)
		sink.prev = append(sink.prev, n)
	}
	for _, s := range ens.Step {
		mc := configs[s.ModelName]
		if mc.MaxBatchSize != 0 && mc.MaxBatchSize < cfg.MaxBatchSize {
			return false, invalid("ensemble %s allows maximum batch size %d, but it contains model %s which only allows maximum batch size to be %d",
				name, cfg.MaxBatchSize, s.ModelName, mc.MaxBatchSize)
		}
		if err := mapStepTensors(name, s, mc, tensors); err != nil {
			return false, err
		}
	}
	decoupled, err = decoupledFlow(name, cfg, tensors)
	if err == nil && decoupled && cfg.GetResponseCache().GetEnable() {
		// A decoupled step on its data path makes the ensemble decoupled
		// (Triton sets its model_transaction_policy so): refused with the
		// cache as a model configured decoupled is (validateModel).
		return false, errDecoupledCache(name)
	}
	return decoupled, err
}

// tensorNode is Triton's TensorNode (ensemble_utils.cc): an ensemble
// tensor's datatype and shape, the model they were inferred from, and its
// place in the data flow for the decoupled check.
type tensorNode struct {
	model     string
	dtype     inference.DataType
	dims      []int64
	fullDims  []int64
	decoupled bool
	label     int
	visited   bool
	prev      []*tensorNode
	next      []*tensorNode
	sibling   *tensorNode // the outputs of one step share it
}

func newTensorNode(model string, batching bool, dt inference.DataType, dims []int64) *tensorNode {
	n := &tensorNode{model: model, dtype: dt, dims: dims}
	if batching {
		n.fullDims = append([]int64{WildcardDim}, dims...)
	} else {
		n.fullDims = dims
	}
	return n
}

func dimsMatch(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && a[i] != WildcardDim && b[i] != WildcardDim {
			return false
		}
	}
	return true
}

// dimsString is Triton's DimsListToString.
func dimsString(d []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, x := range d {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(x, 10))
	}
	b.WriteByte(']')
	return b.String()
}

func consistent(lhs, rhs *tensorNode, prefix string) error {
	if lhs.dtype != rhs.dtype {
		return invalid("%sinconsistent data type: %s is inferred from model %s while %s is inferred from model %s",
			prefix, lhs.dtype, lhs.model, rhs.dtype, rhs.model)
	}
	if !dimsMatch(lhs.dims, rhs.dims) && !dimsMatch(lhs.fullDims, rhs.fullDims) {
		return invalid("%sinconsistent shape: %s is inferred from model %s while %s is inferred from model %s",
			prefix, dimsString(lhs.fullDims), lhs.model, dimsString(rhs.fullDims), rhs.model)
	}
	return nil
}

// mapStepTensors is Triton's ValidateTensorMapping for one step.
func mapStepTensors(ensemble string, s *inference.ModelEnsembling_Step, mc *inference.ModelConfig, tensors map[string]*tensorNode) error {
	step := s.ModelName
	batching := mc.MaxBatchSize > 0
	for _, k := range sortedKeys(s.InputMap) {
		if findInputConfig(mc, k) == nil {
			return invalid("in ensemble %s, ensemble tensor %s is mapping to non-existing input %s in model %s", ensemble, s.InputMap[k], k, step)
		}
	}
	for _, in := range mc.Input {
		t, ok := s.InputMap[in.Name]
		if !ok {
			if in.Optional {
				continue
			}
			return invalid("in ensemble %s, input %s in model %s is not mapped to any ensemble tensors", ensemble, in.Name, step)
		}
		mt := newTensorNode(step, batching, in.DataType, in.Dims)
		if have := tensors[t]; have != nil {
			if err := consistent(have, mt, "in ensemble "+ensemble+", ensemble tensor "+t+": "); err != nil {
				return err
			}
		} else {
			tensors[t] = mt
		}
	}
	for _, k := range sortedKeys(s.OutputMap) {
		if findOutputConfig(mc, k) == nil {
			return invalid("in ensemble %s, ensemble tensor %s is mapped from non-existing output %s in model %s", ensemble, s.OutputMap[k], k, step)
		}
	}
	sibling := &tensorNode{model: step}
	for _, k := range sortedKeys(s.OutputMap) {
		t := s.OutputMap[k]
		out := findOutputConfig(mc, k)
		mt := newTensorNode(step, batching, out.DataType, out.Dims)
		have := tensors[t]
		if have != nil {
			if err := consistent(have, mt, "in ensemble "+ensemble+", ensemble tensor "+t+": "); err != nil {
				return err
			}
		} else {
			have = mt
			tensors[t] = mt
		}
		have.sibling = sibling
	}
	decoupled := mc.GetModelTransactionPolicy().GetDecoupled()
	for _, k := range sortedKeys(s.OutputMap) {
		n := tensors[s.OutputMap[k]]
		n.decoupled = decoupled
		for _, ik := range sortedKeys(s.InputMap) {
			p := tensors[s.InputMap[ik]]
			n.prev = append(n.prev, p)
			p.next = append(p.next, n)
		}
	}
	return nil
}

// decoupledFlow walks the data flow from the ensemble's inputs as Triton's
// ValidateEnsembleConfig does: a step may not take inputs that come from
// different decoupled models; the ensemble is decoupled when any tensor is
// produced downstream of a decoupled step.
func decoupledFlow(ensemble string, cfg *inference.ModelConfig, tensors map[string]*tensorNode) (bool, error) {
	label := 0
	var queue []*tensorNode
	for _, in := range cfg.Input {
		n := tensors[in.Name]
		n.visited = true
		queue = append(queue, n)
	}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, next := range cur.next {
			if next.visited {
				continue
			}
			ready := true
			for _, p := range next.prev {
				if !p.visited {
					ready = false
					break
				}
			}
			if !ready {
				continue
			}
			prevLabel := next.prev[0].label
			for _, p := range next.prev {
				if p.label != prevLabel {
					return false, invalid("in ensemble %s, step of model '%s' receives inputs originated from different decoupled models", ensemble, next.model)
				}
			}
			if next.sibling != nil {
				if next.sibling.visited {
					next.label = next.sibling.label
				} else {
					if next.decoupled {
						label++
						next.label = label
					} else {
						next.label = prevLabel
					}
					next.sibling.label = next.label
					next.sibling.visited = true
				}
			} else if next.decoupled {
				label++
				next.label = label
			} else {
				next.label = prevLabel
			}
			next.visited = true
			queue = append(queue, next)
		}
	}
	return label != 0, nil
}

func findInputConfig(cfg *inference.ModelConfig, name string) *inference.ModelInput {
	for _, in := range cfg.Input {
		if in.Name == name {
			return in
		}
	}
	return nil
}

func findOutputConfig(cfg *inference.ModelConfig, name string) *inference.ModelOutput {
	for _, out := range cfg.Output {
		if out.Name == name {
			return out
		}
	}
	return nil
}

// EnsembleModels lists the models an ensemble's steps name, each once, in
// step order.
func EnsembleModels(cfg *inference.ModelConfig) []string {
	var out []string
	for _, s := range cfg.GetEnsembleScheduling().GetStep() {
		if !slices.Contains(out, s.ModelName) {
			out = append(out, s.ModelName)
		}
	}
	return out
}

// ensembleCycle follows the composing ensembles of cur looking for start,
// as Triton's CircularDependencyCheck does, with its message.
func ensembleCycle(start string, cur *inference.ModelConfig, lookup func(string) (Composing, bool), seen map[string]bool) error {
	for _, dep := range EnsembleModels(cur) {
		if dep == start {
			return invalid("circular dependency between ensembles: %s -> ... -> %s -> %s", start, cur.Name, start)
		}
		if seen[dep] {
			continue
		}
		seen[dep] = true
		if c, ok := lookup(dep); ok && c.Config != nil && IsEnsemble(c.Config) {
			if err := ensembleCycle(start, c.Config, lookup, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// sequenceStep names a model with sequence batching among the ensemble's
// steps, nested ensembles' included; "" when there is none.
func sequenceStep(cfg *inference.ModelConfig, lookup func(model string) (Composing, bool), seen map[string]bool) string {
	for _, s := range cfg.GetEnsembleScheduling().GetStep() {
		if seen[s.ModelName] {
			continue
		}
		seen[s.ModelName] = true
		c, _ := lookup(s.ModelName)
		switch {
		case c.Config == nil:
		case c.Config.GetSequenceBatching() != nil:
			return s.ModelName
		case IsEnsemble(c.Config):
			if n := sequenceStep(c.Config, lookup, seen); n != "" {
				return n
			}
		}
	}
	return ""
}
