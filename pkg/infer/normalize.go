package infer

import (
	"slices"
	"strings"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Request parameters that Triton turns into request fields instead of
// passing them to the backend (common.h kReservedParameterKeys).
var reserved = map[string]bool{
	"sequence_id": true, "sequence_start": true, "sequence_end": true,
	"priority": true, "timeout": true, "headers": true, "binary_data_output": true,
}

// Normalize validates req against cfg exactly as Triton's core does before a
// request reaches a backend (InferenceRequest::Normalize, then
// ValidateRequestInputs), with Triton's messages, and fills r (made with
// backend.NewRequest) with the backend's view of it: inputs with the batch
// dimension split off and checked, reshaped per the config, their data
// slicing req.RawInputContents (no copy); the requested outputs (all of the
// config's when none are named); parameters, correlation id and flags.
//
// All input data must be in req.RawInputContents, one entry per input, as
// the gateway sends it over the bus. Every error is an INVALID_ARG
// *tritonerr.Error.
func Normalize(cfg *inference.ModelConfig, req *inference.ModelInferRequest, r *backend.Request) error {
	return normalize(cfg, req, r, nil)
}

// NormalizeShm is Normalize for a caller that cannot read the inputs kept
// in shared memory (the gateway, before a sequence request goes to the
// router): shmSizes gives, by input index, the byte size such an input
// declares. Its data is not looked at: a fixed-size input's declared size
// must still be exact (Triton's byte size mismatch), a BYTES input is
// checked by the executor, which reads it.
func NormalizeShm(cfg *inference.ModelConfig, req *inference.ModelInferRequest, r *backend.Request, shmSizes map[int]uint64) error {
	return normalize(cfg, req, r, shmSizes)
}

func normalize(cfg *inference.ModelConfig, req *inference.ModelInferRequest, r *backend.Request, shmSizes map[int]uint64) error {
	model := cfg.GetName()
	v := validator{model: model, prefix: logRequest(req.GetId())}

	inputs := req.GetInputs()
	raw := req.GetRawInputContents()
	if len(raw) != len(inputs) {
		return v.errf("expected %d raw input contents, one per input, got %d for model '%s'", len(inputs), len(raw), model)
	}

	r.ID = req.GetId()
	if states := cfg.GetSequenceBatching().GetState(); len(states) > 0 {
		outs := make([]string, len(states))
		for i, st := range states {
			outs[i] = st.GetOutputName()
		}
		r.SetStates(model, outs)
	} else {
		r.SetStates(model, nil)
	}
	if err := v.parameters(req.GetParameters(), r); err != nil {
		return err
	}

	// Duplicate names are rejected when the request is built
	// (InferenceRequest::AddOriginalInput).
	for i, in := range inputs {
		for _, prev := range inputs[:i] {
			if prev.GetName() == in.GetName() {
				return v.errf("input '%s' already exists in request", in.GetName())
			}
		}
	}

	// Requested outputs must exist; none requested means all of them.
	r.RequestedOutputs = r.RequestedOutputs[:0]
	if len(req.GetOutputs()) == 0 {
		for _, o := range cfg.GetOutput() {
			r.RequestedOutputs = append(r.RequestedOutputs, o.GetName())
		}
	} else {
		for _, o := range req.GetOutputs() {
			name := o.GetName()
			// A name given twice is rejected when the request is built
			// (InferenceRequest::AddOriginalRequestedOutput), before the
			// model's outputs are looked at.
			if contains(r.RequestedOutputs, name) {
				return v.errf("output '%s' already exists in request", name)
			}
			r.RequestedOutputs = append(r.RequestedOutputs, name)
		}
		for _, name := range r.RequestedOutputs {
			if findOutput(cfg, name) == nil {
				return tritonerr.InvalidArgf("%sunexpected inference output '%s' for model '%s'", v.prefix, name, model)
			}
		}
		if _, err := ClassificationCounts(req.GetOutputs()); err != nil {
			return err
		}
	}

	// Triton keeps inputs in an unordered_map and checks them in its
	// iteration order, which for libstdc++ is the reverse of insertion: with
	// two bad inputs, the error names the last one. Walk them the same way
	// so that messages match Triton's.
	order := make([]int, len(inputs))
	for i := range order {
		order[i] = len(inputs) - 1 - i
	}

	if err := v.inputCount(cfg, inputs, order); err != nil {
		return err
	}

	// Find each input's config; an unknown name fails here (Model::GetInput).
	configs := make([]*inference.ModelInput, len(inputs))
	for _, i := range order {
		mi := findInput(cfg, inputs[i].GetName())
		if mi == nil {
			return v.errf("unexpected inference input '%s' for model '%s'", inputs[i].GetName(), model)
		}
		configs[i] = mi
	}

	// A negative or overflowing dimension is named as such, before the batch
	// sizes are compared (a negative first dimension would otherwise read
	// as a batch mismatch).
	for _, i := range order {
		shape := inputs[i].GetShape()
		if slices.Contains(shape, -1) {
			return v.errf("All input dimensions should be specified for input '%s' for model '%s', got %s",
				inputs[i].GetName(), model, tensor.DimsString(shape))
		}
		if _, err := tensor.ElementCount(inputs[i].GetName(), shape); err != nil {
			return tritonerr.InvalidArgf("%s%s for model '%s'", v.prefix, tritonerr.From(err).Msg, model)
		}
	}

	// Batch size: the first dimension shared by every non-shape-tensor input.
	batch := int64(0)
	if cfg.GetMaxBatchSize() > 0 {
		for _, i := range order {
			if configs[i].GetIsShapeTensor() {
				continue
			}
			shape := inputs[i].GetShape()
			if len(shape) == 0 {
				return v.errf("input '%s' has no shape but model requires batch dimension for '%s'", inputs[i].GetName(), model)
			}
			if batch == 0 {
				batch = shape[0]
			} else if shape[0] != batch {
				return v.errf("input '%s' batch size does not match other inputs for '%s'", inputs[i].GetName(), model)
			}
		}
	}
	if batch > int64(cfg.GetMaxBatchSize()) {
		return v.errf("inference request batch-size must be <= %d for '%s'", cfg.GetMaxBatchSize(), model)
	}
	if batch < 0 {
		return v.errf("inference request batch-size must be >= 0 for '%s', got %d", model, batch)
	}
	r.BatchSize = int(batch)

	// A caller may lend room for the inputs (r.Inputs' capacity), as it
	// may for the requested outputs: a scheduler's entry for the request.
	if cap(r.Inputs) >= len(inputs) {
		r.Inputs = r.Inputs[:len(inputs)]
		clear(r.Inputs)
	} else {
		r.Inputs = make([]backend.Input, len(inputs))
	}
	for _, i := range order {
		in, mi := inputs[i], configs[i]
		dt, err := v.datatype(in, mi)
		if err != nil {
			return err
		}
		shape, err := v.shape(cfg, in, mi, batch)
		if err != nil {
			return err
		}
		r.Inputs[i] = backend.Input{Name: in.GetName(), DataType: dt, Shape: shape, Data: raw[i]}
	}

	// ValidateRequestInputs: the data must be exactly what the shape says.
	for _, i := range order {
		bi := &r.Inputs[i]
		if size, ok := shmSizes[i]; ok {
			if bi.DataType == tensor.Bytes {
				continue
			}
			want, err := tensor.ByteSize(bi.Name, bi.DataType, bi.Shape)
			if err != nil {
				return err
			}
			if uint64(want) != size {
				return v.errf("input byte size mismatch for input '%s' for model '%s'. Expected %d, got %d", bi.Name, model, want, size)
			}
			continue
		}
		if err := tensor.ValidateInput(req.GetId(), bi.Name, model, bi.DataType, bi.Shape, bi.Data); err != nil {
			return err
		}
	}
	return nil
}

type validator struct {
	model  string
	prefix string
}

// errf is an INVALID_ARG error with Triton's "[request id: X] " prefix.
func (v *validator) errf(format string, args ...any) error {
	e := tritonerr.InvalidArgf(format, args...)
	e.Msg = v.prefix + e.Msg
	return e
}

// logRequest is Triton's LogRequest(): the request id in brackets, or
// nothing for a request without one (as pkg/tensor does).
func logRequest(id string) string {
	if id == "" {
		return ""
	}
	return "[request id: " + id + "] "
}

// inputCount is Normalize's check that the request has as many inputs as
// the model requires, with the missing ones named.
func (v *validator) inputCount(cfg *inference.ModelConfig, inputs []*inference.ModelInferRequest_InferInputTensor, order []int) error {
	total, required := len(cfg.GetInput()), 0
	var missing []string
	for _, mi := range cfg.GetInput() {
		if mi.GetOptional() {
			continue
		}
		required++
		found := false
		for _, in := range inputs {
			if in.GetName() == mi.GetName() {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, mi.GetName())
		}
	}
	// Triton only checks the count; a required input replaced by an
	// unknown one is caught below as unexpected. A required input missing
	// while the count is in range (optional inputs given instead) is caught
	// here with the same message, which is more helpful than the backend's.
	if len(inputs) <= total && len(inputs) >= required {
		unknown := false
		for _, in := range inputs {
			if findInput(cfg, in.GetName()) == nil {
				unknown = true
			}
		}
		if len(missing) == 0 || unknown {
			return nil
		}
	}
	got := make([]string, 0, len(inputs))
	for _, i := range order {
		got = append(got, inputs[i].GetName())
	}
	tail := ". Got input(s) " + quoteList(got) + ", but missing required input(s) " + quoteList(missing) +
		". Please provide all required input(s)."
	if total == required {
		return v.errf("expected %d inputs but got %d inputs for model '%s'%s", total, len(inputs), v.model, tail)
	}
	return v.errf("expected number of inputs between %d and %d but got %d inputs for model '%s'%s",
		required, total, len(inputs), v.model, tail)
}

// quoteList prints names as Triton does: ['A','B'].
func quoteList(names []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('\'')
		b.WriteString(n)
		b.WriteByte('\'')
	}
	b.WriteByte(']')
	return b.String()
}

