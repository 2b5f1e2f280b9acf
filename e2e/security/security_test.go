// Package security runs the constellation as it is deployed secured: the
// real nats-server with the shipped per-role configuration, the real
// binaries with their roles' credentials, a gateway with TLS, and checks
// what each party may and may not do.
package security

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/internal/testutil/tlstest"
	"github.com/nereid-io/nereid/pkg/bus"
)

// violation waits for the server's permission violation on errs.
func violation(t *testing.T, errs chan error, what string) {
	t.Helper()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(err.Error(), "Permissions Violation") {
			t.Fatalf("%s: %v, want a permissions violation", what, err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: allowed", what)
	}
}

// TestExecutorCredentialsConfined holds the executor's credentials against
// the shipped configuration on a real nats-server: it cannot publish on the
// router's or the registry's subjects, nor listen to gateways' replies, and
// a client without credentials cannot connect at all.
func TestExecutorCredentialsConfined(t *testing.T) {
	c := constellation.NewCluster(t)

	if nc, err := nats.Connect(c.NATSURL); err == nil {
		nc.Close()
		t.Fatal("a client without credentials connected")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("without credentials: %v, want an authorization violation", err)
	}

	errs := make(chan error, 16)
	opts := []nats.Option{
		nats.UserInfo(string(bus.RoleExecutor), constellation.RolePassword(bus.RoleExecutor)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }),
	}
	nc, err := nats.Connect(c.NATSURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, subj := range []string{
		bus.SequenceInferSubject("simple_sequence", "1"), // the router's
		bus.SequenceTakeoverSubject("simple_sequence", "1"),
		bus.ShmRegisterSubject, // the registry's
		bus.ShmUnregisterSubject,
		bus.ShmRemovedSubject("node"),
		bus.ExecutorStatsSubject("exec-1"), // the gateway's
	} {
		if err := nc.Publish(subj, []byte("forged")); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		violation(t, errs, "executor publishing on "+subj)
	}
	for _, subj := range []string{bus.InboxPrefix(bus.RoleGateway) + ".>", "_INBOX.>", ">", bus.ShmStatusSubject} {
		if _, err := nc.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		violation(t, errs, "executor subscribing to "+subj)
	}
}

// TestGatewayTLSBinary runs the gateway binary with Triton's SSL flags over
// a real cluster: mutual TLS on gRPC, HTTPS, and a client without a
// certificate refused.
func TestGatewayTLSBinary(t *testing.T) {
	c := constellation.NewCluster(t)
	set := tlstest.MustSet(t)
	httpPort, grpcPort, metricsPort := constellation.FreePort(t), constellation.FreePort(t), constellation.FreePort(t)
	restricted := constellation.NewSecret("config-key-")
	g := constellation.Start(t, "gateway", c.Bin.Path("nereid-gateway"),
		"--nats-url", c.NATSURL,
		"--http-port", strconv.Itoa(httpPort), "--grpc-port", strconv.Itoa(grpcPort), "--metrics-port", strconv.Itoa(metricsPort),
		"--http-restricted-api", "model-config:x-config-key="+restricted,
		"--grpc-use-ssl", "true", "--grpc-use-ssl-mutual", "true",
		"--grpc-server-cert", set.ServerCert, "--grpc-server-key", set.ServerKey, "--grpc-root-cert", set.CAFile,
		"--http-use-ssl", "true", "--http-server-cert", set.ServerCert, "--http-server-key", set.ServerKey,
	)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: set.CA.Pool()}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	live := "https://" + constellation.Addr(httpPort) + "/v2/health/live"
	if !constellation.WaitFor(20*time.Second, func() bool {
		resp, err := hc.Get(live)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("HTTPS health never answered:\n%s", g.Output())
	}

	call := func(cert *tlstest.Leaf) error {
		cfg := &tls.Config{RootCAs: set.CA.Pool()}
		if cert != nil {
			kp, err := cert.TLS()
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{kp}
		}
		cc, err := grpc.NewClient(constellation.Addr(grpcPort), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = inference.NewGRPCInferenceServiceClient(cc).ServerLive(ctx, &inference.ServerLiveRequest{})
		return err
	}
	if err := call(set.Client); err != nil {
		t.Fatalf("gRPC with a client certificate: %v", err)
	}
	if err := call(nil); err == nil {
		t.Fatal("gRPC without a client certificate was served")
	}

	// Neither server metadata nor metrics show a secret the gateway holds.
	secrets := []string{restricted, constellation.RolePassword(bus.RoleGateway)}
	for _, u := range []string{"https://" + constellation.Addr(httpPort) + "/v2", "http://" + constellation.Addr(metricsPort) + "/metrics"} {
		client := hc
		if strings.HasPrefix(u, "http:") {
			client = http.DefaultClient
		}
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", u, resp.StatusCode, body)
		}
		for _, s := range secrets {
			if strings.Contains(string(body), s) {
				t.Errorf("%s shows a secret", u)
			}
		}
	}
	// The restricted group answers Triton's refusal without its header.
	resp, err := hc.Get("https://" + constellation.Addr(httpPort) + "/v2/models/simple/config")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "expecting header 'x-config-key'") {
		t.Errorf("restricted model-config without header: %d %s", resp.StatusCode, body)
	}
}

