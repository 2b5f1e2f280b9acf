package placement

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// ensembleConfig is Triton's simple_ensemble over the model named step.
const ensembleConfig = `name: "%NAME%"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "INPUT0", data_type: TYPE_INT32, dims: [ 16 ] },
  { name: "INPUT1", data_type: TYPE_INT32, dims: [ 16 ] }
]
output [
  { name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 16 ] },
  { name: "OUTPUT1", data_type: TYPE_INT32, dims: [ 16 ] }
]
ensemble_scheduling {
  step [{
    model_name: "%STEP%"
    model_version: -1
    input_map { key: "INPUT0", value: "INPUT0" }
    input_map { key: "INPUT1", value: "INPUT1" }
    output_map { key: "OUTPUT0", value: "OUTPUT0" }
    output_map { key: "OUTPUT1", value: "OUTPUT1" }
  }]
}
`

// addEnsemble writes an ensemble name over the model step into repo.
func addEnsemble(t *testing.T, repo, name, step string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(repo, name, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer("%NAME%", name, "%STEP%", step).Replace(ensembleConfig)
	if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// maxBatchSize is the max_batch_size the gateway's model configuration
// endpoint gives for model.
func maxBatchSize(t *testing.T, g *constellation.Gateway, model string) int {
	t.Helper()
	r, err := http.Get(g.HTTP() + "/v2/models/" + model + "/config")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("%s's configuration: %d %s", model, r.StatusCode, body)
	}
	var cfg struct {
		MaxBatchSize int `json:"max_batch_size"`
	}
	if err := json.Unmarshal(body, &cfg); err != nil {
		t.Fatalf("%s's configuration: %v: %s", model, err, body)
	}
	return cfg.MaxBatchSize
}

// TestPlacementExplicitOverridesAndEnsembles: under placement in explicit
// model control mode, a repository load that carries a configuration is
// placed with it, and every later placement of the model (here, after the
// executor holding it is killed) loads that configuration again; loading
// an ensemble loads its composing model as a dependency, placed by the
// controller; unloading the ensemble keeps the composing model loaded,
// unless unload_dependents is given, as in Triton; a model loaded by a
// load of its own stays.
func TestPlacementExplicitOverridesAndEnsembles(t *testing.T) {
	e := &env{c: constellation.NewCluster(t), repo: repo(t), execs: map[string]*constellation.Proc{}}
	addEnsemble(t, e.repo, "ens7", "m7")
	addEnsemble(t, e.repo, "ens8", "m8")
	e.redis, _ = constellation.Redis(t)
	lead := e.router(t, "router0")
	for i, id := range []string{"exec0", "exec1"} {
		e.execs[id] = e.c.Executor(e.repo, id, "--node", "node"+strconv.Itoa(i), "--placement", "true",
			"--model-capacity", "slots=4", "--model-control-mode", "explicit")
	}
	adminHTTP := constellation.FreePort(t)
	e.g = e.c.Gateway("--placement", "true", "--admin-http-port", strconv.Itoa(adminHTTP))
	adminURL := "http://" + constellation.Addr(adminHTTP) + "/v1/admin/placement"
	if !constellation.WaitFor(30*time.Second, func() bool {
		code, _ := adminCall(t, http.MethodGet, adminURL, "")
		return code == 200 && len(placementView(t, adminURL).Executors) == 2
	}) {
		t.Fatalf("the controller does not see both executors:\n%s", lead.Output())
	}

	t.Run("a load's configuration goes with every placement of the model", func(t *testing.T) {
		body := `{"parameters":{"config":"{\"max_batch_size\":4}"}}`
		if code, b := post(t, e.g, "/v2/repository/models/m6/load", body); code != 200 {
			t.Fatalf("load m6 with a configuration: %d %s", code, b)
		}
		if n := maxBatchSize(t, e.g, "m6"); n != 4 {
			t.Fatalf("m6's max_batch_size is %d, want the load's 4", n)
		}
		infer(t, e.g, "m6")
		var holder string
		for _, id := range []string{"exec0", "exec1"} {
			if placementView(t, adminURL).holds("m6", id) {
				holder = id
			}
		}
		if holder == "" {
			t.Fatalf("no executor holds m6: %+v", placementView(t, adminURL))
		}
		e.execs[holder].Kill()
		// The request places m6 again, on the other executor, with the
		// configuration of its load. (It may have gone to that executor
		// on the controller's word before this gateway read its catalog:
		// the model's configuration is served once it has.)
		infer(t, e.g, "m6")
		if !constellation.WaitFor(10*time.Second, func() bool { return ready(e.g, "m6") }) {
			t.Fatal("m6 answered but is not ready")
		}
		if n := maxBatchSize(t, e.g, "m6"); n != 4 {
			t.Fatalf("m6 placed again has max_batch_size %d, want the load's 4", n)
		}
		other := "exec0"
		if holder == "exec0" {
			other = "exec1"
		}
		if !placementView(t, adminURL).holds("m6", other) {
			t.Fatalf("m6 is not on %s after %s was killed: %+v", other, holder, placementView(t, adminURL))
		}
		// A load without a configuration goes back to the repository's.
		if code, b := post(t, e.g, "/v2/repository/models/m6/load", ""); code != 200 {
			t.Fatalf("load m6 again: %d %s", code, b)
		}
		if n := maxBatchSize(t, e.g, "m6"); n != 8 {
			t.Fatalf("m6 loaded again without a configuration has max_batch_size %d, want the repository's 8", n)
		}
	})

	t.Run("an ensemble's composing model is loaded with it, and unloaded with unload_dependents", func(t *testing.T) {
		if ready(e.g, "m7") {
			t.Fatal("m7 ready before anything loaded it")
		}
		if code, b := post(t, e.g, "/v2/repository/models/ens7/load", ""); code != 200 {
			t.Fatalf("load ens7: %d %s\n%s", code, b, lead.Output())
		}
		if !ready(e.g, "m7") || !ready(e.g, "ens7") {
			t.Fatalf("after ens7's load: ens7 ready %v, m7 ready %v; want both", ready(e.g, "ens7"), ready(e.g, "m7"))
		}
		infer(t, e.g, "ens7")
		if code, b := post(t, e.g, "/v2/repository/models/ens7/unload", ""); code != 200 {
			t.Fatalf("unload ens7: %d %s", code, b)
		}
		if ready(e.g, "ens7") || !ready(e.g, "m7") {
			t.Fatalf("after ens7's unload: ens7 ready %v, m7 ready %v; want m7 alone", ready(e.g, "ens7"), ready(e.g, "m7"))
		}
		if code, b := post(t, e.g, "/v2/repository/models/ens7/load", ""); code != 200 {
			t.Fatalf("load ens7 again: %d %s", code, b)
		}
		infer(t, e.g, "ens7")
		if code, b := post(t, e.g, "/v2/repository/models/ens7/unload", `{"parameters":{"unload_dependents":true}}`); code != 200 {
			t.Fatalf("unload ens7 with its dependents: %d %s", code, b)
		}
		if ready(e.g, "ens7") || ready(e.g, "m7") {
			t.Fatalf("after ens7's unload with its dependents: ens7 ready %v, m7 ready %v; want neither", ready(e.g, "ens7"), ready(e.g, "m7"))
		}
		time.Sleep(2 * time.Second) // two of the controller's rounds
		if ready(e.g, "m7") {
			t.Fatal("m7 placed again after it was unloaded with ens7")
		}
	})

	t.Run("a composing model loaded by a load of its own stays", func(t *testing.T) {
		if code, b := post(t, e.g, "/v2/repository/models/m8/load", ""); code != 200 {
			t.Fatalf("load m8: %d %s", code, b)
		}
		if code, b := post(t, e.g, "/v2/repository/models/ens8/load", ""); code != 200 {
			t.Fatalf("load ens8: %d %s", code, b)
		}
		infer(t, e.g, "ens8")
		if code, b := post(t, e.g, "/v2/repository/models/ens8/unload", `{"parameters":{"unload_dependents":true}}`); code != 200 {
			t.Fatalf("unload ens8 with its dependents: %d %s", code, b)
		}
		if ready(e.g, "ens8") || !ready(e.g, "m8") {
			t.Fatalf("after ens8's unload with its dependents: ens8 ready %v, m8 ready %v; want m8 alone", ready(e.g, "ens8"), ready(e.g, "m8"))
		}
		infer(t, e.g, "m8")
	})
}

// TestPlacementEnsembleOnDemand: in none mode, with more models than
// slots, an ensemble takes no slot; a request to it while its composing
// model is placed nowhere places that model on demand (evicting another)
// and is answered, and again after the composing model was evicted.
func TestPlacementEnsembleOnDemand(t *testing.T) {
	e := &env{c: constellation.NewCluster(t), repo: repo(t), execs: map[string]*constellation.Proc{}}
	addEnsemble(t, e.repo, "ens9", "m9")
	e.redis, _ = constellation.Redis(t)
	lead := e.router(t, "router0")
	for i, id := range []string{"exec0", "exec1"} {
		e.execs[id] = e.c.Executor(e.repo, id, "--node", "node"+strconv.Itoa(i), "--placement", "true", "--model-capacity", "slots=3")
	}
	e.g = e.c.Gateway("--placement", "true")
	// Six slots, eleven models: m0..m5 are placed in free room, the
	// others wait for demand.
	if !constellation.WaitFor(30*time.Second, func() bool { return readyCount(e.g) == 6 }) {
		t.Fatalf("%d models ready, want 6:\n%s", readyCount(e.g), lead.Output())
	}
	if ready(e.g, "ens9") || ready(e.g, "m9") {
		t.Fatalf("before any request: ens9 ready %v, m9 ready %v; want neither", ready(e.g, "ens9"), ready(e.g, "m9"))
	}
	infer(t, e.g, "ens9")
	if !ready(e.g, "m9") {
		t.Fatal("m9 is not ready after a request to ens9 ran it")
	}
	// Requests to m0..m8, twice over, evict m9 (the least recently used
	// model goes first); ens9's next request places it again.
	for range 2 {
		for i := range 9 {
			infer(t, e.g, "m"+strconv.Itoa(i))
		}
	}
	if ready(e.g, "m9") || ready(e.g, "ens9") {
		t.Fatalf("after requests to nine other models: m9 ready %v, ens9 ready %v; want m9 evicted and ens9 waiting for it:\n%s",
			ready(e.g, "m9"), ready(e.g, "ens9"), lead.Output())
	}
	infer(t, e.g, "ens9")
	if !ready(e.g, "m9") {
		t.Fatal("m9 is not ready after a request to ens9 ran it again")
	}
}
