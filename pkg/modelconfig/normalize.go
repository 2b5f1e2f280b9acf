package modelconfig

import (
	"strconv"

	"github.com/nereid-io/nereid/api/inference"
)

// DefaultMaxSequenceIdleMicroseconds is what a sequence batcher uses when
// max_sequence_idle_microseconds is 0 or unset (Triton's
// SEQUENCE_IDLE_DEFAULT_MICROSECONDS).
const DefaultMaxSequenceIdleMicroseconds = 1000000

// Normalize fills the defaults Triton fills before it validates a config and
// the instance-group defaults it fills when it loads the model. It is
// idempotent; Load calls it.
//
//   - version_policy: latest { num_versions: 1 }
//   - dynamic_batching / sequence_batching.oldest without preferred_batch_size:
//     [ max_batch_size ] when max_batch_size > 0
//   - sequence_batching.max_sequence_idle_microseconds 0: 1000000
//   - optimization.{input,output}_pinned_memory: enable true (not ensembles)
//   - instance groups: see NormalizeInstanceGroups
func Normalize(cfg *inference.ModelConfig) {
	if cfg.VersionPolicy == nil {
		cfg.VersionPolicy = &inference.ModelVersionPolicy{
			PolicyChoice: &inference.ModelVersionPolicy_Latest_{
				Latest: &inference.ModelVersionPolicy_Latest{NumVersions: 1},
			},
		}
	}
	if db := cfg.GetDynamicBatching(); db != nil {
		if len(db.PreferredBatchSize) == 0 && cfg.MaxBatchSize > 0 {
			db.PreferredBatchSize = []int32{cfg.MaxBatchSize}
		}
	}
	if sb := cfg.GetSequenceBatching(); sb != nil {
		if sb.MaxSequenceIdleMicroseconds == 0 {
			sb.MaxSequenceIdleMicroseconds = DefaultMaxSequenceIdleMicroseconds
		}
		if o := sb.GetOldest(); o != nil && len(o.PreferredBatchSize) == 0 && cfg.MaxBatchSize > 0 {
			o.PreferredBatchSize = []int32{cfg.MaxBatchSize}
		}
	}
	if cfg.GetEnsembleScheduling() == nil {
		if cfg.Optimization == nil {
			cfg.Optimization = &inference.ModelOptimizationPolicy{}
		}
		if cfg.Optimization.InputPinnedMemory == nil {
			cfg.Optimization.InputPinnedMemory = &inference.ModelOptimizationPolicy_PinnedMemoryBuffer{Enable: true}
		}
		if cfg.Optimization.OutputPinnedMemory == nil {
			cfg.Optimization.OutputPinnedMemory = &inference.ModelOptimizationPolicy_PinnedMemoryBuffer{Enable: true}
		}
	}
	NormalizeInstanceGroups(cfg)
}

// NormalizeInstanceGroups gives a non-ensemble model Triton's instance-group
// defaults for a machine where no GPU has been discovered:
//
//   - no groups: one group named after the model;
//   - an unnamed group: "<model>_<index>";
//   - KIND_AUTO: KIND_CPU (Triton picks GPU only when it finds the GPUs);
//   - count < 1: 1, or 2 for CPU groups of the tensorflow and onnxruntime
//     backends, as Triton's SetDefaultInstanceCount;
//   - KIND_GPU groups are kept as written, with or without gpus; the
//     executor, which knows its devices, decides whether it can serve them.
func NormalizeInstanceGroups(cfg *inference.ModelConfig) {
	if cfg.GetEnsembleScheduling() != nil {
		return
	}
	if len(cfg.InstanceGroup) == 0 {
		cfg.InstanceGroup = []*inference.ModelInstanceGroup{{Name: cfg.Name}}
	}
	for i, g := range cfg.InstanceGroup {
		if g.Name == "" {
			g.Name = cfg.Name + "_" + strconv.Itoa(i)
		}
		if g.Kind == inference.ModelInstanceGroup_KIND_AUTO {
			g.Kind = inference.ModelInstanceGroup_KIND_CPU
		}
		if g.Count < 1 {
			g.Count = 1
			if g.Kind == inference.ModelInstanceGroup_KIND_CPU && (cfg.Backend == backendTF || cfg.Backend == backendONNX) {
				g.Count = 2
			}
		}
	}
}
