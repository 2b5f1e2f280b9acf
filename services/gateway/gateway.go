package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	health "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/infercodec"
	"github.com/nereid-io/nereid/pkg/logsetting"
	"github.com/nereid-io/nereid/pkg/opsmetrics"
	"github.com/nereid-io/nereid/pkg/respcache"
	"github.com/nereid-io/nereid/pkg/routines"
	"github.com/nereid-io/nereid/pkg/settingbus"
	"github.com/nereid-io/nereid/pkg/tlsreload"
	"github.com/nereid-io/nereid/pkg/tracesetting"
	"github.com/nereid-io/nereid/pkg/tracing"
	"github.com/nereid-io/nereid/pkg/tritontrace"
	"github.com/nereid-io/nereid/services/gateway/internal/hostmetrics"
)

// Defaults of Config.
const (
	DefaultServerID         = "triton"
	DefaultHTTPMaxInputSize = 64 << 20
	DefaultRequestTimeout   = 60 * time.Second
)

// Config configures a Gateway. Zero values take the defaults noted.
type Config struct {
	// Conn is the NATS connection to the constellation; required. The
	// gateway does not close it.
	Conn *nats.Conn
	// Local, when set, sends requests to the services of this process
	// that serve them in-process (bus.Local: the standalone server).
	Local *bus.Local
	// HTTPAddr, GRPCAddr and MetricsAddr are the listen addresses (Triton's
	// ports are ":8000", ":8001", ":8002"); "" disables that endpoint.
	HTTPAddr, GRPCAddr, MetricsAddr string
	// ServerID is the server name in server metadata (tritonserver --id).
	// Default "triton": Triton's clients check it.
	ServerID string
	// Version is the server version in server metadata.
	Version string
	// HTTPMaxInputSize bounds an HTTP request body after decompression
	// (tritonserver --http-max-input-size). Default 64 MiB.
	HTTPMaxInputSize int64
	// AllowClientShm lets clients register and unregister shared-memory
	// regions (tritonserver --allow-client-shm; default false). Status
	// works either way.
	AllowClientShm bool
	// RequestTimeout bounds an inference whose client set no deadline, so
	// that a request lost with its executor fails instead of hanging.
	// Default 60 s.
	RequestTimeout time.Duration
	// Logger receives the gateway's logs. Default slog.Default().
	Logger *slog.Logger
	// Logging are the logging settings Logger obeys (pkg/logsetting),
	// changed at run time by the logging extension across the
	// constellation. Nil: the extension reports and spreads settings but
	// this process's Logger does not follow them.
	Logging *logsetting.Manager
	// Node is the machine the gateway runs on; default the host name, as
	// the executor's. Tensors of HandoffThreshold bytes or more bound for
	// an executor of the same node are handed off through shared memory
	// (pkg/handoff) instead of riding the bus.
	Node string
	// HandoffThreshold is that size; 0 means handoff.DefaultThreshold (1
	// MiB), negative turns hand-off off.
	HandoffThreshold int
	// Limits bound request bodies, gRPC messages and slow, idle or chatty
	// connections.
	Limits Limits
	// HTTPTLS and GRPCTLS, when set, serve HTTPS and gRPC over TLS from
	// these files (tritonserver's --grpc-use-ssl and friends; the HTTP
	// flags are named alike). The files are re-read when they change.
	HTTPTLS, GRPCTLS *tlsreload.Files
	// HTTPRestricted and GRPCRestricted are tritonserver's
	// --http-restricted-api and --grpc-restricted-protocol.
	HTTPRestricted, GRPCRestricted Restrictions
	// Metrics are tritonserver's --metrics-config settings.
	Metrics MetricsConfig
	// MetricsConstellation serves on /metrics what /metrics/constellation
	// serves: Triton's per-model and GPU metrics summed over the
	// constellation beside the gateway's own, as Triton's page of one
	// server. False (the default), /metrics has only the gateway's own:
	// executors and sequence routers report the per-model metrics of
	// their work on their own /metrics, so that Prometheus scraping every
	// service counts each request once.
	MetricsConstellation bool
	// Trace is tritonserver's --trace-config: the startup trace settings,
	// which the trace extension changes at run time across the
	// constellation. Zero: tracing off, OpenTelemetry mode.
	Trace tracesetting.Config
	// LostRequestReruns is how many times a stateless request whose
	// executor was lost while holding it runs again on another executor
	// (rerun.go); 0 means DefaultLostRequestReruns (2), negative never.
	LostRequestReruns int
	// AdminAddr and AdminHTTPAddr are the listen addresses of the cluster
	// admin API (api/adminv1) over gRPC and REST; "" (the default)
	// disables each. They use the TLS settings and restrictions (group
	// "admin") of the gRPC and HTTP endpoints. Beyond loopback, New
	// refuses an admin endpoint whose callers nothing authenticates
	// (checkAdminExposure).
	AdminAddr, AdminHTTPAddr string
	// Placement (--placement) is on when executors run under the placement
	// controller: an inference request for a model the catalog lists but
	// no executor holds asks the controller to place it and waits, up to
	// PlacementWait (default DefaultPlacementWait) or its deadline, instead
	// of failing (placement.go).
	Placement     bool
	PlacementWait time.Duration
	// ResponseCache is tritonserver's --cache-config: the response cache
	// of the models whose configuration enables response_cache, in this
	// gateway's memory or shared in Redis (respcache.go). Zero: none.
	ResponseCache respcache.Config
}

