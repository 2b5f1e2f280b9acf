package executor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/executor/internal/repository"
)

// ControlMode is Triton's --model-control-mode.
type ControlMode string

// The model control modes.
const (
	// ControlNone loads every model at start; the repository API cannot
	// load or unload.
	ControlNone ControlMode = "none"
	// ControlPoll loads every model at start, then rescans the repository
	// each PollInterval: added models load, changed ones reload, removed
	// ones unload. The repository API cannot load or unload in it.
	ControlPoll ControlMode = "poll"
	// ControlExplicit loads the models named at start (LoadAll: every
	// one) and then what the repository API asks for.
	ControlExplicit ControlMode = "explicit"
)

// DefaultPollInterval is Triton's default --repository-poll-secs.
const DefaultPollInterval = 15 * time.Second

// LoadAll in Config.Models loads every model of the repository at start.
const LoadAll = "*"

// ParseControlMode reads a --model-control-mode value (any case).
func ParseControlMode(s string) (ControlMode, error) {
	switch m := ControlMode(strings.ToLower(s)); m {
	case ControlNone, ControlPoll, ControlExplicit:
		return m, nil
	}
	return "", fmt.Errorf("unexpected value for --model-control-mode: '%s', expected none, poll or explicit", s)
}

// reasonUnloaded is the reason the repository index gives for a version
// unloaded through the repository API, as Triton's.
const reasonUnloaded = bus.ReasonUnloaded

// snapshot returns the current model versions; the slice is never changed
// in place.
func (e *Executor) snapshot() []*modelVersion {
	e.modelsMu.RLock()
	defer e.modelsMu.RUnlock()
	return e.models
}

func (e *Executor) setModels(models []*modelVersion) {
	slices.SortStableFunc(models, func(a, b *modelVersion) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return int(a.version - b.version)
	})
	e.modelsMu.Lock()
	e.models = models
	e.modelsMu.Unlock()
}

// loadVersions loads the given versions of m. Versions that fail are
// returned UNAVAILABLE with their reason.
func (e *Executor) loadVersions(ctx context.Context, m repository.Model, versions []int64, failed map[int64]error) []*modelVersion {
	versions = slices.Clone(versions)
	slices.Sort(versions)
	var out []*modelVersion
	for _, v := range versions {
		// Stamped before loading: a file changed while the version loads
		// makes the next poll or load load it again.
		mv := &modelVersion{e: e, name: m.Name, version: v, vstr: strconv.FormatInt(v, 10), dir: m.Dir, cfg: m.Config, source: m.Config,
			stamp: repository.Stamp(m.Dir, v)}
		if m.Err != nil {
			mv.state, mv.reason = StateUnavailable, m.Err.Error()
		} else if err := mv.load(ctx); err != nil {
			mv.state, mv.reason = StateUnavailable, err.Error()
		} else {
			mv.state = StateReady
			mv.loadedNs.Store(e.loadStamp())
		}
		if mv.state != StateReady {
			e.log.Warn("model failed to load", "model", m.Name, "version", v, "reason", mv.reason)
			if failed != nil {
				failed[v] = tritonerr.New(tritonerr.KindOf(errOr(m.Err, mv.reason)), "%s", mv.reason)
			}
		}
		out = append(out, mv)
	}
	return out
}

// loadStamp is the load stamp of a version loaded now (its catalog's
// loaded_unix_ns): the time, moved past every stamp this process gave
// before, so that no two loads share one. A restarted executor's stamps
// are later still: a gateway that knew the executor by its id sees its
// versions reloaded.
func (e *Executor) loadStamp() int64 {
	for {
		last, now := e.lastLoad.Load(), time.Now().UnixNano()
		if now <= last {
			now = last + 1
		}
		if e.lastLoad.CompareAndSwap(last, now) {
			return now
		}
	}
}

// errOr returns err, or an internal error with reason.
func errOr(err error, reason string) error {
	if err != nil {
		return err
	}
	return tritonerr.Internalf("%s", reason)
}