// TestSecretsStayOut gives the binaries secrets on flags and in the
// environment and checks that none shows in -h, in the errors of refused
// credentials, or anywhere else they print (constellation.Start scans
// every process's output for every registered secret).
func TestSecretsStayOut(t *testing.T) {
	c := constellation.NewCluster(t)
	natsSecret := constellation.NewSecret("nats-flag-")
	redisSecret := constellation.NewSecret("redis-flag-")
	tokenSecret := constellation.NewSecret("token-")
	restrictSecret := constellation.NewSecret("restricted-")

	for _, bin := range []string{"nereid-gateway", "nereid-executor", "nereid-sequence-router", "nereid-shm-registry", "nereid"} {
		cmd := exec.Command(c.Bin.Path(bin), "--nats-password", natsSecret, "-h")
		cmd.Env = append(cmd.Environ(), "NEREID_NATS_PASSWORD="+natsSecret, "NEREID_NATS_TOKEN="+tokenSecret,
			"NEREID_REDIS_PASSWORD="+redisSecret)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), "-nats-url") && bin != "nereid" {
			t.Errorf("%s -h printed no usage: %s", bin, out)
		}
		for _, s := range []string{natsSecret, redisSecret, tokenSecret} {
			if strings.Contains(string(out), s) {
				t.Errorf("%s -h shows a secret", bin)
			}
		}
	}

	// Wrong NATS credentials: a clear error, at once, without the password.
	gw := constellation.Start(t, "gateway (wrong password)", c.Bin.Path("nereid-gateway"), "--nats-url", c.NATSURL,
		"--nats-password", natsSecret, "--http-port", "-1", "--grpc-port", "-1", "--metrics-port", "-1",
		"--http-restricted-api", "inference:key="+restrictSecret)
	if !constellation.WaitFor(30*time.Second, gw.Exited) {
		t.Fatalf("gateway with a wrong password still runs:\n%s", gw.Output())
	}
	if out := gw.Output(); !strings.Contains(strings.ToLower(out), "authorization violation") {
		t.Errorf("gateway with a wrong password: %s", out)
	}

	// Wrong Redis password: a startup error naming the URL, not the password.
	redisURL, _ := constellation.Redis(t)
	rt := constellation.Start(t, "router (wrong redis password)", c.Bin.Path("nereid-sequence-router"),
		"--nats-url", c.NATSURL, "--redis-url", redisURL, "--redis-password", redisSecret)
	if !constellation.WaitFor(30*time.Second, rt.Exited) {
		t.Fatalf("router with a wrong Redis password still runs:\n%s", rt.Output())
	}
	if out := rt.Output(); !strings.Contains(out, "WRONGPASS") || !strings.Contains(out, redisURL) {
		t.Errorf("router with a wrong Redis password: want WRONGPASS and %s in %s", redisURL, out)
	}
	// The leak scan runs when the test ends, over every process above.
}
