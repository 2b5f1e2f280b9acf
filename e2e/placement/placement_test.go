// Package placement is the e2e suite of model placement (docs/placement.md):
// real nats-server, redis-server, sequence routers running the placement
// controller, executors of small capacity and a gateway, all binaries.
package placement

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

const models = 10

// repo writes m0..m9: Triton's "simple" (built-in addsub backend) under ten
// names.
func repo(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(constellation.RepoPath(t, "deploy/model_repository/simple/config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i := range models {
		name := fmt.Sprintf("m%d", i)
		if err := os.MkdirAll(filepath.Join(dir, name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := strings.Replace(string(src), `name: "simple"`, `name: "`+name+`"`, 1)
		if err := os.WriteFile(filepath.Join(dir, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type env struct {
	c       *constellation.Cluster
	g       *constellation.Gateway
	redis   string
	repo    string
	routers []*constellation.Proc
	execs   map[string]*constellation.Proc
	metrics map[string]string // router id: its metrics URL
}

func (e *env) router(t *testing.T, id string, more ...string) *constellation.Proc {
	port := constellation.FreePort(t)
	args := append([]string{"--nats-url", e.c.NATSURL, "--redis-url", e.redis,
		"--lease-ttl", "2s", "--id", id, "--placement", "true", "--metrics-port", strconv.Itoa(port)}, more...)
	p := constellation.Start(t, id, e.c.Bin.Path("nereid-sequence-router"), args...)
	e.routers = append(e.routers, p)
	if e.metrics == nil {
		e.metrics = map[string]string{}
	}
	e.metrics[id] = "http://" + constellation.Addr(port) + "/metrics"
	return p
}

// onDemandCount is the count of router id's
// nereid_placement_on_demand_seconds for phase (-1: not exported).
func (e *env) onDemandCount(t *testing.T, id, phase string) int {
	t.Helper()
	samples, _, err := constellation.Scrape(e.metrics[id])
	if err != nil {
		t.Fatal(err)
	}
	n, ok := samples[`nereid_placement_on_demand_seconds_count{phase="`+phase+`"}`]
	if !ok {
		return -1
	}
	return int(n)
}

func (e *env) executor(id, node string) *constellation.Proc {
	p := e.c.Executor(e.repo, id, "--node", node, "--placement", "true", "--model-capacity", "slots=3")
	e.execs[id] = p
	return p
}

func ready(g *constellation.Gateway, model string) bool {
	r, err := http.Get(g.HTTP() + "/v2/models/" + model + "/ready")
	if err != nil {
		return false
	}
	r.Body.Close()
	return r.StatusCode == http.StatusOK
}

func readyCount(g *constellation.Gateway) int {
	n := 0
	for i := range models {
		if ready(g, fmt.Sprintf("m%d", i)) {
			n++
		}
	}
	return n
}

const simpleBody = `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},` +
	`{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`

// infer runs model once over HTTP and fails the test unless it answers 200
// with OUTPUT0 = INPUT0 + 1.
func infer(t *testing.T, g *constellation.Gateway, model string) {
	t.Helper()
	c := &http.Client{Timeout: 40 * time.Second}
	r, err := c.Post(g.HTTP()+"/v2/models/"+model+"/infer", "application/json", strings.NewReader(simpleBody))
	if err != nil {
		t.Fatalf("%s: %v", model, err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]`)) {
		t.Fatalf("%s: %d %s", model, r.StatusCode, body)
	}
}

func logged(p *constellation.Proc, s string) bool { return strings.Contains(p.Output(), s) }

// TestPlacement: 3 executors of 3 slots each and 10 models. Nine are
// placed at start (three per executor), the tenth waits; every model
// answers (the tenth on demand, evicting the least recently used model of
// an executor); an evicted model answers again; an executor killed: its
// models answer again from the others; the leading controller killed: its
// standby takes over and places on demand.
func TestPlacement(t *testing.T) {
	e := &env{c: constellation.NewCluster(t), repo: repo(t), execs: map[string]*constellation.Proc{}}
	e.redis, _ = constellation.Redis(t)
	lead := e.router(t, "router0")
	for i := range 3 {
		e.executor(fmt.Sprintf("exec%d", i), fmt.Sprintf("node%d", i))
	}
	adminHTTP := constellation.FreePort(t)
	e.g = e.c.Gateway("--placement", "true", "--admin-http-port", strconv.Itoa(adminHTTP))
	adminURL := "http://" + constellation.Addr(adminHTTP) + "/v1/admin/placement"

	if !constellation.WaitFor(30*time.Second, func() bool { return readyCount(e.g) == 9 }) {
		t.Fatalf("%d models ready, want 9 (3 executors x 3 slots)\nrouter:\n%s", readyCount(e.g), lead.Output())
	}
	for id, p := range e.execs {
		if n := strings.Count(p.Output(), "placement: load"); n != 3 {
			t.Errorf("%s loaded %d models, want 3", id, n)
		}
	}
	if !logged(lead, "placement: models waiting") || !logged(lead, "no executor has room for it") {
		t.Errorf("the controller does not say why the tenth model waits:\n%s", lead.Output())
	}

	t.Run("every model answers; the unplaced one on demand, evicting the least recently used", func(t *testing.T) {
		for i := range models {
			infer(t, e.g, fmt.Sprintf("m%d", i))
		}
		if !logged(lead, `reason="on demand"`) || !logged(lead, `reason="least recently used, evicted"`) {
			t.Fatalf("no on-demand placement or eviction in the controller's log:\n%s", lead.Output())
		}
		// The placement and the load are timed apart.
		if !logged(lead, `msg="placement: on demand, placed"`) {
			t.Errorf("the controller does not log the on-demand placement's phases:\n%s", lead.Output())
		}
		for _, phase := range []string{"place", "load"} {
			if n := e.onDemandCount(t, "router0", phase); n < 1 {
				t.Errorf("nereid_placement_on_demand_seconds{phase=%q}: count %d, want at least 1", phase, n)
			}
		}
		if n := readyCount(e.g); n > 9 {
			t.Fatalf("%d models ready on 9 slots", n)
		}
	})

	t.Run("the admin API shows placement: models and executors, capacity, the decisions with reasons", func(t *testing.T) {
		st := placementView(t, adminURL)
		if st.ControllerID != "router0" {
			t.Errorf("controller %q, want router0", st.ControllerID)
		}
		holders := map[string]int{}
		for _, m := range st.Models {
			for _, id := range m.Executors {
				holders[id]++
			}
			if len(m.Executors) > 1 {
				t.Errorf("%s on %v: one replica wanted", m.Name, m.Executors)
			}
		}
		if len(st.Models) != models || len(st.Executors) != 3 {
			t.Fatalf("%d models and %d executors in the view, want %d and 3: %+v", len(st.Models), len(st.Executors), models, st)
		}
		for _, x := range st.Executors {
			if x.CapacitySlots != "3" || x.HeldModels != "3" || holders[x.ID] != 3 {
				t.Errorf("executor %+v (holding %d models in the model list), want 3 of 3 slots", x, holders[x.ID])
			}
		}
		reasons := map[string]bool{}
		for _, d := range st.Decisions {
			reasons[d.Action+" "+d.Reason] = true
		}
		for _, want := range []string{"load below min_replicas", "load on demand", "unload least recently used, evicted"} {
			if !reasons[want] {
				t.Errorf("no decision %q in %+v", want, st.Decisions)
			}
		}
	})

	t.Run("an evicted model answers again", func(t *testing.T) {
		evicted := ""
		for i := range models {
			if m := fmt.Sprintf("m%d", i); !ready(e.g, m) {
				evicted = m
			}
		}
		if evicted == "" {
			t.Fatal("no model is unplaced after ten models on nine slots")
		}
		infer(t, e.g, evicted)
		if !ready(e.g, evicted) {
			t.Fatalf("%s answered but is not ready", evicted)
		}
	})

	t.Run("an executor killed: its models answer from the others", func(t *testing.T) {
		e.execs["exec0"].Kill()
		if !constellation.WaitFor(15*time.Second, func() bool { return logged(lead, "placement: executor gone") }) {
			t.Fatalf("the controller did not notice exec0's loss:\n%s", lead.Output())
		}
		for i := range models {
			infer(t, e.g, fmt.Sprintf("m%d", i))
		}
		if n := readyCount(e.g); n > 6 {
			t.Fatalf("%d models ready on the 6 slots left", n)
		}
	})

	// A model exec2 does not hold, pinned to it by the operator (nereidctl
	// pin, the admin API's PinModel): loaded there, and never evicted from
	// it while every model is asked for on six slots.
	const pinnedTo = "exec2"
	var pinnedModel string
	t.Run("the operator pins a model to an executor: loaded there, never evicted from it", func(t *testing.T) {
		st := placementView(t, adminURL)
		for i := range models {
			if m := fmt.Sprintf("m%d", i); !st.holds(m, pinnedTo) {
				pinnedModel = m
				break
			}
		}
		pins := adminURL + "/pins/"
		for _, tc := range []struct {
			model, body string
			status      int
			msg         string
		}{
			{"nosuch", `{"executors":["exec1"]}`, 404, "model 'nosuch' is in the repository of no executor under placement"},
			{"m1", `{"executors":["exec0"]}`, 400, "executor 'exec0' is not under placement"},
			{"m1", `{"executors":[]}`, 400, "executors are required"},
		} {
			if code, body := adminCall(t, http.MethodPut, pins+tc.model, tc.body); code != tc.status || !strings.Contains(body, tc.msg) {
				t.Errorf("pin %s %s: %d %s, want %d with %q", tc.model, tc.body, code, body, tc.status, tc.msg)
			}
		}
		code, body := adminCall(t, http.MethodPut, pins+pinnedModel, `{"executors":["`+pinnedTo+`"]}`)
		if st := decodePlacement(t, body); code != 200 || len(st.Pins) != 1 || !slices.Equal(st.pinned(pinnedModel), []string{pinnedTo}) {
			t.Fatalf("pin: %d %s", code, body)
		}
		// The log line reaches the test through the process's pipe, which
		// may come after the answer.
		if !constellation.WaitFor(5*time.Second, func() bool { return logged(lead, `msg="placement: pinned"`) }) {
			t.Errorf("the controller did not log the pin:\n%s", lead.Output())
		}
		if !constellation.WaitFor(15*time.Second, func() bool { return placementView(t, adminURL).holds(pinnedModel, pinnedTo) }) {
			t.Fatalf("%s not loaded on %s after its pin: %+v", pinnedModel, pinnedTo, placementView(t, adminURL))
		}
		for round := range 2 {
			for i := range models {
				infer(t, e.g, fmt.Sprintf("m%d", i))
			}
			if st := placementView(t, adminURL); !st.holds(pinnedModel, pinnedTo) {
				t.Fatalf("round %d: %s is no longer on %s: %+v", round, pinnedModel, pinnedTo, st)
			}
		}
		pinnedAt := strings.Index(lead.Output(), `msg="placement: pinned"`)
		if i := strings.Index(lead.Output()[pinnedAt:], `action=unload model=`+pinnedModel+` executor=`+pinnedTo); i >= 0 {
			t.Fatalf("%s unloaded from %s after its pin:\n%s", pinnedModel, pinnedTo, lead.Output())
		}
		if !logged(lead, `action=load model=`+pinnedModel+` executor=`+pinnedTo+` reason="pinned to the executor by the operator"`) {
			t.Errorf("no load for the pin in the controller's log:\n%s", lead.Output())
		}
	})

	t.Run("the leading controller killed: the standby places on demand", func(t *testing.T) {
		standby := e.router(t, "router1")
		time.Sleep(time.Second) // standing by: the lease is router0's
		if logged(standby, "placement: leading") {
			t.Fatalf("the standby leads while the leader lives:\n%s", standby.Output())
		}
		lead.Kill()
		if !constellation.WaitFor(15*time.Second, func() bool { return logged(standby, "placement: leading") }) {
			t.Fatalf("the standby did not take over:\n%s", standby.Output())
		}
		for i := range models {
			infer(t, e.g, fmt.Sprintf("m%d", i))
		}
		if !logged(standby, `reason="on demand"`) {
			t.Fatalf("the new leader placed nothing on demand:\n%s", standby.Output())
		}
		// The pin is kept in Redis: the new leader has it, and removes it.
		if got := placementView(t, adminURL).pinned(pinnedModel); !slices.Equal(got, []string{pinnedTo}) {
			t.Fatalf("the new leader's pins of %s: %v, want [%s]", pinnedModel, got, pinnedTo)
		}
		if code, body := adminCall(t, http.MethodDelete, adminURL+"/pins/"+pinnedModel, ""); code != 200 || len(decodePlacement(t, body).Pins) != 0 {
			t.Fatalf("unpin: %d %s", code, body)
		}
	})
}

// placementJSON is the admin API's GetPlacement as its REST mapping
// writes it (protojson with the proto's names, 64-bit integers as strings).
type placementJSON struct {
	ControllerID string `json:"controller_id"`
	Models       []struct {
		Name      string   `json:"name"`
		Executors []string `json:"executors"`
	} `json:"models"`
	Executors []struct {
		ID            string `json:"id"`
		CapacitySlots string `json:"capacity_slots"`
		HeldModels    string `json:"held_models"`
	} `json:"executors"`
	Decisions []struct {
		Action   string `json:"action"`
		Model    string `json:"model"`
		Executor string `json:"executor"`
		Reason   string `json:"reason"`
	} `json:"decisions"`
	Pins []struct {
		Model     string   `json:"model"`
		Executors []string `json:"executors"`
	} `json:"pins"`
}

// holds reports whether the view shows executor id holding model.
func (st placementJSON) holds(model, id string) bool {
	for _, m := range st.Models {
		if m.Name == model {
			return slices.Contains(m.Executors, id)
		}
	}
	return false
}

// pinned is the executors the view says model is pinned to.
func (st placementJSON) pinned(model string) []string {
	for _, p := range st.Pins {
		if p.Model == model {
			return p.Executors
		}
	}
	return nil
}

// adminCall sends method url with body (JSON) to the admin API's REST
// mapping and returns the status and body.
func adminCall(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

func placementView(t *testing.T, url string) placementJSON {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, r.StatusCode, body)
	}
	return decodePlacement(t, string(body))
}

func decodePlacement(t *testing.T, body string) placementJSON {
	t.Helper()
	var st placementJSON
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return st
}

// TestPlacementDrain: under placement, a drained executor's models are
// placed on the others, and its drain (what nereidctl drain and a pod's
// preStop wait for) is over only once they serve there: when the admin API
// says DRAINED, every model is ready without it.
func TestPlacementDrain(t *testing.T) {
	src, err := os.ReadFile(constellation.RepoPath(t, "deploy/model_repository/simple/config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"m0", "m1"} {
		if err := os.MkdirAll(filepath.Join(dir, name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := strings.Replace(string(src), `name: "simple"`, `name: "`+name+`"`, 1)
		if err := os.WriteFile(filepath.Join(dir, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{c: constellation.NewCluster(t), repo: dir, execs: map[string]*constellation.Proc{}}
	e.redis, _ = constellation.Redis(t)
	lead := e.router(t, "router0")
	e.executor("exec0", "node0")
	adminHTTP := constellation.FreePort(t)
	e.g = e.c.Gateway("--placement", "true", "--admin-http-port", strconv.Itoa(adminHTTP))
	admin := "http://" + constellation.Addr(adminHTTP) + "/v1/admin"
	if !constellation.WaitFor(30*time.Second, func() bool { return ready(e.g, "m0") && ready(e.g, "m1") }) {
		t.Fatalf("m0 and m1 not ready on exec0\nrouter:\n%s", lead.Output())
	}
	e.executor("exec1", "node1")
	time.Sleep(2 * time.Second) // exec1 is heard, and holds nothing: min_replicas is met

	drainState := func(method string) (string, string) {
		t.Helper()
		req, err := http.NewRequest(method, admin+"/executors/exec0/drain", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		var st struct {
			State      string `json:"state"`
			WaitingFor string `json:"waiting_for"`
		}
		if r.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil {
			t.Fatalf("%s drain: %d %s", method, r.StatusCode, body)
		}
		return st.State, st.WaitingFor
	}
	drainState("POST")
	var state, waiting string
	if !constellation.WaitFor(30*time.Second, func() bool {
		state, waiting = drainState("GET")
		return state == "DRAIN_STATE_DRAINED"
	}) {
		t.Fatalf("exec0 not drained: %s (waiting for %s)\nrouter:\n%s", state, waiting, lead.Output())
	}
	// Drained: exec0 takes nothing new, so ready means exec1 serves it.
	for _, m := range []string{"m0", "m1"} {
		if !ready(e.g, m) {
			t.Errorf("%s is not ready elsewhere when exec0's drain is over", m)
		}
	}
	if !logged(e.execs["exec1"], "placement: load") {
		t.Errorf("exec1 loaded nothing:\n%s", e.execs["exec1"].Output())
	}
}