// Gateway terminates Triton's HTTP/REST and gRPC protocols and forwards to
// the executors over NATS. It is stateless apart from its view of the
// catalog, so any number can run side by side.
type Gateway struct {
	// metrics is this gateway's registry: Triton's metrics summed over the
	// constellation and the gateway's own (metrics.go).
	metrics *opsmetrics.Registry
	handoff *prometheus.CounterVec // nereid_handoff_bytes
	reruns  *prometheus.CounterVec // nereid_requests_rerun (rerun.go)

	cfg  Config
	log  *slog.Logger
	bus  *bus.Conn // the gateway's one connection to the constellation
	cat  *catalog
	exts []string

	httpLn, grpcLn, metricsLn net.Listener
	httpSrv, metricsSrv       *http.Server
	grpcSrv                   *grpc.Server

	// The admin API (admin.go); nil when off.
	admin                *adminService
	adminLn, adminHTTPLn net.Listener
	adminSrv             *grpc.Server
	adminHTTPSrv         *http.Server
	started              time.Time

	inflight inflightBudget // HTTP body bytes in flight (intake.go)
	ensStats ensembleStats  // the ensembles this gateway ran (ensemble.go)
	conns    connGuard      // connections shed or too slow (conns.go, grpcrate.go)
	hijacked sync.WaitGroup // connections taken over for chunked bodies (chunked.go)
	// streamWork runs the requests of gRPC streams, each on a goroutine
	// kept from earlier requests (grown stack and all).
	streamWork routines.Pool

	ready   chan struct{}
	runOnce sync.Once
	// group owns the goroutines that outlive a request (takeover
	// resolves, the serving loops); run stops and waits for them.
	group *routines.Group
	seq   seqTracker // sequence requests across router takeovers (sequence.go)

	id    string                // this process, in settings versions and acknowledgements
	trace *tracesetting.Manager // trace extension settings (tracesetting.go)
	// tracer records and exports the spans of traced requests (nil: the
	// trace mode exports nothing). Set by run before serving.
	tracer *tracing.Tracer
	// traceFile writes traced requests to Triton's trace file in trace
	// mode triton (tritontrace.go); nil in the other mode. Set by run
	// before serving.
	traceFile *tritontrace.Writer
	// logging are the logging extension's settings (logging.go).
	logging *logsetting.Manager
	// host reads the machine's CPU and memory for Triton's CPU metrics.
	host hostmetrics.Sampler
	// cache is the response cache (respcache.go); nil without one.
	cache *respcache.Cache
	// orca keeps the executors' metric families for the ORCA load
	// reports (orca.go).
	orca orcaReports
	// gateways are the other gateways, from their presence (admin.go):
	// those whose part of the statistics to wait for (stats.go).
	gateways presenceTable[*adminv1.Gateway]
	// presenceMu orders this gateway's announcements; withdrawn, set by
	// the last one, keeps a late announcement from undoing it.
	presenceMu sync.Mutex
	withdrawn  bool
}

