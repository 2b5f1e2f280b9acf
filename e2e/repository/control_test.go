package repository

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

const identConfig = `backend: "identity"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
`

// controlRepo is a repository with one identity model, "ident".
func controlRepo(t *testing.T) string {
	t.Helper()
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "ident", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "ident", "config.pbtxt"), []byte(identConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	return repo
}

func inferIdent(t *testing.T, base string) (int, string) {
	t.Helper()
	status, body := constellation.Call(t, http.MethodPost, base+"/v2/models/ident/infer",
		`{"inputs":[{"name":"IN","datatype":"INT32","shape":[2],"data":[5,6]}]}`)
	return status, string(body)
}

// TestExplicitModelControlProcesses runs the constellation as processes
// under the shipped NATS configuration (permissions, JetStream): a load
// reaches both executors, an executor restarted in explicit mode comes back
// with the loaded set, so do both restarted at once (the set is kept in
// JetStream), and an unload reaches every executor and outlives a restart
// of them all.
func TestExplicitModelControlProcesses(t *testing.T) {
	c := constellation.NewCluster(t)
	g := c.Gateway()
	base := g.HTTP()
	repoA, repoB := controlRepo(t), controlRepo(t)
	executor := func(repo, id string) *constellation.Proc {
		probe := constellation.Addr(constellation.FreePort(t))
		p := c.Executor(repo, id, "--model-control-mode", "explicit", "--probe-addr", probe)
		if err := constellation.WaitHTTP("http://"+probe+"/readyz", 200, 20*time.Second); err != nil {
			t.Fatalf("executor %s: %v\n%s", id, err, p.Output())
		}
		return p
	}
	a := executor(repoA, "exA")
	b := executor(repoB, "exB")
	if !constellation.WaitFor(20*time.Second, func() bool {
		s, _ := constellation.Call(t, http.MethodGet, base+"/v2/health/ready", "")
		return s == 200
	}) {
		t.Fatalf("constellation not ready:\n%s\n%s\n%s", g.Output(), a.Output(), b.Output())
	}
	if s, body := constellation.Call(t, http.MethodPost, base+"/v2/repository/models/ident/load", ""); s != 200 {
		t.Fatalf("load: %d %s", s, body)
	}
	if s, body := inferIdent(t, base); s != 200 || !strings.Contains(body, `"data":[5,6]`) {
		t.Fatalf("infer after load: %d %s", s, body)
	}

	// exA restarts with nothing named at start: it loads what exB serves.
	a.Stop()
	a = executor(repoA, "exA")
	b.Stop()
	if !constellation.WaitFor(20*time.Second, func() bool {
		s, body := inferIdent(t, base)
		return s == 200 && strings.Contains(body, `"data":[5,6]`)
	}) {
		t.Fatalf("restarted executor does not serve the loaded model:\n%s", a.Output())
	}

	// Every executor stops; those started next load the set again.
	a.Stop()
	a = executor(repoA, "exA")
	b = executor(repoB, "exB")
	if !constellation.WaitFor(20*time.Second, func() bool {
		s, body := inferIdent(t, base)
		return s == 200 && strings.Contains(body, `"data":[5,6]`)
	}) {
		t.Fatalf("executors restarted together do not serve the loaded model:\n%s\n%s", a.Output(), b.Output())
	}

	if s, body := constellation.Call(t, http.MethodPost, base+"/v2/repository/models/ident/unload", ""); s != 200 {
		t.Fatalf("unload: %d %s", s, body)
	}
	if s, body := inferIdent(t, base); s == 200 {
		t.Fatalf("infer after unload: %d %s", s, body)
	}
	a.Stop()
	b.Stop()
	a = executor(repoA, "exA")
	b = executor(repoB, "exB")
	if !constellation.WaitFor(20*time.Second, func() bool {
		s, _ := constellation.Call(t, http.MethodGet, base+"/v2/health/ready", "")
		return s == 200
	}) {
		t.Fatalf("constellation not ready after the restart:\n%s\n%s", a.Output(), b.Output())
	}
	// Both executors are heard: the model stays unloaded, listed by name.
	if !constellation.WaitFor(20*time.Second, func() bool {
		s, body := constellation.Call(t, http.MethodPost, base+"/v2/repository/index", "")
		return s == 200 && strings.Contains(string(body), `[{"name":"ident"}]`)
	}) {
		_, body := constellation.Call(t, http.MethodPost, base+"/v2/repository/index", "")
		t.Fatalf("index after restarting with the model unloaded: %s", body)
	}
	if s, body := inferIdent(t, base); s == 200 {
		t.Fatalf("infer after a restart with the model unloaded: %d %s", s, body)
	}
	for _, p := range []*constellation.Proc{a, b} {
		if strings.Contains(p.Output(), "no loaded-model set in JetStream") {
			t.Fatalf("executor fell back to its peers under the shipped configuration:\n%s", p.Output())
		}
	}
}
