// Package shmregistry is the shared-memory registry: the authority on registered shared-memory regions (system and CUDA). Regions live in Redis (or the standalone's memory store) so that a restarted registry still knows them; gateways ask it over NATS and never keep their own copy.
//
// This release starts, connects to NATS (and to Redis when configured),
// answers its ping subject and reports ready; the protocol it serves arrives
// with the features that need it.
package shmregistry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/nereid-io/nereid/pkg/bus"
)

// Name is the service name used in logs and subjects.
const Name = "shm-registry"

// Config holds everything the service needs; flags fill it in main.
type Config struct {
	// Conn is the NATS connection; the caller owns it.
	Conn *nats.Conn
	// RedisURL selects the Redis store (redis://host:port/db); empty means
	// the in-memory store of the standalone mode.
	RedisURL string
	Logger   *slog.Logger
}

// Service is one running shared-memory registry.
type Service struct {
	cfg   Config
	log   *slog.Logger
	ready chan struct{}
}

// New checks the configuration.
func New(cfg Config) (*Service, error) {
	if cfg.Conn == nil {
		return nil, errors.New(Name + ": a NATS connection is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Service{cfg: cfg, log: cfg.Logger.With("service", Name), ready: make(chan struct{})}, nil
}

// Ready is closed once the service is connected and serving.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if s.cfg.RedisURL != "" {
		opt, err := redis.ParseURL(s.cfg.RedisURL)
		if err != nil {
			return fmt.Errorf("%s: redis url: %w", Name, err)
		}
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		if err := pingRedis(ctx, rdb); err != nil {
			return fmt.Errorf("%s: %w", Name, err)
		}
	}
	sub, err := s.cfg.Conn.Subscribe(bus.PingSubject(Name), func(m *nats.Msg) { _ = m.Respond([]byte(Name)) })
	if err != nil {
		return fmt.Errorf("%s: subscribe: %w", Name, err)
	}
	defer sub.Unsubscribe()
	if err := s.cfg.Conn.Flush(); err != nil {
		return fmt.Errorf("%s: flush: %w", Name, err)
	}
	close(s.ready)
	s.log.Info("ready")
	<-ctx.Done()
	return nil
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
