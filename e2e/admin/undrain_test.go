package admin

import (
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// With every executor of the models drained (nereidctl drain), the server
// and the models are not ready, over HTTP (Triton's 400) and gRPC, and a
// stateless inference is refused as unavailable; nereidctl undrain makes
// the executor serve again, and everything is ready again. The admin API
// listens on loopback when no address is given.
func TestUndrainRestoresServingAndReadiness(t *testing.T) {
	e := start(t, []string{"exec-a"})

	// The default bind: the listener's own address, as the gateway
	// announces it.
	r, err := e.admin.ListGateways(ctx(t), &adminv1.ListGatewaysRequest{})
	if err != nil || len(r.GetGateways()) != 1 {
		t.Fatalf("gateways: %v %v", r, err)
	}
	if host, _, err := net.SplitHostPort(r.GetGateways()[0].GetAdminAddress()); err != nil || !net.ParseIP(host).IsLoopback() {
		t.Fatalf("admin API listens on %q by default, want loopback", r.GetGateways()[0].GetAdminAddress())
	}

	httpStatus := func(path string) int {
		resp, err := http.Get(e.g.HTTP() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	conn, err := grpc.NewClient(e.g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	g := inference.NewGRPCInferenceServiceClient(conn)
	grpcReady := func() (server bool, ready map[string]bool) {
		sr, err := g.ServerReady(ctx(t), &inference.ServerReadyRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ready = map[string]bool{}
		for _, m := range models {
			mr, err := g.ModelReady(ctx(t), &inference.ModelReadyRequest{Name: m})
			if err != nil {
				t.Fatal(err)
			}
			ready[m] = mr.GetReady()
		}
		return sr.GetReady(), ready
	}
	allReady := func(want bool) bool {
		code := http.StatusBadRequest // Triton's answer for not ready
		if want {
			code = http.StatusOK
		}
		if httpStatus("/v2/health/ready") != code {
			return false
		}
		for _, m := range models {
			if httpStatus("/v2/models/"+m+"/ready") != code {
				return false
			}
		}
		server, modelsReady := grpcReady()
		if server != want {
			return false
		}
		for _, ready := range modelsReady {
			if ready != want {
				return false
			}
		}
		return true
	}
	waitFor(t, "the server and its models ready", func() bool { return allReady(true) })
	e.simple(t, 1)

	ctl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(e.c.Bin.Path("nereidctl"), append([]string{"--addr", e.adminRPC, "--timeout", "60s"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("nereidctl %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if out := ctl("drain", "exec-a"); !strings.Contains(out, "executor exec-a: drained") {
		t.Fatalf("nereidctl drain:\n%s", out)
	}
	waitFor(t, "the server and its models not ready with their only executor drained", func() bool { return allReady(false) })
	var refused struct {
		Error string `json:"error"`
	}
	body := `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]},` +
		`{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}`
	if code := doJSON(t, "POST", e.g.HTTP()+"/v2/models/simple/infer", nil, []byte(body), &refused); code != http.StatusServiceUnavailable ||
		!strings.Contains(refused.Error, "drains") {
		t.Fatalf("inference with the executor drained: %d %q, want 503 saying its executors drain", code, refused.Error)
	}

	if out := ctl("undrain", "exec-a"); out != "executor exec-a: serving" {
		t.Fatalf("nereidctl undrain:\n%s", out)
	}
	waitFor(t, "the server and its models ready again", func() bool { return allReady(true) })
	ran := e.inferenceCount(t, "exec-a", "simple")
	e.simple(t, 2)
	if now := e.inferenceCount(t, "exec-a", "simple"); now != ran+1 {
		t.Fatalf("the undrained executor ran %d requests, want 1", now-ran)
	}
	// A new sequence binds to the undrained executor.
	if got := e.seqInfer(t, "undrained-seq", 5, true, false); got != 5 {
		t.Fatalf("sequence start on the undrained executor: %d", got)
	}
	e.seqInfer(t, "undrained-seq", 2, false, true)
	if out := ctl("drain-status", "exec-a"); out != "executor exec-a: serving" {
		t.Fatalf("nereidctl drain-status after undrain:\n%s", out)
	}
}

// The admin API bound beyond loopback: refused at start when nothing
// authenticates its callers, served with the restriction of the admin
// group, to calls that carry it only.
func TestAdminBeyondLoopbackNeedsRestriction(t *testing.T) {
	c := constellation.NewCluster(t)
	port := func() string { return strconv.Itoa(constellation.FreePort(t)) }
	p := constellation.Start(t, "gateway", c.Bin.Path("nereid-gateway"), "--nats-url", c.NATSURL,
		"--http-port", port(), "--grpc-port", port(), "--metrics-port", port(), "--admin-address", "0.0.0.0", "--admin-port", port())
	waitFor(t, "the gateway to refuse to start", p.Exited)
	if out := p.Output(); !strings.Contains(out, "the admin API (gRPC)") || !strings.Contains(out, "reachable from other machines") {
		t.Fatalf("gateway with an unrestricted admin API on 0.0.0.0:\n%s", out)
	}

	adminPort := constellation.FreePort(t)
	c.Gateway("--admin-address", "0.0.0.0", "--admin-port", strconv.Itoa(adminPort),
		"--grpc-restricted-protocol", "admin:admin-key=open-sesame")
	conn, err := grpc.NewClient(constellation.Addr(adminPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	admin := adminv1.NewAdminClient(conn)
	if _, err := admin.ListGateways(ctx(t), &adminv1.ListGatewaysRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("without the header: %v, want Unavailable", err)
	}
	r, err := admin.ListGateways(metadata.AppendToOutgoingContext(ctx(t), "triton-grpc-protocol-admin-key", "open-sesame"), &adminv1.ListGatewaysRequest{})
	if err != nil || len(r.GetGateways()) != 1 {
		t.Fatalf("with the header: %v %v", r, err)
	}
	if host, _, _ := net.SplitHostPort(r.GetGateways()[0].GetAdminAddress()); !net.ParseIP(host).IsUnspecified() {
		t.Fatalf("admin API on %q, want every interface", r.GetGateways()[0].GetAdminAddress())
	}
}
