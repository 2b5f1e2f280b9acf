// Command nereid is the standalone server: every Nereid service in one process
// around an embedded NATS server, with tritonserver's flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nereid-io/nereid/pkg/fdlimit"
	"github.com/nereid-io/nereid/pkg/logsetting"
	"github.com/nereid-io/nereid/pkg/tritonflag"
	"github.com/nereid-io/nereid/services/executor"
	"github.com/nereid-io/nereid/services/gateway"
	"github.com/nereid-io/nereid/services/standalone"
)

func main() {
	cfg := standalone.DefaultConfig()
	fs := flag.NewFlagSet("nereid", flag.ExitOnError)
	var repos tritonflag.Strings
	fs.Var(&repos, "model-repository", "path to the model repository (repeatable: a model in two repositories is not available)")
	var models tritonflag.Strings
	fs.Var(&models, "load-model", "load only this model (repeatable); in explicit mode the models loaded at start, * for all")
	pollSecs := fs.Int("repository-poll-secs", 15, "in poll mode, seconds between scans of the model repository")
	var strictCfg, noAutoComplete, exitOnError bool
	tritonflag.BoolVar(fs, &strictCfg, "strict-model-config", false, "every model needs its config.pbtxt (no auto-completion)")
	tritonflag.BoolVar(fs, &noAutoComplete, "disable-auto-complete-config", false, "do not auto-complete model configurations: every model needs its config.pbtxt")
	tritonflag.BoolVar(fs, &exitOnError, "exit-on-error", true, "exit when a model named at start fails to load, as tritonserver does (false: it is listed UNAVAILABLE with the reason and the others serve)")
	fs.Func("model-control-mode", "none, poll or explicit (Triton's model control modes; default none)", func(v string) (err error) {
		cfg.ControlMode, err = executor.ParseControlMode(v)
		return err
	})
	fs.StringVar(&cfg.Host, "host", "", "address the HTTP, gRPC and metrics servers bind (default all)")
	fs.IntVar(&cfg.HTTPPort, "http-port", cfg.HTTPPort, "HTTP port")
	fs.IntVar(&cfg.GRPCPort, "grpc-port", cfg.GRPCPort, "gRPC port")
	fs.IntVar(&cfg.MetricsPort, "metrics-port", cfg.MetricsPort, "metrics port")
	fs.IntVar(&cfg.AdminPort, "admin-port", 0, "port of the cluster admin API over gRPC (nereid.admin.v1); 0: off")
	fs.IntVar(&cfg.AdminHTTPPort, "admin-http-port", 0, "port of the cluster admin API over REST; 0: off")
	fs.StringVar(&cfg.AdminHost, "admin-address", cfg.AdminHost, "admin API bind address (beyond loopback the admin group must be restricted, or served over mutual TLS)")
	tritonflag.BoolVar(fs, &cfg.AllowHTTP, "allow-http", true, "serve HTTP")
	tritonflag.BoolVar(fs, &cfg.AllowGRPC, "allow-grpc", true, "serve gRPC")
	tritonflag.BoolVar(fs, &cfg.AllowMetrics, "allow-metrics", true, "serve Prometheus metrics")
	fs.StringVar(&cfg.ServerID, "id", cfg.ServerID, "server identifier reported in server metadata")
	fs.Int64Var(&cfg.HTTPMaxInputSize, "http-max-input-size", cfg.HTTPMaxInputSize, "largest HTTP request body in bytes")
	tritonflag.BoolVar(fs, &cfg.AllowClientShm, "allow-client-shm", false, "let clients register system and CUDA shared-memory regions")
	fs.StringVar(&cfg.NATSListen, "nats-listen", "", "also open the embedded NATS server on this address (host:port) so separate services can join; beyond loopback it needs the role passwords (NEREID_NATS_<ROLE>_PASSWORD)")
	tritonflag.BoolVar(fs, &cfg.InProcessBus, "in-process-bus", cfg.InProcessBus, "send requests to the executor of this process without NATS or encoding (false: over the embedded NATS server, as between separate services)")
	fs.StringVar(&cfg.RedisURL, "redis-url", "", "Redis URL for router and registry state and durable sequence state (default: in memory)")
	cfg.Limits.RegisterFlags(fs)
	fs.StringVar(&cfg.BackendDirectory, "backend-directory", "/opt/tritonserver/backends", "where Triton backend libraries are looked for (<dir>/<backend>/libtriton_<backend>.so)")
	cfg.BackendConfig = tritonflag.BackendConfig{}
	fs.Var(tritonflag.BackendConfig(cfg.BackendConfig), "backend-config", "a setting for backends: <backend>,<setting>=<value> (repeatable)")
	fs.Int64Var(&cfg.UploadBudget, "model-upload-budget", executor.DefaultUploadBudget, "bytes of temporary storage that the files of load requests (file: parameters) may take at once; -1: unbounded")
	tritonflag.BoolVar(fs, &cfg.AllowUploadedCode, "allow-uploaded-code", false, "let a repository load run code that arrives in the request: backend libraries, other shared libraries and Python files among its file: parameters (default false: such a load is refused, and an uploaded model's backend library comes from --backend-directory only)")
	fs.StringVar(&cfg.ServerLibrary, "server-library", "", "the libtritonserver.so Triton backends link against (default: next to this binary, then the loader's path)")
	var rateLimit executor.RateLimitFlags
	rateLimit.Register(fs)
	var logFlags logsetting.Flags
	logFlags.Register(fs)
	var edge gateway.EdgeFlags
	edge.Register(fs)
	cfg.RedisAuth.Register(fs)
	_ = fs.Parse(os.Args[1:])
	cfg.PollInterval = time.Duration(*pollSecs) * time.Second
	cfg.DisableAutoComplete, cfg.ExitOnError = strictCfg || noAutoComplete, exitOnError
	cfg.Models = models
	cfg.RateLimit, cfg.RateLimitResources = rateLimit.Mode, rateLimit.Resources
	if len(repos) > 0 {
		cfg.ModelRepository, cfg.MoreRepositories = repos[0], repos[1:]
	}
	cfg.RedisAuth.FromEnv()
	cfg.NATSPasswords = standalone.PasswordsFromEnv()
	var gw gateway.Config
	if err := edge.Apply(&gw); err != nil {
		fmt.Fprintln(os.Stderr, "nereid:", err)
		os.Exit(2)
	}
	cfg.HTTPTLS, cfg.GRPCTLS, cfg.HTTPRestricted, cfg.GRPCRestricted = gw.HTTPTLS, gw.GRPCTLS, gw.HTTPRestricted, gw.GRPCRestricted
	cfg.Metrics = gw.Metrics
	cfg.Trace = gw.Trace
	cfg.ResponseCache = gw.ResponseCache

	cfg.Logging, cfg.Logger = logFlags.MustBuild("nereid")
	fdlimit.RaiseAndReport(cfg.Logger) // connections need descriptors: as many as the system allows

	srv, err := standalone.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nereid:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		select {
		case <-srv.Ready():
			cfg.Logger.Info("nereid ready", "http", srv.Gateway().HTTPAddr(), "grpc", srv.Gateway().GRPCAddr(), "metrics", srv.Gateway().MetricsAddr())
		case <-ctx.Done():
		}
	}()
	if err := srv.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "nereid:", err)
		os.Exit(1)
	}
}