// serve subscribes a READY version to its inference subjects.
func (e *Executor) serve(mv *modelVersion) error {
	if mv.state != StateReady || e.draining.Load() || isEnsemble(mv.cfg) {
		// A draining executor takes no new work, also for versions
		// loaded meanwhile. An ensemble's requests are run by the
		// gateways (ensemble.go).
		return nil
	}
	bc := e.bus
	s, err := bc.HandleBody(bus.InferSubject(mv.name, mv.vstr), bus.QueueExecutors, mv.handleInfer)
	if err != nil {
		return fmt.Errorf("executor: serve %s version %s: %w", mv.name, mv.vstr, err)
	}
	mv.sub = s
	// Requests whose tensors live on this node (shared memory, hand-off)
	// are addressed to the node's executors only.
	if mv.nodeSub, err = bc.HandleBody(bus.InferNodeSubject(mv.name, mv.vstr, e.cfg.Node), bus.QueueExecutors, mv.handleInfer); err != nil {
		return fmt.Errorf("executor: serve %s version %s on node %s: %w", mv.name, mv.vstr, e.cfg.Node, err)
	}
	return e.shm.subscribeDevices(bc, mv) // CUDA shared memory on this executor's GPUs
}

// retire stops serving mv, lets the requests it has received finish, then
// finalizes its instances and model.
func (e *Executor) retire(mv *modelVersion) {
	for _, s := range append([]*bus.Subscription{mv.sub, mv.nodeSub}, mv.devSubs...) {
		if s != nil {
			_ = s.Drain()
		}
	}
	seq := mv.seq
	mv.unload()
	if seq != nil {
		seq.dropDurable() // unloading frees the model's sequence states
	}
}

// handleControl serves ModelControlRequest: load or unload one model, then
// answer with the outcome and the executor's catalog. The outcome travels
// in the reply, not as a bus error, so that the gateway gathering the
// answers of every executor sees failures too.
func (e *Executor) handleControl(_ context.Context, data []byte) (proto.Message, error) {
	var req busv1.ModelControlRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		return nil, tritonerr.InvalidArgf("malformed model control request: %v", err)
	}
	var err error
	switch {
	case e.cfg.ControlMode != ControlExplicit:
		err = tritonerr.Unavailablef("explicit model load / unload is not allowed if polling is enabled")
	case e.cfg.Placement:
		// Under placement the gateways, and this executor's backends
		// (TRITONSERVER_ServerLoadModel), send loads and unloads to the
		// placement controller: one sent to every executor would load
		// the model on each behind the controller's back.
		err = tritonerr.Unsupportedf("failed to %s '%s': under placement, models are loaded and unloaded for the whole cluster through a gateway's repository API", controlAction(&req), req.GetName())
	default:
		e.controlMu.Lock()
		if req.GetLoad() {
			if err = e.loadModel(e.execCtx, &req); err == nil {
				e.record(&req)
			}
		} else {
			e.unloadWithDependents(req.GetName(), req.GetUnloadDependents())
			e.record(&req)
		}
		e.controlMu.Unlock()
	}
	reply := &busv1.ModelControlReply{ExecutorId: e.cfg.ID, Catalog: e.catalog()}
	if err != nil {
		te := tritonerr.From(err)
		reply.ErrorKind, reply.Error = te.Kind.String(), te.Msg
	}
	return reply, nil
}

// changed publishes a new revision, so that gateways refetch the catalog.
func (e *Executor) changed() {
	e.revision.Add(1)
	e.heartbeat(false)
}

// loadModel loads (or reloads) one model: versions whose configuration and
// files (their modification times) did not change keep serving, the others
// are loaded anew; a version that fails to reload keeps its previous
// instance serving, as Triton does.
func (e *Executor) loadModel(ctx context.Context, req *busv1.ModelControlRequest) error {
	return e.loadWithComposing(ctx, req, e.loadModelFiles) // ensembles: ensemble.go
}

