package seqrouter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/failover"
	"github.com/nereid-io/nereid/pkg/logsetting"
	"github.com/nereid-io/nereid/pkg/opsmetrics"
	"github.com/nereid-io/nereid/pkg/redisconn"
	"github.com/nereid-io/nereid/pkg/routines"
	"github.com/nereid-io/nereid/pkg/seqbatch"
	"github.com/nereid-io/nereid/pkg/settingbus"
	"github.com/nereid-io/nereid/pkg/tracesetting"
	"github.com/nereid-io/nereid/pkg/tracing"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Name is the service name used in logs and subjects.
const Name = "sequence-router"

// Defaults of Config.
const (
	DefaultLeaseTTL = 2 * time.Second
	DefaultPullHold = time.Second
)

// Config holds everything the service needs; flags fill it in main.
type Config struct {
	// Conn is the NATS connection; the caller owns it.
	Conn *nats.Conn
	// RedisURL selects the Redis store (redis://host:port/db); empty means
	// the in-memory store of the standalone mode.
	RedisURL string
	// RedisAuth are the ACL user, password and TLS material for RedisURL.
	RedisAuth redisconn.Options
	Logger    *slog.Logger
	// ID names this router in the lease; default random.
	ID string
	// LeaseTTL is how long a model's lease outlives its holder (default
	// 2 s): a standby takes the model over at most this long after the
	// router serving it died. The holder renews every LeaseTTL/4 and stops
	// serving the model when LeaseTTL/2 passed without a renewal, well
	// before the lease can have lapsed.
	LeaseTTL time.Duration
	// PullHold is how long an idle executor's pull waits for work before
	// it is answered empty (default 1 s).
	PullHold time.Duration
	// MaxBacklog bounds every model's backlog (sequences waiting for a
	// slot); 0 is unbounded, as Triton. A model's parameter
	// "nereid_max_sequence_backlog" overrides it.
	MaxBacklog int
	// DelaySlots and DelayBacklog are test hooks: Triton's
	// TRITONSERVER_DELAY_SCHEDULER and TRITONSERVER_BACKLOG_DELAY_SCHEDULER.
	DelaySlots, DelayBacklog int
	// Trace is --trace-config: the startup trace settings, changed at run
	// time by the trace extension through any gateway.
	Trace tracesetting.Config
	// Logging are the settings Logger obeys (pkg/logsetting), kept in step
	// with the logging extension; nil: Logger does not change.
	Logging *logsetting.Manager
}

// Service is one running sequence router.
type Service struct {
	metrics *opsmetrics.Registry // metrics.go

	cfg   Config
	log   *slog.Logger
	ready chan struct{}
	bus   *bus.Conn
	st    store
	trace *tracesetting.Manager // trace extension settings, kept in step by any gateway
	// tracer records the spans of traced requests; nil when nothing is
	// exported.
	tracer *tracing.Tracer

	// group owns the service's goroutines (lease loops, takeovers,
	// resolves, drains); its context ends when Run returns, and Run waits
	// for them.
	group *routines.Group

	mu        sync.Mutex
	models    map[string]*model // the models whose lease this router holds
	claims    map[string]time.Time
	floors    map[string]*failover.Floor // per model: epochs in use (failover.go)
	executors map[string]*executor
	busGen    uint64 // the bus generation the executors' clocks refer to
	started   time.Time
}

type executor struct {
	generation uint64
	seen       time.Time
}

// New checks the configuration.
func New(cfg Config) (*Service, error) {
	if cfg.Conn == nil {
		return nil, errors.New(Name + ": a NATS connection is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		cfg.ID = "router-" + hex.EncodeToString(b[:])
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.PullHold <= 0 {
		cfg.PullHold = DefaultPullHold
	}
	if cfg.Trace.Mode == "" {
		cfg.Trace = tracesetting.DefaultConfig()
	}
	s := &Service{
		trace: tracesetting.New(cfg.Trace, cfg.ID),
		cfg:   cfg, log: cfg.Logger.With("service", Name, "router", cfg.ID), ready: make(chan struct{}),
		models: map[string]*model{}, started: time.Now(), executors: map[string]*executor{}, claims: map[string]time.Time{},
		floors: map[string]*failover.Floor{},
	}
	s.metrics = newRouterMetrics(s)
	return s, nil
}

// Ready is closed once the service is connected and serving (active or
// standing by).
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Active reports whether this router holds the lease of at least one
// model and serves it.
func (s *Service) Active() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.models) > 0
}

