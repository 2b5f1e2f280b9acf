// Package standalone composes every Nereid service into one process around an
// embedded NATS server: the gateway, an executor over the model repository, the
// shared-memory registry and the sequence router. The services are the same
// packages the separate binaries run; only the wiring differs (in-process NATS
// connections instead of TCP).
package standalone

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/logsetting"
	"github.com/nereid-io/nereid/pkg/redisconn"
	"github.com/nereid-io/nereid/pkg/respcache"
	"github.com/nereid-io/nereid/pkg/tlsreload"
	"github.com/nereid-io/nereid/pkg/tracesetting"
	"github.com/nereid-io/nereid/pkg/version"
	"github.com/nereid-io/nereid/services/executor"
	"github.com/nereid-io/nereid/services/gateway"
	seqrouter "github.com/nereid-io/nereid/services/sequence-router"
	shmregistry "github.com/nereid-io/nereid/services/shm-registry"
)

// Config mirrors tritonserver's flags where they exist.
type Config struct {
	ModelRepository string
	// MoreRepositories are further --model-repository paths.
	MoreRepositories []string
	// Models restricts loading to these models (empty: all); in explicit
	// model control mode, the models loaded at start ("*": all).
	Models []string
	// ControlMode is --model-control-mode (default none).
	ControlMode executor.ControlMode
	// PollInterval is --repository-poll-secs (poll mode).
	PollInterval time.Duration
	// DisableAutoComplete and ExitOnError: see executor.Config.
	DisableAutoComplete, ExitOnError bool
	// Host is the address the HTTP, gRPC and metrics servers bind.
	Host                               string
	HTTPPort, GRPCPort, MetricsPort    int
	AllowHTTP, AllowGRPC, AllowMetrics bool
	// AdminPort and AdminHTTPPort serve the cluster admin API over gRPC
	// and REST (0, the default: off), on AdminHost (empty: 127.0.0.1;
	// beyond loopback the gateway wants the admin group restricted or
	// mutual TLS).
	AdminPort, AdminHTTPPort int
	AdminHost                string
	ServerID                 string
	HTTPMaxInputSize         int64
	// AllowClientShm is tritonserver's --allow-client-shm: clients may
	// register shared-memory regions (default false).
	AllowClientShm bool
	// Limits bound request bodies and slow or idle connections (the
	// gateway's; zero values take its defaults).
	Limits gateway.Limits
	// NATSListen, when set ("127.0.0.1:4222"), also opens the embedded NATS
	// server to the network so that separate executors can join; empty keeps
	// it in-process, reachable by nothing outside this process.
	NATSListen string
	// NATSPasswords, when set, turn on the embedded server's authorization:
	// one user per service role (bus.Roles) with that role's permissions
	// (bus.RolePermissions) and this password, as deploy/docker/nats.conf
	// configures a separate nats-server. The in-process services connect as
	// their roles too. Required when NATSListen is not a loopback address;
	// see PasswordsFromEnv.
	NATSPasswords map[bus.Role]string
	// NATSMaxPayload is the embedded server's max message size; larger
	// tensors travel in chunks.
	NATSMaxPayload int32
	// InProcessBus sends the gateway's requests to the executor and the
	// shared-memory registry of this process without NATS and without
	// encoding (bus.Local): the request and reply messages are handed over
	// as they are (a decoupled model's responses stream in-process too).
	// Sequence requests (through the sequence router) and requests for
	// models this process does not serve still go over NATS. Default on;
	// off measures the constellation's path in one process.
	InProcessBus bool
	// HandoffThreshold is the gateway's (gateway.Config): with InProcessBus
	// off, tensors this large or larger reach the executor of this process
	// as slices rather than over NATS; negative sends them over NATS, as to
	// an executor on another node (benchmarks).
	HandoffThreshold int
	// RedisURL moves the router's and registry's state, and the durable
	// sequence states of models with state_durability "redis", to Redis.
	RedisURL string
	// RedisAuth are the ACL user, password and TLS material for RedisURL
	// (one user for every service here).
	RedisAuth redisconn.Options
	// HTTPTLS, GRPCTLS, HTTPRestricted and GRPCRestricted are the gateway's
	// (see gateway.Config).
	HTTPTLS, GRPCTLS               *tlsreload.Files
	HTTPRestricted, GRPCRestricted gateway.Restrictions
	// Metrics are the gateway's --metrics-config settings.
	Metrics gateway.MetricsConfig
	// ResponseCache is --cache-config: the gateway's response cache.
	ResponseCache respcache.Config
	// Trace is --trace-config, for every service.
	Trace tracesetting.Config
	// Logging are the settings Logger obeys, followed by every service.
	Logging *logsetting.Manager
	Logger  *slog.Logger
	// BackendDirectory, BackendConfig and ServerLibrary are the executor's
	// (Triton backends: --backend-directory, --backend-config).
	BackendDirectory string
	BackendConfig    map[string]map[string]string
	ServerLibrary    string
	// AllowUploadedCode is the executor's (--allow-uploaded-code): code
	// that arrives in a repository load may be loaded and run.
	AllowUploadedCode bool
	// UploadBudget is the executor's (--model-upload-budget): the bytes the
	// files of load requests may take at once; 0 is the executor's default.
	UploadBudget int64
	// RateLimit and RateLimitResources are the executor's (--rate-limit,
	// --rate-limit-resource): Triton's rate limiter, off by default.
	RateLimit          executor.RateLimitMode
	RateLimitResources []executor.RateLimitResource
}