// New checks cfg, connects the bus and opens the listeners, so that port
// conflicts surface here and the actual addresses are known before Run.
// grpcStreamWorkers is the size of the gRPC server's goroutine pool; RPCs
// beyond it get goroutines of their own.
const grpcStreamWorkers = 64

func New(cfg Config) (*Gateway, error) {
	if cfg.Conn == nil {
		return nil, errors.New("gateway: Config.Conn is required")
	}
	if cfg.ServerID == "" {
		cfg.ServerID = DefaultServerID
	}
	if cfg.HTTPMaxInputSize <= 0 {
		cfg.HTTPMaxInputSize = DefaultHTTPMaxInputSize
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.LostRequestReruns == 0 {
		cfg.LostRequestReruns = DefaultLostRequestReruns
	}
	if cfg.Node == "" {
		cfg.Node, _ = os.Hostname()
	}
	cfg.Limits = cfg.Limits.withDefaults()
	handoff.Sweep() // hand-off files left in /dev/shm by crashed processes
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("service", "gateway")
	reg := opsmetrics.New()
	bc, err := bus.New(cfg.Conn, bus.WithLogger(log), bus.WithCodec(infercodec.Codec{}), bus.WithLocal(cfg.Local), reg.BusOption()) // tensors chunked without copies
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g := &Gateway{
		metrics: reg,
		cfg:     cfg,
		log:     log,
		bus:     bc,
		cat:     newCatalog(bc, log),
		exts:    extensions(),
		ready:   make(chan struct{}),
		group:   routines.New(context.Background()),
		id:      newInstanceID(),
		started: time.Now(),
	}
	g.cat.node = cfg.Node
	if cfg.Trace.Mode == "" {
		cfg.Trace = tracesetting.DefaultConfig()
		g.cfg.Trace = cfg.Trace
	}
	g.trace = tracesetting.New(cfg.Trace, g.id)
	if g.logging = cfg.Logging; g.logging == nil {
		g.logging = logsetting.New(logsetting.Defaults, g.id)
	}
	g.inflight.limit = cfg.Limits.HTTPMaxInflightBodySize
	g.registerMetrics()
	g.guardConns()
	ok := false
	defer func() {
		if !ok {
			g.closeListeners()
			_ = bc.Close()
		}
	}()
	listen := func(addr string) (net.Listener, error) {
		if addr == "" {
			return nil, nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		return ln, nil
	}
	if g.httpLn, err = listen(cfg.HTTPAddr); err != nil {
		return nil, err
	}
	if g.grpcLn, err = listen(cfg.GRPCAddr); err != nil {
		return nil, err
	}
	if g.metricsLn, err = listen(cfg.MetricsAddr); err != nil {
		return nil, err
	}
	if g.adminLn, err = listen(cfg.AdminAddr); err != nil {
		return nil, err
	}
	if g.adminHTTPLn, err = listen(cfg.AdminHTTPAddr); err != nil {
		return nil, err
	}
	if err := checkAdminExposure(cfg, g.adminLn, g.adminHTTPLn); err != nil {
		return nil, err
	}
	var httpTLS, grpcTLS *tls.Config
	if cfg.HTTPTLS != nil {
		r, err := tlsreload.New(*cfg.HTTPTLS, tlsreload.WithLogger(log))
		if err != nil {
			return nil, fmt.Errorf("gateway: HTTP: %w", err)
		}
		httpTLS = r.Config("h2", "http/1.1")
	}
	if cfg.GRPCTLS != nil {
		r, err := tlsreload.New(*cfg.GRPCTLS, tlsreload.WithLogger(log))
		if err != nil {
			return nil, fmt.Errorf("gateway: gRPC: %w", err)
		}
		grpcTLS = r.Config("h2")
	}
	if g.httpLn != nil {
		if httpTLS != nil {
			g.httpLn = tls.NewListener(g.httpLn, httpTLS)
		}
		g.httpSrv = &http.Server{
			// Restrictions first: a refused request reads no body. Inside
			// the chunk counting, so that a chunked body taken over
			// (hijacked) still counts against the budget.
			Handler:           restrictHTTP(cfg.HTTPRestricted, g.chunkCounting(g.limitBodies(g.httpHandler()))),
			ReadHeaderTimeout: off(cfg.Limits.HTTPReadHeaderTimeout),
			IdleTimeout:       off(cfg.Limits.HTTPIdleTimeout),
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
			ConnState:         g.conns.httpConnState(),
		}
	}
	if g.metricsLn != nil {
		g.metricsSrv = &http.Server{Handler: g.metricsHandler(), ReadHeaderTimeout: off(cfg.Limits.HTTPReadHeaderTimeout), IdleTimeout: off(cfg.Limits.HTTPIdleTimeout), ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	}
	if g.grpcLn != nil {
		opts := append(cfg.Limits.grpcOptions(),
			grpc.ForceServerCodecV2(g.grpcCodec()), // large tensors without extra copies
			// Pooled goroutines serve the RPCs: a goroutine started per RPC
			// grows (copies) its stack on every request on the way through
			// decoding and the bus; a pooled one keeps its stack.
			grpc.NumStreamWorkers(grpcStreamWorkers),
		)
		creds := insecure.NewCredentials()
		if grpcTLS != nil {
			creds = credentials.NewTLS(grpcTLS)
		}
		opts = append(opts, grpc.Creds(g.guardGRPC(creds)))
		opts = append(opts, restrictedOptions(cfg.GRPCRestricted)...)
		g.grpcSrv = grpc.NewServer(opts...)
		g.grpcSrv.RegisterService(grpcServiceDesc(), &grpcService{g: g})
		health.RegisterHealthServer(g.grpcSrv, &healthService{g: g})
	}
	if g.adminLn != nil || g.adminHTTPLn != nil {
		g.admin = &adminService{g: g}
	}
	if g.adminLn != nil {
		opts := restrictedOptions(cfg.GRPCRestricted)
		if grpcTLS != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(grpcTLS)))
		}
		g.adminSrv = grpc.NewServer(opts...)
		adminv1.RegisterAdminServer(g.adminSrv, g.admin)
	}
	if g.adminHTTPLn != nil {
		h, err := g.admin.adminHTTPHandler()
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		if httpTLS != nil {
			g.adminHTTPLn = tls.NewListener(g.adminHTTPLn, httpTLS)
		}
		g.adminHTTPSrv = &http.Server{Handler: restrictHTTP(cfg.HTTPRestricted, h), ReadHeaderTimeout: off(cfg.Limits.HTTPReadHeaderTimeout),
			IdleTimeout: off(cfg.Limits.HTTPIdleTimeout), ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	}
	if g.cache, err = respcache.New(cfg.ResponseCache, log); err != nil {
		return nil, fmt.Errorf("gateway: response cache: %w", err)
	}
	if g.cache != nil {
		reg.MustRegister(cacheCollector{g.cache})
		g.cat.reloaded = g.invalidateCache // reloads executors make by themselves (reload.go)
	}
	ok = true
	return g, nil
}

// HTTPAddr is the address the HTTP endpoint listens on ("" if disabled).
func (g *Gateway) HTTPAddr() string { return addrOf(g.httpLn) }

// GRPCAddr is the address the gRPC endpoint listens on ("" if disabled).
func (g *Gateway) GRPCAddr() string { return addrOf(g.grpcLn) }

// MetricsAddr is the address the metrics endpoint listens on ("" if disabled).
func (g *Gateway) MetricsAddr() string { return addrOf(g.metricsLn) }

// AdminAddr is the address the admin API's gRPC endpoint listens on ("" if
// disabled).
func (g *Gateway) AdminAddr() string { return addrOf(g.adminLn) }

// AdminHTTPAddr is the address the admin API's REST endpoint listens on
// ("" if disabled).
func (g *Gateway) AdminHTTPAddr() string { return addrOf(g.adminHTTPLn) }

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// Ready is closed once the gateway serves: its listeners accept and it
// listens to executor heartbeats. Whether models are ready is a separate
// matter (the health endpoints).
func (g *Gateway) Ready() <-chan struct{} { return g.ready }

// Run serves until ctx ends, then shuts down gracefully. It may be called
// once.
func (g *Gateway) Run(ctx context.Context) error {
	err := errors.New("gateway: Run called twice")
	g.runOnce.Do(func() { err = g.run(ctx) })
	return err
}

func (g *Gateway) run(ctx context.Context) error {
	defer g.bus.Close()
	// Last of all, the unsubscriptions reach the NATS server before Run
	// returns: over a connection that stays open (one the caller owns), a
	// peer asking this gateway after that would otherwise find a
	// subscription nobody answers, and wait out its timeout rather than
	// hear at once that nobody serves it.
	defer func() { _ = g.bus.NATS().FlushTimeout(time.Second) }()
	defer g.streamWork.Close()
	defer g.group.Stop()
	if g.grpcSrv != nil {
		defer grpcInflation.add(g.cfg.Limits.GRPCMaxInputSize, &g.inflight)()
	}
	sub, err := g.bus.Subscribe(bus.HeartbeatSubject, func(_ context.Context, data []byte) {
		var hb busv1.ExecutorHeartbeat
		if err := proto.Unmarshal(data, &hb); err != nil {
			g.log.Warn("bad executor heartbeat", "err", err)
			return
		}
		g.cat.heartbeat(&hb)
	})
	if err != nil {
		g.closeListeners()
		return fmt.Errorf("gateway: %w", err)
	}
	defer sub.Unsubscribe()
	takeovers, err := g.seq.start(g)
	if err != nil {
		g.closeListeners()
		return fmt.Errorf("gateway: %w", err)
	}
	defer takeovers.Unsubscribe()
	if g.cache != nil {
		inval, err := g.subscribeInvalidations()
		if err != nil {
			g.closeListeners()
			return fmt.Errorf("gateway: %w", err)
		}
		if inval != nil {
			defer inval.Unsubscribe()
		}
		// The pending stores' writer; the connections to Redis close once
		// it is done.
		g.group.Go(func(ctx context.Context) {
			g.cache.Run(ctx)
			_ = g.cache.Close()
		})
	}
	if g.cfg.Trace.Mode == tracesetting.ModeOpenTelemetry {
		if g.tracer, err = tracing.New(ctx, g.cfg.Trace, "gateway", g.trace); err != nil {
			g.closeListeners()
			return fmt.Errorf("gateway: %w", err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = g.tracer.Shutdown(sctx)
		}()
	}
	if g.cfg.Trace.Mode == tracesetting.ModeTriton {
		tracing.UsePropagator() // the executors' timestamps are asked for in the trace context
		g.traceFile = tritontrace.New(g.trace, g.cfg.Trace.File, g.log)
		// Written once the servers have stopped: what is gathered, then
		// the file's closing bracket.
		defer func() {
			if err := g.traceFile.Close(); err != nil {
				g.log.Error("closing the trace file", "file", g.cfg.Trace.File, "err", err)
			}
		}()
	}
	settings, err := settingbus.Follow(ctx, g.bus, bus.RoleGateway, g.id, true, g.trace, g.logging)
	if err != nil {
		g.closeListeners()
		return fmt.Errorf("gateway: %w", err)
	}
	defer settings.Stop()
	gws, err := g.followGateways()
	if err != nil {
		g.closeListeners()
		return fmt.Errorf("gateway: %w", err)
	}
	defer gws.Unsubscribe()
	ownStats, err := g.serveGatewayStats()
	if err != nil {
		g.closeListeners()
		return fmt.Errorf("gateway: %w", err)
	}
	defer ownStats.Unsubscribe()
	if g.admin != nil {
		subs, err := g.admin.followPresence()
		if err != nil {
			g.closeListeners()
			return fmt.Errorf("gateway: %w", err)
		}
		defer func() {
			for _, s := range subs {
				_ = s.Unsubscribe()
			}
		}()
	}
	querySubs, err := g.serveServerQueries()
	if err != nil {
		g.closeListeners()
		return fmt.Errorf("gateway: %w", err)
	}
	defer func() {
		for _, s := range querySubs {
			_ = s.Unsubscribe()
		}
	}()
	// Executors answer a solicitation with a heartbeat at once, so a fresh
	// gateway learns the catalog without waiting a heartbeat interval.
	if err := g.bus.Publish(bus.SolicitSubject, &busv1.CatalogRequest{}); err != nil {
		g.log.Warn("soliciting executors failed", "err", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 5)
	serve := func(name string, fn func() error) {
		g.group.Go(func(context.Context) {
			if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				errs <- fmt.Errorf("gateway: %s: %w", name, err)
			}
		})
	}
	if g.httpSrv != nil {
		serve("http", func() error { return g.httpSrv.Serve(g.httpLn) })
		g.log.Info("serving HTTP", "addr", g.HTTPAddr())
	}
	if g.grpcSrv != nil {
		serve("grpc", func() error { return g.grpcSrv.Serve(g.grpcLn) })
		g.log.Info("serving gRPC", "addr", g.GRPCAddr())
	}
	if g.metricsSrv != nil {
		serve("metrics", func() error { return g.metricsSrv.Serve(g.metricsLn) })
		g.log.Info("serving metrics", "addr", g.MetricsAddr())
	}
	if g.adminSrv != nil {
		serve("admin", func() error { return g.adminSrv.Serve(g.adminLn) })
		g.log.Info("serving the admin API (gRPC)", "addr", g.AdminAddr())
	}
	if g.adminHTTPSrv != nil {
		serve("admin REST", func() error { return g.adminHTTPSrv.Serve(g.adminHTTPLn) })
		g.log.Info("serving the admin API (REST)", "addr", g.AdminHTTPAddr())
	}
	g.group.Go(func(ctx context.Context) { g.cat.settle(ctx, bus.HeartbeatInterval) })
	g.group.Go(func(ctx context.Context) {
		t := time.NewTicker(bus.HeartbeatInterval / 4)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				g.cat.expire(now)
			}
		}
	})
	// Presence for the admin API and the statistics of every gateway
	// (admin.go, stats.go).
	g.announce(false)
	g.group.Go(func(ctx context.Context) {
		t := time.NewTicker(bus.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				g.announce(false)
			}
		}
	})
	close(g.ready)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
	}
	cancel()
	g.announce(true)
	g.shutdown()
	g.group.Stop()
	return runErr
}

