// Package executor is Nereid's executor service: it loads the models of a
// model repository through their backends (pkg/backend), creates their
// instances per instance_group, serves inference requests arriving over
// NATS (one execution at a time per instance, with Triton's dynamic batcher
// for models that ask for it), keeps Triton's per-model statistics, and
// announces what it serves so that gateways can route to it.
//
// On the bus (subjects from pkg/bus):
//
//   - bus.InferSubject(model, version), queue group bus.QueueExecutors:
//     inference.ModelInferRequest -> inference.ModelInferResponse, errors
//     with Triton's kinds and messages;
//   - bus.HeartbeatSubject: busv1.ExecutorHeartbeat every
//     bus.HeartbeatInterval, at once when a gateway publishes on
//     bus.SolicitSubject, and with withdraw=true on shutdown;
//   - bus.ExecutorCatalogSubject(id): busv1.CatalogRequest ->
//     busv1.ExecutorCatalog, every model version with its state (READY or
//     UNAVAILABLE with the reason) and config;
//   - bus.ExecutorStatsSubject(id): busv1.StatisticsRequest ->
//     busv1.StatisticsReply (Triton's statistics and the time to first
//     response of decoupled models) for the READY versions it serves;
//   - sequence models (sequence.go): each instance pulls its batches from
//     the sequence router; implicit state stays with the instance, and
//     with state_durability "redis" each new state is also written to
//     Redis before the answer (durable.go, statestore.go);
//   - shared memory (shm.go): bus.InferDeviceSubject for each GPU it owns,
//     bus.ShmCudaSubject(node, device) to check CUDA handles at register,
//     bus.ShmRemovedSubject(node) to drop mappings of removed regions.
//
// The service is a library: New(Config), Run(ctx), Ready(). Its main is in
// cmd/executor; the standalone binary runs the same code in-process.
package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/infercodec"
	"github.com/nereid-io/nereid/pkg/logsetting"
	"github.com/nereid-io/nereid/pkg/opsmetrics"
	"github.com/nereid-io/nereid/pkg/placement"
	"github.com/nereid-io/nereid/pkg/redisconn"
	"github.com/nereid-io/nereid/pkg/routines"
	"github.com/nereid-io/nereid/pkg/settingbus"
	"github.com/nereid-io/nereid/pkg/tracesetting"
	"github.com/nereid-io/nereid/pkg/tracing"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/pkg/tritonmetrics"
	_ "github.com/nereid-io/nereid/services/executor/internal/builtin" // the built-in backends
	"github.com/nereid-io/nereid/services/executor/internal/cbackend"
	"github.com/nereid-io/nereid/services/executor/internal/gpu"
	"github.com/nereid-io/nereid/services/executor/internal/repository"
)

// Model version states, as Triton's ModelReadyState names them.
const (
	StateReady       = bus.StateReady
	StateUnavailable = bus.StateUnavailable
	StateLoading     = bus.StateLoading
	StateUnloading   = bus.StateUnloading
)

// redisStartWait bounds how long the start waits for Redis (--redis-url)
// to answer before it goes on without it.
const redisStartWait = 5 * time.Second

// DrainTimeout bounds how long shutdown waits for requests in flight before
// it cancels the executions still running.
const DrainTimeout = 10 * time.Second

