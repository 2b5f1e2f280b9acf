// Command nereid-sequence-router runs the sequence-router service on its own, against a NATS server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/fdlimit"
	"github.com/nereid-io/nereid/pkg/logsetting"
	"github.com/nereid-io/nereid/pkg/natsconn"
	"github.com/nereid-io/nereid/pkg/opsmetrics"
	"github.com/nereid-io/nereid/pkg/placement"
	"github.com/nereid-io/nereid/pkg/probe"
	"github.com/nereid-io/nereid/pkg/redisconn"
	"github.com/nereid-io/nereid/pkg/tracesetting"
	"github.com/nereid-io/nereid/pkg/tritonflag"
	seqrouter "github.com/nereid-io/nereid/services/sequence-router"
	"github.com/nereid-io/nereid/services/sequence-router/placer"
)

func main() {
	fs := flag.NewFlagSet("nereid-sequence-router", flag.ExitOnError)
	natsURL := fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server URL(s), comma-separated")
	redisURL := fs.String("redis-url", "", "Redis URL (redis://host:port/db, or rediss:// for TLS); empty keeps state in memory")
	probeAddr := fs.String("probe-addr", "", "address for /livez and /readyz (empty disables)")
	metricsPort := fs.Int("metrics-port", 0, "port serving /metrics: queued requests, backlog and active sequences per model, NATS round trips (0 disables)")
	maxBacklog := fs.Int("max-sequence-backlog", 0, "sequences that may wait for a slot per model (0: unbounded, as Triton)")
	leaseTTL := fs.Duration("lease-ttl", seqrouter.DefaultLeaseTTL, "how long the active router's lease outlives it (takeover time)")
	id := fs.String("id", "", "router id in the lease (default random)")
	var placed bool
	tritonflag.BoolVar(fs, &placed, "placement", false, "also run the placement controller (docs/placement.md): leader-elected in --redis-url, it decides which executors started with --placement load which models")
	minReplicas := fs.Int("placement-min-replicas", 1, "under --placement, executors each model should be on (a model's nereid_min_replicas parameter overrides it)")
	maxReplicas := fs.Int("placement-max-replicas", 0, "under --placement, executors each model may be on at most (0: no bound; a model's nereid_max_replicas parameter overrides it)")
	scaleUp := fs.Float64("placement-scale-up-pending", 0, "under --placement, scale by load: a model whose requests in flight per replica stay at or above this for --placement-scale-up-after gets another replica in free capacity (0: off)")
	scaleUpQueue := fs.Duration("placement-scale-up-queue-time", 0, "under --placement, scale by load: a model whose requests wait this long or longer in its replicas' queues on the mean for --placement-scale-up-after gets another replica in free capacity (0: off)")
	scaleUpAfter := fs.Duration("placement-scale-up-after", 10*time.Second, "under --placement, how long the load must last before each replica added")
	scaleDownAfter := fs.Duration("placement-scale-down-after", 5*time.Minute, "under --placement with scaling by load, how long a replica beyond min_replicas stays idle before it is unloaded")
	var logFlags logsetting.Flags
	logFlags.Register(fs)
	var auth natsconn.Auth
	auth.Register(fs)
	var redisAuth redisconn.Options
	redisAuth.Register(fs)
	var trace tracesetting.Flag
	fs.Var(&trace, "trace-config", "a trace setting, as tritonserver's --trace-config (repeatable)")
	_ = fs.Parse(os.Args[1:])
	auth.FromEnv()
	redisAuth.FromEnv()
	cfg := seqrouter.Config{RedisURL: *redisURL, RedisAuth: redisAuth, MaxBacklog: *maxBacklog, LeaseTTL: *leaseTTL, ID: *id, Trace: trace.Config()}
	// Triton's test hooks: hold batches until that many requests wait.
	cfg.DelaySlots, _ = strconv.Atoi(os.Getenv("TRITONSERVER_DELAY_SCHEDULER"))
	cfg.DelayBacklog, _ = strconv.Atoi(os.Getenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER"))

	logs, log := logFlags.MustBuild("nereid-sequence-router")
	fdlimit.RaiseAndReport(log) // connections need descriptors: as many as the system allows
	cfg.Logging = logs
	var pcfg *placer.Config
	if placed {
		pcfg = &placer.Config{RedisURL: *redisURL, RedisAuth: redisAuth, ID: *id, LeaseTTL: *leaseTTL,
			Planner: placement.Config{MinReplicas: *minReplicas, MaxReplicas: *maxReplicas,
				ScaleUpPending: *scaleUp, ScaleUpQueueTime: *scaleUpQueue, ScaleUpAfter: *scaleUpAfter, ScaleDownAfter: *scaleDownAfter}}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, auth, *natsURL, *probeAddr, *metricsPort, cfg, pcfg); err != nil {
		fmt.Fprintln(os.Stderr, "nereid-sequence-router:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, auth natsconn.Auth, natsURL, probeAddr string, metricsPort int, cfg seqrouter.Config, pcfg *placer.Config) error {
	opts, err := auth.Options(bus.RoleSequenceRouter)
	if err != nil {
		return err
	}
	nc, err := natsconn.Connect(ctx, natsURL, "nereid-sequence-router", log, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	cfg.Conn, cfg.Logger = nc, log
	svc, err := seqrouter.New(cfg)
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
	if pcfg == nil {
		return svc.Run(ctx)
	}
	pcfg.Conn, pcfg.Logger, pcfg.Metrics = nc, log, svc.MetricsRegistry()
	ctl, err := placer.New(*pcfg)
	if err != nil {
		return err
	}
	// The controller stops with the router: either ending ends both.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	placed := make(chan error, 1)
	go func() { placed <- ctl.Run(ctx); cancel() }()
	err = svc.Run(ctx)
	cancel()
	return errors.Join(err, <-placed)
}
