package executor

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/executor/internal/gpu"
)

// Under placement (Config.Placement) the executor loads nothing at start:
// it lists its repository's models by name, advertises its capacity, and
// loads and unloads what the placement controller tells it on
// bus.ExecutorPlaceSubject, measuring each load's footprint in host and
// GPU memory. Its model control mode stays Triton's for clients.

// handlePlace serves the controller's ModelControlRequest: load or unload
// one model on this executor, then answer with the outcome and the
// catalog, as handleControl does for the repository API.
func (e *Executor) handlePlace(_ context.Context, data []byte) (proto.Message, error) {
	var req busv1.ModelControlRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		return nil, tritonerr.InvalidArgf("malformed placement request: %v", err)
	}
	e.controlMu.Lock()
	var err error
	if req.GetLoad() {
		before, gpuBefore := residentBytes(), e.gpuUsed()
		if err = e.loadModel(e.execCtx, &req); err == nil {
			e.measured(req.GetName(), residentBytes()-min(before, residentBytes()), gpuGrowth(gpuBefore, e.gpuUsed()))
		}
		e.log.Info("placement: load", "model", req.GetName(), "err", err)
	} else {
		e.unloadModel(req.GetName())
		e.log.Info("placement: unload", "model", req.GetName())
	}
	e.controlMu.Unlock()
	reply := &busv1.ModelControlReply{ExecutorId: e.cfg.ID, Catalog: e.catalog()}
	if err != nil {
		te := tritonerr.From(err)
		reply.ErrorKind, reply.Error = te.Kind.String(), te.Msg
	}
	return reply, nil
}

// measured records the memory (grew) and GPU memory (gpuGrew) a load of
// model took, shared by its READY versions that have no footprint yet
// (those that kept serving through a reload keep theirs).
func (e *Executor) measured(model string, grew, gpuGrew uint64) {
	now := time.Now()
	var fresh []*modelVersion
	for _, mv := range e.snapshot() {
		if mv.name == model && mv.state == StateReady && mv.loadedAt.Load() == 0 {
			fresh = append(fresh, mv)
		}
	}
	for _, mv := range fresh {
		mv.footprint.Store(grew / uint64(len(fresh)))
		mv.gpuFootprint.Store(gpuGrew / uint64(len(fresh)))
		mv.loadedAt.Store(now.UnixMilli())
	}
	if len(fresh) > 0 {
		e.changed()
	}
}

// placementState fills the placement fields of a version's catalog entry:
// footprint, last use (the load's time when no request came) and requests
// in flight.
func (mv *modelVersion) placementState(s *busv1.ModelVersionState) {
	if mv.state != StateReady {
		return
	}
	s.FootprintBytes = mv.footprint.Load()
	s.GpuFootprintBytes = mv.gpuFootprint.Load()
	last := mv.loadedAt.Load()
	if mv.stats != nil {
		mv.stats.mu.Lock()
		last = max(last, int64(mv.stats.lastInference))
		s.QueueNs, s.QueueCount = mv.stats.queue.ns, mv.stats.queue.count
		mv.stats.mu.Unlock()
	}
	s.LastUsedUnixMs = last
	s.Inflight = uint32(max(mv.inflight.Load(), 0))
}

// capacity is what the executor advertises: --model-capacity, the host's
// memory and its GPUs' (NVML; none without a GPU).
func (e *Executor) capacity() *busv1.ExecutorCapacity {
	c := &busv1.ExecutorCapacity{Bytes: e.cfg.Capacity.Bytes, Slots: uint32(e.cfg.Capacity.Slots), HostMemoryBytes: hostMemory()}
	for _, g := range e.gpus.Read() {
		c.GpuMemoryBytes = append(c.GpuMemoryBytes, uint64(g.MemoryTotal))
	}
	return c
}

// gpuMemory reads the GPU memory a process uses on each of the executor's
// GPUs, in a fixed order, gpu.UsageUnknown where a GPU cannot say:
// gpu.Sampler through NVML; tests give a stand-in, as no GPU exists where
// they run.
type gpuMemory interface {
	ProcessMemory(pid int) []uint64
}