// shutdown stops accepting, lets requests in flight finish for a few
// seconds, then closes what is left.
func (g *Gateway) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range []*http.Server{g.httpSrv, g.metricsSrv, g.adminHTTPSrv} {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Shutdown(ctx); err != nil {
				_ = s.Close()
			}
		}()
	}
	for _, srv := range []*grpc.Server{g.grpcSrv, g.adminSrv} {
		if srv == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() { srv.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				srv.Stop() // GracefulStop returns too
				<-done
			}
		}()
	}
	wg.Wait()
	// Taken-over connections end with their exchange, which their
	// deadline bounds.
	g.hijacked.Wait()
}

func (g *Gateway) closeListeners() {
	for _, ln := range []net.Listener{g.httpLn, g.grpcLn, g.metricsLn, g.adminLn, g.adminHTTPLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// serverReady reports Triton's server readiness: connected to the
// constellation, at least one executor known, none still loading.
func (g *Gateway) serverReady() bool {
	return g.cfg.Conn.IsConnected() && g.cat.isSettled() && g.cat.current().serverReady()
}

// extensions lists the protocol extensions this gateway implements, for
// server metadata. Only what really works is listed.
func extensions() []string {
	return []string{
		"classification",
		"binary_tensor_data",
		"cuda_shared_memory",
		"system_shared_memory",
		"model_configuration",
		"model_repository",
		"model_repository(unload_dependents)",
		"schedule_policy",
		"statistics",
		"sequence",
		"sequence(string_id)",
		"trace",
		"logging",
	}
}

// inferContext is the context an inference is forwarded in: ctx with
// RequestTimeout applied when ctx has no deadline. Its caller cancels it.
func (g *Gateway) inferContext(ctx context.Context) *bus.Bounded {
	c := new(bus.Bounded)
	g.boundInference(c, ctx)
	return c
}

// boundInference makes c, a zero Bounded, inferContext's context under
// ctx.
func (g *Gateway) boundInference(c *bus.Bounded, ctx context.Context) {
	c.Init(ctx, g.cfg.RequestTimeout)
}