// loadModelFiles is loadModel for one model, without its composing models.
func (e *Executor) loadModelFiles(ctx context.Context, req *busv1.ModelControlRequest) error {
	name := req.GetName()
	if name == "" || !filepath.IsLocal(name) || strings.ContainsAny(name, `/\`) {
		return tritonerr.InvalidArgf("failed to load '%s', invalid model name", name)
	}
	dir, err := e.modelDir(name)
	if err != nil {
		return err
	}
	overridden := len(req.GetFiles()) > 0
	var tmp string
	if overridden {
		if req.GetConfig() == "" {
			return tritonerr.InvalidArgf("failed to load '%s', model configuration must be provided when model files are overridden", name)
		}
		if err := e.checkUploadBudget(name, req.GetFiles()); err != nil {
			return err
		}
		if tmp, err = writeOverride(name, req.GetFiles()); err != nil {
			return err
		}
		dir = filepath.Join(tmp, name)
	}
	keepTmp := false
	defer func() {
		if tmp != "" && !keepTmp {
			_ = os.RemoveAll(tmp)
		}
	}()
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return tritonerr.Internalf("failed to load '%s', failed to poll from model repository", name)
	}
	var m repository.Model
	if req.GetConfig() != "" {
		override := e.completeOverride(dir, []byte(req.GetConfig()))
		cfg, err := modelconfig.LoadJSON(dir, override)
		if err != nil {
			return tritonerr.InvalidArgf("failed to load '%s', failed to parse config override: %s", name, tritonerr.From(err).Msg)
		}
		m = repository.WithConfig(dir, cfg)
	} else {
		m = e.strict(repository.ScanModel(dir))
	}
	if overridden && !e.cfg.AllowUploadedCode {
		if err := refuseUploadedCode(name, req.GetFiles(), m.Config); err != nil {
			return err
		}
		e.setUploaded(dir, true)
		defer e.setUploaded(dir, false)
	}
	if m.Err != nil {
		// The versions loaded before keep serving; a model without any is
		// listed with the reason.
		e.failUnloaded(name, m)
		return tritonerr.New(tritonerr.KindOf(m.Err), "failed to load '%s', %s", name, tritonerr.From(m.Err).Msg)
	}

	current := e.snapshot()
	old := map[int64]*modelVersion{}
	var others []*modelVersion
	for _, mv := range current {
		if mv.name != name {
			others = append(others, mv)
		} else if mv.state == StateReady {
			old[mv.version] = mv
		}
	}
	prevTmp := e.overrideDir(name)
	var next, fresh, retired []*modelVersion
	var toLoad []int64
	for _, v := range m.Versions {
		o, ok := old[v]
		if ok && !overridden && prevTmp == "" && proto.Equal(o.source, m.Config) && o.stamp == repository.Stamp(m.Dir, v) {
			next = append(next, o) // unchanged: keeps serving
			continue
		}
		toLoad = append(toLoad, v)
	}
	// Versions new to this executor read LOADING while they load; those
	// reloading keep serving, READY, until their replacement is.
	var interim []*modelVersion
	for _, v := range toLoad {
		if _, ok := old[v]; !ok {
			interim = append(interim, e.placeholder(m.Name, v, strconv.FormatInt(v, 10), m.Dir, m.Config, StateLoading, ""))
		}
	}
	if len(interim) > 0 {
		cur := slices.Clone(others)
		for _, o := range old {
			cur = append(cur, o)
		}
		e.setModels(append(cur, interim...))
		e.changed()
	}
	failed := map[int64]error{}
	// The versions that replace a serving instance (a reload).
	var replacing []*modelVersion
	for _, mv := range e.loadVersions(ctx, m, toLoad, failed) {
		if mv.state == StateReady {
			fresh = append(fresh, mv)
			next = append(next, mv)
			if o, ok := old[mv.version]; ok {
				retired = append(retired, o)
				replacing = append(replacing, mv)
			}
			continue
		}
		if o, ok := old[mv.version]; ok {
			next = append(next, o) // a failed reload keeps the version serving
			continue
		}
		next = append(next, mv)
	}
	for v, o := range old {
		if !slices.Contains(m.Versions, v) {
			retired = append(retired, o) // no longer selected by the policy
			o.endSequences()
		}
	}
	for _, mv := range fresh {
		if err := e.serve(mv); err != nil {
			failed[mv.version] = tritonerr.Internalf("%v", err)
		}
	}
	if len(fresh) == 0 && len(retired) == 0 && len(failed) == 0 && len(interim) == 0 && len(next) == len(old) {
		return nil // nothing changed: no new revision
	}
	e.setModels(append(others, next...))
	if len(fresh) > 0 {
		keepTmp = tmp != ""
		e.setOverrideDir(name, tmp)
		e.setOverrideBytes(name, filesSize(req.GetFiles()))
	}
	e.changed()
	for _, mv := range retired {
		e.retire(mv)
	}
	if len(replacing) > 0 {
		// Until now the replaced instances were answering the requests
		// they had taken, and a gateway that saw the new load stamp may
		// have cached those answers under the model's new cache
		// generation. They have answered their last: another stamp makes
		// gateways drop what they cached meanwhile, after which only the
		// new instances' answers are cached.
		for _, mv := range replacing {
			mv.loadedNs.Store(e.loadStamp())
		}
		e.changed()
	}
	if len(fresh) > 0 && prevTmp != "" && prevTmp != tmp {
		_ = os.RemoveAll(prevTmp)
	}
	if len(failed) > 0 {
		vs := make([]int64, 0, len(failed))
		for v := range failed {
			vs = append(vs, v)
		}
		slices.Sort(vs)
		ferr := failed[vs[0]]
		return tritonerr.New(tritonerr.KindOf(ferr), "failed to load '%s' version %d: %s", name, vs[0], tritonerr.From(ferr).Msg)
	}
	return nil
}

// completeOverride completes a configuration override that names no
// backend or platform from the model's config.pbtxt when that names a
// built-in Go backend: Triton completes such an override from the model's
// files (its auto-completion), and a built-in backend's model has none but
// its configuration. Any other override is returned as it is (a full
// replacement, as in Triton), and so is every override when auto-completion
// is disabled.
func (e *Executor) completeOverride(dir string, override []byte) []byte {
	if e.cfg.DisableAutoComplete || !modelconfig.NamesNoBackend(override) {
		return override
	}
	base, err := modelconfig.Load(dir)
	if err != nil {
		return override
	}
	if _, found := e.cb.Find(backend.Name(base), dir, 0); found {
		return override // a Triton backend library completes its own
	}
	if _, _, err := backend.Resolve(base); err != nil {
		return override
	}
	merged, err := modelconfig.Overlay(base, override)
	if err != nil {
		return override
	}
	return merged
}

// failUnloaded lists a model that has no READY version as UNAVAILABLE
// with the reason it failed.
func (e *Executor) failUnloaded(name string, m repository.Model) {
	var next []*modelVersion
	for _, mv := range e.snapshot() {
		if mv.name == name && (mv.state == StateReady || mv.reason == m.Err.Error()) {
			return // still serving, or already listed with this reason
		}
		if mv.name != name {
			next = append(next, mv)
		}
	}
	next = append(next, &modelVersion{e: e, name: name, dir: m.Dir, cfg: m.Config, state: StateUnavailable, reason: m.Err.Error()})
	e.setModels(next)
	e.changed()
}

// unloadModel unloads every version of a model. The versions stay in the
// index, UNAVAILABLE with reason "unloaded". Gateways are told first, so
// that they stop routing here; then the requests received finish, and the
// instances are finalized.
func (e *Executor) unloadModel(name string) {
	var during, next, retired []*modelVersion
	for _, mv := range e.snapshot() {
		if mv.name != name {
			during, next = append(during, mv), append(next, mv)
			continue
		}
		state := StateUnavailable
		if mv.state == StateReady {
			retired = append(retired, mv)
			state = StateUnloading
			mv.endSequences()
		}
		during = append(during, e.placeholder(mv.name, mv.version, mv.vstr, mv.dir, mv.cfg, state, reasonUnloaded))
		next = append(next, e.placeholder(mv.name, mv.version, mv.vstr, mv.dir, mv.cfg, StateUnavailable, reasonUnloaded))
	}
	// UNLOADING while the requests received finish: gateways stop sending
	// new ones at once.
	e.setModels(during)
	e.changed()
	for _, mv := range retired {
		e.retire(mv)
	}
	e.setModels(next)
	e.changed()
	if tmp := e.overrideDir(name); tmp != "" {
		_ = os.RemoveAll(tmp)
		e.setOverrideDir(name, "")
		e.setOverrideBytes(name, 0)
	}
}

// DefaultUploadBudget is the temporary storage the files of load requests
// may take at once on an executor when Config.UploadBudget is 0.
const DefaultUploadBudget = 1 << 30

// UploadBudgetFlag is the flag that sets Config.UploadBudget.
const UploadBudgetFlag = "--model-upload-budget"

func filesSize(files map[string][]byte) int64 {
	var n int64
	for _, b := range files {
		n += int64(len(b))
	}
	return n
}

// checkUploadBudget refuses a load whose files would take the temporary
// storage of load requests past the budget, so that uploads are bounded by
// the operator's figure rather than by the disk. The files of the model's
// own current upload do not count: a reload replaces them.
func (e *Executor) checkUploadBudget(name string, files map[string][]byte) error {
	budget := e.cfg.UploadBudget
	if budget == 0 {
		budget = DefaultUploadBudget
	}
	if budget < 0 {
		return nil
	}
	n := filesSize(files)
	if n > budget {
		return tritonerr.InvalidArgf("failed to load '%s', the files in the load request take %d bytes, over the %d bytes that uploaded model files may take on an executor (%s)", name, n, budget, UploadBudgetFlag)
	}
	e.mu.Lock()
	var held int64
	for m, b := range e.overrideBytes {
		if m != name {
			held += b
		}
	}
	e.mu.Unlock()
	if held+n > budget {
		return tritonerr.Unavailablef("failed to load '%s', the files in the load request take %d bytes and models loaded with files already hold %d of the %d bytes that uploaded model files may take on an executor (%s); unload one of them first", name, n, held, budget, UploadBudgetFlag)
	}
	return nil
}

func (e *Executor) setOverrideBytes(name string, n int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n == 0 {
		delete(e.overrideBytes, name)
		return
	}
	if e.overrideBytes == nil {
		e.overrideBytes = map[string]int64{}
	}
	e.overrideBytes[name] = n
}

// maxNameLen is the longest file name the file systems allow (NAME_MAX).
const maxNameLen = 255

// writeOverride writes the files of a load request into a new temporary
// repository: ROOT/NAME/PATH for each file. It returns ROOT.
func writeOverride(name string, files map[string][]byte) (string, error) {
	root, err := os.MkdirTemp("", "nereid-override-")
	if err != nil {
		return "", tritonerr.Internalf("failed to load '%s', cannot create a temporary model repository: %v", name, err)
	}
	dir := filepath.Join(root, name)
	for p, data := range files {
		if !filepath.IsLocal(p) || p == modelconfig.FileName {
			_ = os.RemoveAll(root)
			return "", tritonerr.InvalidArgf("failed to load '%s', invalid file override path 'file:%s'", name, p)
		}
		for _, part := range strings.Split(filepath.ToSlash(p), "/") {
			if len(part) > maxNameLen {
				_ = os.RemoveAll(root)
				return "", tritonerr.InvalidArgf("failed to load '%s', Invalid file path 'file:%.64s...': a path component is longer than %d bytes", name, p, maxNameLen)
			}
		}
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err == nil {
			err = os.WriteFile(full, data, 0o644)
		}
		if err != nil {
			_ = os.RemoveAll(root)
			return "", tritonerr.Internalf("failed to load '%s', cannot write file override '%s': %v", name, p, err)
		}
	}
	return root, nil
}

func (e *Executor) overrideDir(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.overrides[name]
}

func (e *Executor) setOverrideDir(name, dir string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if dir == "" {
		delete(e.overrides, name)
		return
	}
	if e.overrides == nil {
		e.overrides = map[string]string{}
	}
	e.overrides[name] = dir
}

// removeOverrides deletes the temporary repositories at shutdown.
func (e *Executor) removeOverrides() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, dir := range e.overrides {
		_ = os.RemoveAll(dir)
	}
	e.overrides = nil
}

// openSet opens the constellation's loaded-model set and returns what it
// holds.
func (e *Executor) openSet(ctx context.Context) ([]*busv1.ModelControlRequest, error) {
	set, err := openLoadedSet(ctx, e.cfg.Conn)
	if err != nil {
		return nil, err
	}
	reqs, err := set.list(ctx)
	if err != nil {
		return nil, err
	}
	e.set = set
	if len(reqs) > 0 {
		names := make([]string, len(reqs))
		for i, r := range reqs {
			names[i] = r.GetName()
		}
		e.log.Info("loading the models loaded through the repository API", "models", strings.Join(names, " "))
	}
	return reqs, nil
}

// restore loads what the set holds, as the repository API loaded it. A
// model that fails is listed with the reason; it does not stop the
// executor (--exit-on-error is about the models named at start).
func (e *Executor) restore(ctx context.Context, reqs []*busv1.ModelControlRequest) {
	e.controlMu.Lock()
	defer e.controlMu.Unlock()
	for _, req := range reqs {
		var err error
		if req.GetFilesNotKept() {
			err = tritonerr.Unavailablef("failed to load '%s', its model files were too large to keep in the constellation's loaded-model set: load it again", req.GetName())
			e.failUnloaded(req.GetName(), repository.Model{Name: req.GetName(), Err: err})
		} else {
			err = e.loadModel(ctx, req)
		}
		if err != nil {
			e.log.Warn("model loaded through the repository API failed to load again", "model", req.GetName(), "err", err)
		}
	}
}

// record writes a load or an unload into the loaded-model set. A failure
// costs only the restore of this model at a later start: it is logged.
func (e *Executor) record(req *busv1.ModelControlRequest) {
	if e.set == nil {
		return
	}
	var err error
	if req.GetLoad() {
		err = e.set.put(e.execCtx, req)
	} else {
		err = e.set.remove(e.execCtx, req.GetName())
	}
	if err != nil {
		e.log.Warn("recording the model in the loaded-model set", "model", req.GetName(), "load", req.GetLoad(), "err", err)
	}
}

// peerWait is how long an executor starting in explicit mode listens for
// the others' loaded models: every live executor answers within it.
const peerWait = bus.HeartbeatInterval

// loadedByPeers asks the other executors which models they serve, so that
// an executor joining (or restarting into) a constellation in explicit
// mode loads what the repository API loaded before, when NATS has no
// JetStream to keep the set: it then lives with the executors, and is lost
// once they all stop.
func (e *Executor) loadedByPeers(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, peerWait)
	defer cancel()
	seen := map[string]bool{}
	err := e.bus.Gather(ctx, bus.LoadedModelsSubject, &busv1.CatalogRequest{}, func(data []byte) bool {
		var cat busv1.ExecutorCatalog
		if proto.Unmarshal(data, &cat) != nil || cat.GetExecutorId() == e.cfg.ID {
			return true
		}
		for _, m := range cat.GetModels() {
			if m.GetState() == StateReady {
				seen[m.GetName()] = true
			}
		}
		return true
	})
	if err != nil {
		e.log.Debug("asking peers for their loaded models", "err", err)
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) > 0 {
		e.log.Info("loading the models the other executors serve", "models", strings.Join(names, " "))
	}
	return names
}

// poll returns the loop of poll mode: every PollInterval it rescans the
// repository and applies what changed on disk, as Triton's poll mode does.
func (e *Executor) poll(ctx context.Context) func(context.Context) {
	every := e.cfg.PollInterval
	if every <= 0 {
		every = DefaultPollInterval
	}
	return func(execCtx context.Context) {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-execCtx.Done():
				return
			case <-tick.C:
				e.pollOnce()
			}
		}
	}
}

// pollOnce loads the models on disk (a reload only of the versions whose
// configuration or files changed) and unloads those whose directory is gone.
// Under placement it loads none that it does not hold: the controller
// places models (new ones show in the catalog by name); it reloads the
// ones it holds whose files changed, and unloads those gone from disk.
func (e *Executor) pollOnce() {
	found, err := e.scan()
	if err != nil {
		e.log.Warn("polling the model repository", "err", err)
		return
	}
	onDisk := map[string]bool{}
	e.controlMu.Lock()
	defer e.controlMu.Unlock()
	for _, m := range found {
		if m.Dir == "" {
			continue // in two repositories: not available
		}
		onDisk[m.Name] = true
		if e.cfg.Placement && !e.servesReady(m.Name) {
			continue
		}
		if err := e.loadModel(e.execCtx, &busv1.ModelControlRequest{Name: m.Name, Load: true}); err != nil {
			e.log.Debug("poll: model failed to load", "model", m.Name, "err", err)
		}
	}
	gone := map[string]bool{}
	for _, mv := range e.snapshot() {
		if !onDisk[mv.name] && mv.reason != reasonUnloaded {
			gone[mv.name] = true
		}
	}
	for name := range gone {
		e.log.Info("poll: model removed from the repository", "model", name)
		e.unloadModel(name)
	}
}

// repositories lists the model repositories, in the order given.
func (e *Executor) repositories() []string {
	return append([]string{e.cfg.RepositoryPath}, e.cfg.MoreRepositories...)
}

// errNotUnique is Triton's error for a model found in two repositories.
func errNotUnique(name string) error {
	return tritonerr.Internalf("failed to poll model '%s': not unique across all model repositories", name)
}

// scan lists the models of every repository, sorted by name. A model in
// more than one is returned with errNotUnique and no directory.
func (e *Executor) scan() ([]repository.Model, error) {
	byName := map[string]repository.Model{}
	for _, root := range e.repositories() {
		found, err := repository.Scan(root)
		if err != nil {
			return nil, fmt.Errorf("model repository %s: %w", root, err)
		}
		for _, m := range found {
			m = e.strict(m)
			if _, dup := byName[m.Name]; dup {
				m = repository.Model{Name: m.Name, Err: errNotUnique(m.Name)}
			}
			byName[m.Name] = m
		}
	}
	out := make([]repository.Model, 0, len(byName))
	for _, m := range byName {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b repository.Model) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// modelDir finds the directory of a model across the repositories.
func (e *Executor) modelDir(name string) (string, error) {
	var found []string
	for _, root := range e.repositories() {
		dir := filepath.Join(root, name)
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			found = append(found, dir)
		}
	}
	switch len(found) {
	case 0:
		return filepath.Join(e.cfg.RepositoryPath, name), nil // reported as missing by the caller
	case 1:
		return found[0], nil
	}
	return "", tritonerr.Internalf("failed to load '%s', %s", name, tritonerr.From(errNotUnique(name)).Msg)
}

// placeholder is a catalog entry for a version without instances.
// vstr is "" for a model that failed before its versions were known.
func (e *Executor) placeholder(name string, v int64, vstr, dir string, cfg *inference.ModelConfig, state, reason string) *modelVersion {
	return &modelVersion{e: e, name: name, version: v, vstr: vstr, dir: dir, cfg: cfg, source: cfg, state: state, reason: reason}
}

// strict fails a model without config.pbtxt when auto-completion is off.
func (e *Executor) strict(m repository.Model) repository.Model {
	if !e.cfg.DisableAutoComplete || m.Dir == "" {
		return m
	}
	if _, err := os.Stat(filepath.Join(m.Dir, modelconfig.FileName)); err != nil {
		return repository.Model{Name: m.Name, Dir: m.Dir, Err: tritonerr.InvalidArgf(
			"model '%s' has no %s and auto-complete of model configurations is disabled", m.Name, modelconfig.FileName)}
	}
	return m
}
