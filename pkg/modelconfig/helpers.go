package modelconfig

import "github.com/nereid-io/nereid/api/inference"

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