// Config configures an executor.
type Config struct {
	// Conn is the NATS connection (required). The executor does not close it.
	Conn *nats.Conn
	// Local, when set, serves requests from services of this process
	// in-process (bus.Local: the standalone server).
	Local *bus.Local
	// Trace is --trace-config: the startup trace settings, changed at run
	// time by the trace extension through any gateway.
	Trace tracesetting.Config
	// Logging are the settings Logger obeys (pkg/logsetting), kept in step
	// with the logging extension; nil: Logger does not change.
	Logging *logsetting.Manager
	// RepositoryPath is the model repository to serve (required).
	RepositoryPath string
	// MoreRepositories are further repositories (--model-repository given
	// more than once); a model in two of them is not available, as in
	// Triton.
	MoreRepositories []string
	// Models restricts loading to these models; empty loads them all. In
	// explicit control mode they are the models loaded at start
	// (--load-model): empty loads none, "*" loads all.
	Models []string
	// ControlMode is Triton's --model-control-mode; default ControlNone.
	ControlMode ControlMode
	// DisableAutoComplete is Triton's --disable-auto-complete-config (and
	// --strict-model-config=true): every model needs its config.pbtxt.
	DisableAutoComplete bool
	// ExitOnError is Triton's --exit-on-error: Run fails when a model fails
	// to load at start, instead of listing it UNAVAILABLE.
	ExitOnError bool
	// PollInterval is Triton's --repository-poll-secs: how often poll mode
	// rescans the repository; default DefaultPollInterval.
	PollInterval time.Duration
	// ID names this executor on the bus; default: random.
	ID string
	// Node is the machine it runs on (shared-memory regions are node-local);
	// default: the host name.
	Node string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// BackendDirectory is where Triton backend libraries are looked for
	// (Triton's --backend-directory); default /opt/tritonserver/backends.
	BackendDirectory string
	// BackendConfig holds --backend-config settings by backend, then key.
	BackendConfig map[string]map[string]string
	// ServerLibrary is the libtritonserver.so Triton backends link against;
	// empty looks next to the executable, then on the loader's path.
	ServerLibrary string
	// AllowUploadedCode lets a repository load run code that arrived in the
	// request (--allow-uploaded-code): backend libraries and Python files
	// among its "file:" parameters, and a backend library found among them.
	// Off (the default), such a load is refused, and a model whose files
	// arrived in a load request takes its backend library from
	// BackendDirectory only.
	AllowUploadedCode bool
	// UploadBudget bounds the bytes of temporary storage that the files of
	// load requests may take at once (--model-upload-budget), over every
	// model loaded with files; 0 is DefaultUploadBudget, negative unbounded.
	UploadBudget int64
	// RedisURL is where the durable states of sequences live (models with
	// the parameter state_durability "redis"): redis://host:port/db or
	// rediss://. Empty keeps them in this process's memory (the standalone
	// server), where they do not survive the executor.
	RedisURL string
	// RedisAuth are the ACL user, password and TLS material for RedisURL.
	RedisAuth redisconn.Options
	// Metrics are tritonserver's --metrics-config settings of the
	// per-model metrics on the executor's /metrics.
	Metrics tritonmetrics.Config
	// RateLimit is tritonserver's --rate-limit (default off) and
	// RateLimitResources its --rate-limit-resource counts: with
	// RateLimitExecutionCount, executions wait for the resources of their
	// instance group's rate_limiter (ratelimit.go). The pools are this
	// executor's, as Triton's are a server's.
	RateLimit          RateLimitMode
	RateLimitResources []RateLimitResource
	// Placement (--placement) puts the executor under the placement
	// controller: it loads no model at start and loads and unloads what
	// the controller tells it (placement.go). In ControlExplicit the
	// controller keeps the cluster's loaded models; Models are then the
	// startup models the executor's catalog names for it.
	Placement bool
	// Capacity is --model-capacity: the footprint bytes and model slots it
	// advertises to the placement controller; zero bounds nothing.
	Capacity placement.Capacity
}

