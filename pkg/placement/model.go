package placement

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nereid-io/nereid/api/inference"
)

// The model configuration parameters placement reads.
const (
	// ParamFootprint is the footprint to assume before the first load has
	// measured one ("512MiB").
	ParamFootprint = "nereid_model_footprint"
	// ParamGPUFootprint is the GPU memory to assume before the first load
	// has measured the model's ("2GiB"): without it a model never loaded
	// takes no GPU room, and its first placement may find a GPU too full.
	ParamGPUFootprint = "nereid_gpu_footprint"
	// ParamMinReplicas and ParamMaxReplicas bound the executors holding
	// the model; they override the cluster-wide defaults.
	ParamMinReplicas = "nereid_min_replicas"
	ParamMaxReplicas = "nereid_max_replicas"
	// ParamPinned "true" keeps the model from ever being evicted.
	ParamPinned = "nereid_pinned"
)

// Model is a model the cluster serves, as placement sees it.
type Model struct {
	Name string
	// FootprintHint is the footprint assumed until an executor measured
	// one (ParamFootprint); 0: Config.DefaultFootprint.
	FootprintHint uint64
	// GPUFootprintHint is the GPU memory assumed until an executor
	// measured the model's (ParamGPUFootprint); 0: none.
	GPUFootprintHint uint64
	// MinReplicas is how many executors should hold the model (0:
	// Config.MinReplicas); MaxReplicas how many at most (0:
	// Config.MaxReplicas).
	MinReplicas, MaxReplicas int
	// GPU: an instance_group asks for KIND_GPU, so only executors with a
	// GPU can hold it.
	GPU bool
	// Pinned models are never evicted.
	Pinned bool
	// Sequence models are never evicted: their live sequences are bound to
	// the executors holding them.
	Sequence bool
	// Ensemble models hold no instance (gateways, or the executor serving
	// every step, run them): they take no model slot.
	Ensemble bool
}

// ModelFrom reads a model's placement from its configuration; a parameter
// that does not parse is an error naming it.
func ModelFrom(cfg *inference.ModelConfig) (Model, error) {
	m := Model{Name: cfg.GetName(), Sequence: cfg.GetSequenceBatching() != nil,
		Ensemble: cfg.GetEnsembleScheduling() != nil || cfg.GetPlatform() == "ensemble"}
	for _, g := range cfg.GetInstanceGroup() {
		if g.GetKind() == inference.ModelInstanceGroup_KIND_GPU {
			m.GPU = true
		}
	}
	param := func(key string) (string, bool) {
		p, ok := cfg.GetParameters()[key]
		return strings.TrimSpace(p.GetStringValue()), ok
	}
	for key, dst := range map[string]*uint64{ParamFootprint: &m.FootprintHint, ParamGPUFootprint: &m.GPUFootprintHint} {
		if v, ok := param(key); ok {
			n, err := ParseBytes(v)
			if err != nil {
				return m, fmt.Errorf("model '%s': parameter %s: %v", m.Name, key, err)
			}
			*dst = n
		}
	}
	for key, dst := range map[string]*int{ParamMinReplicas: &m.MinReplicas, ParamMaxReplicas: &m.MaxReplicas} {
		if v, ok := param(key); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return m, fmt.Errorf("model '%s': parameter %s must be a number of executors, not %q", m.Name, key, v)
			}
			*dst = n
		}
	}
	if m.MaxReplicas > 0 && m.MinReplicas > m.MaxReplicas {
		return m, fmt.Errorf("model '%s': parameter %s (%d) exceeds %s (%d)", m.Name, ParamMinReplicas, m.MinReplicas, ParamMaxReplicas, m.MaxReplicas)
	}
	if v, ok := param(ParamPinned); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return m, fmt.Errorf("model '%s': parameter %s must be true or false, not %q", m.Name, ParamPinned, v)
		}
		m.Pinned = b
	}
	return m, nil
}
