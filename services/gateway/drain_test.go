package gateway

import (
	"net"
	"strings"
	"testing"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tlsreload"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// A model whose every executor drains is not ready, nor is the server;
// one executor left serving keeps both ready, and undoing the drain (a
// catalog without the mark) makes them ready again.
func TestDrainedExecutorsMakeModelsUnready(t *testing.T) {
	c := newCatalog(nil, discardLogger())
	models := func() []*busv1.ModelVersionState {
		seq := &inference.ModelConfig{Name: "seq", SchedulingChoice: &inference.ModelConfig_SequenceBatching{SequenceBatching: &inference.ModelSequenceBatching{}}}
		return []*busv1.ModelVersionState{{Name: "simple", Version: "1", State: "READY", Config: cfgOf("simple")},
			{Name: "seq", Version: "1", State: "READY", Config: seq}}
	}
	c.execs["a"] = &executorState{id: "a", node: "n", haveCat: true, models: models()}
	c.execs["b"] = &executorState{id: "b", node: "n", haveCat: true, models: models()}
	publish := func(draining ...string) *view {
		c.mu.Lock()
		defer c.mu.Unlock()
		for id, e := range c.execs {
			e.draining = false
			for _, d := range draining {
				e.draining = e.draining || d == id
			}
		}
		c.publishLocked()
		return c.current()
	}

	v := publish("a")
	if !v.serverReady() {
		t.Fatal("server unready with one executor of the model still serving")
	}
	vv, err := v.resolve("simple", latestVersion)
	if err != nil {
		t.Fatalf("one executor still serves: %v", err)
	}
	if _, ok := vv.execNodes["a"]; ok || len(vv.executors) != 2 {
		t.Fatalf("draining executor a among the nodes requests go to (%v), or not asked for statistics (%v)", vv.execNodes, vv.executors)
	}

	v = publish("a", "b")
	if v.serverReady() {
		t.Fatal("server ready while every executor of a loaded model drains")
	}
	for _, version := range []int64{latestVersion, 1} {
		_, err := v.resolve("simple", version)
		if te := tritonerr.From(err); te == nil || te.Kind != tritonerr.Unavailable || !strings.Contains(te.Msg, "every executor serving it drains") {
			t.Fatalf("resolve(simple, %d) with every executor draining: %v", version, err)
		}
		// The sequences bound to the draining executors go on (the
		// drain waits for their END), but the model is not ready.
		vv, err := v.resolve("seq", version)
		if err != nil || modelReady(vv, err) {
			t.Fatalf("resolve(seq, %d) with every executor draining: %v, ready %v", version, err, modelReady(vv, err))
		}
	}
	for _, e := range v.index(false) {
		if e.State != stateUnavailable || e.Reason != reasonDraining {
			t.Fatalf("index with every executor draining: %+v", v.index(false))
		}
	}

	v = publish()
	if !v.serverReady() {
		t.Fatal("server unready once the drains are undone")
	}
	for _, m := range []string{"simple", "seq"} {
		if vv, err := v.resolve(m, 1); !modelReady(vv, err) {
			t.Fatalf("%s undrained: %v", m, err)
		}
	}
}

// The admin API beyond loopback needs its callers authenticated: a
// restriction of the admin group on the endpoint's protocol, or mutual
// TLS. On loopback nothing is required.
func TestAdminExposure(t *testing.T) {
	listen := func(addr string) net.Listener {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	restricted := Restrictions{}
	if err := restricted.Add("admin:admin-key=secret"); err != nil {
		t.Fatal(err)
	}
	otherGroup := Restrictions{}
	if err := otherGroup.Add("inference:key=secret"); err != nil {
		t.Fatal(err)
	}
	loop, wide := listen("127.0.0.1:0"), listen("0.0.0.0:0")
	for _, tc := range []struct {
		name       string
		cfg        Config
		grpc, rest net.Listener
		refused    string
	}{
		{name: "loopback, nothing restricted", grpc: loop, rest: loop},
		{name: "gRPC beyond loopback, nothing restricted", grpc: wide, refused: "the admin API (gRPC) on "},
		{name: "REST beyond loopback, nothing restricted", rest: wide, refused: "the admin API (REST) on "},
		{name: "beyond loopback, another group restricted", cfg: Config{GRPCRestricted: otherGroup}, grpc: wide, refused: "--grpc-restricted-protocol admin:"},
		{name: "gRPC restricted, REST not", cfg: Config{GRPCRestricted: restricted}, grpc: wide, rest: wide, refused: "--http-restricted-api admin:"},
		{name: "both restricted", cfg: Config{GRPCRestricted: restricted, HTTPRestricted: restricted}, grpc: wide, rest: wide},
		{name: "mutual TLS", cfg: Config{GRPCTLS: &tlsreload.Files{Mutual: true}, HTTPTLS: &tlsreload.Files{Mutual: true}}, grpc: wide, rest: wide},
		{name: "TLS without client certificates", cfg: Config{GRPCTLS: &tlsreload.Files{}}, grpc: wide, refused: "nothing authenticates its callers"},
	} {
		err := checkAdminExposure(tc.cfg, tc.grpc, tc.rest)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.refused)
		}
	}

	// New refuses to start, closing what it opened.
	ns := startNATS(t)
	_, err := New(Config{Conn: connect(t, ns, "gateway"), AdminAddr: "0.0.0.0:0", Logger: discardLogger()})
	if err == nil || !strings.Contains(err.Error(), "reachable from other machines") {
		t.Fatalf("New with an unrestricted admin API on 0.0.0.0: %v", err)
	}
}
