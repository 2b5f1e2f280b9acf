package placement

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// post sends body to the gateway's HTTP path and returns the status and
// body.
func post(t *testing.T, g *constellation.Gateway, path, body string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 60 * time.Second}
	r, err := c.Post(g.HTTP()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// TestPlacementExplicit: executors under placement in explicit model
// control mode keep Triton's meaning for clients. A model named by an
// executor's --load-model is loaded in the cluster at start, the others
// are not; a repository load places a model and answers once it is READY,
// an unload takes it out of every executor, and a request for a model not
// loaded is not placed on demand. Models loaded beyond the executors'
// slots stay loaded: evicted, they are placed again on demand. The loaded
// models are kept in Redis across the controller's failover.
func TestPlacementExplicit(t *testing.T) {
	e := &env{c: constellation.NewCluster(t), repo: repo(t), execs: map[string]*constellation.Proc{}}
	e.redis, _ = constellation.Redis(t)
	lead := e.router(t, "router0")
	explicit := func(id, node string, more ...string) {
		args := append([]string{"--node", node, "--placement", "true", "--model-capacity", "slots=2", "--model-control-mode", "explicit"}, more...)
		e.execs[id] = e.c.Executor(e.repo, id, args...)
	}
	explicit("exec0", "node0", "--load-model", "m0")
	explicit("exec1", "node1")
	adminHTTP := constellation.FreePort(t)
	e.g = e.c.Gateway("--placement", "true", "--admin-http-port", strconv.Itoa(adminHTTP))

	if !constellation.WaitFor(30*time.Second, func() bool { return ready(e.g, "m0") }) {
		t.Fatalf("m0, a startup model, is not ready:\n%s", lead.Output())
	}
	if !logged(lead, `msg="placement: startup models loaded"`) {
		t.Errorf("the controller did not log the startup models:\n%s", lead.Output())
	}
	infer(t, e.g, "m0")

	t.Run("a model not loaded is not served, nor placed on demand", func(t *testing.T) {
		if n := readyCount(e.g); n != 1 {
			t.Fatalf("%d models ready, want 1 (m0)", n)
		}
		if code, body := post(t, e.g, "/v2/models/m1/infer", simpleBody); code == 200 {
			t.Fatalf("m1, never loaded, answered: %s", body)
		}
		if ready(e.g, "m1") {
			t.Fatal("m1 was placed on demand without a load")
		}
	})

	t.Run("a repository load places the model, READY when it answers; an unload takes it out", func(t *testing.T) {
		if code, body := post(t, e.g, "/v2/repository/models/m1/load", ""); code != 200 {
			t.Fatalf("load m1: %d %s", code, body)
		}
		if !ready(e.g, "m1") {
			t.Fatal("m1 not ready right after its load answered")
		}
		infer(t, e.g, "m1")
		if code, body := post(t, e.g, "/v2/repository/models/m1/unload", ""); code != 200 {
			t.Fatalf("unload m1: %d %s", code, body)
		}
		if ready(e.g, "m1") {
			t.Fatal("m1 ready right after its unload answered")
		}
		if code, body := post(t, e.g, "/v2/models/m1/infer", simpleBody); code == 200 {
			t.Fatalf("m1 answered after its unload: %s", body)
		}
		time.Sleep(2 * time.Second) // two of the controller's rounds
		if ready(e.g, "m1") {
			t.Fatal("m1 placed again after its unload")
		}
	})

	t.Run("loads it cannot do are refused with why", func(t *testing.T) {
		for _, tc := range []struct {
			path, body string
			code       int
			msg        string
		}{
			{"/v2/repository/models/nosuch/load", "", 500, "failed to load 'nosuch', failed to poll from model repository"},
			{"/v2/repository/models/m2/load", `{"parameters":{"config":"{not json"}}`, 400, "failed to load 'm2'"},
		} {
			if code, body := post(t, e.g, tc.path, tc.body); code != tc.code || !strings.Contains(body, tc.msg) {
				t.Errorf("POST %s %s: %d %s, want %d with %q", tc.path, tc.body, code, body, tc.code, tc.msg)
			}
		}
		if ready(e.g, "m2") {
			t.Fatal("m2 loaded by a refused load")
		}
	})

	t.Run("models loaded beyond the slots stay loaded: evicted, placed again on demand", func(t *testing.T) {
		// m0 and m2..m5: five loaded models on four slots.
		for i := 2; i <= 5; i++ {
			m := fmt.Sprintf("m%d", i)
			if code, body := post(t, e.g, "/v2/repository/models/"+m+"/load", ""); code != 200 {
				t.Fatalf("load %s: %d %s", m, code, body)
			}
			if !ready(e.g, m) {
				t.Fatalf("%s not ready right after its load", m)
			}
		}
		if !logged(lead, `reason="least recently used, evicted"`) {
			t.Fatalf("no eviction for the fifth model on four slots:\n%s", lead.Output())
		}
		for _, m := range []string{"m0", "m2", "m3", "m4", "m5"} {
			infer(t, e.g, m)
		}
	})

	t.Run("the loaded models survive the controller's failover", func(t *testing.T) {
		standby := e.router(t, "router1")
		time.Sleep(time.Second) // standing by: the lease is router0's
		lead.Kill()
		if !constellation.WaitFor(15*time.Second, func() bool { return logged(standby, "placement: leading") }) {
			t.Fatalf("the standby did not take over:\n%s", standby.Output())
		}
		for _, m := range []string{"m0", "m2", "m3", "m4", "m5"} {
			infer(t, e.g, m)
		}
		if code, body := post(t, e.g, "/v2/models/m1/infer", simpleBody); code == 200 {
			t.Fatalf("m1, unloaded before the failover, answered: %s", body)
		}
		if logged(standby, `msg="placement: startup models loaded"`) {
			t.Errorf("the new leader loaded the startup models again:\n%s", standby.Output())
		}
		if code, body := post(t, e.g, "/v2/repository/models/m1/load", ""); code != 200 {
			t.Fatalf("load m1 through the new leader: %d %s", code, body)
		}
		infer(t, e.g, "m1")
	})
}
