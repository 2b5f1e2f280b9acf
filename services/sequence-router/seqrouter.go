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
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/seqbatch"
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
	Logger   *slog.Logger
	// ID names this router in the lease; default random.
	ID string
	// LeaseTTL is how long the lease outlives its holder (default 2 s): a
	// standby takes over at most this long after the active router died.
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
}

// Service is one running sequence router.
type Service struct {
	cfg   Config
	log   *slog.Logger
	ready chan struct{}
	bus   *bus.Conn
	st    store

	mu        sync.Mutex
	models    map[string]*model
	executors map[string]*executor
	active    bool
	subs      []*bus.Subscription
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
	return &Service{
		cfg: cfg, log: cfg.Logger.With("service", Name, "router", cfg.ID), ready: make(chan struct{}),
		models: map[string]*model{}, executors: map[string]*executor{},
	}, nil
}

// Ready is closed once the service is connected and serving (active or
// standing by).
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Active reports whether this router holds the lease and serves.
func (s *Service) Active() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if s.cfg.RedisURL != "" {
		opt, err := redis.ParseURL(s.cfg.RedisURL)
		if err != nil {
			return fmt.Errorf("%s: redis url: %w", Name, err)
		}
		rdb := redis.NewClient(opt)
		if err := pingRedis(ctx, rdb); err != nil {
			rdb.Close()
			return fmt.Errorf("%s: %w", Name, err)
		}
		s.st = &redisStore{rdb: rdb, opTimeout: 2 * time.Second}
	} else {
		s.st = newMemStore()
	}
	defer s.st.close()
	bc, err := bus.New(s.cfg.Conn, bus.WithLogger(s.log))
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	s.bus = bc
	defer bc.Close()

	ping, err := s.cfg.Conn.Subscribe(bus.PingSubject(Name), func(m *nats.Msg) { _ = m.Respond([]byte(Name)) })
	if err != nil {
		return fmt.Errorf("%s: subscribe: %w", Name, err)
	}
	defer ping.Unsubscribe()
	hb, err := bc.Subscribe(bus.HeartbeatSubject, s.heartbeat)
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	defer hb.Unsubscribe()
	if err := s.cfg.Conn.Flush(); err != nil {
		return fmt.Errorf("%s: flush: %w", Name, err)
	}
	close(s.ready)
	s.log.Info("ready", "store", map[bool]string{true: "redis", false: "memory"}[s.cfg.RedisURL != ""])

	renew := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer renew.Stop()
	house := time.NewTicker(250 * time.Millisecond)
	defer house.Stop()
	var renewed time.Time
	s.lease(ctx, &renewed)
	for {
		select {
		case <-ctx.Done():
			s.deactivate("shutting down")
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.st.release(rctx, s.cfg.ID)
			cancel()
			return nil
		case <-renew.C:
			s.lease(ctx, &renewed)
		case <-house.C:
			s.housekeeping(time.Now())
		}
	}
}

// lease takes or renews the lease and (de)activates accordingly. A store
// that cannot be reached keeps an active router serving until its lease
// would have lapsed: nobody else can have taken it before then.
func (s *Service) lease(ctx context.Context, renewed *time.Time) {
	lctx, cancel := context.WithTimeout(ctx, s.cfg.LeaseTTL/3)
	ok, err := s.st.acquire(lctx, s.cfg.ID, s.cfg.LeaseTTL)
	cancel()
	switch {
	case err != nil:
		if s.Active() && time.Since(*renewed) > s.cfg.LeaseTTL*3/4 {
			s.deactivate("lease store unreachable: " + err.Error())
		}
	case ok:
		*renewed = time.Now()
		if !s.Active() {
			if err := s.activate(); err != nil {
				s.log.Error("cannot activate", "err", err)
			}
		}
	default:
		if s.Active() {
			s.deactivate("another router holds the lease")
		}
	}
}

func (s *Service) activate() error {
	infer, err := s.bus.HandleDelegated(bus.SequenceInferWildcard, bus.QueueRouters, s.handleInfer)
	if err != nil {
		return err
	}
	pull, err := s.bus.HandleDelegated(bus.SequencePullWildcard, bus.QueueRouters, s.handlePull)
	if err != nil {
		_ = infer.Unsubscribe()
		return err
	}
	_ = s.cfg.Conn.Flush()
	s.mu.Lock()
	s.active = true
	s.subs = []*bus.Subscription{infer, pull}
	s.mu.Unlock()
	s.log.Info("active: serving sequences")
	return nil
}

// deactivate stops serving and drops the state in memory; requests this
// router holds fail (the next active router has the bindings).
func (s *Service) deactivate(why string) {
	s.mu.Lock()
	if !s.active {
		s.mu.Unlock()
		return
	}
	s.active = false
	subs := s.subs
	s.subs = nil
	models := s.models
	s.models = map[string]*model{}
	s.mu.Unlock()
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
	for _, m := range models {
		m.shutdown(tritonerr.Unavailablef("the sequence router serving model '%s' stopped: %s", m.name, why))
	}
	s.log.Warn("standing by", "why", why)
}

func (s *Service) model(name, version string) *model {
	key := bus.Token(name) + "." + bus.Token(version)
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.models[key]
	if m == nil {
		m = &model{s: s, name: name, version: version, key: key,
			pulls: map[seqbatch.InstanceKey]*pull{}, inflight: map[uint64]*flight{}}
		s.models[key] = m
	}
	return m
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
	now := time.Now()
	it := &item{reply: reply, body: sr.GetRequest(), received: now, id: seqbatch.FromProto(sr.GetId()),
		start: sr.GetStart(), end: sr.GetEnd(), timeout: time.Duration(sr.GetTimeoutUs()) * time.Microsecond}
	if d, ok := ctx.Deadline(); ok {
		it.deadline = d
	}
	s.model(name, version).infer(now, it)
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
	s.model(name, version).pull(now, reply, &p)
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

// pingRedis waits for Redis to answer, so that a service started alongside
// Redis does not fail on the first try.
func pingRedis(ctx context.Context, rdb *redis.Client) error {
	var err error
	for {
		if err = rdb.Ping(ctx).Err(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