// Executor serves a model repository over NATS.
type Executor struct {
	// metrics is the executor's registry (metrics.go), gpus the NVML
	// sampler of its GPU metrics (nil without a GPU).
	metrics *opsmetrics.Registry
	gpus    *gpu.Sampler
	// gpuMem reads the process's GPU memory around a placement load
	// (placement.go); nil: gpus. Set under controlMu.
	gpuMem gpuMemory

	cfg        Config
	trace      *tracesetting.Manager // trace extension settings, kept in step by any gateway
	tracer     *tracing.Tracer       // spans of traced requests; nil when nothing is exported
	log        *slog.Logger
	generation uint64
	revision   atomic.Uint64   // catalog changes within the generation
	lastLoad   atomic.Int64    // the latest load stamp given (loadStamp)
	deps       dependencyLoads // models loaded only as an ensemble's composing models (ensemble.go)
	hints      hintCache       // placement hints of models not loaded here (placement.go)
	ready      chan struct{}

	bus *bus.Conn
	// group owns the service's goroutines; they run under the executions'
	// context and Run waits for them.
	group    *routines.Group
	mu       sync.Mutex
	backends map[string]backend.Backend
	// models is every version, loaded or not, sorted by name then version.
	// The slice is replaced, never changed in place (copy on write), so a
	// snapshot stays valid without the lock.
	modelsMu sync.RWMutex
	models   []*modelVersion
	// execCtx is the context of executions: model versions loaded at run
	// time live under it, not under the request that loaded them.
	execCtx context.Context
	// controlMu serializes repository loads and unloads.
	controlMu sync.Mutex
	// set keeps the models loaded through the repository API for executors
	// that start later (explicit mode, JetStream available; else nil).
	set *loadedSet
	// overrides are the temporary repositories of models loaded with file
	// overrides, by model (under mu).
	overrides map[string]string
	// overrideBytes is the size of each of those repositories' files,
	// counted against Config.UploadBudget.
	overrideBytes map[string]int64
	shm           *shmState  // shared memory and GPUs (shm.go)
	states        stateStore // durable sequence states (statestore.go)
	cb            *cbackend.Loader
	rates         *rateLimiter // nil: --rate-limit off

	// uploads are the model directories written from a load request that
	// are loading, while code that arrived in requests is not allowed
	// (under mu): their backend library comes from the backend directory.
	uploads map[string]bool

	// started is when the executor started (admin API); draining is set
	// while it drains, subsDrained once its inference subscriptions are
	// drained, drainEpoch counts drains and undrains (under controlMu) so
	// that the end of an undone drain marks nothing (admin.go).
	started     time.Time
	draining    atomic.Bool
	subsDrained atomic.Bool
	drainEpoch  uint64

	peersMu sync.Mutex
	peers   map[string]time.Time // other executors, by id: when last heard
	// peersHeard is closed once every live peer has had a heartbeat
	// interval to be heard: before, an empty or partial peer set would make
	// a backend's query call a model served elsewhere unknown.
	peersHeard chan struct{}

	// ensembleSub serves the ensembles this executor runs whole, and
	// ensemblePlans holds their step graphs by version (ensemblerun.go).
	ensembleSub   *bus.Subscription
	ensemblePlans sync.Map
}

// New checks cfg and fills its defaults; Run does the work.
func New(cfg Config) (*Executor, error) {
	if cfg.Conn == nil {
		return nil, errors.New("executor: Config.Conn is required")
	}
	if cfg.RepositoryPath == "" {
		return nil, errors.New("executor: Config.RepositoryPath is required")
	}
	if cfg.ControlMode == ControlExplicit && slices.Contains(cfg.Models, LoadAll) && len(cfg.Models) > 1 {
		// tritonserver's startup check, word for word.
		return nil, errors.New("executor: Wildcard model name '*' must be the ONLY startup model if specified at all.")
	}
	if cfg.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.ID = "executor-" + hex.EncodeToString(b[:])
	}
	if cfg.Node == "" {
		cfg.Node, _ = os.Hostname()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e := &Executor{
		peersHeard: make(chan struct{}),
		cfg:        cfg,
		log:        cfg.Logger.With("service", "executor", "executor", cfg.ID),
		ready:      make(chan struct{}),
		backends:   map[string]backend.Backend{},
		started:    time.Now(),
	}
	if cfg.Trace.Mode == "" {
		e.cfg.Trace = tracesetting.DefaultConfig()
	}
	e.rates = newRateLimiter(cfg, e.log)
	e.trace = tracesetting.New(e.cfg.Trace, cfg.ID)
	// A restarted executor with the same id announces a newer generation,
	// so gateways refetch its catalog; a load or unload, a new revision.
	e.generation = uint64(time.Now().UnixNano())
	e.cb = cbackend.NewLoader(cbackend.Config{
		Directory: cfg.BackendDirectory, Settings: cfg.BackendConfig, ServerLibrary: cfg.ServerLibrary,
		Logger: e.log, Server: (*backendServer)(e),
	})
	var err error
	if e.metrics, e.gpus, err = newMetrics(e); err != nil {
		return nil, fmt.Errorf("executor: GPU metrics: %w", err)
	}
	return e, nil
}

// ID is the executor's id on the bus.
func (e *Executor) ID() string { return e.cfg.ID }

// Ready is closed once the models are loaded and announced.
func (e *Executor) Ready() <-chan struct{} { return e.ready }

