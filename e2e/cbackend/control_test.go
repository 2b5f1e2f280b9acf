package cbackend

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

const controlConfig = `
name: "cctl"
backend: "ncontrol"
max_batch_size: 0
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [1] }]
output [{ name: "READY", data_type: TYPE_BOOL, dims: [1] }]
`

// withControl adds the model-control backend and its model to a setup.
func withControl(t *testing.T, repo string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(repo, "cctl", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "cctl", "config.pbtxt"), []byte(controlConfig), 0o644); err != nil {
		t.Fatal(err)
	}
}

// control asks cctl to act on target; params are extra request
// parameters. It returns the HTTP status and body.
func control(t *testing.T, gw *constellation.Gateway, action, target string, params map[string]string) (int, string) {
	t.Helper()
	p := map[string]string{"action": action, "target": target}
	for k, v := range params {
		p[k] = v
	}
	body, err := json.Marshal(map[string]any{
		"parameters": p,
		"inputs":     []any{map[string]any{"name": "INPUT0", "datatype": "FP32", "shape": []int{1}, "data": []float32{0}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	code, b := post(t, gw.HTTP()+"/v2/models/cctl/infer", string(body))
	return code, string(b)
}

// indexState returns the state of a model's version 1 in the repository
// index ("" when absent).
func indexState(t *testing.T, gw *constellation.Gateway, model string) string {
	t.Helper()
	code, body := post(t, gw.HTTP()+"/v2/repository/index", "")
	if code != 200 {
		t.Fatalf("index: %d %s", code, body)
	}
	var idx []struct{ Name, Version, State string }
	if err := json.Unmarshal(body, &idx); err != nil {
		t.Fatal(err)
	}
	for _, m := range idx {
		if m.Name == model && (m.Version == "1" || m.Version == "") {
			return m.State
		}
	}
	return ""
}

// TestModelControlFromABackend: a C backend loads and unloads models through
// TRITONSERVER_ServerLoadModel(WithParameters) and ServerUnloadModel(AndDependents);
// the loads and unloads reach every executor of the constellation as the
// repository API's do, with Triton's errors.
func TestModelControlFromABackend(t *testing.T) {
	backendDir, repo := setup(t)
	withControl(t, repo)
	c := constellation.NewCluster(t)
	args := []string{"--backend-directory", backendDir, "--model-control-mode", "explicit", "--load-model", "cctl"}
	a := c.Executor(repo, "exec-a", args...)
	b := c.Executor(repo, "exec-b", args...)
	gw := c.Gateway()
	if err := constellation.WaitHTTP(gw.HTTP()+"/v2/models/cctl/ready", 200, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s\n%s", err, a.Output(), b.Output())
	}
	if code, _ := get(t, gw.HTTP()+"/v2/models/cid/ready"); code == 200 {
		t.Fatal("cid is ready before anything loaded it")
	}

	t.Run("Load", func(t *testing.T) {
		code, body := control(t, gw, "load", "cid", nil)
		if code != 200 || !strings.Contains(body, `"name":"READY","datatype":"BOOL","shape":[1],"data":[true]`) {
			t.Fatalf("%d %s\n%s", code, body, a.Output())
		}
		// Gateways learn of a load from the executors' catalogs, a moment
		// after the executors finished it.
		if err := constellation.WaitHTTP(gw.HTTP()+"/v2/models/cid/ready", 200, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if code, body := post(t, gw.HTTP()+"/v2/models/cid/infer", `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,2],"data":[3,4]}]}`); code != 200 || !strings.Contains(string(body), `"data":[3,4]`) {
			t.Fatalf("%d %s", code, body)
		}
	})

	t.Run("UnloadThenUnloadDependents", func(t *testing.T) {
		code, body := control(t, gw, "unload", "cid", nil)
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		// The unload runs after the call returns, as Triton's.
		if !constellation.WaitFor(30*time.Second, func() bool { return indexState(t, gw, "cid") == "UNAVAILABLE" }) {
			t.Fatalf("cid is still %s after the backend unloaded it", indexState(t, gw, "cid"))
		}
		if code, _ := get(t, gw.HTTP()+"/v2/models/cid/ready"); code == 200 {
			t.Fatal("cid is ready after the backend unloaded it")
		}
		if code, body := control(t, gw, "load", "cid", nil); code != 200 || !strings.Contains(body, `"data":[true]`) {
			t.Fatalf("reload: %d %s", code, body)
		}
		if code, body := control(t, gw, "unload_dependents", "cid", nil); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		if !constellation.WaitFor(30*time.Second, func() bool { return indexState(t, gw, "cid") == "UNAVAILABLE" }) {
			t.Fatalf("cid is still %s after the backend unloaded it with its dependents", indexState(t, gw, "cid"))
		}
	})

	t.Run("LoadWithConfigAndFiles", func(t *testing.T) {
		// A model that is in no repository: its configuration and files come
		// with the load, as the repository API's "config" and "file:" do.
		cfg := `{"backend":"nidentity","max_batch_size":4,"input":[{"name":"INPUT0","data_type":"TYPE_FP32","dims":[-1]}],"output":[{"name":"OUTPUT0","data_type":"TYPE_FP32","dims":[-1]}]}`
		code, body := control(t, gw, "load_file", "cnew", map[string]string{"config": cfg, "file_path": "1/notes.txt", "file_data": "version one"})
		if code != 200 || !strings.Contains(body, `"data":[true]`) {
			t.Fatalf("%d %s\n%s", code, body, a.Output())
		}
		if err := constellation.WaitHTTP(gw.HTTP()+"/v2/models/cnew/ready", 200, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		code, body2 := post(t, gw.HTTP()+"/v2/models/cnew/infer", `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,1],"data":[7]}]}`)
		if code != 200 || !strings.Contains(string(body2), `"name":"OUTPUT0"`) {
			t.Fatalf("cnew: %d %s", code, body2)
		}
		_, cfgBody := get(t, gw.HTTP()+"/v2/models/cnew/config")
		if !strings.Contains(string(cfgBody), `"max_batch_size":4`) {
			t.Fatalf("cnew's configuration is not the one loaded: %s", cfgBody)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		// Triton's message for a model in no repository, from the first
		// executor in id order.
		code, body := control(t, gw, "load", "nosuch", nil)
		if code == 200 || !strings.Contains(body, `failed to load 'nosuch', failed to poll from model repository (executor 'exec-a')`) {
			t.Fatalf("%d %s", code, body)
		}
		code, body = control(t, gw, "load_config", "cbad", map[string]string{"config": "{not json"})
		if code == 200 || !strings.Contains(body, "failed to load 'cbad'") {
			t.Fatalf("%d %s", code, body)
		}
		// The executors keep serving.
		if code, body := control(t, gw, "load", "cid", nil); code != 200 || !strings.Contains(body, `"data":[true]`) {
			t.Fatalf("%d %s", code, body)
		}
	})

	t.Run("LoadedOnEveryExecutor", func(t *testing.T) {
		// With exec-a gone, exec-b serves what the backend loaded.
		a.Stop()
		for _, m := range []string{"cid", "cnew"} {
			var code int
			var body []byte
			if !constellation.WaitFor(30*time.Second, func() bool {
				code, body = post(t, gw.HTTP()+"/v2/models/"+m+"/infer", `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,1],"data":[5]}]}`)
				return code == 200
			}) {
				t.Fatalf("%s after exec-a stopped: %d %s\n%s", m, code, body, b.Output())
			}
		}
	})
}

// TestModelControlFromABackendOutsideExplicitMode: in none mode (the
// default) a backend's load and unload fail with Triton's message and
// change nothing.
func TestModelControlFromABackendOutsideExplicitMode(t *testing.T) {
	backendDir, repo := setup(t)
	withControl(t, repo)
	gw := constellation.Standalone(t, repo, "--backend-directory", backendDir, "--load-model", "cctl", "--load-model", "cid")
	for _, action := range []string{"load", "unload", "unload_dependents"} {
		code, body := control(t, gw, action, "cid", nil)
		if code == 200 || !strings.Contains(body, "explicit model load / unload is not allowed if polling is enabled") {
			t.Fatalf("%s: %d %s", action, code, body)
		}
	}
	if code, _ := get(t, gw.HTTP()+"/v2/models/cid/ready"); code != 200 {
		t.Fatal("cid is no longer ready after refused unloads")
	}
}

// TestModelControlFromABackendUnderPlacement: under placement, a backend's
// loads and unloads go to the placement controller, which performs them for
// the cluster, as it does a gateway's repository loads: the model is placed
// on one executor and READY when the call returns; a model loaded with its
// configuration and files (in no repository) is placed again with them
// when the executor holding it dies; an unload takes the model out.
func TestModelControlFromABackendUnderPlacement(t *testing.T) {
	backendDir, repo := setup(t)
	withControl(t, repo)
	c := constellation.NewCluster(t)
	redisURL, _ := constellation.Redis(t)
	router := constellation.Start(t, "router0", c.Bin.Path("nereid-sequence-router"), "--nats-url", c.NATSURL, "--redis-url", redisURL,
		"--lease-ttl", "2s", "--id", "router0", "--placement", "true")
	execs := map[string]*constellation.Proc{}
	for _, id := range []string{"exec-a", "exec-b"} {
		execs[id] = c.Executor(repo, id, "--backend-directory", backendDir, "--model-control-mode", "explicit", "--load-model", "cctl",
			"--placement", "true", "--node", "node-"+id)
	}
	gw := c.Gateway("--placement", "true")
	if err := constellation.WaitHTTP(gw.HTTP()+"/v2/models/cctl/ready", 200, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, router.Output())
	}
	// holders are the executors whose logs say the controller had them
	// load model.
	holders := func(model string) []string {
		var out []string
		for id, p := range execs {
			for _, line := range strings.Split(p.Output(), "\n") {
				if strings.Contains(line, `msg="placement: load"`) && strings.Contains(line, " model="+model+" err=<nil>") {
					out = append(out, id)
					break
				}
			}
		}
		return out
	}

	code, body := control(t, gw, "load", "cid", nil)
	if code != 200 || !strings.Contains(body, `"data":[true]`) {
		t.Fatalf("load cid: %d %s\n%s", code, body, router.Output())
	}
	if h := holders("cid"); len(h) != 1 {
		t.Fatalf("cid loaded on %v, want one executor placed by the controller", h)
	}
	if code, body := post(t, gw.HTTP()+"/v2/models/cid/infer", `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,2],"data":[3,4]}]}`); code != 200 || !strings.Contains(string(body), `"data":[3,4]`) {
		t.Fatalf("cid: %d %s", code, body)
	}

	cfg := `{"backend":"nidentity","max_batch_size":4,"input":[{"name":"INPUT0","data_type":"TYPE_FP32","dims":[-1]}],"output":[{"name":"OUTPUT0","data_type":"TYPE_FP32","dims":[-1]}]}`
	code, body = control(t, gw, "load_file", "cnew", map[string]string{"config": cfg, "file_path": "1/notes.txt", "file_data": "version one"})
	if code != 200 || !strings.Contains(body, `"data":[true]`) {
		t.Fatalf("load cnew with its files: %d %s\n%s", code, body, router.Output())
	}
	h := holders("cnew")
	if len(h) != 1 {
		t.Fatalf("cnew loaded on %v, want one executor", h)
	}
	execs[h[0]].Kill()
	delete(execs, h[0])
	// The request places cnew again, on the other executor, with the
	// configuration and files of its load.
	var body2 []byte
	if !constellation.WaitFor(30*time.Second, func() bool {
		code, body2 = post(t, gw.HTTP()+"/v2/models/cnew/infer", `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,1],"data":[7]}]}`)
		return code == 200
	}) {
		t.Fatalf("cnew after %s was killed: %d %s\n%s", h[0], code, body2, router.Output())
	}
	if again := holders("cnew"); len(again) != 1 {
		t.Fatalf("cnew placed again on %v, want the survivor", again)
	}
	// The request may have gone to the survivor on the controller's word
	// before the gateway read its catalog: the configuration is served
	// once it has.
	if err := constellation.WaitHTTP(gw.HTTP()+"/v2/models/cnew/ready", 200, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, cfgBody := get(t, gw.HTTP()+"/v2/models/cnew/config"); !strings.Contains(string(cfgBody), `"max_batch_size":4`) {
		t.Fatalf("cnew placed again has not the configuration of its load: %s", cfgBody)
	}

	if code, body := control(t, gw, "unload", "cnew", nil); code != 200 {
		t.Fatalf("unload cnew: %d %s", code, body)
	}
	if !constellation.WaitFor(30*time.Second, func() bool { code, _ := get(t, gw.HTTP()+"/v2/models/cnew/ready"); return code != 200 }) {
		t.Fatal("cnew is still ready after the backend unloaded it")
	}
}
