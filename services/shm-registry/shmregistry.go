package shmregistry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/logsetting"
	"github.com/nereid-io/nereid/pkg/opsmetrics"
	"github.com/nereid-io/nereid/pkg/redisconn"
	"github.com/nereid-io/nereid/pkg/settingbus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Name is the service name used in logs and subjects.
const Name = "shm-registry"

// DefaultSweepInterval is how often the registry removes regions awaiting
// unregister whose holds have all lapsed.
const DefaultSweepInterval = time.Second

// Config holds everything the service needs; flags fill it in main.
type Config struct {
	// Conn is the NATS connection; the caller owns it.
	Conn *nats.Conn
	// Local, when set, serves requests from services of this process
	// in-process (bus.Local: the standalone server).
	Local *bus.Local
	// RedisURL selects the Redis store (redis://host:port/db); empty means
	// the in-memory store of the standalone mode.
	RedisURL string
	// RedisAuth are the ACL user, password and TLS material for RedisURL.
	RedisAuth redisconn.Options
	// RedisPrefix prefixes the store's Redis keys; default
	// DefaultRedisPrefix. Registries that share regions share it.
	RedisPrefix string
	// SweepInterval defaults to DefaultSweepInterval.
	SweepInterval time.Duration
	Logger        *slog.Logger
	// Logging are the settings Logger obeys (pkg/logsetting), kept in step
	// with the logging extension; nil: Logger does not change.
	Logging *logsetting.Manager
}

// Service is one running shared-memory registry.
type Service struct {
	cfg   Config
	log   *slog.Logger
	ready chan struct{}
	store store
	bus   *bus.Conn

	metrics  *opsmetrics.Registry   // metrics.go
	requests *prometheus.CounterVec // nereid_shm_registry_requests
	storeMu  sync.Mutex             // store, for the metrics' reads
}

// New checks the configuration.
func New(cfg Config) (*Service, error) {
	if cfg.Conn == nil {
		return nil, errors.New(Name + ": a NATS connection is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	s := &Service{cfg: cfg, log: cfg.Logger.With("service", Name), ready: make(chan struct{})}
	s.metrics, s.requests = newRegistryMetrics(s)
	return s, nil
}

// currentStore is the store once Run opened it, else nil.
func (s *Service) currentStore() store {
	s.storeMu.Lock()
	defer s.storeMu.Unlock()
	return s.store
}

// Ready is closed once the service is connected and serving.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	var st store
	if s.cfg.RedisURL != "" {
		rdb, err := redisconn.Open(ctx, s.cfg.RedisURL, s.cfg.RedisAuth)
		if err != nil {
			return fmt.Errorf("%s: %w", Name, err)
		}
		st = newRedisStore(rdb, s.cfg.RedisPrefix)
	} else {
		st = newMemStore()
	}
	s.storeMu.Lock()
	s.store = st
	s.storeMu.Unlock()
	defer st.Close()

	bc, err := bus.New(s.cfg.Conn, bus.WithLogger(s.log), bus.WithLocal(s.cfg.Local), s.metrics.BusOption())
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	defer bc.Close()
	s.bus = bc

	var subs []*bus.Subscription
	defer func() {
		for _, sub := range subs {
			_ = sub.Drain()
		}
	}()
	for subject, h := range map[string]bus.HandlerFunc{
		bus.ShmRegisterSubject:   s.counted("register", s.handleRegister),
		bus.ShmUnregisterSubject: s.counted("unregister", s.handleUnregister),
		bus.ShmStatusSubject:     s.counted("status", s.handleStatus),
		bus.ShmAcquireSubject:    s.counted("acquire", s.handleAcquire),
		bus.ShmReleaseSubject:    s.counted("release", s.handleRelease),
	} {
		sub, err := bc.Handle(subject, bus.QueueShmRegistry, h)
		if err != nil {
			return fmt.Errorf("%s: %w", Name, err)
		}
		subs = append(subs, sub)
	}
	ping, err := bc.ServePing(Name)
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	defer ping.Unsubscribe()
	if s.cfg.Logging != nil {
		logFollow, err := settingbus.Follow(ctx, bc, bus.RoleShmRegistry, Name+"-"+instanceID(), false, s.cfg.Logging)
		if err != nil {
			return fmt.Errorf("%s: %w", Name, err)
		}
		defer logFollow.Stop()
	}
	if err := bc.Flush(ctx); err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	close(s.ready)
	s.log.Info("ready", "store", s.storeName())

	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			removed, err := s.store.Sweep(ctx, now)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("sweeping held regions", "err", err)
			}
			s.removed(removed)
		}
	}
}

func (s *Service) storeName() string {
	if s.cfg.RedisURL != "" {
		return "redis"
	}
	return "memory"
}

// removed tells the regions' nodes that they are gone.
func (s *Service) removed(regions []*busv1.ShmRegion) {
	for _, r := range regions {
		s.log.Debug("region removed", "name", r.GetName(), "node", r.GetNode())
		if err := s.bus.Publish(bus.ShmRemovedSubject(r.GetNode()), &busv1.ShmRegionRemoved{Region: r}); err != nil {
			s.log.Warn("announcing a removed region", "name", r.GetName(), "err", err)
		}
	}
}

func unmarshal(data []byte, m proto.Message) error {
	if err := proto.Unmarshal(data, m); err != nil {
		return tritonerr.InvalidArgf("malformed shared memory registry request: %v", err)
	}
	return nil
}

