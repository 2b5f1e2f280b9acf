// Command nereid-executor loads a model repository and serves its models to
// a Nereid constellation over NATS.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
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
	"github.com/nereid-io/nereid/pkg/tritonmetrics"
	"github.com/nereid-io/nereid/services/executor"
)

func main() {
	fs := flag.NewFlagSet("nereid-executor", flag.ExitOnError)
	natsURL := fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server URL(s), comma-separated")
	var repos tritonflag.Strings
	fs.Var(&repos, "model-repository", "model repository to serve (required; repeatable: a model in two repositories is not available)")
	var models tritonflag.Strings
	fs.Var(&models, "load-model", "serve only this model (repeatable; default: all); in explicit mode the models loaded at start, * for all")
	var mode executor.ControlMode
	pollSecs := fs.Int("repository-poll-secs", 15, "in poll mode, seconds between scans of the model repository")
	var strictCfg, noAutoComplete, exitOnError, allowUploadedCode bool
	tritonflag.BoolVar(fs, &strictCfg, "strict-model-config", false, "every model needs its config.pbtxt (no auto-completion)")
	tritonflag.BoolVar(fs, &noAutoComplete, "disable-auto-complete-config", false, "do not auto-complete model configurations: every model needs its config.pbtxt")
	tritonflag.BoolVar(fs, &exitOnError, "exit-on-error", true, "exit when a model named at start fails to load, as tritonserver does (false: it is listed UNAVAILABLE with the reason and the others serve)")
	tritonflag.BoolVar(fs, &allowUploadedCode, "allow-uploaded-code", false, "let a repository load run code that arrives in the request: backend libraries, other shared libraries and Python files among its file: parameters (default false: such a load is refused, and an uploaded model's backend library comes from --backend-directory only)")
	uploadBudget := fs.Int64("model-upload-budget", executor.DefaultUploadBudget, "bytes of temporary storage that the files of load requests (file: parameters) may take at once on this executor; -1: unbounded")
	var placed bool
	tritonflag.BoolVar(fs, &placed, "placement", false, "run under the placement controller (docs/placement.md): load no model at start, load and unload what the controller tells this executor; with --model-control-mode none, or poll (which then only reloads the models it holds when their files change)")
	var capacity placement.Capacity
	fs.Func("model-capacity", "what this executor may hold under --placement: bytes of model footprint (4GiB), model slots (slots=3) or both (slots=3,4GiB); default unbounded", func(v string) (err error) {
		capacity, err = placement.ParseCapacity(v)
		return err
	})
	fs.Func("model-control-mode", "none, poll or explicit (Triton's model control modes; default none)", func(v string) (err error) {
		mode, err = executor.ParseControlMode(v)
		return err
	})
	id := fs.String("id", "", "executor id on the bus (default: random)")
	node := fs.String("node", "", "node name for node-local resources (default: host name)")
	probeAddr := fs.String("probe-addr", "", "address for /livez, /readyz and /metrics (empty disables)")
	metricsPort := fs.Int("metrics-port", 0, "port serving /metrics: Triton's per-model metrics of the requests this executor served, GPU metrics, NATS round trips and the Triton backends' custom metrics (0 disables)")
	var metricsCfg tritonmetrics.Config
	fs.Var(&metricsCfg, "metrics-config", tritonmetrics.FlagUsage)
	backendDir := fs.String("backend-directory", "/opt/tritonserver/backends", "where Triton backend libraries are looked for (<dir>/<backend>/libtriton_<backend>.so)")
	backendConfig := tritonflag.BackendConfig{}
	fs.Var(backendConfig, "backend-config", "a setting for backends: <backend>,<setting>=<value> (repeatable)")
	serverLib := fs.String("server-library", "", "the libtritonserver.so Triton backends link against (default: next to this binary, then the loader's path)")
	redisURL := fs.String("redis-url", "", "Redis URL (redis://host:port/db, or rediss:// for TLS) for the durable state of models with state_durability \"redis\"; empty keeps it in memory")
	var logFlags logsetting.Flags
	logFlags.Register(fs)
	var auth natsconn.Auth
	auth.Register(fs)
	var redisAuth redisconn.Options
	redisAuth.Register(fs)
	var trace tracesetting.Flag
	fs.Var(&trace, "trace-config", "a trace setting, as tritonserver's --trace-config (repeatable)")
	var rateLimit executor.RateLimitFlags
	rateLimit.Register(fs)
	_ = fs.Parse(os.Args[1:])
	pollInterval := time.Duration(*pollSecs) * time.Second
	auth.FromEnv()
	redisAuth.FromEnv()

	logs, log := logFlags.MustBuild("nereid-executor")
	fdlimit.RaiseAndReport(log) // connections need descriptors: as many as the system allows
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, auth, *natsURL, *probeAddr, *metricsPort, executor.Config{
		RepositoryPath: first(repos), MoreRepositories: rest(repos), Models: models, ControlMode: mode, PollInterval: pollInterval,
		Trace:               trace.Config(),
		DisableAutoComplete: strictCfg || noAutoComplete, ExitOnError: exitOnError, ID: *id, Node: *node, Logger: log, Logging: logs,
		BackendDirectory: *backendDir, BackendConfig: backendConfig, ServerLibrary: *serverLib, AllowUploadedCode: allowUploadedCode, UploadBudget: *uploadBudget,
		Placement: placed, Capacity: capacity,
		RedisURL: *redisURL, RedisAuth: redisAuth, Metrics: metricsCfg,
		RateLimit: rateLimit.Mode, RateLimitResources: rateLimit.Resources,
	}); err != nil {
		fmt.Fprintln(os.Stderr, "nereid-executor:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, auth natsconn.Auth, natsURL, probeAddr string, metricsPort int, cfg executor.Config) error {
	if cfg.RepositoryPath == "" {
		return fmt.Errorf("--model-repository is required")
	}
	opts, err := auth.Options(bus.RoleExecutor)
	if err != nil {
		return err
	}
	nc, err := natsconn.Connect(ctx, natsURL, "nereid-executor", log, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	cfg.Conn = nc
	ex, err := executor.New(cfg)
	if err != nil {
		return err
	}
	// The probe port serves the metrics too.
	p, err := probe.ListenWith(probeAddr, ex.Ready(), map[string]http.Handler{"GET /metrics": ex.MetricsHandler()})
	if err != nil {
		return err
	}
	defer p.Close()
	m, err := opsmetrics.ListenPort(metricsPort, ex.MetricsHandler())
	if err != nil {
		return fmt.Errorf("--metrics-port: %w", err)
	}
	defer m.Close()
	return ex.Run(ctx)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func rest(s []string) []string {
	if len(s) < 2 {
		return nil
	}
	return s[1:]
}
