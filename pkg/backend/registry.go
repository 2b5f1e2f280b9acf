package backend

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Factory initializes a backend (TRITONBACKEND_Initialize). It runs at most
// once per process and backend name, when the first model naming the backend
// is loaded.
type Factory func(ctx context.Context) (Backend, error)

var (
	regMu     sync.RWMutex
	factories = map[string]Factory{}
)

// Register makes a backend available under name, the value of a model
// config's `backend` field. It is meant for init functions and panics on an
// empty name, a nil factory or a name registered twice, as database/sql's
// Register does.
func Register(name string, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	if name == "" || f == nil {
		panic("backend: Register with an empty name or a nil factory")
	}
	if _, dup := factories[name]; dup {
		panic("backend: Register called twice for backend " + name)
	}
	factories[name] = f
}

// Lookup returns the factory registered under name.
func Lookup(name string) (Factory, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	f, ok := factories[name]
	return f, ok
}

// Names lists the registered backends, sorted.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(factories))
	for n := range factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// platformBackends is Triton's mapping from the legacy `platform` field to
// the backend that serves it, used when `backend` is empty.
var platformBackends = map[string]string{
	"tensorflow_graphdef":   "tensorflow",
	"tensorflow_savedmodel": "tensorflow",
	"tensorrt_plan":         "tensorrt",
	"onnxruntime_onnx":      "onnxruntime",
	"pytorch_libtorch":      "pytorch",
}

// Name returns the backend a model config asks for: its `backend`, or
// when that is empty the backend Triton maps its `platform` to (a platform
// registered under its own name is taken as is).
func Name(cfg *inference.ModelConfig) string {
	if b := cfg.GetBackend(); b != "" {
		return b
	}
	p := cfg.GetPlatform()
	if _, ok := Lookup(p); ok {
		return p
	}
	if b, ok := platformBackends[p]; ok {
		return b
	}
	return p
}

// Resolve finds the factory for a model config (see Name). A backend that
// is not registered is UNAVAILABLE: the model fails to load and says which
// backend it lacks.
func Resolve(cfg *inference.ModelConfig) (string, Factory, error) {
	name := Name(cfg)
	if name == "" {
		return "", nil, tritonerr.InvalidArgf("model '%s' must specify 'backend' or 'platform'", cfg.GetName())
	}
	f, ok := Lookup(name)
	if !ok {
		return name, nil, tritonerr.Unavailablef("unable to find backend '%s' for model '%s' (available: %v)", name, cfg.GetName(), Names())
	}
	return name, f, nil
}

// Instances returns the instances a config asks for, one InstanceInfo per
// instance_group entry × count, named as Triton names them. A config
// without instance groups gets one CPU instance. Stats is left nil for the
// caller to fill.
func Instances(cfg *inference.ModelConfig) []InstanceInfo {
	groups := cfg.GetInstanceGroup()
	if len(groups) == 0 {
		return []InstanceInfo{{
			Name: fmt.Sprintf("%s_0_0", cfg.GetName()),
			Kind: inference.ModelInstanceGroup_KIND_CPU,
		}}
	}
	var out []InstanceInfo
	for gi, g := range groups {
		gname := g.GetName()
		if gname == "" {
			gname = fmt.Sprintf("%s_%d", cfg.GetName(), gi)
		}
		count := int(g.GetCount())
		if count < 1 {
			count = 1
		}
		// Triton makes count instances on each listed GPU.
		devices := []int32{0}
		if g.GetKind() == inference.ModelInstanceGroup_KIND_GPU && len(g.GetGpus()) > 0 {
			devices = g.GetGpus()
		}
		k := 0
		for _, dev := range devices {
			for range count {
				out = append(out, InstanceInfo{
					Name: fmt.Sprintf("%s_%d", gname, k), Group: gi, Index: k,
					Kind: g.GetKind(), DeviceID: dev,
				})
				k++
			}
		}
	}
	return out
}