func (v *validator) datatype(in *inference.ModelInferRequest_InferInputTensor, mi *inference.ModelInput) (tensor.DataType, error) {
	want := tensor.FromConfig(mi.GetDataType())
	got, ok := tensor.ParseDataType(in.GetDatatype())
	if !ok || got != want {
		name := in.GetDatatype()
		if !ok {
			name = tensor.Invalid.String()
		}
		return 0, v.errf("inference input '%s' data-type is '%s', but model '%s' expects '%s'",
			in.GetName(), name, v.model, want.String())
	}
	return got, nil
}

// shape checks an input's shape against its config dims and returns the
// shape the backend sees: batch dimension first (for batching models),
// the rest reshaped per the config.
func (v *validator) shape(cfg *inference.ModelConfig, in *inference.ModelInferRequest_InferInputTensor, mi *inference.ModelInput, batch int64) ([]int64, error) {
	orig := in.GetShape()
	if mi.GetIsShapeTensor() {
		// Shape tensors keep their shape as given (no batch dimension split).
		return orig, nil
	}
	dims := orig
	batching := cfg.GetMaxBatchSize() > 0
	if batching {
		dims = orig[1:]
	}
	cdims := mi.GetDims()
	match := len(cdims) == len(dims)
	if match {
		for i, d := range dims {
			if d == -1 {
				return nil, v.errf("All input dimensions should be specified for input '%s' for model '%s', got %s",
					in.GetName(), v.model, tensor.DimsString(orig))
			}
			if cdims[i] != -1 && cdims[i] != d {
				match = false
				break
			}
		}
	}
	if !match {
		full := make([]int64, 0, len(cdims)+1)
		if batching {
			full = append(full, -1)
		}
		full = append(full, cdims...)
		return nil, v.errf("unexpected shape for input '%s' for model '%s'. Expected %s, got %s",
			in.GetName(), v.model, tensor.DimsString(full), tensor.DimsString(orig))
	}

	rs := mi.GetReshape()
	if rs == nil && len(orig) > 0 && (!batching || orig[0] == batch) {
		// The shape as given, capped so that appending to it copies: no
		// copy of its own (one allocation per input).
		return orig[:len(orig):len(orig)], nil
	}
	out := make([]int64, 0, len(dims)+1)
	if batching {
		out = append(out, batch)
	}
	if rs != nil {
		// Variable dims of the input fill the reshape's -1s in order.
		var vars []int64
		for i, d := range cdims {
			if d == -1 {
				vars = append(vars, dims[i])
			}
		}
		for _, d := range rs.GetShape() {
			if d == -1 && len(vars) > 0 {
				d, vars = vars[0], vars[1:]
			}
			out = append(out, d)
		}
		return out, nil
	}
	return append(out, dims...), nil
}