// Run loads the repository, serves it and announces it until ctx ends;
// then it withdraws, lets requests in flight finish (up to DrainTimeout)
// and finalizes instances, models and backends. It returns nil after a
// clean shutdown, an error when it cannot start.
func (e *Executor) Run(ctx context.Context) error {
	defer e.gpus.Close()
	bc, err := bus.New(e.cfg.Conn, bus.WithLogger(e.log), bus.WithCodec(infercodec.Codec{}), bus.WithLocal(e.cfg.Local), e.metrics.BusOption()) // replies' tensors sent without copies
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	e.bus = bc
	defer bc.Close()
	stopTracing, err := e.startTracing(ctx)
	if err != nil {
		return err
	}
	defer stopTracing()

	// Executions outlive ctx by the drain: they end when execCancel runs.
	execCtx, execCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer execCancel()
	e.group = routines.New(execCtx)
	defer e.group.Stop()
	e.execCtx = execCtx

	if err := e.openStates(ctx); err != nil {
		return err
	}
	defer e.states.close()    // after the models using it are finalized
	defer e.removeOverrides() // after the models using them are finalized
	restore, fromPeers := e.loadedBefore(ctx)
	if err := e.load(execCtx); err != nil {
		return err
	}
	defer e.unload()
	if e.cfg.ExitOnError {
		// The models named at start must load, as in tritonserver; those
		// loaded at run time before (restored) only say why they failed.
		for _, mv := range e.snapshot() {
			if mv.state != StateReady && !fromPeers[mv.name] {
				return fmt.Errorf("executor: failed to load all models: %s", mv.describe())
			}
		}
	}
	handoff.Sweep()                            // files of crashed processes
	defer handoff.RegisterExecutor(e.cfg.ID)() // gateways of this process hand over slices

	stopShm, err := e.startShm(execCtx, bc) // shared-memory regions, GPUs (shm.go)
	if err != nil {
		return err
	}
	defer stopShm()

	subs, err := e.subscribe(bc)
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	if err != nil {
		return err
	}
	stores := []settingbus.Store{e.trace}
	if e.cfg.Logging != nil {
		stores = append(stores, e.cfg.Logging)
	}
	settings, err := settingbus.Follow(ctx, bc, bus.RoleExecutor, e.cfg.ID, false, stores...)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	defer settings.Stop()
	// Backends calling other models (BLS) need to know who serves what:
	// peers are known from their heartbeats, within HeartbeatInterval.
	settle := time.AfterFunc(bus.HeartbeatInterval+bus.HeartbeatInterval/2, func() { close(e.peersHeard) })
	defer settle.Stop()
	if len(restore) > 0 {
		e.restore(execCtx, restore)
	}
	// Make sure the server has our subscriptions before anyone is told to
	// route here.
	if err := bc.Flush(ctx); err != nil {
		e.log.Warn("nats flush", "err", err)
	}

	e.heartbeat(false)
	close(e.ready)
	e.log.Info("executor ready", "node", e.cfg.Node, "models", e.summary())

	if e.cfg.ControlMode == ControlPoll {
		e.group.Go(e.poll(ctx))
	}
	e.announce(ctx)
	e.withdraw(execCtx)
	execCancel()
	e.log.Info("executor stopped")
	return nil
}

// startTracing starts the exporter of spans when traces go to
// OpenTelemetry; stop flushes and ends it.
func (e *Executor) startTracing(ctx context.Context) (stop func(), err error) {
	if e.cfg.Trace.Mode != tracesetting.ModeOpenTelemetry {
		// No spans here, but a gateway writing Triton's trace file asks
		// for a request's timestamps through its trace context.
		tracing.UsePropagator()
		return func() {}, nil
	}
	if e.tracer, err = tracing.New(ctx, e.cfg.Trace, "executor", e.trace); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.tracer.Shutdown(sctx)
	}, nil
}

// openStates opens the store of durable sequence states: Redis when
// configured, else memory. Refused credentials stop the start; a Redis
// that does not answer yet does not: the models serve, and durable writes
// wait for it.
func (e *Executor) openStates(ctx context.Context) error {
	if e.cfg.RedisURL == "" {
		e.states = newMemStates()
		return nil
	}
	octx, cancel := context.WithTimeout(ctx, redisStartWait)
	rdb, err := redisconn.Open(octx, e.cfg.RedisURL, e.cfg.RedisAuth)
	cancel()
	if err != nil && ctx.Err() == nil && octx.Err() != nil {
		e.log.Warn("Redis does not answer yet; durable sequence states will wait for it", "url", redisconn.Redact(e.cfg.RedisURL), "err", err)
		rdb, err = redisconn.New(e.cfg.RedisURL, e.cfg.RedisAuth)
	}
	if err != nil {
		return fmt.Errorf("executor: durable sequence state: %w", err)
	}
	e.states = newRedisStates(rdb)
	return nil
}