// DefaultConfig is tritonserver's defaults: ports 8000/8001/8002, all
// endpoints on, server id "triton", 64 MiB HTTP input limit.
func DefaultConfig() Config {
	return Config{
		HTTPPort: 8000, GRPCPort: 8001, MetricsPort: 8002,
		AllowHTTP: true, AllowGRPC: true, AllowMetrics: true,
		AdminHost:        "127.0.0.1",
		ServerID:         "triton",
		HTTPMaxInputSize: 64 << 20,
		NATSMaxPayload:   8 << 20,
		InProcessBus:     true,
	}
}

// Server is a running standalone composition.
type Server struct {
	cfg   Config
	log   *slog.Logger
	local *bus.Local // nil: every request goes over NATS
	ns    *server.Server
	gw    *gateway.Gateway
	ready chan struct{}
}

// New validates cfg and starts nothing yet.
func New(cfg Config) (*Server, error) {
	if cfg.ModelRepository == "" {
		return nil, errors.New("--model-repository is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NATSMaxPayload <= 0 {
		cfg.NATSMaxPayload = DefaultConfig().NATSMaxPayload
	}
	if cfg.AdminHost == "" {
		cfg.AdminHost = DefaultConfig().AdminHost
	}
	s := &Server{cfg: cfg, log: cfg.Logger, ready: make(chan struct{})}
	if cfg.InProcessBus {
		s.local = bus.NewLocal()
	}
	return s, nil
}

// InProcess counts the requests the in-process bus has carried (0 when
// InProcessBus is off): what took the fast path instead of NATS.
func (s *Server) InProcess() uint64 {
	if s.local == nil {
		return 0
	}
	return s.local.Delivered()
}

// Ready is closed when every service reports ready.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Gateway exposes the gateway for its listen addresses (tests bind port 0).
func (s *Server) Gateway() *gateway.Gateway { return s.gw }

// NATSURL is the embedded server's client URL when NATSListen is set.
func (s *Server) NATSURL() string {
	if s.ns == nil || s.cfg.NATSListen == "" {
		return ""
	}
	return s.ns.ClientURL()
}

// Connect opens a connection to the embedded NATS server for a service of
// role that joins this process (a second executor in tests and
// benchmarks): in-process, without a socket, as the server's own services
// are connected, with the role's inbox prefix and credentials. Call it
// once the server is ready; the connection is the caller's to close.
func (s *Server) Connect(role bus.Role) (*nats.Conn, error) {
	if s.ns == nil {
		return nil, errors.New("the standalone server is not running")
	}
	return s.connect(role)
}

// connect connects a service of role to s.ns.
func (s *Server) connect(role bus.Role) (*nats.Conn, error) {
	o := []nats.Option{nats.InProcessServer(s.ns), nats.Name(string(role)), nats.MaxReconnects(-1),
		nats.CustomInboxPrefix(bus.InboxPrefix(role))}
	if pw := s.cfg.NATSPasswords[role]; pw != "" {
		o = append(o, nats.UserInfo(string(role), pw))
	}
	return nats.Connect("", o...)
}

func addr(host string, port int, allowed bool) string {
	if !allowed || port < 0 {
		return ""
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// closedClientsKept is how many closed connections the embedded NATS
// server remembers.
const closedClientsKept = 16

// Run starts NATS and the services and blocks until ctx ends or a service
// fails; it then stops everything.
func (s *Server) Run(ctx context.Context) error {
	opts := &server.Options{
		ServerName: "nereid-standalone",
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: s.cfg.NATSMaxPayload,
		// Executors hold large replies while the gateway reads them; the
		// default 64 MB pending limit would cut a 256 MiB tensor's reader.
		MaxPending: 1 << 30,
		// The server remembers closed connections for its monitoring
		// (connz), which nothing reads here (no monitoring port, no system
		// account user); its default ring of 10,000 pointers would be
		// scanned whole at every garbage collection of the process.
		MaxClosedClients: closedClientsKept,
		// The subject cache saves a walk of the subscriptions' tree
		// at the price of an entry (and its garbage) for every subject
		// published, each request's unique reply inbox among them: off,
		// a 64-byte request costs fewer instructions and the process
		// keeps ~100 KB less live.
		NoSublistCache: true,
	}
	if err := s.authorize(opts); err != nil {
		return err
	}
	if s.cfg.NATSListen == "" {
		opts.DontListen = true
	} else {
		h, p, err := net.SplitHostPort(s.cfg.NATSListen)
		if err != nil {
			return fmt.Errorf("--nats-listen: %w", err)
		}
		opts.Host = h
		if opts.Port, err = strconv.Atoi(p); err != nil {
			return fmt.Errorf("--nats-listen: %w", err)
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("embedded nats: %w", err)
	}
	s.ns = ns
	go ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		return errors.New("embedded nats did not start")
	}

	var conns []*nats.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	conn := func(role bus.Role) *nats.Conn {
		if err != nil {
			return nil
		}
		var c *nats.Conn
		c, err = s.connect(role)
		conns = append(conns, c)
		return c
	}
	exConn, gwConn, shmConn, seqConn := conn(bus.RoleExecutor), conn(bus.RoleGateway), conn(bus.RoleShmRegistry), conn(bus.RoleSequenceRouter)
	if err != nil {
		return fmt.Errorf("in-process nats connection: %w", err)
	}

	ex, err := executor.New(executor.Config{
		Conn: exConn, Local: s.local, RepositoryPath: s.cfg.ModelRepository, MoreRepositories: s.cfg.MoreRepositories, Models: s.cfg.Models, ControlMode: s.cfg.ControlMode, PollInterval: s.cfg.PollInterval,
		DisableAutoComplete: s.cfg.DisableAutoComplete, ExitOnError: s.cfg.ExitOnError, Logger: s.log,
		BackendDirectory: s.cfg.BackendDirectory, BackendConfig: s.cfg.BackendConfig, ServerLibrary: s.cfg.ServerLibrary, AllowUploadedCode: s.cfg.AllowUploadedCode, UploadBudget: s.cfg.UploadBudget,
		RedisURL: s.cfg.RedisURL, RedisAuth: s.cfg.RedisAuth, Trace: s.cfg.Trace, Logging: s.cfg.Logging,
		RateLimit: s.cfg.RateLimit, RateLimitResources: s.cfg.RateLimitResources,
	})
	if err != nil {
		return err
	}
	gw, err := gateway.New(gateway.Config{
		Conn:             gwConn,
		Local:            s.local,
		HTTPAddr:         addr(s.cfg.Host, s.cfg.HTTPPort, s.cfg.AllowHTTP),
		GRPCAddr:         addr(s.cfg.Host, s.cfg.GRPCPort, s.cfg.AllowGRPC),
		MetricsAddr:      addr(s.cfg.Host, s.cfg.MetricsPort, s.cfg.AllowMetrics),
		AdminAddr:        addr(s.cfg.AdminHost, s.cfg.AdminPort, s.cfg.AdminPort > 0),
		AdminHTTPAddr:    addr(s.cfg.AdminHost, s.cfg.AdminHTTPPort, s.cfg.AdminHTTPPort > 0),
		ServerID:         s.cfg.ServerID,
		Version:          version.Version,
		HTTPMaxInputSize: s.cfg.HTTPMaxInputSize,
		AllowClientShm:   s.cfg.AllowClientShm,
		HandoffThreshold: s.cfg.HandoffThreshold,
		Limits:           s.cfg.Limits,
		HTTPTLS:          s.cfg.HTTPTLS,
		GRPCTLS:          s.cfg.GRPCTLS,
		HTTPRestricted:   s.cfg.HTTPRestricted,
		Metrics:          s.cfg.Metrics,
		Trace:            s.cfg.Trace,
		ResponseCache:    s.cfg.ResponseCache,
		Logging:          s.cfg.Logging,
		GRPCRestricted:   s.cfg.GRPCRestricted,
		Logger:           s.log,

		// One server: Triton's page on /metrics.
		MetricsConstellation: true,
	})
	if err != nil {
		return err
	}
	s.gw = gw
	shm, err := shmregistry.New(shmregistry.Config{Conn: shmConn, Local: s.local, RedisURL: s.cfg.RedisURL, RedisAuth: s.cfg.RedisAuth, Logger: s.log, Logging: s.cfg.Logging})
	if err != nil {
		return err
	}
	seq, err := seqrouter.New(seqrouter.Config{Conn: seqConn, RedisURL: s.cfg.RedisURL, RedisAuth: s.cfg.RedisAuth, Logger: s.log, Trace: s.cfg.Trace, Logging: s.cfg.Logging})
	if err != nil {
		return err
	}

	type service struct {
		name  string
		run   func(context.Context) error
		ready <-chan struct{}
	}
	services := []service{
		{"executor", ex.Run, ex.Ready()},
		{"shm-registry", shm.Run, shm.Ready()},
		{"sequence-router", seq.Run, seq.Ready()},
		{"gateway", gw.Run, gw.Ready()},
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(services))
	var wg sync.WaitGroup
	for _, svc := range services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := svc.run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", svc.name, err)
			}
			cancel() // one service ending takes the process down with it
		}()
	}
	go func() {
		for _, svc := range services {
			select {
			case <-svc.ready:
			case <-ctx.Done():
				return
			}
		}
		close(s.ready)
	}()
	<-ctx.Done()
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

// PasswordsFromEnv reads the role passwords of the embedded server from
// the variables deploy/docker/nats.conf reads (bus.PasswordEnv), nil when
// none is set.
func PasswordsFromEnv() map[bus.Role]string {
	var pw map[bus.Role]string
	for _, r := range bus.Roles() {
		if v := os.Getenv(bus.PasswordEnv(r)); v != "" {
			if pw == nil {
				pw = map[bus.Role]string{}
			}
			pw[r] = v
		}
	}
	return pw
}

// authorize configures the embedded server's users from NATSPasswords, and
// refuses to open it beyond this machine without them.
func (s *Server) authorize(opts *server.Options) error {
	if len(s.cfg.NATSPasswords) == 0 {
		if s.cfg.NATSListen != "" && !loopback(s.cfg.NATSListen) {
			return fmt.Errorf("--nats-listen %s is reachable from other machines: set the role passwords (%s, ...) so that NATS requires credentials, or listen on 127.0.0.1",
				s.cfg.NATSListen, bus.PasswordEnv(bus.RoleExecutor))
		}
		return nil
	}
	for _, r := range bus.Roles() {
		pw := s.cfg.NATSPasswords[r]
		if pw == "" {
			return fmt.Errorf("embedded nats: no password for role %s (%s)", r, bus.PasswordEnv(r))
		}
		p := bus.RolePermissions(r)
		opts.Users = append(opts.Users, &server.User{
			Username: string(r),
			Password: pw,
			Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: p.Publish},
				Subscribe: &server.SubjectPermission{Allow: p.Subscribe},
			},
		})
	}
	return nil
}

// loopback reports whether host:port binds only the loopback interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func collect(ch <-chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}