// gpuUsed is this process's memory on each of its GPUs now; nil without a
// GPU (no sampler: NVML did not initialise, and is not called again).
func (e *Executor) gpuUsed() []uint64 {
	if e.gpuMem != nil {
		return e.gpuMem.ProcessMemory(os.Getpid())
	}
	return e.gpus.ProcessMemory(os.Getpid())
}

// gpuGrowth is how much GPU memory the process took between two readings:
// the growth of each GPU read both times, summed. A GPU that shrank
// counts as 0 rather than hide another's growth (memory freed meanwhile
// by other work is not the load's), and one unknown in either reading is
// left out.
func gpuGrowth(before, after []uint64) uint64 {
	var grew uint64
	for i := range min(len(before), len(after)) {
		if b, a := before[i], after[i]; b != gpu.UsageUnknown && a != gpu.UsageUnknown && a > b {
			grew += a - b
		}
	}
	return grew
}

// residentBytes is the process's resident set size (Linux; 0 elsewhere).
func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}

// hostMemory is MemTotal from /proc/meminfo (Linux; 0 elsewhere).
func hostMemory() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// hintTTL is how long the placement hint of a model not loaded here is
// kept before its configuration is read again.
const hintTTL = 10 * time.Second

// hintCache keeps the placement hints of the repository's models that are
// not loaded here (placementHint).
type hintCache struct {
	mu  sync.Mutex
	at  map[string]time.Time
	cfg map[string]*inference.ModelConfig
}

// placementHint is what the placement controller reads of a model of this
// executor's repository that no version of is loaded here, before any
// load measured it: the nereid_* parameters (footprint hint, replica
// bounds, pinned), the instance groups' kinds (a GPU model) and whether it
// has a sequence batcher, from its configuration, read at most once per
// hintTTL; nil when it does not parse (its load will say why). Only this
// much travels, so that a catalog of thousands of models stays small.
func (e *Executor) placementHint(name string, now time.Time) *inference.ModelConfig {
	e.hints.mu.Lock()
	defer e.hints.mu.Unlock()
	if at, ok := e.hints.at[name]; ok && now.Sub(at) < hintTTL {
		return e.hints.cfg[name]
	}
	if e.hints.at == nil {
		e.hints.at, e.hints.cfg = map[string]time.Time{}, map[string]*inference.ModelConfig{}
	}
	var hint *inference.ModelConfig
	if dir, err := e.modelDir(name); err == nil {
		if cfg, err := modelconfig.Load(dir); err == nil {
			hint = hintOf(cfg)
		}
	}
	e.hints.at[name], e.hints.cfg[name] = now, hint
	return hint
}

// hintOf is the part of cfg placement reads (placement.ModelFrom, and an
// ensemble's step models).
func hintOf(cfg *inference.ModelConfig) *inference.ModelConfig {
	h := &inference.ModelConfig{Name: cfg.GetName()}
	for k, v := range cfg.GetParameters() {
		if strings.HasPrefix(k, "nereid_") {
			if h.Parameters == nil {
				h.Parameters = map[string]*inference.ModelParameter{}
			}
			h.Parameters[k] = v
		}
	}
	for _, g := range cfg.GetInstanceGroup() {
		h.InstanceGroup = append(h.InstanceGroup, &inference.ModelInstanceGroup{Kind: g.GetKind()})
	}
	if cfg.GetSequenceBatching() != nil {
		h.SchedulingChoice = &inference.ModelConfig_SequenceBatching{SequenceBatching: &inference.ModelSequenceBatching{}}
	}
	if ens := cfg.GetEnsembleScheduling(); ens != nil {
		// The controller places an ensemble's composing models with it.
		steps := &inference.ModelEnsembling{}
		for _, st := range ens.GetStep() {
			steps.Step = append(steps.Step, &inference.ModelEnsembling_Step{ModelName: st.GetModelName()})
		}
		h.SchedulingChoice = &inference.ModelConfig_EnsembleScheduling{EnsembleScheduling: steps}
	}
	return h
}