// loadedBefore is, in explicit mode, what the repository API loaded before
// this start, to load too: the constellation's set when NATS has
// JetStream (restore), else what the running executors serve, added to
// the models loaded at start (fromPeers names them). Under placement the
// controller keeps the cluster's loaded models
// (services/sequence-router/placer) and tells this executor what to hold.
func (e *Executor) loadedBefore(ctx context.Context) (restore []*busv1.ModelControlRequest, fromPeers map[string]bool) {
	fromPeers = map[string]bool{}
	if e.cfg.ControlMode != ControlExplicit || e.cfg.Placement {
		return nil, fromPeers
	}
	restore, err := e.openSet(ctx)
	if err != nil {
		e.log.Info("no loaded-model set in JetStream: loading what the other executors serve", "err", err)
		for _, name := range e.loadedByPeers(ctx) {
			if !slices.Contains(e.cfg.Models, name) {
				fromPeers[name] = true
				e.cfg.Models = append(e.cfg.Models, name)
			}
		}
	}
	return restore, fromPeers
}

// subscribe serves the models loaded and the executor's subjects: model
// control, the catalog, statistics, whole ensembles, placement, the admin
// API, peers' heartbeats and gateways' solicitations. It returns what it
// subscribed, also when it fails part way.
func (e *Executor) subscribe(bc *bus.Conn) ([]*bus.Subscription, error) {
	var subs []*bus.Subscription
	for _, mv := range e.snapshot() {
		if err := e.serve(mv); err != nil {
			return subs, err
		}
	}
	type handler struct {
		subject string
		h       bus.HandlerFunc
	}
	handlers := []handler{
		{bus.ModelControlSubject, e.handleControl},
		{bus.LoadedModelsSubject, e.handleCatalog},
		{bus.ExecutorCatalogSubject(e.cfg.ID), e.handleCatalog},
		{bus.ExecutorStatsSubject(e.cfg.ID), e.handleStats},
	}
	if e.cfg.Placement {
		handlers = append(handlers, handler{bus.ExecutorPlaceSubject(e.cfg.ID), e.handlePlace})
	}
	for _, h := range handlers {
		sub, err := bc.Handle(h.subject, "", h.h)
		if err != nil {
			return subs, fmt.Errorf("executor: %w", err)
		}
		subs = append(subs, sub)
	}
	var err error
	if e.ensembleSub, err = bc.HandleBody(bus.ExecutorEnsembleSubject(e.cfg.ID), bus.QueueExecutors, e.handleEnsemble); err != nil {
		return subs, fmt.Errorf("executor: %w", err)
	}
	subs = append(subs, e.ensembleSub)
	adminSubs, err := e.serveAdmin(bc)
	if err != nil {
		return subs, err
	}
	subs = append(subs, adminSubs...)
	for _, l := range []struct {
		subject string
		f       func(context.Context, []byte)
	}{
		{bus.HeartbeatSubject, e.peerHeartbeat},
		{bus.SolicitSubject, func(context.Context, []byte) { e.heartbeat(false) }},
	} {
		sub, err := bc.Subscribe(l.subject, l.f)
		if err != nil {
			return subs, fmt.Errorf("executor: %w", err)
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

// announce sends the executor's heartbeat every HeartbeatInterval until
// ctx ends.
func (e *Executor) announce(ctx context.Context) {
	tick := time.NewTicker(bus.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			e.heartbeat(false)
		}
	}
}

// withdraw tells gateways first that the executor is going, so that they
// stop routing here, then lets what has arrived finish, up to
// DrainTimeout.
func (e *Executor) withdraw(execCtx context.Context) {
	e.heartbeat(true)
	flushCtx, cancelFlush := context.WithTimeout(execCtx, time.Second)
	_ = e.bus.Flush(flushCtx)
	cancelFlush()
	drained := make(chan struct{})
	e.group.Go(func(context.Context) {
		defer close(drained)
		var wg sync.WaitGroup
		wg.Go(e.shm.drainDevices)
		wg.Go(func() { _ = e.ensembleSub.Drain() })
		for _, mv := range e.snapshot() {
			if mv.nodeSub != nil {
				wg.Go(func() { _ = mv.nodeSub.Drain() })
			}
			if mv.sub != nil {
				wg.Go(func() { _ = mv.sub.Drain() })
			}
		}
		wg.Wait()
	})
	select {
	case <-drained:
	case <-time.After(DrainTimeout):
		e.log.Warn("requests still in flight after the drain timeout; cancelling them")
	}
}

// summary lists "name/version:STATE" for the log.
func (e *Executor) summary() string {
	var parts []string
	for _, mv := range e.snapshot() {
		parts = append(parts, mv.name+"/"+mv.vstr+":"+mv.state)
	}
	return strings.Join(parts, " ")
}

func (e *Executor) heartbeat(withdraw bool) {
	hb := &busv1.ExecutorHeartbeat{ExecutorId: e.cfg.ID, Node: e.cfg.Node, Generation: e.generation, Withdraw: withdraw, Revision: e.revision.Load()}
	if err := e.bus.Publish(bus.HeartbeatSubject, hb); err != nil {
		e.log.Warn("heartbeat", "err", err)
	}
}

// load scans the repository and loads every model version it serves.
// Models that fail are kept, UNAVAILABLE with their reason.
func (e *Executor) load(ctx context.Context) error {
	found, err := e.scan()
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	byName := map[string]repository.Model{}
	for _, m := range found {
		byName[m.Name] = m
	}
	names := e.cfg.Models
	if e.cfg.Placement {
		names = []string{} // the placement controller decides (placement.go)
	} else if (len(names) == 0 && e.cfg.ControlMode != ControlExplicit) || slices.Contains(names, LoadAll) {
		names = nil
		for _, m := range found {
			names = append(names, m.Name)
		}
	}
	names = withComposing(names, byName) // an ensemble's composing models load with it (ensemble.go)
	slices.Sort(names)
	names = slices.Compact(names)

	var models []*modelVersion
	for _, name := range names {
		m, ok := byName[name]
		// A model that fails before its versions are known is listed once,
		// with version "".
		if !ok || (m.Err != nil && len(m.Versions) == 0) {
			mv := &modelVersion{e: e, name: name, state: StateUnavailable}
			if ok {
				mv.cfg, mv.reason = m.Config, m.Err.Error()
			} else {
				mv.reason = fmt.Sprintf("failed to load '%s', no model '%s' in the model repository", name, name)
			}
			e.log.Warn("model failed to load", "model", name, "reason", mv.reason)
			models = append(models, mv)
			continue
		}
		models = append(models, e.loadVersions(ctx, m, m.Versions, nil)...)
	}
	e.setModels(models)
	e.checkEnsembles()
	return nil
}

// backendFor initializes a backend the first time a model names it
// (TRITONBACKEND_Initialize runs once per process): a Triton backend
// library found on Triton's search path for the model, else the built-in
// Go backend of that name.
func (e *Executor) backendFor(ctx context.Context, cfg *inference.ModelConfig, dir string, version int64) (backend.Backend, error) {
	var (
		name, key string
		factory   backend.Factory
	)
	find := e.cb.Find
	if e.uploaded(dir) {
		find = func(name, _ string, _ int64) (cbackend.Found, bool) { return e.cb.FindInstalled(name) }
	}
	if f, ok := find(backend.Name(cfg), dir, version); ok {
		name, key, factory = f.Name, f.Key, e.cb.Factory(f)
	} else {
		var err error
		if name, factory, err = backend.Resolve(cfg); err != nil {
			return nil, err
		}
		key = name
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if b, ok := e.backends[key]; ok {
		return b, nil
	}
	b, err := factory(ctx)
	if err != nil {
		if te, ok := err.(*tritonerr.Error); ok && te.Kind == tritonerr.Unavailable {
			return nil, err // a library that would not load says why itself
		}
		return nil, tritonerr.Internalf("failed to initialize backend '%s': %v", name, err)
	}
	e.backends[key] = b
	return b, nil
}

// unload finalizes in Triton's order: instances, models, then backends.
func (e *Executor) unload() {
	for _, mv := range e.snapshot() {
		mv.unload()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for name, b := range e.backends {
		if err := b.Finalize(); err != nil {
			e.log.Warn("backend finalize", "backend", name, "err", err)
		}
	}
	e.backends = map[string]backend.Backend{}
}

func (e *Executor) handleCatalog(context.Context, []byte) (proto.Message, error) {
	return e.catalog(), nil
}

// catalog lists every model version this executor knows, with its state,
// then the other models of its repositories as Triton's repository index
// shows them: by name alone when never loaded, and UNAVAILABLE with
// Triton's reason when the name is in two repositories.
func (e *Executor) catalog() *busv1.ExecutorCatalog {
	onDisk := e.repositoryNames()
	e.modelsMu.RLock()
	cat := &busv1.ExecutorCatalog{ExecutorId: e.cfg.ID, Node: e.cfg.Node, Generation: e.generation, Revision: e.revision.Load(),
		ExplicitControl: e.cfg.ControlMode == ControlExplicit, Draining: e.draining.Load()}
	if e.cfg.Placement {
		cat.Placement, cat.Capacity = true, e.capacity()
		if e.cfg.ControlMode == ControlExplicit {
			cat.StartupModels = e.cfg.Models
		}
	}
	known := map[string]bool{}
	for _, mv := range e.models {
		known[mv.name] = true
		if onDisk[mv.name] > 1 && mv.state != StateReady {
			continue // listed below as a duplicate
		}
		st := &busv1.ModelVersionState{
			Name: mv.name, Version: mv.vstr, State: mv.state, Reason: mv.reason, Config: mv.cfg,
			FaultsContained: mv.state == StateReady && !mv.native(),
		}
		if mv.state == StateReady {
			st.LoadedUnixNs = mv.loadedNs.Load()
		}
		if e.cfg.Placement {
			mv.placementState(st)
		}
		cat.Models = append(cat.Models, st)
	}
	// The rest reads no version: placement hints read files, which must
	// not hold up loads and unloads waiting to change the versions.
	e.modelsMu.RUnlock()
	names := make([]string, 0, len(onDisk))
	for n := range onDisk {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		switch {
		case onDisk[n] > 1:
			cat.Models = append(cat.Models, &busv1.ModelVersionState{Name: n, State: StateUnavailable, Reason: reasonDuplicate})
		case !known[n]:
			st := &busv1.ModelVersionState{Name: n} // in the repository, not loaded
			if e.cfg.Placement {
				st.Config = e.placementHint(n, time.Now())
			}
			cat.Models = append(cat.Models, st)
		}
	}
	return cat
}

// reasonDuplicate is Triton's index reason for a model directory found in
// more than one repository.
const reasonDuplicate = "model appears in two or more repositories"

// repositoryNames counts, by name, the repositories holding a directory of
// that name: each one is a model as far as the repository index goes.
func (e *Executor) repositoryNames() map[string]int {
	out := map[string]int{}
	for _, root := range e.repositories() {
		entries, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		for _, d := range entries {
			if isDir(filepath.Join(root, d.Name())) { // symlinks followed, as Scan does
				out[d.Name()]++
			}
		}
	}
	return out
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// handleStats answers for the READY versions matching the request (empty
// name or version: all). Unknown models give an empty answer: the gateway
// knows the catalog and reports NOT_FOUND itself.
func (e *Executor) handleStats(_ context.Context, data []byte) (proto.Message, error) {
	var req busv1.StatisticsRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		return nil, tritonerr.InvalidArgf("malformed statistics request: %v", err)
	}
	resp := e.statsReply(req.GetName(), req.GetVersion())
	if req.GetName() == "" {
		resp.Gpus = gpuProtos(e.gpus.Read())
		// What the Triton backends of this process registered: a gateway
		// adds them up over the constellation (tritonmetrics.Collect).
		if fams := cbackend.MetricFamilies(); len(fams) > 0 {
			resp.BackendMetrics, resp.BackendMetricsProcess = fams, cbackend.MetricsProcess
		}
	}
	return resp, nil
}

// statsReply is the statistics and metrics of the READY versions matching
// name and version (empty: all), in the order of the models' names and
// versions.
func (e *Executor) statsReply(name, version string) *busv1.StatisticsReply {
	resp := &busv1.StatisticsReply{ModelStats: []*inference.ModelStatistics{}}
	for _, mv := range e.snapshot() {
		if mv.state != StateReady || (name != "" && name != mv.name) || (version != "" && version != mv.vstr) {
			continue
		}
		resp.ModelStats = append(resp.ModelStats, mv.stats.proto(mv.name, mv.vstr))
		resp.Metrics = append(resp.Metrics, mv.stats.metricsProto(mv.name, mv.vstr))
		if h := mv.stats.firstResponseProto(mv.name, mv.vstr); h != nil {
			resp.FirstResponse = append(resp.FirstResponse, h)
		}
	}
	return resp
}

// TraceSettings returns the trace settings the executor applies.
func (e *Executor) TraceSettings() *tracesetting.Manager { return e.trace }
