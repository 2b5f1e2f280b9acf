package standalone

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/pkg/bus"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func testConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.ModelRepository = "../../deploy/model_repository"
	cfg.Models = []string{"simple"}
	cfg.Host = "127.0.0.1"
	cfg.HTTPPort, cfg.GRPCPort, cfg.MetricsPort = 0, 0, 0
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

// run starts srv and returns a function that stops it and returns Run's
// error.
func run(t *testing.T, srv *Server) (stop func() error, done chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once bool
	var err error
	stop = func() error {
		if !once {
			once = true
			cancel()
			err = <-done
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop, done
}

// runReady starts srv and waits until every service reports ready.
func runReady(t *testing.T, srv *Server) (stop func() error) {
	t.Helper()
	stop, done := run(t, srv)
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("standalone ended: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("standalone not ready after 60s")
	}
	return stop
}

// rolePasswords gives every role a password of its own.
func rolePasswords(salt string) map[bus.Role]string {
	pws := map[bus.Role]string{}
	for _, r := range bus.Roles() {
		pws[r] = "pw-" + string(r) + "-" + salt
	}
	return pws
}

// executorErrors collects the asynchronous errors of nc.
func executorErrors(nc *nats.Conn) <-chan error {
	errs := make(chan error, 4)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	return errs
}

// wantRegistryRefused publishes on the shared-memory registry's subject
// over nc, an executor's connection, and wants NATS to refuse it: the
// executor's permissions hold.
func wantRegistryRefused(t *testing.T, nc *nats.Conn, errs <-chan error) {
	t.Helper()
	if err := nc.Publish(bus.ShmRegisterSubject, []byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(err.Error(), "Permissions Violation") {
			t.Fatalf("executor publishing a registry subject: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("executor credentials may publish on the registry's subject")
	}
}

func TestEmbeddedNATSRequiresRoleCredentials(t *testing.T) {
	cfg := testConfig(t)
	cfg.NATSListen = freeAddr(t)
	cfg.NATSPasswords = rolePasswords("5e1f")
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, srv)
	// The services work under their roles' permissions: the gateway heard
	// the executor and serves the model.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + srv.Gateway().HTTPAddr() + "/v2/models/simple/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("simple never ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	url := "nats://" + cfg.NATSListen
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("connected to the embedded NATS without credentials")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("connect without credentials: %v", err)
	}
	nc, err := nats.Connect(url, nats.UserInfo(string(bus.RoleExecutor), cfg.NATSPasswords[bus.RoleExecutor]))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	wantRegistryRefused(t, nc, executorErrors(nc))
}

func TestNATSListenBeyondLoopbackNeedsCredentials(t *testing.T) {
	cfg := testConfig(t)
	_, port, _ := net.SplitHostPort(freeAddr(t))
	cfg.NATSListen = net.JoinHostPort("0.0.0.0", port)
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop, _ := run(t, srv)
	err = stop()
	if err == nil || !strings.Contains(err.Error(), "reachable from other machines") {
		t.Fatalf("Run = %v, want a refusal to listen without credentials", err)
	}
}

// TestConnectJoinsUnderItsRole: Connect gives a service joining the
// process an in-process connection as its role, credentials and
// permissions included, once the server runs.
func TestConnectJoinsUnderItsRole(t *testing.T) {
	cfg := testConfig(t)
	cfg.NATSPasswords = rolePasswords("9c2d")
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := srv.Connect(bus.RoleExecutor); err == nil {
		nc.Close()
		t.Fatal("Connect before Run gave a connection")
	}
	runReady(t, srv)
	nc, err := srv.Connect(bus.RoleExecutor)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := nc.NewRespInbox(); !strings.HasPrefix(got, bus.InboxPrefix(bus.RoleExecutor)) {
		t.Errorf("inbox %q lacks the executor's prefix %q", got, bus.InboxPrefix(bus.RoleExecutor))
	}
	wantRegistryRefused(t, nc, executorErrors(nc))
}
