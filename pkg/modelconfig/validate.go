package modelconfig

import (
	"fmt"
	"math"
	"strconv"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// WildcardDim marks a variable-size dimension in dims and reshape.
const WildcardDim = -1

// Validate checks a normalized config with Triton's rules: the model-level
// checks (ValidateModelConfig), instance groups (ValidateInstanceGroup) and
// inputs, outputs and batch inputs/outputs (ValidateModelIOConfig), plus the
// syntax of sequence_batching state entries. Messages are Triton's.
func Validate(cfg *inference.ModelConfig) error {
	if err := validateModel(cfg); err != nil {
		return err
	}
	if err := validateInstanceGroups(cfg); err != nil {
		return err
	}
	return validateIO(cfg)
}

func invalid(format string, args ...any) error { return tritonerr.InvalidArgf(format, args...) }

// errDecoupledCache is Triton's refusal of a decoupled model with the
// response cache: the cache keeps one response per request, not a stream.
func errDecoupledCache(name string) error {
	return invalid("Response Cache does not currently support model %s with 'decoupled' transaction policy. Please disable the response cache.", name)
}

// backendOfPlatform is Triton's GetBackendTypeFromPlatform, returning the
// backend name or "" for platforms it does not know.
func backendOfPlatform(platform string) string {
	switch platform {
	case platformTFGraphDef, platformTFSavedModel:
		return backendTF
	case platformTensorRT:
		return backendTensorRT
	case platformONNX:
		return backendONNX
	case platformLibTorch:
		return backendPyTorch
	}
	return ""
}

func knownBackend(b string) bool {
	switch b {
	case backendTF, backendTensorRT, backendONNX, backendPyTorch:
		return true
	}
	return false
}

func validateModel(cfg *inference.ModelConfig) error {
	name := cfg.Name
	if name == "" {
		return invalid("model configuration must specify 'name'")
	}
	if cfg.Backend == "" {
		if cfg.Platform != platformEnsemble {
			return invalid("unexpected platform type '%s' for %s", cfg.Platform, name)
		}
	} else if cfg.Platform == platformEnsemble {
		return invalid("Ensemble model '%s' must have platform type '%s' and empty backend type", name, cfg.Platform)
	}
	if knownBackend(cfg.Backend) && backendOfPlatform(cfg.Platform) != cfg.Backend {
		return invalid("unexpected 'platform' and 'backend' pair, got:%s, %s", cfg.Platform, cfg.Backend)
	}
	if cfg.MaxBatchSize < 0 {
		return invalid("'max_batch_size' must be non-negative value for %s", name)
	}
	if cfg.VersionPolicy == nil {
		return invalid("must specify 'version policy' for %s", name)
	}

	if db := cfg.GetDynamicBatching(); db != nil {
		for _, size := range db.PreferredBatchSize {
			if size <= 0 {
				return invalid("dynamic batching preferred size must be positive for %s", name)
			}
			if size > cfg.MaxBatchSize {
				return invalid("dynamic batching preferred size must be <= max batch size for %s", name)
			}
		}
		levels := db.PriorityLevels
		if levels != 0 {
			if db.DefaultPriorityLevel == 0 || db.DefaultPriorityLevel > levels {
				return invalid("default priority level must be in range [1, %d] for %s", levels, name)
			}
			for level := range db.PriorityQueuePolicy {
				if level == 0 || level > levels {
					return invalid("priority queue policy must have priority level in range [1, %d] for %s", levels, name)
				}
			}
		}
		if db.PreserveOrdering {
			if levels > 1 {
				return invalid("Only one priority level is allowed when 'preserve_ordering' is true for %s", name)
			}
			policies := []*inference.ModelQueuePolicy{db.DefaultQueuePolicy}
			for _, p := range db.PriorityQueuePolicy {
				policies = append(policies, p)
			}
			for _, p := range policies {
				if p.GetDefaultTimeoutMicroseconds() != 0 && p.GetTimeoutAction() == inference.ModelQueuePolicy_DELAY {
					return invalid("Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for %s", name)
				}
			}
		}
	}

	if sb := cfg.GetSequenceBatching(); sb != nil {
		if cfg.GetResponseCache().GetEnable() {
			return invalid("Response Cache does not currently support model %s with sequence batching scheduler. Please disable the response cache.", name)
		}
		if sb.IterativeSequence {
			// Triton's iterative sequencer gives each request its own
			// sequence and runs it again whenever the backend releases it
			// with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE. Here the sequence
			// router forms sequence batches and executors never put a
			// request back into them, so such a model is refused at load
			// rather than served with requests that cannot be rescheduled.
			return tritonerr.Unsupportedf("sequence batching with 'iterative_sequence' is not supported for %s: requests released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE cannot be executed again", name)
		}
		for _, kind := range []inference.ModelSequenceBatching_Control_Kind{
			inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START,
			inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END,
			inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY,
		} {
			if _, err := BooleanControl(sb, name, kind); err != nil {
				return err
			}
		}
		corrid, err := CorrIDControl(sb, name)
		if err != nil {
			return err
		}
		if corrid != nil {
			switch corrid.DataType {
			case inference.DataType_TYPE_UINT64, inference.DataType_TYPE_INT64,
				inference.DataType_TYPE_UINT32, inference.DataType_TYPE_INT32,
				inference.DataType_TYPE_STRING:
			default:
				return invalid("unexpected data type for control CONTROL_SEQUENCE_CORRID for %s. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING", name)
			}
		}
		if o := sb.GetOldest(); o != nil {
			for _, size := range o.PreferredBatchSize {
				if size <= 0 {
					return invalid("sequence batching preferred batch size must be positive for %s", name)
				}
				if size > cfg.MaxBatchSize {
					return invalid("sequence batching preferred batch size must be <= max batch size for %s", name)
				}
			}
		}
		if d := sb.GetDirect(); d != nil {
			u := d.MinimumSlotUtilization
			if u < 0 || u > 1 || math.IsNaN(float64(u)) {
				return invalid("sequence batching minimum slot utilization must be in range (0.0, 1.0] for %s", name)
			}
		}
		if err := validateStates(cfg, sb, name); err != nil {
			return err
		}
	}
	if _, err := StateDurability(cfg); err != nil {
		return err
	}
	if _, err := RerunOnExecutorLoss(cfg); err != nil {
		return err
	}
	if _, err := MaxSequenceBacklog(cfg); err != nil {
		return err
	}
	if _, err := SequenceQueueTimeout(cfg); err != nil {
		return err
	}

	if ens := cfg.GetEnsembleScheduling(); ens != nil {
		if err := validateEnsemble(cfg, ens); err != nil {
			return err
		}
	} else if cfg.Platform == platformEnsemble {
		return invalid("ensemble scheduling must be set for ensemble %s whose platform is %s", name, platformEnsemble)
	}

	if cfg.GetModelTransactionPolicy().GetDecoupled() && cfg.GetResponseCache().GetEnable() {
		return errDecoupledCache(name)
	}

	if mm := cfg.ModelMetrics; mm != nil {
		for _, mc := range mm.MetricControl {
			switch {
			case mc.MetricIdentifier == nil:
				return invalid("metric control must specify 'metric_identifier'")
			case mc.MetricIdentifier.Family == "":
				return invalid("metric identifier must specify non-empty 'family'")
			case mc.GetHistogramOptions() == nil:
				return invalid("metric control must specify 'histogram_options'")
			case len(mc.GetHistogramOptions().Buckets) == 0:
				return invalid("histogram options must specify non-empty 'buckets'")
			}
		}
	}
	return nil
}

func validateEnsemble(cfg *inference.ModelConfig, ens *inference.ModelEnsembling) error {
	name := cfg.Name
	if cfg.Platform != platformEnsemble {
		return invalid("ensemble scheduling cannot be set for model '%s' whose platform is not %s", name, platformEnsemble)
	}
	if len(cfg.InstanceGroup) != 0 {
		return invalid("instance group should not be specified for ensemble '%s'", name)
	}
	if cfg.Optimization != nil {
		return invalid("optimization should not be specified for ensemble '%s'", name)
	}
	if len(cfg.ModelWarmup) != 0 {
		return invalid("model_warmup can not be specified for ensemble '%s'", name)
	}
	if len(ens.Step) == 0 {
		return invalid("must specify 'step' for ensemble '%s'", name)
	}
	return validateEnsembleFlow(cfg, ens) // ensemble.go
}

// BooleanControl returns the control input carrying a START, END or READY
// control, or nil when the config has none, checking the syntax Triton
// checks (GetBooleanSequenceControlProperties): named control inputs, no
// tensor used twice, the kind given at most once, and exactly one of
// int32_false_true, fp32_false_true or bool_false_true with two entries.
func BooleanControl(sb *inference.ModelSequenceBatching, model string, kind inference.ModelSequenceBatching_Control_Kind) (*Control, error) {
	var found *Control
	seen := map[string]bool{}
	for _, ci := range sb.ControlInput {
		if ci.Name == "" {
			return nil, invalid("sequence batching control tensor must have a name for %s", model)
		}
		if seen[ci.Name] {
			return nil, invalid("sequence batching control tensor '%s' is specified for multiple control kinds for %s", ci.Name, model)
		}
		seen[ci.Name] = true
		for _, c := range ci.Control {
			if c.Kind != kind {
				continue
			}
			if found != nil {
				return nil, invalid("sequence batching specifies multiple %s tensors for %s", kind, model)
			}
			ni, nf, nb := len(c.Int32FalseTrue), len(c.Fp32FalseTrue), len(c.BoolFalseTrue)
			set := 0
			for _, n := range []int{ni, nf, nb} {
				if n != 0 {
					set++
				}
			}
			if set == 0 {
				return nil, invalid("sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for %s for %s", kind, model)
			}
			if set > 1 {
				return nil, invalid("sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' for %s for %s", kind, model)
			}
			found = &Control{Input: ci.Name, Kind: kind, Config: c}
			switch {
			case ni > 0:
				if ni != 2 {
					return nil, invalid("sequence batching control 'int32_false_true' must have exactly 2 entries for %s for %s", kind, model)
				}
				found.DataType = inference.DataType_TYPE_INT32
			case nf > 0:
				if nf != 2 {
					return nil, invalid("sequence batching control 'fp32_false_true' must have exactly 2 entries for %s for %s", kind, model)
				}
				found.DataType = inference.DataType_TYPE_FP32
			default:
				if nb != 2 {
					return nil, invalid("sequence batching control 'bool_false_true' must have exactly 2 entries for %s for %s", kind, model)
				}
				found.DataType = inference.DataType_TYPE_BOOL
			}
		}
	}
	return found, nil
}

// CorrIDControl returns the control input carrying CONTROL_SEQUENCE_CORRID,
// or nil, checking Triton's syntax (GetTypedSequenceControlProperties): the
// datatype comes from data_type and no *_false_true list may be given.
// Validate also checks that the datatype is one Triton allows.
func CorrIDControl(sb *inference.ModelSequenceBatching, model string) (*Control, error) {
	kind := inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID
	var found *Control
	seen := map[string]bool{}
	for _, ci := range sb.ControlInput {
		if ci.Name == "" {
			return nil, invalid("sequence batching control tensor must have a name for %s", model)
		}
		if seen[ci.Name] {
			return nil, invalid("sequence batching control tensor '%s' is specified for multiple control kinds for %s", ci.Name, model)
		}
		seen[ci.Name] = true
		for _, c := range ci.Control {
			if c.Kind != kind {
				continue
			}
			if found != nil {
				return nil, invalid("sequence batching specifies multiple %s tensors for %s", kind, model)
			}
			found = &Control{Input: ci.Name, Kind: kind, DataType: c.DataType, Config: c}
			if len(c.Int32FalseTrue) > 0 || len(c.Fp32FalseTrue) > 0 || len(c.BoolFalseTrue) > 0 {
				return nil, invalid("sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for %s for %s", kind, model)
			}
		}
	}
	return found, nil
}

// Control describes one sequence-batcher control as the batcher injects it.
type Control struct {
	// Input is the model input that carries the control.
	Input string
	Kind  inference.ModelSequenceBatching_Control_Kind
	// DataType is TYPE_INT32, TYPE_FP32 or TYPE_BOOL for the boolean
	// controls (from which *_false_true list is set), and the configured
	// data_type for CORRID.
	DataType inference.DataType
	Config   *inference.ModelSequenceBatching_Control
}

// validateStates checks the implicit-state entries. The syntax checks
// (names, data type, dims) are Nereid's, in Triton's style; the initial_state
// checks are Triton's (SequenceBatchScheduler::Create and
// GenerateInitialStateData, SequenceStates::Initialize), in Triton's order
// and words. The checks that need the model's files (a data_file's size)
// run when the executor loads the model (its internal/seqstate).
func validateStates(cfg *inference.ModelConfig, sb *inference.ModelSequenceBatching, model string) error {
	withInitial := map[string]bool{}
	for _, st := range sb.State {
		if st.InputName == "" {
			return invalid("sequence batching state must specify 'input_name' for %s", model)
		}
		if st.OutputName == "" {
			return invalid("sequence batching state '%s' must specify 'output_name' for %s", st.InputName, model)
		}
		if st.DataType == inference.DataType_TYPE_INVALID {
			return invalid("sequence batching state '%s' must specify 'data_type' for %s", st.InputName, model)
		}
		if len(st.Dims) == 0 {
			return invalid("sequence batching state '%s' must specify 'dims' for %s", st.InputName, model)
		}
		for _, d := range st.Dims {
			if d < 1 && d != WildcardDim {
				return invalid("sequence batching state '%s' dimension must be integer >= 1, or %d to indicate a variable-size dimension for %s", st.InputName, WildcardDim, model)
			}
		}
		if n := len(st.InitialState); n > 1 {
			return invalid("initial_state field for state input '%s' must contain exactly one or zero element. Found '%d' elements.", st.InputName, n)
		}
		if len(st.InitialState) == 1 {
			if err := validateInitialState(st, st.InitialState[0], withInitial); err != nil {
				return err
			}
		}
	}
	for _, st := range sb.State {
		if !st.UseGrowableMemory {
			continue
		}
		if !st.UseSameBufferForInputOutput {
			return invalid("In order to 'use_growable_memory', you must also enable 'use_single_buffer' for state input name '%s'.", st.InputName)
		}
		for _, g := range cfg.InstanceGroup {
			if g.Kind != inference.ModelInstanceGroup_KIND_GPU {
				return invalid("'use_growable_memory' can only work with KIND_GPU model instances right now. Please either change the instance type to KIND_GPU or set 'use_growable_memory' to false for state input '%s'.", st.InputName)
			}
		}
	}
	return nil
}

// validateInitialState is the part of Triton's GenerateInitialStateData
// that needs no file. seen holds the state inputs that already have an
// initial state.
func validateInitialState(st *inference.ModelSequenceBatching_State, is *inference.ModelSequenceBatching_InitialState, seen map[string]bool) error {
	if is.DataType != st.DataType {
		return invalid("The data type used for 'initial_state' field of state '%s' does not match the state data type.", st.InputName)
	}
	if is.Name == "" {
		return invalid("Field 'name' must be set when using initial_state for state input '%s'.", st.InputName)
	}
	if seen[st.InputName] {
		return invalid("State input name '%s' specified more than once.", st.InputName)
	}
	seen[st.InputName] = true
	if len(is.Dims) != len(st.Dims) {
		return invalid("Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state input '%s'. %d != %d", st.InputName, len(is.Dims), len(st.Dims))
	}
	for i, d := range is.Dims {
		if d == WildcardDim {
			return invalid("'initial_state' field for state input name '%s' contains variable dimensions.", st.InputName)
		}
		if st.Dims[i] != WildcardDim && d != st.Dims[i] {
			return invalid("'initial_state' dim for input name '%s' doesn't match 'state' dim description. %d != %d", st.InputName, d, st.Dims[i])
		}
	}
	if is.StateData == nil {
		return invalid("initial_state setting expects state'%s' to have state_data set", st.InputName)
	}
	return nil
}

func validateInstanceGroups(cfg *inference.ModelConfig) error {
	if cfg.GetEnsembleScheduling() != nil {
		return nil
	}
	if len(cfg.InstanceGroup) == 0 {
		return invalid("must specify one or more 'instance group's for %s", cfg.Name)
	}
	for _, g := range cfg.InstanceGroup {
		switch g.Kind {
		case inference.ModelInstanceGroup_KIND_MODEL:
			if len(g.Gpus) > 0 {
				return invalid("instance group %s of model %s has kind KIND_MODEL but specifies one or more GPUs", g.Name, cfg.Name)
			}
		case inference.ModelInstanceGroup_KIND_GPU:
			// Device checks belong to the executor that owns the GPUs.
		case inference.ModelInstanceGroup_KIND_CPU:
			if len(g.Gpus) > 0 {
				return invalid("instance group %s of model %s has kind KIND_CPU but specifies one or more GPUs", g.Name, cfg.Name)
			}
		default:
			return tritonerr.Internalf("instance group %s of model %s has unexpected kind %s", g.Name, cfg.Name, g.Kind)
		}
		if cfg.Platform != platformTensorRT && len(g.Profile) > 0 {
			// Triton's message lacks a space before "specifies"; kept verbatim.
			return invalid("instance group %s of model %s and platform %sspecifies profile field which is only supported for TensorRT models", g.Name, cfg.Name, cfg.Platform)
		}
		for _, p := range g.Profile {
			if p == "" {
				return invalid("profile name must not be empty")
			}
			if n, err := strconv.Atoi(p); err != nil || n < 0 {
				return invalid("instance group %s of model %s and platform %s specifies invalid profile %s. The field should contain the string representation of a non-negative integer.", g.Name, cfg.Name, cfg.Platform, p)
			}
		}
	}
	return nil
}

func validateIO(cfg *inference.ModelConfig) error {
	for _, in := range cfg.Input {
		if err := validateInput(in, cfg.MaxBatchSize, cfg.Platform); err != nil {
			return invalid("%s for %s", err, cfg.Name)
		}
	}
	for _, out := range cfg.Output {
		if err := validateOutput(out, cfg.MaxBatchSize, cfg.Platform); err != nil {
			return invalid("%s for %s", err, cfg.Name)
		}
	}
	if err := validateBatchIO(cfg); err != nil {
		return invalid("%s for %s", err, cfg.Name)
	}
	return nil
}

func validateInput(in *inference.ModelInput, maxBatch int32, platform string) error {
	if err := validateShape(in.Name, in.DataType, in.Dims, in.Reshape, maxBatch, "model input "); err != nil {
		return err
	}
	if (in.Format == inference.ModelInput_FORMAT_NHWC || in.Format == inference.ModelInput_FORMAT_NCHW) && len(in.Dims) != 3 {
		return fmt.Errorf("model input NHWC/NCHW require 3 dims")
	}
	if platform != platformTensorRT && in.IsShapeTensor {
		return fmt.Errorf("shape tensors are only supported for TensorRT platform")
	}
	return validateNonLinear(in.IsNonLinearFormatIo, len(in.Dims), platform, "input")
}

func validateOutput(out *inference.ModelOutput, maxBatch int32, platform string) error {
	if err := validateShape(out.Name, out.DataType, out.Dims, out.Reshape, maxBatch, "model output "); err != nil {
		return err
	}
	if platform != platformTensorRT && out.IsShapeTensor {
		return fmt.Errorf("shape tensors are only supported for TensorRT platform")
	}
	return validateNonLinear(out.IsNonLinearFormatIo, len(out.Dims), platform, "output")
}

func validateNonLinear(set bool, ndims int, platform, what string) error {
	if !set {
		return nil
	}
	if platform != platformTensorRT {
		return fmt.Errorf("Non-linear IO format is only supported for the TensorRT platform")
	}
	if ndims != 3 {
		return fmt.Errorf("Non-linear IO format %s requires 3 dims", what)
	}
	return nil
}

// validateShape is Triton's ValidateIOShape.
func validateShape(name string, dt inference.DataType, dims []int64, reshape *inference.ModelTensorReshape, maxBatch int32, prefix string) error {
	if name == "" {
		return fmt.Errorf("%smust specify 'name'", prefix)
	}
	p := prefix + "'" + name + "' "
	if dt == inference.DataType_TYPE_INVALID {
		return fmt.Errorf("%smust specify 'data_type'", p)
	}
	if _, ok := inference.DataType_name[int32(dt)]; !ok {
		return fmt.Errorf("%shas unknown 'data_type' %d", p, dt)
	}
	if len(dims) == 0 {
		return fmt.Errorf("%smust specify 'dims'", p)
	}
	if reshape != nil && len(reshape.Shape) == 0 && maxBatch == 0 {
		return fmt.Errorf("%scannot have empty reshape for non-batching model as scalar tensors are not supported", p)
	}
	for _, d := range dims {
		if d < 1 && d != WildcardDim {
			return fmt.Errorf("%sdimension must be integer >= 1, or %d to indicate a variable-size dimension", p, WildcardDim)
		}
	}
	if reshape == nil {
		return nil
	}
	for _, d := range reshape.Shape {
		if d < 1 && d != WildcardDim {
			return fmt.Errorf("%sreshape dimensions must be integer >= 1, or %d to indicate a variable-size dimension", p, WildcardDim)
		}
	}
	dimsSize, err := elementCount(dims, name+" dims")
	if err != nil {
		return err
	}
	reshapeSize, err := elementCount(reshape.Shape, name+" reshape")
	if err != nil {
		return err
	}
	// An empty reshape (a scalar per batch item) needs dims of one element.
	if dimsSize != reshapeSize && (reshapeSize != 0 || dimsSize != 1) {
		return fmt.Errorf("%shas different size for dims and reshape", p)
	}
	if dimsSize == WildcardDim {
		// With variable dimensions, the fixed runs between them must match:
		// [2, 4, -1, 6] may become [8, -1, 1, 6].
		a, b := runs(dims), runs(reshape.Shape)
		if len(a) != len(b) {
			return fmt.Errorf("%shas different number of variable-size dimensions for dims and reshape", p)
		}
		for i := range a {
			if a[i] != b[i] {
				return fmt.Errorf("%shas different size for dims and reshape", p)
			}
		}
	}
	return nil
}

// elementCount is Triton's GetElementCount: -1 when any dimension is
// variable, 0 for an empty shape, else the product, guarded against
// overflow.
func elementCount(dims []int64, what string) (int64, error) {
	if len(dims) == 0 {
		return 0, nil
	}
	n := int64(1)
	for _, d := range dims {
		if d == WildcardDim {
			return WildcardDim, nil
		}
	}
	for _, d := range dims {
		if d > 0 && n > math.MaxInt64/d {
			return 0, fmt.Errorf("unexpected integer overflow while calculating element count for %s", what)
		}
		n *= d
	}
	return n, nil
}

// runs splits dims at variable dimensions and returns the product of each
// fixed run. Dims are validated >= 1 before this is called, but the products
// still saturate rather than overflow.
func runs(dims []int64) []int64 {
	var out []int64
	cur := int64(1)
	for _, d := range dims {
		if d == WildcardDim {
			out = append(out, cur)
			cur = 1
			continue
		}
		if d > 0 && cur > math.MaxInt64/d {
			cur = math.MaxInt64
		} else {
			cur *= d
		}
	}
	return append(out, cur)
}

func validateBatchIO(cfg *inference.ModelConfig) error {
	inputs := map[string]bool{}
	outputs := map[string]bool{}
	for _, in := range cfg.Input {
		inputs[in.Name] = true
	}
	for _, out := range cfg.Output {
		outputs[out.Name] = true
	}
	for _, bi := range cfg.BatchInput {
		if _, ok := inference.BatchInput_Kind_name[int32(bi.Kind)]; !ok {
			return fmt.Errorf("unknown batch input kind '%s'", bi.Kind)
		}
		if len(bi.SourceInput) != 1 {
			return fmt.Errorf("batch input kind '%s' expects 1 source input, got %d", bi.Kind, len(bi.SourceInput))
		}
		if bi.DataType != inference.DataType_TYPE_INT32 && bi.DataType != inference.DataType_TYPE_FP32 {
			return fmt.Errorf("batch input data type must be TYPE_INT32 or TYPE_FP32")
		}
		for _, s := range bi.SourceInput {
			if !inputs[s] {
				return fmt.Errorf("unknown source input name '%s'", s)
			}
		}
	}
	for _, bo := range cfg.BatchOutput {
		if bo.Kind != inference.BatchOutput_BATCH_SCATTER_WITH_INPUT_SHAPE {
			return fmt.Errorf("unknown batch output kind '%s'", bo.Kind)
		}
		if len(bo.SourceInput) != 1 {
			return fmt.Errorf("batch output kind '%s' expects 1 source input, got %d", bo.Kind, len(bo.SourceInput))
		}
		for _, s := range bo.SourceInput {
			if !inputs[s] {
				return fmt.Errorf("unknown source input name '%s'", s)
			}
		}
		targets := map[string]bool{}
		for _, t := range bo.TargetName {
			if !outputs[t] {
				return fmt.Errorf("unknown target output name '%s'", t)
			}
			if targets[t] {
				return fmt.Errorf("target output name '%s' can only be specified once", t)
			}
			targets[t] = true
		}
	}
	return nil
}