func (s *Service) handleRegister(ctx context.Context, data []byte) (proto.Message, error) {
	var req busv1.ShmRegisterRequest
	if err := unmarshal(data, &req); err != nil {
		return nil, err
	}
	r := req.GetRegion()
	if r.GetName() == "" || (r.GetKind() != busv1.ShmKind_SHM_KIND_SYSTEM && r.GetKind() != busv1.ShmKind_SHM_KIND_CUDA) {
		return nil, tritonerr.InvalidArgf("shared memory register request needs a region name and kind")
	}
	r.AwaitingUnregister = false
	if err := s.store.Register(ctx, r); err != nil {
		return nil, err
	}
	s.log.Debug("region registered", "name", r.GetName(), "kind", r.GetKind(), "node", r.GetNode(), "byte_size", r.GetByteSize())
	return &busv1.ShmRegisterResponse{}, nil
}

// kindWords names a kind as Triton's messages do.
func kindWords(k busv1.ShmKind) string {
	if k == busv1.ShmKind_SHM_KIND_CUDA {
		return "cuda"
	}
	return "system"
}

func (s *Service) handleUnregister(ctx context.Context, data []byte) (proto.Message, error) {
	var req busv1.ShmUnregisterRequest
	if err := unmarshal(data, &req); err != nil {
		return nil, err
	}
	kind := req.GetKind()
	names := []string{req.GetName()}
	if req.GetName() == "" {
		all, err := s.store.List(ctx)
		if err != nil {
			return nil, err
		}
		names = names[:0]
		for _, r := range all {
			if r.GetKind() == kind {
				names = append(names, r.GetName())
			}
		}
		slices.Sort(names)
	}
	resp := &busv1.ShmUnregisterResponse{}
	var failed []string
	var lastErr error
	now := time.Now()
	for _, n := range names {
		r, deferred, err := s.store.Unregister(ctx, n, kind, now)
		switch {
		case err != nil:
			failed = append(failed, n)
			lastErr = err
		case deferred:
			resp.Deferred = append(resp.Deferred, n)
		case r != nil:
			resp.Removed = append(resp.Removed, n)
			s.removed([]*busv1.ShmRegion{r})
		}
	}
	if len(failed) > 0 {
		if req.GetName() != "" {
			return nil, lastErr
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Failed to unregister the following %s shared memory regions: ", kindWords(kind))
		for _, n := range failed {
			b.WriteString(n + " ,")
		}
		s.log.Warn(b.String(), "err", lastErr)
		return nil, tritonerr.Internalf("%s", b.String())
	}
	return resp, nil
}

func (s *Service) handleStatus(ctx context.Context, data []byte) (proto.Message, error) {
	var req busv1.ShmStatusRequest
	if err := unmarshal(data, &req); err != nil {
		return nil, err
	}
	kind, name := req.GetKind(), req.GetName()
	resp := &busv1.ShmStatusResponse{}
	if name != "" {
		r, err := s.store.Get(ctx, name)
		if err != nil {
			return nil, err
		}
		switch {
		case kind == busv1.ShmKind_SHM_KIND_UNSPECIFIED:
		case r == nil:
			return nil, tritonerr.NotFoundf("Unable to find %s shared memory region: '%s'", kindWords(kind), name)
		case r.GetKind() != kind && r.GetKind() == busv1.ShmKind_SHM_KIND_CUDA:
			return nil, tritonerr.NotFoundf("The region named '%s' is registered as CUDA shared memory, not system shared memory", name)
		case r.GetKind() != kind:
			return nil, tritonerr.NotFoundf("The region named '%s' is registered as system shared memory, not CUDA shared memory", name)
		}
		if r != nil {
			resp.Regions = append(resp.Regions, r)
		}
		return resp, nil
	}
	all, err := s.store.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range all {
		if kind == busv1.ShmKind_SHM_KIND_UNSPECIFIED || r.GetKind() == kind {
			resp.Regions = append(resp.Regions, r)
		}
	}
	slices.SortFunc(resp.Regions, func(a, b *busv1.ShmRegion) int { return strings.Compare(a.GetName(), b.GetName()) })
	return resp, nil
}

func (s *Service) handleAcquire(ctx context.Context, data []byte) (proto.Message, error) {
	var req busv1.ShmAcquireRequest
	if err := unmarshal(data, &req); err != nil {
		return nil, err
	}
	if req.GetHolder() == "" {
		return nil, tritonerr.InvalidArgf("shared memory acquire request needs a holder")
	}
	names := slices.Clone(req.GetNames())
	slices.Sort(names)
	names = slices.Compact(names)
	found, missing, err := s.store.Acquire(ctx, req.GetHolder(), names, time.UnixMilli(req.GetExpiresUnixMs()))
	if err != nil {
		return nil, err
	}
	return &busv1.ShmAcquireResponse{Regions: found, Missing: missing}, nil
}

func (s *Service) handleRelease(ctx context.Context, data []byte) (proto.Message, error) {
	var req busv1.ShmReleaseRequest
	if err := unmarshal(data, &req); err != nil {
		return nil, err
	}
	names := slices.Clone(req.GetNames())
	slices.Sort(names)
	names = slices.Compact(names)
	removed, err := s.store.Release(ctx, req.GetHolder(), names, time.Now())
	if err != nil {
		return nil, err
	}
	s.removed(removed)
	return &busv1.ShmReleaseResponse{}, nil
}

// instanceID tells this registry process apart in settings acknowledgements.
func instanceID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
