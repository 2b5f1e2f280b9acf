package modelconfig

import (
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// InputByName returns the configured input called name, or nil.
func InputByName(cfg *inference.ModelConfig, name string) *inference.ModelInput {
	for _, in := range cfg.GetInput() {
		if in.Name == name {
			return in
		}
	}
	return nil
}

// OutputByName returns the configured output called name, or nil.
func OutputByName(cfg *inference.ModelConfig, name string) *inference.ModelOutput {
	for _, out := range cfg.GetOutput() {
		if out.Name == name {
			return out
		}
	}
	return nil
}

// FullShape is the shape a request tensor must have for config dims: dims
// themselves, or -1 (any batch size) followed by dims when the model batches
// (max_batch_size > 0). This is also the shape model metadata reports.
func FullShape(cfg *inference.ModelConfig, dims []int64) []int64 {
	if cfg.GetMaxBatchSize() <= 0 {
		return append([]int64(nil), dims...)
	}
	return append([]int64{WildcardDim}, dims...)
}

// MaxSequenceIdleMicroseconds is the sequence idle timeout with Triton's
// default applied, or 0 when the model has no sequence batcher.
func MaxSequenceIdleMicroseconds(cfg *inference.ModelConfig) uint64 {
	sb := cfg.GetSequenceBatching()
	if sb == nil {
		return 0
	}
	if sb.MaxSequenceIdleMicroseconds == 0 {
		return DefaultMaxSequenceIdleMicroseconds
	}
	return sb.MaxSequenceIdleMicroseconds
}

// IsDecoupled reports whether the model may send any number of responses per
// request.
func IsDecoupled(cfg *inference.ModelConfig) bool {
	return cfg.GetModelTransactionPolicy().GetDecoupled()
}

// Durability is where a sequence model's implicit state lives besides the
// executor running the sequence (Nereid's model parameter
// "state_durability").
type Durability uint8

const (
	// DurabilityNone: the state lives only with its executor, as in Triton;
	// a lost executor loses its sequences.
	DurabilityNone Durability = iota
	// DurabilityRedis: every new output state is written to Redis before
	// the response is sent, so that another executor continues the
	// sequence when its executor is lost.
	DurabilityRedis
)

// DurabilityParameter is the model config parameter that asks for durable
// implicit state: parameters { key: "state_durability" value: {
// string_value: "redis" } }.
const DurabilityParameter = "state_durability"

// StateDurability reads the model's "state_durability" parameter: absent,
// empty or "none" is DurabilityNone, "redis" is DurabilityRedis; anything
// else, or "redis" on a model without sequence_batching.state (only
// implicit state can be made durable), is an error naming the value.
func StateDurability(cfg *inference.ModelConfig) (Durability, error) {
	p, ok := cfg.GetParameters()[DurabilityParameter]
	if !ok {
		return DurabilityNone, nil
	}
	switch v := p.GetStringValue(); v {
	case "", "none":
		return DurabilityNone, nil
	case "redis":
		if len(cfg.GetSequenceBatching().GetState()) == 0 {
			return DurabilityNone, tritonerr.InvalidArgf("model '%s' sets parameter '%s' to 'redis' but has no sequence_batching state: only implicit state can be made durable", cfg.GetName(), DurabilityParameter)
		}
		return DurabilityRedis, nil
	default:
		return DurabilityNone, tritonerr.InvalidArgf("model '%s': unknown value '%s' of parameter '%s' (expected 'redis' or 'none')", cfg.GetName(), v, DurabilityParameter)
	}
}

// RerunParameter is the model config parameter that says whether a request
// whose executor was lost while holding it may run again on another
// executor: parameters { key: "rerun_on_executor_loss" value: {
// string_value: "true" } } (or "false").
const RerunParameter = "rerun_on_executor_loss"

// Rerun is a model's answer to RerunParameter.
type Rerun uint8

const (
	// RerunDefault: the parameter is absent; the gateway decides (it reruns
	// a request only where the model's backend cannot take an executor
	// down: a request lost with an executor on a Triton C backend may be
	// what crashed it, and would crash the next one).
	RerunDefault Rerun = iota
	// RerunAlways: "true": run it again, whatever the backend.
	RerunAlways
	// RerunNever: "false": never, for a model whose executions act beyond
	// their outputs.
	RerunNever
)

// RerunOnExecutorLoss reads the model's "rerun_on_executor_loss"
// parameter: absent or empty is RerunDefault, "true" RerunAlways, "false"
// RerunNever; anything else is an error naming the value. Only stateless
// requests are ever rerun (a sequence's request runs again only from
// durable state), so the parameter means nothing to a sequence or
// decoupled model.
func RerunOnExecutorLoss(cfg *inference.ModelConfig) (Rerun, error) {
	p, ok := cfg.GetParameters()[RerunParameter]
	if !ok {
		return RerunDefault, nil
	}
	switch v := p.GetStringValue(); v {
	case "":
		return RerunDefault, nil
	case "true":
		return RerunAlways, nil
	case "false":
		return RerunNever, nil
	default:
		return RerunDefault, tritonerr.InvalidArgf("model '%s': unknown value '%s' of parameter '%s' (expected 'true' or 'false')", cfg.GetName(), v, RerunParameter)
	}
}