// parameters turns the request parameters Triton treats as request fields
// into them, with the messages of Triton's gRPC front end, and keeps the
// others for the backend.
func (v *validator) parameters(params map[string]*inference.InferParameter, r *backend.Request) error {
	r.Flags = 0
	r.CorrelationID = backend.CorrelationID{}
	r.Parameters = nil
	for key, p := range params {
		switch key {
		case "sequence_id":
			switch c := p.GetParameterChoice().(type) {
			case *inference.InferParameter_Int64Param:
				r.CorrelationID = backend.CorrelationUint(uint64(c.Int64Param))
			case *inference.InferParameter_Uint64Param:
				r.CorrelationID = backend.CorrelationUint(c.Uint64Param)
			case *inference.InferParameter_StringParam:
				r.CorrelationID = backend.CorrelationString(c.StringParam)
			default:
				return tritonerr.InvalidArgf("invalid value type for 'sequence_id' parameter, expected int64_param or string_param.")
			}
		case "sequence_start", "sequence_end":
			c, ok := p.GetParameterChoice().(*inference.InferParameter_BoolParam)
			if !ok {
				return tritonerr.InvalidArgf("invalid value type for '%s' parameter, expected bool_param.", key)
			}
			if c.BoolParam {
				if key == "sequence_start" {
					r.Flags |= backend.SequenceStart
				} else {
					r.Flags |= backend.SequenceEnd
				}
			}
		default:
			if reserved[key] {
				continue
			}
			if r.Parameters == nil {
				r.Parameters = make(map[string]any, len(params))
			}
			switch c := p.GetParameterChoice().(type) {
			case *inference.InferParameter_BoolParam:
				r.Parameters[key] = c.BoolParam
			case *inference.InferParameter_Int64Param:
				r.Parameters[key] = c.Int64Param
			case *inference.InferParameter_Uint64Param:
				r.Parameters[key] = c.Uint64Param
			case *inference.InferParameter_DoubleParam:
				r.Parameters[key] = c.DoubleParam
			case *inference.InferParameter_StringParam:
				r.Parameters[key] = c.StringParam
			}
		}
	}
	return nil
}

func findInput(cfg *inference.ModelConfig, name string) *inference.ModelInput {
	for _, mi := range cfg.GetInput() {
		if mi.GetName() == name {
			return mi
		}
	}
	return nil
}

func findOutput(cfg *inference.ModelConfig, name string) *inference.ModelOutput {
	for _, mo := range cfg.GetOutput() {
		if mo.GetName() == name {
			return mo
		}
	}
	return nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
