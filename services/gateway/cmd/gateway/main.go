// Command nereid-gateway serves Triton's HTTP/REST, gRPC and metrics
// endpoints for a Nereid constellation reached over NATS.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/fdlimit"
	"github.com/nereid-io/nereid/pkg/logsetting"
	"github.com/nereid-io/nereid/pkg/natsconn"
	"github.com/nereid-io/nereid/pkg/tritonflag"
	"github.com/nereid-io/nereid/pkg/version"
	"github.com/nereid-io/nereid/services/gateway"
)

func main() {
	fs := flag.NewFlagSet("nereid-gateway", flag.ExitOnError)
	natsURL := fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server URL(s), comma-separated")
	id := fs.String("id", gateway.DefaultServerID, "server identifier reported in server metadata")
	httpPort := fs.Int("http-port", 8000, "HTTP/REST port")
	grpcPort := fs.Int("grpc-port", 8001, "gRPC port")
	metricsPort := fs.Int("metrics-port", 8002, "Prometheus metrics port")
	httpAddr := fs.String("http-address", "0.0.0.0", "HTTP/REST bind address")
	grpcAddr := fs.String("grpc-address", "0.0.0.0", "gRPC bind address")
	metricsAddr := fs.String("metrics-address", "0.0.0.0", "metrics bind address")
	adminPort := fs.Int("admin-port", 0, "port of the cluster admin API over gRPC (nereid.admin.v1); 0: off")
	adminHTTPPort := fs.Int("admin-http-port", 0, "port of the cluster admin API over REST; 0: off")
	adminAddr := fs.String("admin-address", "127.0.0.1", "admin API bind address (beyond loopback the admin group must be restricted, or served over mutual TLS)")
	allowHTTP := tritonflag.Bool(fs, "allow-http", true, "serve HTTP/REST")
	allowGRPC := tritonflag.Bool(fs, "allow-grpc", true, "serve gRPC")
	allowMetrics := tritonflag.Bool(fs, "allow-metrics", true, "serve Prometheus metrics")
	metricsConstellation := tritonflag.Bool(fs, "metrics-constellation", false, "serve on /metrics, beside the gateway's own metrics, Triton's per-model and GPU metrics summed over the constellation (always on /metrics/constellation); for a Prometheus that scrapes this gateway alone, not the executors and sequence routers")
	maxInput := fs.Int64("http-max-input-size", gateway.DefaultHTTPMaxInputSize, "largest HTTP request body, in bytes, after decompression")
	allowShm := tritonflag.Bool(fs, "allow-client-shm", false, "let clients register and unregister shared-memory regions")
	timeout := fs.Duration("request-timeout", gateway.DefaultRequestTimeout, "deadline of an inference whose client sets none")
	node := fs.String("node", "", "node name: tensors for executors of the same node are handed off through shared memory (default: host name)")
	reruns := fs.Int("lost-request-reruns", gateway.DefaultLostRequestReruns, "times a stateless request runs again on another executor when the executor holding it is lost (0: never; a model opts out with parameter rerun_on_executor_loss \"false\")")
	handoffThreshold := fs.Int("handoff-threshold", 0, "tensor size in bytes from which same-node hand-off is used (0: 1 MiB; negative: never)")
	var limits gateway.Limits
	limits.RegisterFlags(fs)
	var logFlags logsetting.Flags
	logFlags.Register(fs)
	var edge gateway.EdgeFlags
	edge.Register(fs)
	var placed bool
	tritonflag.BoolVar(fs, &placed, "placement", false, "executors run under the placement controller (docs/placement.md): a request for a model no executor holds waits for the controller to place it")
	var auth natsconn.Auth
	auth.Register(fs)
	_ = fs.Parse(os.Args[1:])
	auth.FromEnv()

	logs, log := logFlags.MustBuild("nereid-gateway")
	fdlimit.RaiseAndReport(log) // connections need descriptors: as many as the system allows
	addr := func(host string, port int, on bool) string {
		if !on || port < 0 {
			return ""
		}
		return net.JoinHostPort(host, strconv.Itoa(port))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := gateway.Config{
		HTTPAddr:         addr(*httpAddr, *httpPort, *allowHTTP),
		GRPCAddr:         addr(*grpcAddr, *grpcPort, *allowGRPC),
		MetricsAddr:      addr(*metricsAddr, *metricsPort, *allowMetrics),
		AdminAddr:        addr(*adminAddr, *adminPort, *adminPort > 0),
		AdminHTTPAddr:    addr(*adminAddr, *adminHTTPPort, *adminHTTPPort > 0),
		ServerID:         *id,
		Version:          version.Version,
		HTTPMaxInputSize: *maxInput,
		AllowClientShm:   *allowShm,
		RequestTimeout:   *timeout,
		Node:             *node,
		HandoffThreshold: *handoffThreshold,
		Limits:           limits,

		LostRequestReruns: cmp.Or(*reruns, -1), // 0 on the command line: never

		Logger:  log,
		Logging: logs,

		MetricsConstellation: *metricsConstellation,
		Placement:            placed,
	}
	err := edge.Apply(&cfg)
	if err == nil {
		err = run(ctx, log, *natsURL, auth, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nereid-gateway:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, natsURL string, auth natsconn.Auth, cfg gateway.Config) error {
	opts, err := auth.Options(bus.RoleGateway)
	if err != nil {
		return err
	}
	nc, err := natsconn.Connect(ctx, natsURL, "nereid-gateway", log, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	cfg.Conn = nc
	g, err := gateway.New(cfg)
	if err != nil {
		return err
	}
	return g.Run(ctx)
}