// Serving lists the models (as "<model>.<version>" subject tokens) whose
// lease this router holds.
func (s *Service) Serving() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.models))
	for k := range s.models {
		out = append(out, k)
	}
	return out
}

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if s.cfg.RedisURL != "" {
		rdb, err := redisconn.Open(ctx, s.cfg.RedisURL, s.cfg.RedisAuth)
		if err != nil {
			return fmt.Errorf("%s: %w", Name, err)
		}
		s.st = &redisStore{rdb: rdb, opTimeout: 2 * time.Second}
	} else {
		s.st = newMemStore()
	}
	defer s.st.close()
	bc, err := bus.New(s.cfg.Conn, bus.WithLogger(s.log), s.metrics.BusOption())
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	s.bus = bc
	defer bc.Close()

	ping, err := bc.ServePing(Name)
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	defer ping.Unsubscribe()
	hb, err := bc.Subscribe(bus.HeartbeatSubject, s.heartbeat)
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	defer hb.Unsubscribe()
	if s.cfg.Trace.Mode == tracesetting.ModeOpenTelemetry {
		if s.tracer, err = tracing.New(ctx, s.cfg.Trace, Name, s.trace); err != nil {
			return fmt.Errorf("%s: %w", Name, err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.tracer.Shutdown(sctx)
		}()
	} else {
		// No spans here, but a gateway writing Triton's trace file asks
		// the executor for a request's timestamps through its trace
		// context, which the router passes on (SequenceWork.trace_context).
		tracing.UsePropagator()
	}
	stores := []settingbus.Store{s.trace}
	if s.cfg.Logging != nil {
		stores = append(stores, s.cfg.Logging)
	}
	settings, err := settingbus.Follow(ctx, bc, bus.RoleSequenceRouter, s.cfg.ID, false, stores...)
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	defer settings.Stop()
	s.group = routines.New(ctx)
	defer s.group.Stop()
	claims, err := bc.SubscribeAll(bus.SequenceClaimWildcard, s.claim)
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	defer claims.Unsubscribe()
	if err := bc.Flush(ctx); err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	close(s.ready)
	s.log.Info("ready", "store", map[bool]string{true: "redis", false: "memory"}[s.cfg.RedisURL != ""])

	house := time.NewTicker(250 * time.Millisecond)
	defer house.Stop()
	// Presence for the admin API, on its own goroutine: counting a model's
	// sequences waits for its batcher's lock, which nothing else here
	// should wait for.
	s.group.Go(func(ctx context.Context) {
		t := time.NewTicker(bus.HeartbeatInterval)
		defer t.Stop()
		for {
			s.announce(false)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	for {
		select {
		case <-ctx.Done():
			for _, m := range s.allModels() {
				s.stepDown(m, failover.Shutdown)
			}
			s.group.Stop()
			s.announce(true)
			return nil
		case <-house.C:
			s.housekeeping(time.Now())
		}
	}
}

// model returns the model this router serves, nil when it lost it.
func (s *Service) model(name, version string) *model {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.models[modelKey(name, version)]
}

func (s *Service) allModels() []*model {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*model, 0, len(s.models))
	for _, m := range s.models {
		out = append(out, m)
	}
	return out
}

func (s *Service) handleInfer(ctx context.Context, subject, reply string, data []byte) {
	name, version, _, ok := bus.ParseSequenceSubject(subject)
	if !ok {
		s.bus.ReplyError(reply, tritonerr.InvalidArgf("bad sequence subject %s", subject))
		return
	}
	var sr busv1.SequenceRequest
	if err := proto.Unmarshal(data, &sr); err != nil {
		s.bus.ReplyError(reply, tritonerr.InvalidArgf("malformed sequence request for model '%s': %v", name, err))
		return
	}
	if len(sr.GetResolve()) > 0 {
		if m := s.model(name, version); m != nil {
			if !s.group.Go(func(ctx context.Context) { m.resolve(ctx, reply, sr.GetResolve()) }) {
				s.bus.ReplyError(reply, bus.NotTaken("the sequence router for model '%s' is shutting down", name))
			}
		} else {
			s.bus.ReplyError(reply, bus.NotTaken("the sequence router for model '%s' is not serving it any more", name))
		}
		return
	}
	now := time.Now()
	// A traced request gets the router's span; the executor that runs it
	// continues the trace from there (busv1.SequenceWork.trace_context).
	ctx, span := s.tracer.StartChild(ctx, name, "sequence_batcher")
	defer tracing.End(span, nil)
	it := &item{reply: reply, body: sr.GetRequest(), received: now, id: seqbatch.FromProto(sr.GetId()), trace: tracing.Inject(ctx),
		start: sr.GetStart(), end: sr.GetEnd(), timeout: time.Duration(sr.GetTimeoutUs()) * time.Microsecond, token: sr.GetToken(),
		stream: sr.GetStream(), seq: sr.GetStreamSeq(), shape: sr.GetShape(), window: sr.GetStreamWindow(),
		key: s.bus.RequestKey(reply)}
	if d, ok := ctx.Deadline(); ok {
		it.deadline = d
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		ctx = logsetting.WithRequestID(ctx, requestID(it.body))
		s.log.DebugContext(ctx, "sequence request", "model", name, "version", version, "sequence", it.id.Key(),
			"start", it.start, "end", it.end)
	}
	m := s.model(name, version)
	if m == nil {
		s.bus.ReplyError(reply, bus.NotTaken("the sequence router for model '%s' is not serving it any more; the request was not run", name))
		return
	}
	m.infer(now, it)
}

func (s *Service) handlePull(_ context.Context, subject, reply string, data []byte) {
	name, version, _, ok := bus.ParseSequenceSubject(subject)
	if !ok {
		s.bus.ReplyError(reply, tritonerr.InvalidArgf("bad sequence subject %s", subject))
		return
	}
	var p busv1.SequencePull
	if err := proto.Unmarshal(data, &p); err != nil {
		s.bus.ReplyError(reply, tritonerr.InvalidArgf("malformed sequence pull for model '%s': %v", name, err))
		return
	}
	now := time.Now()
	s.seen(p.GetExecutorId(), p.GetGeneration(), now)
	m := s.model(name, version)
	if p.GetUnloaded() {
		if m != nil { // published: nobody waits for an answer
			m.unloaded(now, &p)
		}
		return
	}
	if m == nil {
		s.bus.ReplyError(reply, bus.NotTaken("the sequence router for model '%s' is not serving it any more", name))
		return
	}
	m.pull(now, reply, &p)
}

// forwardCancel publishes again, on bus.CancelSubject, the cancellation of
// a request the router handed to an executor. The executor heard the
// client's own cancellation too, but possibly before the batch reached it,
// when only its memory of early cancellations (bus, a few seconds) would
// apply it; the second one finds the request running there. It carries
// the request's cancellation key, which the executor requires (it got the
// key in the batch, busv1.SequenceWork.cancel_key).
func (s *Service) forwardCancel(reply string, key uint64) {
	s.bus.ForwardCancel(reply, key)
	s.log.Debug("cancellation forwarded to the executor running the request")
}

// heartbeat tracks executors: a withdrawal loses its slots at once.
func (s *Service) heartbeat(_ context.Context, data []byte) {
	var hb busv1.ExecutorHeartbeat
	if proto.Unmarshal(data, &hb) != nil || hb.GetExecutorId() == "" {
		return
	}
	if hb.GetWithdraw() {
		s.mu.Lock()
		delete(s.executors, hb.GetExecutorId())
		s.mu.Unlock()
		s.lose(hb.GetExecutorId(), 0, "withdrew")
		return
	}
	s.seen(hb.GetExecutorId(), hb.GetGeneration(), time.Now())
}

// seen records that executor (generation) is alive; a new generation means
// it restarted and lost the state of its sequences.
func (s *Service) seen(id string, gen uint64, now time.Time) {
	s.mu.Lock()
	e := s.executors[id]
	restarted := false
	if e == nil {
		e = &executor{generation: gen}
		s.executors[id] = e
	} else if gen != 0 && e.generation != gen {
		restarted = e.generation != 0
		e.generation = gen
	}
	e.seen = now
	s.mu.Unlock()
	if restarted {
		s.lose(id, gen, "restarted")
	}
}

// lose withdraws the slots of executor (every generation but keep).
func (s *Service) lose(id string, keep uint64, why string) {
	for _, m := range s.allModels() {
		m.lose(id, keep, why)
	}
}

func (s *Service) housekeeping(now time.Time) {
	s.mu.Lock()
	if gen := s.bus.Generation(); !s.bus.Connected() || gen != s.busGen {
		// Nothing could be heard while NATS was down: the executors'
		// silence says nothing about them. Their clocks start again.
		s.busGen = gen
		for _, e := range s.executors {
			e.seen = now
		}
	}
	var gone []string
	for id, e := range s.executors {
		if now.Sub(e.seen) > bus.HeartbeatExpiry {
			gone = append(gone, id)
			delete(s.executors, id)
		}
	}
	s.mu.Unlock()
	for _, id := range gone {
		s.log.Warn("executor lost: withdrawing its sequence slots", "executor", id)
		s.lose(id, 0, "stopped sending heartbeats")
	}
	for _, m := range s.allModels() {
		m.expirePending(now)
	}
}

// TraceSettings returns the trace settings the router applies.
func (s *Service) TraceSettings() *tracesetting.Manager { return s.trace }
