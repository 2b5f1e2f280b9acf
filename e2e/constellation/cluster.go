package constellation

import (
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/pkg/bus"
)

// Gateway is a running gateway (or standalone server) with its ports.
type Gateway struct {
	*Proc
	HTTPPort, GRPCPort, MetricsPort int
}

// HTTP is the base URL of the HTTP endpoint.
func (g *Gateway) HTTP() string { return "http://" + Addr(g.HTTPPort) }

// GRPC is the gRPC target.
func (g *Gateway) GRPC() string { return Addr(g.GRPCPort) }

// Metrics is the metrics URL.
func (g *Gateway) Metrics() string { return "http://" + Addr(g.MetricsPort) + "/metrics" }

// Cluster is a set of processes sharing one NATS server.
type Cluster struct {
	t       testing.TB
	Bin     *Binaries
	NATSURL string
	NATS    *Proc
}

// NewCluster builds the binaries and starts nats-server on a free port.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	return NewClusterWith(t)
}

// NewClusterWith is NewCluster with more nats-server flags, which win over
// the defaults (a monitoring port: "-m", "8222").
func NewClusterWith(t testing.TB, natsArgs ...string) *Cluster {
	t.Helper()
	bin, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	port := FreePort(t)
	// The shipped configuration, least privilege for every role; address
	// and port from the command line, which wins over the file, and no
	// monitoring port (-m 0) to collide with anything, and JetStream's
	// store in the test's temporary directory (-sd).
	conf := RepoPath(t, "deploy/docker/nats.conf")
	p := Start(t, "nats-server", bin.Path("nats-server"), append([]string{"-c", conf, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-m", "0",
		"--store_dir", t.TempDir()}, natsArgs...)...)
	url := "nats://" + Addr(port)
	if !WaitFor(10*time.Second, func() bool {
		nc, err := nats.Connect(url, nats.UserInfo(string(bus.RoleGateway), RolePassword(bus.RoleGateway)))
		if err != nil {
			return false
		}
		nc.Close()
		return true
	}) {
		t.Fatalf("nats-server did not start:\n%s", p.Output())
	}
	return &Cluster{t: t, Bin: bin, NATSURL: url, NATS: p}
}

// ConnectAs connects to the cluster's NATS as role.
func (c *Cluster) ConnectAs(r bus.Role) *nats.Conn { return ConnectAs(c.t, c.NATSURL, r) }

// Executor starts an executor over repo with the given extra flags.
func (c *Cluster) Executor(repo, id string, extra ...string) *Proc {
	c.t.Helper()
	args := append([]string{"--nats-url", c.NATSURL, "--model-repository", repo, "--id", id}, extra...)
	return Start(c.t, "executor "+id, c.Bin.Path("nereid-executor"), args...)
}

// Gateway starts a gateway on free ports and waits for /v2/health/live.
func (c *Cluster) Gateway(extra ...string) *Gateway {
	c.t.Helper()
	return Serve(c.t, "gateway", c.Bin.Path("nereid-gateway"), "/v2/health/live", 15*time.Second,
		append([]string{"--nats-url", c.NATSURL}, extra...))
}

// Standalone starts the one-process server on free ports and waits until
// it is ready.
func Standalone(t testing.TB, repo string, extra ...string) *Gateway {
	t.Helper()
	bin, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	return Serve(t, "standalone", bin.Path("nereid"), "/v2/health/ready", 20*time.Second,
		append([]string{"--model-repository", repo}, extra...))
}

// Serve starts a server of Triton's three ports on free ports and waits
// until health answers 200. A port free a moment ago can be taken by a
// test package running beside this one before the server binds it: a
// start that fails for that is tried again on other ports.
func Serve(t testing.TB, name, path, health string, timeout time.Duration, args []string) *Gateway {
	t.Helper()
	for attempt := 1; ; attempt++ {
		g := &Gateway{HTTPPort: FreePort(t), GRPCPort: FreePort(t), MetricsPort: FreePort(t)}
		g.Proc = Start(t, name, path, append([]string{
			"--http-port", strconv.Itoa(g.HTTPPort),
			"--grpc-port", strconv.Itoa(g.GRPCPort),
			"--metrics-port", strconv.Itoa(g.MetricsPort),
		}, args...)...)
		healthy := WaitFor(timeout, func() bool {
			if g.Exited() {
				return true
			}
			r, err := http.Get(g.HTTP() + health)
			if err != nil {
				return false
			}
			r.Body.Close()
			return r.StatusCode == 200
		}) && !g.Exited()
		if healthy {
			return g
		}
		if attempt < 3 && g.Exited() && strings.Contains(g.Output(), "address already in use") {
			continue
		}
		t.Fatalf("%s: %s did not answer 200 within %v\n%s", name, g.HTTP()+health, timeout, g.Output())
	}
}

// RepoPath resolves a path relative to the repository root
// ("deploy/model_repository").
func RepoPath(t testing.TB, rel string) string {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, rel)
}

// Redis starts a secured redis-server (StartRedis) on a free port with its
// data in a temporary directory and returns its URL.
func Redis(t testing.TB) (url string, p *Proc) {
	t.Helper()
	return StartRedis(t, FreePort(t), t.TempDir())
}

// StartRedis starts redis-server as Nereid is deployed secured: TLS only,
// the shipped ACL users (deploy/redis/users.acl.in), data kept in dir so
// that a restart on the same port and dir finds it. Routers and registries
// started by Start get their user's credentials and the CA in the
// environment.
func StartRedis(t testing.TB, port int, dir string) (url string, p *Proc) {
	t.Helper()
	s := redisServer(t, port, dir)
	cmd, err := s.Command()
	if err != nil {
		t.Fatal(err)
	}
	p = Start(t, "redis-server", cmd.Path, cmd.Args[1:]...)
	if err := s.Wait(15 * time.Second); err != nil {
		t.Fatalf("redis-server did not start: %v\n%s", err, p.Output())
	}
	return s.URL(), p
}
