// Command nereid-shm-registry runs the shm-registry service on its own, against a NATS server.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/fdlimit"
	"github.com/nereid-io/nereid/pkg/logsetting"
	"github.com/nereid-io/nereid/pkg/natsconn"
	"github.com/nereid-io/nereid/pkg/opsmetrics"
	"github.com/nereid-io/nereid/pkg/probe"
	"github.com/nereid-io/nereid/pkg/redisconn"
	shmregistry "github.com/nereid-io/nereid/services/shm-registry"
)

func main() {
	fs := flag.NewFlagSet("nereid-shm-registry", flag.ExitOnError)
	natsURL := fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server URL(s), comma-separated")
	redisURL := fs.String("redis-url", "", "Redis URL (redis://host:port/db, or rediss:// for TLS); empty keeps state in memory")
	probeAddr := fs.String("probe-addr", "", "address for /livez and /readyz (empty disables)")
	metricsPort := fs.Int("metrics-port", 0, "port serving /metrics: regions registered, requests answered, NATS round trips (0 disables)")
	var logFlags logsetting.Flags
	logFlags.Register(fs)
	var auth natsconn.Auth
	auth.Register(fs)
	var redisAuth redisconn.Options
	redisAuth.Register(fs)
	_ = fs.Parse(os.Args[1:])
	auth.FromEnv()
	redisAuth.FromEnv()

	logs, log := logFlags.MustBuild("nereid-shm-registry")
	fdlimit.RaiseAndReport(log) // connections need descriptors: as many as the system allows
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, logs, auth, *natsURL, *redisURL, redisAuth, *probeAddr, *metricsPort); err != nil {
		fmt.Fprintln(os.Stderr, "nereid-shm-registry:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, logs *logsetting.Manager, auth natsconn.Auth, natsURL, redisURL string, redisAuth redisconn.Options, probeAddr string, metricsPort int) error {
	opts, err := auth.Options(bus.RoleShmRegistry)
	if err != nil {
		return err
	}
	nc, err := natsconn.Connect(ctx, natsURL, "nereid-shm-registry", log, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	svc, err := shmregistry.New(shmregistry.Config{Conn: nc, RedisURL: redisURL, RedisAuth: redisAuth, Logger: log, Logging: logs})
	if err != nil {
		return err
	}
	p, err := probe.Listen(probeAddr, svc.Ready())
	if err != nil {
		return err
	}
	defer p.Close()
	m, err := opsmetrics.ListenPort(metricsPort, svc.MetricsHandler())
	if err != nil {
		return fmt.Errorf("--metrics-port: %w", err)
	}
	defer m.Close()
	return svc.Run(ctx)
}
