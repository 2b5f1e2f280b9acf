package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/internal/testutil/leakcheck"
	"github.com/nereid-io/nereid/services/executor"
)

// identConfig is an INT32 identity model without batching.
const identConfig = `backend: "identity"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] } ]
`

// writeModel writes a model directory with its config and version folders.
func writeModel(t testing.TB, repo, name, config string, versions ...int) {
	t.Helper()
	dir := filepath.Join(repo, name)
	for _, v := range versions {
		if err := os.MkdirAll(filepath.Join(dir, fmt.Sprint(v)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.pbtxt"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
}

// controlRepo is a repository with "simple" (Triton's example) and
// "ident" (versions 1 and 2).
func controlRepo(t testing.TB) string {
	t.Helper()
	repo := t.TempDir()
	simple, err := os.ReadFile(filepath.Join(repository, "simple", "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	writeModel(t, repo, "simple", string(simple), 1)
	writeModel(t, repo, "ident", identConfig, 1, 2)
	return repo
}

// startExplicitExecutor runs a real executor in explicit model control
// mode over repo, loading models at start.
func startExplicitExecutor(t testing.TB, ns *server.Server, id, repo string, models ...string) *runningExecutor {
	t.Helper()
	return runExecutorWith(t, ns, executor.Config{RepositoryPath: repo, Models: models, ID: id, ControlMode: executor.ControlExplicit})
}

// waitExecutors waits until the gateway has the catalogs of n executors.
func waitExecutors(t testing.TB, g *Gateway, n int) {
	t.Helper()
	waitFor(t, fmt.Sprint(n, " executors"), 10*time.Second, func() bool { return len(g.cat.executorIDs()) == n })
}

func post(t testing.TB, url, body string) httpResult {
	t.Helper()
	return do(t, "POST", url, []byte(body), nil)
}

func identInferJSON(vals [4]int) string {
	b, _ := json.Marshal(vals)
	return `{"inputs":[{"name":"IN","datatype":"INT32","shape":[4],"data":` + string(b) + `}]}`
}

// checkIdent infers on ident (version "" = latest) and checks the echo.
func checkIdent(t testing.TB, base, version string, vals [4]int) {
	t.Helper()
	checkModel(t, base, "ident", version, vals)
}

// checkModel infers on an identity model of identConfig and checks the echo.
func checkModel(t testing.TB, base, model, version string, vals [4]int) {
	t.Helper()
	path := base + "/v2/models/" + model
	if version != "" {
		path += "/versions/" + version
	}
	r := post(t, path+"/infer", identInferJSON(vals))
	if r.status != 200 {
		t.Fatalf("infer %s %q: %d %s", model, version, r.status, r.body)
	}
	var resp struct {
		Outputs []struct {
			Data []int `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(r.body, &resp); err != nil || len(resp.Outputs) != 1 || fmt.Sprint(resp.Outputs[0].Data) != fmt.Sprint(vals[:]) {
		t.Fatalf("infer %s %q: wrong answer %s", model, version, r.body)
	}
}

func ready(t testing.TB, base, model, version string) bool {
	t.Helper()
	path := base + "/v2/models/" + model
	if version != "" {
		path += "/versions/" + version
	}
	return do(t, "GET", path+"/ready", nil, nil).status == 200
}

type idxEntry struct {
	Name, Version, State, Reason string
}

func index(t testing.TB, base string) map[string]idxEntry {
	t.Helper()
	r := post(t, base+"/v2/repository/index", "")
	var entries []idxEntry
	if err := json.Unmarshal(r.body, &entries); err != nil {
		t.Fatalf("index: %v: %s", err, r.body)
	}
	out := map[string]idxEntry{}
	for _, e := range entries {
		out[e.Name+"/"+e.Version] = e
	}
	return out
}

func inferenceCount(t testing.TB, base, model, version string) int {
	t.Helper()
	r := do(t, "GET", base+"/v2/models/"+model+"/versions/"+version+"/stats", nil, nil)
	var st struct {
		ModelStats []struct {
			InferenceCount int `json:"inference_count"`
		} `json:"model_stats"`
	}
	if err := json.Unmarshal(r.body, &st); err != nil || len(st.ModelStats) != 1 {
		t.Fatalf("stats %s/%s: %d %s", model, version, r.status, r.body)
	}
	return st.ModelStats[0].InferenceCount
}

func TestModelControlHTTP(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	repo := controlRepo(t)
	startExplicitExecutor(t, ns, "ex1", repo, "simple")
	waitModelReady(t, g, "simple")
	base := "http://" + g.HTTPAddr()

	if ready(t, base, "ident", "") {
		t.Fatal("ident ready before it was loaded")
	}
	t.Run("index lists models never loaded", func(t *testing.T) {
		// Triton's index shows every model of the repository: one never
		// loaded by its name alone, and one added on disk at once.
		writeModel(t, repo, "ondisk", identConfig, 1)
		defer os.RemoveAll(filepath.Join(repo, "ondisk"))
		r := post(t, base+"/v2/repository/index", "")
		jsonEqual(t, r.body, `[{"name":"ident"},{"name":"ondisk"},{"name":"simple","version":"1","state":"READY"}]`)
		r = post(t, base+"/v2/repository/index", `{"ready":true}`)
		jsonEqual(t, r.body, `[{"name":"simple","version":"1","state":"READY"}]`)
		if r := post(t, base+"/v2/models/ident/infer", identInferJSON([4]int{})); r.status != 404 ||
			!strings.Contains(string(r.body), "Request for unknown model: 'ident' is not found") {
			t.Fatalf("infer on a model never loaded: %d %s", r.status, r.body)
		}
	})
	t.Run("load", func(t *testing.T) {
		if r := post(t, base+"/v2/repository/models/ident/load", ""); r.status != 200 {
			t.Fatalf("load: %d %s", r.status, r.body)
		}
		// The answer comes once the gateway's view has the model.
		if !ready(t, base, "ident", "2") || ready(t, base, "ident", "1") {
			t.Fatal("after load: want version 2 ready, version 1 not (latest policy)")
		}
		checkIdent(t, base, "", [4]int{1, 2, 3, 4})
	})
	t.Run("load unchanged keeps the version", func(t *testing.T) {
		before := inferenceCount(t, base, "ident", "2")
		if r := post(t, base+"/v2/repository/models/ident/load", ""); r.status != 200 {
			t.Fatalf("load: %d %s", r.status, r.body)
		}
		if got := inferenceCount(t, base, "ident", "2"); got != before || before == 0 {
			t.Fatalf("inference count after an unchanged load: %d, want %d (not reloaded)", got, before)
		}
	})
	t.Run("reload of the version whose file changed", func(t *testing.T) {
		before := inferenceCount(t, base, "ident", "2")
		if err := os.WriteFile(filepath.Join(repo, "ident", "2", "weights.bin"), []byte("w"), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := post(t, base+"/v2/repository/models/ident/load", ""); r.status != 200 {
			t.Fatalf("load: %d %s", r.status, r.body)
		}
		if got := inferenceCount(t, base, "ident", "2"); got != 0 || before == 0 {
			t.Fatalf("inference count after a load with a changed file: %d (before %d), want 0 (reloaded)", got, before)
		}
		checkIdent(t, base, "2", [4]int{2, 4, 6, 8})
	})
	t.Run("a version added on disk loads with the next load", func(t *testing.T) {
		if err := os.MkdirAll(filepath.Join(repo, "ident", "3"), 0o755); err != nil {
			t.Fatal(err)
		}
		if ready(t, base, "ident", "3") {
			t.Fatal("version 3 ready before a load: explicit mode does not poll")
		}
		if r := post(t, base+"/v2/repository/models/ident/load", ""); r.status != 200 {
			t.Fatalf("load: %d %s", r.status, r.body)
		}
		if !ready(t, base, "ident", "3") || ready(t, base, "ident", "2") {
			t.Fatal("after the load: want version 3 ready and 2 unloaded (latest policy)")
		}
		if err := os.RemoveAll(filepath.Join(repo, "ident", "3")); err != nil {
			t.Fatal(err)
		}
		if r := post(t, base+"/v2/repository/models/ident/load", ""); r.status != 200 {
			t.Fatalf("load: %d %s", r.status, r.body)
		}
		if ready(t, base, "ident", "3") || !ready(t, base, "ident", "2") {
			t.Fatal("after removing version 3 and loading: want version 2 ready again")
		}
	})
	t.Run("reload on config change", func(t *testing.T) {
		writeModel(t, repo, "ident", identConfig+`parameters { key: "execute_delay_ms" value { string_value: "1" } }`+"\n")
		if r := post(t, base+"/v2/repository/models/ident/load", ""); r.status != 200 {
			t.Fatalf("load: %d %s", r.status, r.body)
		}
		if got := inferenceCount(t, base, "ident", "2"); got != 0 {
			t.Fatalf("inference count after a changed load: %d, want 0 (reloaded)", got)
		}
		checkIdent(t, base, "2", [4]int{5, 6, 7, 8})
	})
	t.Run("version policy all, then latest", func(t *testing.T) {
		writeModel(t, repo, "ident", identConfig+"version_policy: { all { } }\n")
		if r := post(t, base+"/v2/repository/models/ident/load", ""); r.status != 200 {
			t.Fatalf("load: %d %s", r.status, r.body)
		}
		checkIdent(t, base, "1", [4]int{1, 1, 1, 1})
		checkIdent(t, base, "2", [4]int{2, 2, 2, 2})
		writeModel(t, repo, "ident", identConfig+"version_policy: { latest { num_versions: 1 } }\n")
		if r := post(t, base+"/v2/repository/models/ident/load", ""); r.status != 200 {
			t.Fatalf("load: %d %s", r.status, r.body)
		}
		if ready(t, base, "ident", "1") || !ready(t, base, "ident", "2") {
			t.Fatal("after policy latest: want only version 2 ready")
		}
	})
	t.Run("failed reload keeps the previous version", func(t *testing.T) {
		writeModel(t, repo, "ident", "backend: \"identity\"\ninput [ { name: \"IN\" data_type: TYPE_INT32 dims: [ 4 ] } ]\n")
		r := post(t, base+"/v2/repository/models/ident/load", "")
		if r.status == 200 || !strings.Contains(string(r.body), "failed to load 'ident'") {
			t.Fatalf("load of a broken config: %d %s", r.status, r.body)
		}
		checkIdent(t, base, "2", [4]int{9, 9, 9, 9})
		writeModel(t, repo, "ident", "this is not { a config")
		if r := post(t, base+"/v2/repository/models/ident/load", ""); r.status == 200 || !strings.Contains(string(r.body), "failed to read text proto") {
			t.Fatalf("load of an unparsable config: %d %s", r.status, r.body)
		}
		checkIdent(t, base, "2", [4]int{9, 9, 9, 9})
		writeModel(t, repo, "ident", identConfig)
	})
	t.Run("unload", func(t *testing.T) {
		if r := post(t, base+"/v2/repository/models/ident/unload", `{"parameters":{"unload_dependents":false}}`); r.status != 200 {
			t.Fatalf("unload: %d %s", r.status, r.body)
		}
		if ready(t, base, "ident", "") {
			t.Fatal("ident ready after unload")
		}
		e := index(t, base)["ident/2"]
		if e.State != "UNAVAILABLE" || e.Reason != "unloaded" {
			t.Fatalf("index after unload: %+v", e)
		}
		if r := post(t, base+"/v2/models/ident/infer", identInferJSON([4]int{})); r.status == 200 {
			t.Fatalf("infer after unload: %d %s", r.status, r.body)
		}
		if !ready(t, base, "simple", "1") {
			t.Fatal("simple not ready after unloading ident")
		}
	})
	t.Run("unknown model", func(t *testing.T) {
		r := post(t, base+"/v2/repository/models/nope/load", "")
		jsonEqual(t, r.body, `{"error":"failed to load 'nope', failed to poll from model repository"}`)
		if r.status != 500 {
			t.Fatalf("status %d", r.status)
		}
	})
	t.Run("missing config", func(t *testing.T) {
		if err := os.MkdirAll(filepath.Join(repo, "noconfig", "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		r := post(t, base+"/v2/repository/models/noconfig/load", "")
		if r.status == 200 || !strings.Contains(string(r.body), "failed to load 'noconfig'") {
			t.Fatalf("load without a config: %d %s", r.status, r.body)
		}
		if e := index(t, base)["noconfig/"]; e.State != "UNAVAILABLE" || e.Reason == "" {
			t.Fatalf("index entry of the failed model: %+v", e)
		}
	})
	t.Run("config override", func(t *testing.T) {
		override := `{"backend":"identity","max_batch_size":2,` +
			`"input":[{"name":"IN","data_type":"TYPE_INT32","dims":[4]}],` +
			`"output":[{"name":"OUT","data_type":"TYPE_INT32","dims":[4]}]}`
		body, _ := json.Marshal(map[string]any{"parameters": map[string]any{"config": override}})
		if r := post(t, base+"/v2/repository/models/ident/load", string(body)); r.status != 200 {
			t.Fatalf("load with config: %d %s", r.status, r.body)
		}
		r := do(t, "GET", base+"/v2/models/ident/config", nil, nil)
		if !strings.Contains(string(r.body), `"max_batch_size":2`) {
			t.Fatalf("config after override: %s", r.body)
		}
		bad, _ := json.Marshal(map[string]any{"parameters": map[string]any{"config": `{"max_batch_size": "x"`}})
		if r := post(t, base+"/v2/repository/models/ident/load", string(bad)); r.status != 400 || !strings.Contains(string(r.body), "failed to parse config override") {
			t.Fatalf("bad config override: %d %s", r.status, r.body)
		}
		if !ready(t, base, "ident", "2") {
			t.Fatal("a bad override unloaded the model")
		}
	})
	t.Run("file override", func(t *testing.T) {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		cfg := `{"name":"fresh","backend":"identity",` +
			`"input":[{"name":"IN","data_type":"TYPE_INT32","dims":[4]}],` +
			`"output":[{"name":"OUT","data_type":"TYPE_INT32","dims":[4]}]}`
		body, _ := json.Marshal(map[string]any{"parameters": map[string]any{
			"config": cfg, "file:3/weights.bin": base64.StdEncoding.EncodeToString([]byte("weights"))}})
		if r := post(t, base+"/v2/repository/models/fresh/load", string(body)); r.status != 200 {
			t.Fatalf("load with files: %d %s", r.status, r.body)
		}
		if !ready(t, base, "fresh", "3") {
			t.Fatal("fresh version 3 not ready")
		}
		written, _ := filepath.Glob(filepath.Join(tmp, "*", "fresh", "3", "weights.bin"))
		if len(written) != 1 {
			t.Fatalf("override files: %v", written)
		}
		if data, _ := os.ReadFile(written[0]); string(data) != "weights" {
			t.Fatalf("override file holds %q", data)
		}
		if r := post(t, base+"/v2/repository/models/fresh/unload", ""); r.status != 200 {
			t.Fatalf("unload: %d %s", r.status, r.body)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Fatalf("temporary repository left after unload: %v", left)
		}
		noCfg, _ := json.Marshal(map[string]any{"parameters": map[string]any{"file:1/x": "eA=="}})
		if r := post(t, base+"/v2/repository/models/fresh/load", string(noCfg)); r.status != 400 {
			t.Fatalf("files without config: %d %s", r.status, r.body)
		}
		escape, _ := json.Marshal(map[string]any{"parameters": map[string]any{"config": cfg, "file:../x": "eA=="}})
		if r := post(t, base+"/v2/repository/models/fresh/load", string(escape)); r.status != 400 || !strings.Contains(string(r.body), "invalid file override path") {
			t.Fatalf("file outside the model: %d %s", r.status, r.body)
		}
	})
	t.Run("concurrent double load", func(t *testing.T) {
		writeModel(t, repo, "twice", identConfig, 1)
		var wg sync.WaitGroup
		codes := make([]int, 2)
		for i := range codes {
			wg.Go(func() {
				resp := do(t, "POST", base+"/v2/repository/models/twice/load", nil, nil)
				codes[i] = resp.status
			})
		}
		wg.Wait()
		if codes[0] != 200 || codes[1] != 200 {
			t.Fatalf("concurrent loads: %v", codes)
		}
		n := 0
		for k, e := range index(t, base) {
			if strings.HasPrefix(k, "twice/") && e.State == "READY" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d READY versions of twice, want 1", n)
		}
	})
}

func TestModelControlGRPC(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	repo := controlRepo(t)
	startExplicitExecutor(t, ns, "ex1", repo)
	waitExecutors(t, g, 1)
	c, _ := grpcClient(t, g)
	ctx := context.Background()

	str := func(s string) *inference.ModelRepositoryParameter {
		return &inference.ModelRepositoryParameter{ParameterChoice: &inference.ModelRepositoryParameter_StringParam{StringParam: s}}
	}
	byt := func(b []byte) *inference.ModelRepositoryParameter {
		return &inference.ModelRepositoryParameter{ParameterChoice: &inference.ModelRepositoryParameter_BytesParam{BytesParam: b}}
	}
	if _, err := c.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "simple"}); err != nil {
		t.Fatalf("load simple: %v", err)
	}
	if r, err := c.ModelReady(ctx, &inference.ModelReadyRequest{Name: "simple"}); err != nil || !r.GetReady() {
		t.Fatalf("simple ready after load: %v %v", r, err)
	}
	override := `{"backend":"identity","max_batch_size":3,` +
		`"input":[{"name":"IN","data_type":"TYPE_INT32","dims":[4]}],` +
		`"output":[{"name":"OUT","data_type":"TYPE_INT32","dims":[4]}]}`
	if _, err := c.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "ident",
		Parameters: map[string]*inference.ModelRepositoryParameter{"config": str(override)}}); err != nil {
		t.Fatalf("load ident with config: %v", err)
	}
	cfg, err := c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "ident"})
	if err != nil || cfg.GetConfig().GetMaxBatchSize() != 3 {
		t.Fatalf("config after override: %v %v", cfg, err)
	}
	if _, err := c.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "ident",
		Parameters: map[string]*inference.ModelRepositoryParameter{"config": byt([]byte(override))}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("config as bytes: %v", err)
	}
	if _, err := c.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "fresh",
		Parameters: map[string]*inference.ModelRepositoryParameter{
			"config": str(strings.Replace(override, `"backend"`, `"name":"fresh","backend"`, 1)), "file:1/w.bin": byt([]byte{0, 1, 2})}}); err != nil {
		t.Fatalf("load with files: %v", err)
	}
	if r, err := c.ModelReady(ctx, &inference.ModelReadyRequest{Name: "fresh", Version: "1"}); err != nil || !r.GetReady() {
		t.Fatalf("fresh ready: %v %v", r, err)
	}
	if _, err := c.RepositoryModelUnload(ctx, &inference.RepositoryModelUnloadRequest{ModelName: "fresh"}); err != nil {
		t.Fatalf("unload fresh: %v", err)
	}
	if r, err := c.ModelReady(ctx, &inference.ModelReadyRequest{Name: "fresh"}); err == nil && r.GetReady() {
		t.Fatal("fresh ready after unload")
	}
	_, err = c.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "nope"})
	if s := status.Convert(err); s.Code() != codes.Internal || s.Message() != "failed to load 'nope', failed to poll from model repository" {
		t.Fatalf("load unknown: %v", err)
	}
	idx, err := c.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{Ready: true})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range idx.GetModels() {
		names = append(names, m.GetName()+"/"+m.GetVersion()+":"+m.GetState())
	}
	if got := strings.Join(names, " "); got != "ident/2:READY simple/1:READY" {
		t.Fatalf("ready index: %s", got)
	}
}

// TestModelControlNoneMode: a real executor in mode none refuses load and
// unload with Triton's error.
func TestModelControlNoneMode(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	startExecutor(t, ns, "ex1", "simple")
	waitModelReady(t, g, "simple")
	r := post(t, "http://"+g.HTTPAddr()+"/v2/repository/models/simple/unload", "")
	if r.status != 503 {
		t.Fatalf("unload in mode none: %d", r.status)
	}
	jsonEqual(t, r.body, `{"error":"explicit model load / unload is not allowed if polling is enabled"}`)
	if !ready(t, "http://"+g.HTTPAddr(), "simple", "1") {
		t.Fatal("simple not ready after a refused unload")
	}
}

func TestModelControlTwoExecutors(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	repoA, repoB := controlRepo(t), controlRepo(t)
	a := startExplicitExecutor(t, ns, "exA", repoA)
	startExplicitExecutor(t, ns, "exB", repoB)
	waitExecutors(t, g, 2)
	base := "http://" + g.HTTPAddr()

	if r := post(t, base+"/v2/repository/models/ident/load", ""); r.status != 200 {
		t.Fatalf("load: %d %s", r.status, r.body)
	}
	// Both executors serve it: with A gone, B still answers.
	for _, id := range []string{"exA", "exB"} {
		if !servesReady(g, id, "ident") {
			t.Fatalf("executor %s does not serve ident", id)
		}
	}

	// B's copy of the model breaks: the error names B, A keeps the new
	// version, B the old one, and the model serves on both.
	writeModel(t, repoA, "ident", identConfig+`parameters { key: "x" value { string_value: "1" } }`+"\n")
	writeModel(t, repoB, "ident", "not a config {")
	r := post(t, base+"/v2/repository/models/ident/load", "")
	if r.status == 200 || !strings.Contains(string(r.body), "(executor 'exB')") || !strings.Contains(string(r.body), "failed to load 'ident'") {
		t.Fatalf("load failing on one executor: %d %s", r.status, r.body)
	}
	for _, id := range []string{"exA", "exB"} {
		if !servesReady(g, id, "ident") {
			t.Fatalf("executor %s lost ident after a failed load", id)
		}
	}
	a.stop()
	waitExecutors(t, g, 1)
	checkIdent(t, base, "", [4]int{4, 3, 2, 1})

	// A restarted executor in explicit mode loads what the others serve,
	// though nothing names it at start.
	writeModel(t, repoA, "ident", identConfig)
	startExplicitExecutor(t, ns, "exA", repoA)
	waitExecutors(t, g, 2)
	waitFor(t, "exA serving ident", 10*time.Second, func() bool { return servesReady(g, "exA", "ident") })
	if servesReady(g, "exA", "simple") {
		t.Fatal("restarted executor loaded a model nobody loaded")
	}
}

// servesReady reports whether the gateway's view has executor id serving a
// READY version of model.
func servesReady(g *Gateway, id, model string) bool {
	g.cat.mu.Lock()
	defer g.cat.mu.Unlock()
	e, ok := g.cat.execs[id]
	if !ok {
		return false
	}
	for _, m := range e.models {
		if m.GetName() == model && m.GetState() == "READY" {
			return true
		}
	}
	return false
}

// openFDs counts this process's open file descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	return len(entries)
}

// TestModelControlStress loads and unloads a model 200 times while clients
// infer on it and on another model: no crash, no wrong answer, the other
// model never fails, and no goroutine or file descriptor is left behind.
func TestModelControlStress(t *testing.T) {
	leakcheck.Check(t)
	ns := startNATS(t)
	g := startGateway(t, ns)
	repo := controlRepo(t)
	startExplicitExecutor(t, ns, "ex1", repo, "simple", "ident")
	waitModelReady(t, g, "ident")
	base := "http://" + g.HTTPAddr()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	// Warm up, then count.
	checkIdent(t, base, "", [4]int{1, 2, 3, 4})
	fdsBefore := openFDs(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	errs := make(chan error, 16)
	var served, refused sync.Map
	var wg sync.WaitGroup
	infer := func(model, body string, check func([]byte) error, mayFail bool) {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v2/models/"+model+"/infer", strings.NewReader(body))
			resp, err := client.Do(req)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", model, err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == 200:
				if err := check(b); err != nil {
					errs <- fmt.Errorf("%s: wrong answer: %w", model, err)
					return
				}
				served.Store(model, true)
			case mayFail && strings.Contains(string(b), `"error":`):
				refused.Store(model, true)
			default:
				errs <- fmt.Errorf("%s: %d %s", model, resp.StatusCode, b)
				return
			}
		}
	}
	identBody := identInferJSON([4]int{7, 1, 7, 1})
	wg.Add(3)
	go infer("ident", identBody, func(b []byte) error {
		if !strings.Contains(string(b), `"data":[7,1,7,1]`) {
			return fmt.Errorf("%s", b)
		}
		return nil
	}, true)
	go infer("ident", identBody, func(b []byte) error {
		if !strings.Contains(string(b), `"data":[7,1,7,1]`) {
			return fmt.Errorf("%s", b)
		}
		return nil
	}, true)
	go infer("simple", simpleRequestJSON(""), func(b []byte) error {
		if !strings.Contains(string(b), `"data":`+intsJSON(sum)) || !strings.Contains(string(b), `"data":`+intsJSON(diff)) {
			return fmt.Errorf("%s", b)
		}
		return nil
	}, false)

	control := func(action string) error {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v2/repository/models/ident/"+action, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: %d %s", action, resp.StatusCode, b)
		}
		return nil
	}
	var failure error
cycles:
	for i := 0; i < 200; i++ {
		for _, action := range []string{"unload", "load"} {
			if err := control(action); err != nil {
				failure = fmt.Errorf("cycle %d: %w", i, err)
				break cycles
			}
		}
		select {
		case failure = <-errs:
			break cycles
		default:
		}
	}
	close(stop)
	wg.Wait()
	if failure == nil {
		select {
		case failure = <-errs:
		default:
		}
	}
	if failure != nil {
		t.Fatal(failure)
	}
	if _, ok := served.Load("simple"); !ok {
		t.Fatal("simple never answered")
	}
	checkIdent(t, base, "", [4]int{4, 3, 2, 1})
	client.CloseIdleConnections()
	if fdsAfter := openFDs(t); fdsAfter > fdsBefore+20 {
		t.Fatalf("open file descriptors: %d before the cycles, %d after", fdsBefore, fdsAfter)
	}
}

// TestModelControlPoll: in poll mode the executor picks up models added,
// changed and removed on disk, and versions added; the repository API
// refuses to load.
func TestModelControlPoll(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	repo := controlRepo(t)
	nc := connect(t, ns, "executor-poll")
	ex, err := executor.New(executor.Config{Conn: nc, RepositoryPath: repo, ID: "ex1", Logger: discardLogger(),
		ControlMode: executor.ControlPoll, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ex.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitModelReady(t, g, "ident")
	base := "http://" + g.HTTPAddr()

	if r := post(t, base+"/v2/repository/models/ident/unload", ""); r.status != 503 {
		t.Fatalf("unload in poll mode: %d %s", r.status, r.body)
	}
	writeModel(t, repo, "added", identConfig, 1)
	waitFor(t, "added model ready", 10*time.Second, func() bool { return ready(t, base, "added", "1") })

	writeModel(t, repo, "ident", identConfig+"max_batch_size: 2\n")
	waitFor(t, "changed config served", 10*time.Second, func() bool {
		r := do(t, "GET", base+"/v2/models/ident/config", nil, nil)
		return strings.Contains(string(r.body), `"max_batch_size":2`)
	})
	if err := os.MkdirAll(filepath.Join(repo, "ident", "3"), 0o755); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "new version 3", 10*time.Second, func() bool { return ready(t, base, "ident", "3") && !ready(t, base, "ident", "2") })
	// Version 3 removed from disk: it unloads and the policy serves 2 again.
	if err := os.RemoveAll(filepath.Join(repo, "ident", "3")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "version 3 removed", 10*time.Second, func() bool { return !ready(t, base, "ident", "3") && ready(t, base, "ident", "2") })

	if err := os.RemoveAll(filepath.Join(repo, "added")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "removed model unloaded", 10*time.Second, func() bool { return !ready(t, base, "added", "1") })

	// A file changed in a version directory reloads that version alone, as
	// Triton's poll mode does (it compares modification times).
	writeModel(t, repo, "multi", identConfig+"version_policy: { all { } }\n", 1, 2)
	waitFor(t, "multi versions 1 and 2", 10*time.Second, func() bool { return ready(t, base, "multi", "1") && ready(t, base, "multi", "2") })
	checkModel(t, base, "multi", "1", [4]int{1, 1, 1, 1})
	checkModel(t, base, "multi", "2", [4]int{2, 2, 2, 2})
	if err := os.WriteFile(filepath.Join(repo, "multi", "2", "weights.bin"), []byte("new weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "version 2 reloaded", 10*time.Second, func() bool { return inferenceCount(t, base, "multi", "2") == 0 })
	if n := inferenceCount(t, base, "multi", "1"); n != 1 {
		t.Fatalf("version 1 was reloaded with version 2 (inference count %d, want 1)", n)
	}
	// A file deleted from it reloads it too (L0_lifecycle's file delete).
	checkModel(t, base, "multi", "2", [4]int{2, 2, 2, 2})
	if err := os.Remove(filepath.Join(repo, "multi", "2", "weights.bin")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "version 2 reloaded after a file deletion", 10*time.Second, func() bool { return inferenceCount(t, base, "multi", "2") == 0 })
	if n := inferenceCount(t, base, "multi", "1"); n != 1 {
		t.Fatalf("version 1 was reloaded with version 2 (inference count %d, want 1)", n)
	}
	// A file of the model itself concerns every version.
	checkModel(t, base, "multi", "2", [4]int{2, 2, 2, 2})
	if err := os.WriteFile(filepath.Join(repo, "multi", "labels.txt"), []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both versions reloaded", 10*time.Second, func() bool {
		return inferenceCount(t, base, "multi", "1") == 0 && inferenceCount(t, base, "multi", "2") == 0
	})
	if !ready(t, base, "simple", "1") {
		t.Fatal("simple lost while polling")
	}
}

// TestModelControlRepositories: models come from every repository; a name
// in two of them is not available, with Triton's reason.
func TestModelControlRepositories(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	repoA, repoB := controlRepo(t), t.TempDir()
	writeModel(t, repoB, "other", identConfig, 1)
	writeModel(t, repoB, "ident", identConfig, 1)
	nc := connect(t, ns, "executor-repos")
	ex, err := executor.New(executor.Config{Conn: nc, RepositoryPath: repoA, MoreRepositories: []string{repoB},
		ID: "ex1", Logger: discardLogger(), ControlMode: executor.ControlExplicit, Models: []string{executor.LoadAll}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ex.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitModelReady(t, g, "other")
	base := "http://" + g.HTTPAddr()
	if !ready(t, base, "simple", "1") {
		t.Fatal("simple from the first repository not ready")
	}
	if e := index(t, base)["ident/"]; e.State != "UNAVAILABLE" || e.Reason != "model appears in two or more repositories" {
		t.Fatalf("index entry of a model in two repositories: %+v", e)
	}
	want := "failed to poll model 'ident': not unique across all model repositories"
	r := post(t, base+"/v2/repository/models/ident/load", "")
	if r.status != 500 || !strings.Contains(string(r.body), want) {
		t.Fatalf("load of a model in two repositories: %d %s", r.status, r.body)
	}
	if err := os.RemoveAll(filepath.Join(repoB, "ident")); err != nil {
		t.Fatal(err)
	}
	if r := post(t, base+"/v2/repository/models/ident/load", ""); r.status != 200 {
		t.Fatalf("load once unique: %d %s", r.status, r.body)
	}
	checkIdent(t, base, "2", [4]int{3, 1, 4, 1})
}

// TestModelControlUnloadInFlight: requests an executor has received when an
// unload arrives finish with their answers before the unload returns; new
// requests fail at once.
func TestModelControlUnloadInFlight(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	repo := controlRepo(t)
	writeModel(t, repo, "slow", identConfig+`instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "execute_delay_ms" value { string_value: "300" } }
`, 1)
	startExplicitExecutor(t, ns, "ex1", repo, "slow")
	waitModelReady(t, g, "slow")
	base := "http://" + g.HTTPAddr()

	const n = 6
	type result struct {
		status int
		body   string
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			body := identInferJSON([4]int{i, i, i, i})
			resp, err := http.Post(base+"/v2/models/slow/infer", "application/json", strings.NewReader(body))
			if err != nil {
				results <- result{0, err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := fmt.Sprintf(`"data":[%d,%d,%d,%d]`, i, i, i, i)
			if resp.StatusCode == 200 && !strings.Contains(string(b), want) {
				results <- result{-1, string(b)}
				return
			}
			results <- result{resp.StatusCode, string(b)}
		}()
	}
	// One answer means the executor runs them one after the other: the
	// others wait in its queue.
	first := <-results
	if first.status != 200 {
		t.Fatalf("first request: %d %s", first.status, first.body)
	}
	if r := post(t, base+"/v2/repository/models/slow/unload", ""); r.status != 200 {
		t.Fatalf("unload: %d %s", r.status, r.body)
	}
	// The requests queued when the unload arrived ran to the end: had the
	// instances been finalized first, they would have failed.
	for i := 1; i < n; i++ {
		select {
		case r := <-results:
			if r.status != 200 {
				t.Fatalf("request in flight during the unload: %d %s", r.status, r.body)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d requests unanswered after the unload", n-i)
		}
	}
	r := post(t, base+"/v2/models/slow/infer", identInferJSON([4]int{}))
	if r.status == 200 || !strings.Contains(string(r.body), "slow") {
		t.Fatalf("request after unload: %d %s", r.status, r.body)
	}
}

// TestModelControlStrictAndExitOnError: without auto-completion a model
// needs its config.pbtxt; with exit-on-error a model failing at start
// stops the executor.
func TestModelControlStrictAndExitOnError(t *testing.T) {
	ns := startNATS(t)
	repo := controlRepo(t)
	if err := os.MkdirAll(filepath.Join(repo, "bare", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(cfg executor.Config) (*executor.Executor, chan error, context.CancelFunc) {
		cfg.Conn, cfg.RepositoryPath, cfg.Logger = connect(t, ns, "executor-"+cfg.ID), repo, discardLogger()
		ex, err := executor.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ex.Run(ctx) }()
		return ex, done, cancel
	}

	if _, err := executor.New(executor.Config{Conn: connect(t, ns, "wild"), RepositoryPath: repo, ControlMode: executor.ControlExplicit,
		Models: []string{"simple", executor.LoadAll}}); err == nil || !strings.Contains(err.Error(), "Wildcard model name '*' must be the ONLY startup model") {
		t.Fatalf("'*' with another startup model: %v", err)
	}

	_, done, cancel := run(executor.Config{ID: "exit", ExitOnError: true})
	defer cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "failed to load all models") || !strings.Contains(err.Error(), "bare") {
			t.Fatalf("exit on error: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("executor with a broken model and exit-on-error kept running")
	}

	g := startGateway(t, ns)
	ex, done2, cancel2 := run(executor.Config{ID: "strict", DisableAutoComplete: true})
	t.Cleanup(func() { cancel2(); <-done2 })
	<-ex.Ready()
	waitModelReady(t, g, "simple")
	want := "model 'bare' has no config.pbtxt and auto-complete of model configurations is disabled"
	if e := index(t, "http://"+g.HTTPAddr())["bare/"]; e.State != "UNAVAILABLE" || e.Reason != want {
		t.Fatalf("index entry without config.pbtxt: %+v", e)
	}
}

// TestModelControlOtherGateway: a gateway that did not carry the load learns
// the change from the executor's heartbeat.
func TestModelControlOtherGateway(t *testing.T) {
	ns := startNATS(t)
	g1, g2 := startGateway(t, ns), startGateway(t, ns)
	startExplicitExecutor(t, ns, "ex1", controlRepo(t), "simple")
	waitModelReady(t, g2, "simple")
	if r := post(t, "http://"+g1.HTTPAddr()+"/v2/repository/models/ident/load", ""); r.status != 200 {
		t.Fatalf("load: %d %s", r.status, r.body)
	}
	waitModelReady(t, g2, "ident")
	if r := post(t, "http://"+g1.HTTPAddr()+"/v2/repository/models/ident/unload", ""); r.status != 200 {
		t.Fatalf("unload: %d %s", r.status, r.body)
	}
	base2 := "http://" + g2.HTTPAddr()
	waitFor(t, "ident unloaded on the other gateway", 10*time.Second, func() bool { return !ready(t, base2, "ident", "") })
}

// startNATSJetStream runs an embedded nats-server with JetStream, which
// keeps the set of models loaded through the repository API.
func startNATSJetStream(t testing.TB) *server.Server {
	t.Helper()
	leakcheck.Check(t)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// TestModelControlSetSurvivesRestarts: with JetStream, the models loaded
// through the repository API (overrides included) come back when every
// executor restarts at once; an unloaded model stays unloaded.
func TestModelControlSetSurvivesRestarts(t *testing.T) {
	ns := startNATSJetStream(t)
	g := startGateway(t, ns)
	repoA, repoB := controlRepo(t), controlRepo(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	a := startExplicitExecutor(t, ns, "exA", repoA)
	b := startExplicitExecutor(t, ns, "exB", repoB)
	waitExecutors(t, g, 2)
	base := "http://" + g.HTTPAddr()

	// All versions: the disk's config serves only the latest.
	override := `{"backend":"identity","version_policy":{"all":{}},` +
		`"input":[{"name":"IN","data_type":"TYPE_INT32","dims":[4]}],` +
		`"output":[{"name":"OUT","data_type":"TYPE_INT32","dims":[4]}]}`
	withConfig, _ := json.Marshal(map[string]any{"parameters": map[string]any{"config": override}})
	withFiles, _ := json.Marshal(map[string]any{"parameters": map[string]any{
		"config":             strings.Replace(override, `"backend"`, `"name":"fresh","backend"`, 1),
		"file:5/weights.bin": base64.StdEncoding.EncodeToString([]byte("kept weights")),
	}})
	// A load whose files fill a NATS message reaches the executors, but its
	// record could not hold them: a restart says so.
	big, _ := json.Marshal(map[string]any{"parameters": map[string]any{
		"config":       strings.Replace(override, `"backend"`, `"name":"big","backend"`, 1),
		"file:1/w.bin": base64.StdEncoding.EncodeToString(make([]byte, 1<<20-3000)),
	}})
	loads := []struct{ model, body string }{{"ident", string(withConfig)}, {"simple", ""}, {"fresh", string(withFiles)}, {"big", string(big)}}
	for _, l := range loads {
		if r := post(t, base+"/v2/repository/models/"+l.model+"/load", l.body); r.status != 200 {
			t.Fatalf("load %s: %d %s", l.model, r.status, r.body)
		}
	}
	if r := post(t, base+"/v2/repository/models/simple/unload", ""); r.status != 200 {
		t.Fatalf("unload simple: %d %s", r.status, r.body)
	}

	a.stop()
	b.stop()
	waitExecutors(t, g, 0)
	startExplicitExecutor(t, ns, "exA", repoA)
	startExplicitExecutor(t, ns, "exB", repoB)
	waitExecutors(t, g, 2)
	for _, id := range []string{"exA", "exB"} {
		waitFor(t, id+" serving ident and fresh", 10*time.Second, func() bool {
			return servesReady(g, id, "ident") && servesReady(g, id, "fresh")
		})
		if servesReady(g, id, "simple") {
			t.Fatalf("%s loaded simple, which was unloaded before the restart", id)
		}
	}
	checkIdent(t, base, "1", [4]int{8, 6, 4, 2}) // only the override serves version 1
	checkIdent(t, base, "2", [4]int{2, 4, 6, 8})
	checkModel(t, base, "fresh", "5", [4]int{5, 5, 5, 5})
	written, _ := filepath.Glob(filepath.Join(tmp, "*", "fresh", "5", "weights.bin"))
	if len(written) != 2 {
		t.Fatalf("restored file overrides: %v, want one per executor", written)
	}
	if data, _ := os.ReadFile(written[0]); string(data) != "kept weights" {
		t.Fatalf("restored override file holds %q", data)
	}
	idx := index(t, base)
	if e := idx["simple/"]; e.State != "" {
		t.Fatalf("index entry of simple after the restart: %+v, want its name alone", e)
	}
	if e := idx["big/"]; e.State != "UNAVAILABLE" || !strings.Contains(e.Reason, "too large to keep") {
		t.Fatalf("index entry of a model whose files could not be kept: %+v (index %v)", e, idx)
	}
}

// TestTritonModelControlExamples runs the steps of Triton's client examples
// simple_http_model_control.py and simple_grpc_model_control.py, request
// for request, against a gateway and an executor in explicit mode.
func TestTritonModelControlExamples(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	repo := controlRepo(t)
	writeModel(t, repo, "other", identConfig, 1)
	startExplicitExecutor(t, ns, "ex1", repo)
	waitExecutors(t, g, 1)
	const inRepo = 3 // simple, ident, other
	wrongConfig := `"parameters": {"config": {{"max_batch_size": "16"}}}`

	t.Run("http", func(t *testing.T) {
		base := "http://" + g.HTTPAddr()
		load := func(model, config string) httpResult {
			body := ""
			if config != "" {
				b, _ := json.Marshal(map[string]any{"parameters": map[string]any{"config": config}})
				body = string(b)
			}
			return post(t, base+"/v2/repository/models/"+model+"/load", body)
		}
		var idx []json.RawMessage
		if r := post(t, base+"/v2/repository/index", ""); json.Unmarshal(r.body, &idx) != nil || len(idx) != inRepo {
			t.Fatalf("index before any load: %s", r.body)
		}
		if r := load("simple", ""); r.status != 200 || !ready(t, base, "simple", "") {
			t.Fatalf("load simple: %d %s", r.status, r.body)
		}
		if r := load("simple", wrongConfig); r.status == 200 || !strings.Contains(string(r.body), "failed to load") {
			t.Fatalf("load with a malformed config: %d %s", r.status, r.body)
		}
		if r := load("simple", `{"max_batch_size":"16"}`); r.status != 200 {
			t.Fatalf("load with max_batch_size 16: %d %s", r.status, r.body)
		}
		var cfg struct {
			MaxBatchSize int `json:"max_batch_size"`
		}
		if r := do(t, "GET", base+"/v2/models/simple/config", nil, nil); json.Unmarshal(r.body, &cfg) != nil || cfg.MaxBatchSize != 16 {
			t.Fatalf("config after the override: %s", r.body)
		}
		if r := post(t, base+"/v2/repository/models/simple/unload", ""); r.status != 200 || ready(t, base, "simple", "") {
			t.Fatalf("unload: %d %s", r.status, r.body)
		}
		if r := load("wrong_model_name", ""); r.status == 200 || !strings.Contains(string(r.body), "failed to load") {
			t.Fatalf("load of a wrong model name: %d %s", r.status, r.body)
		}
	})

	t.Run("grpc", func(t *testing.T) {
		c, _ := grpcClient(t, g)
		ctx := context.Background()
		load := func(model, config string, files map[string][]byte) error {
			params := map[string]*inference.ModelRepositoryParameter{}
			if config != "" {
				params["config"] = &inference.ModelRepositoryParameter{ParameterChoice: &inference.ModelRepositoryParameter_StringParam{StringParam: config}}
			}
			for k, v := range files {
				params[k] = &inference.ModelRepositoryParameter{ParameterChoice: &inference.ModelRepositoryParameter_BytesParam{BytesParam: v}}
			}
			_, err := c.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: model, Parameters: params})
			return err
		}
		isReady := func() bool {
			r, err := c.ModelReady(ctx, &inference.ModelReadyRequest{Name: "simple"})
			return err == nil && r.GetReady()
		}
		if idx, err := c.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{}); err != nil || len(idx.GetModels()) != inRepo {
			t.Fatalf("index before any load: %v %v", idx, err)
		}
		if err := load("simple", "", nil); err != nil || !isReady() {
			t.Fatalf("load simple: %v", err)
		}
		if err := load("simple", wrongConfig, nil); err == nil || !strings.Contains(err.Error(), "failed to load") {
			t.Fatalf("load with a malformed config: %v", err)
		}
		if err := load("simple", `{"max_batch_size":"16"}`, nil); err != nil {
			t.Fatalf("load with max_batch_size 16: %v", err)
		}
		if cfg, err := c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "simple"}); err != nil || cfg.GetConfig().GetMaxBatchSize() != 16 {
			t.Fatalf("config after the override: %v %v", cfg, err)
		}
		if _, err := c.RepositoryModelUnload(ctx, &inference.RepositoryModelUnloadRequest{ModelName: "simple"}); err != nil || isReady() {
			t.Fatalf("unload: %v", err)
		}
		// A path component longer than NAME_MAX is refused; the server lives.
		err := load("simple", "{}", map[string][]byte{"file:" + strings.Repeat("A", 256): []byte("a")})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "Invalid file path") {
			t.Fatalf("load with an oversized file name: %v", err)
		}
		if r, err := c.ServerLive(ctx, &inference.ServerLiveRequest{}); err != nil || !r.GetLive() {
			t.Fatalf("server not live after the refused load: %v", err)
		}
		if err := load("wrong_model_name", "", nil); err == nil || !strings.Contains(err.Error(), "failed to load") {
			t.Fatalf("load of a wrong model name: %v", err)
		}
	})
}

// TestModelControlPollTwoExecutors: in poll mode each executor watches its
// own copy of the repository; the same change on both gives the same
// result on both.
func TestModelControlPollTwoExecutors(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	repos := []string{controlRepo(t), controlRepo(t)}
	for i, repo := range repos {
		id := fmt.Sprintf("poll%d", i)
		ex, err := executor.New(executor.Config{Conn: connect(t, ns, id), RepositoryPath: repo, ID: id, Logger: discardLogger(),
			ControlMode: executor.ControlPoll, PollInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ex.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	waitExecutors(t, g, 2)
	for _, repo := range repos {
		writeModel(t, repo, "added", identConfig, 1)
	}
	for _, id := range []string{"poll0", "poll1"} {
		waitFor(t, id+" serving the added model", 10*time.Second, func() bool { return servesReady(g, id, "added") })
	}
	for _, repo := range repos {
		if err := os.RemoveAll(filepath.Join(repo, "ident")); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"poll0", "poll1"} {
		waitFor(t, id+" unloading the removed model", 10*time.Second, func() bool { return !servesReady(g, id, "ident") })
	}
	checkModel(t, "http://"+g.HTTPAddr(), "added", "1", [4]int{6, 7, 8, 9})
}

// TestModelControlLoadTooLarge: files in a load request that do not fit in
// one bus message are refused with a limit the user can read, not the
// bus's own error naming an internal subject, and with Triton's statuses
// for a load too large for its transport: 400 over HTTP (INVALID_ARG, as
// Triton's check of the request JSON's size), RESOURCE_EXHAUSTED over
// gRPC (as its server's message size limit); the server keeps serving.
func TestModelControlLoadTooLarge(t *testing.T) {
	ns := startNATS(t) // max_payload 1 MiB, NATS's default
	g := startGateway(t, ns)
	repo := controlRepo(t)
	startExplicitExecutor(t, ns, "ex1", repo, "simple")
	waitModelReady(t, g, "simple")
	base := "http://" + g.HTTPAddr()

	big := base64.StdEncoding.EncodeToString(make([]byte, 2<<20))
	body := `{"parameters":{"config":"{\"backend\":\"identity\"}","file:1/weights.bin":"` + big + `"}}`
	r := post(t, base+"/v2/repository/models/huge/load", body)
	if r.status != 400 || !strings.Contains(string(r.body), "over the") || !strings.Contains(string(r.body), "max_payload") ||
		strings.Contains(string(r.body), "nereid.") {
		t.Fatalf("oversized load: %d %s, want 400 naming the limit and not a bus subject", r.status, r.body)
	}
	want := "failed to load 'huge': the files and configuration in the load request take "
	var e struct{ Error string }
	if err := json.Unmarshal(r.body, &e); err != nil || !strings.HasPrefix(e.Error, want) {
		t.Fatalf("oversized load over HTTP: %s, want an error starting %q", r.body, want)
	}
	c, _ := grpcClient(t, g)
	_, err := c.RepositoryModelLoad(context.Background(), &inference.RepositoryModelLoadRequest{
		ModelName: "huge",
		Parameters: map[string]*inference.ModelRepositoryParameter{
			"config":             {ParameterChoice: &inference.ModelRepositoryParameter_StringParam{StringParam: `{"backend":"identity"}`}},
			"file:1/weights.bin": {ParameterChoice: &inference.ModelRepositoryParameter_BytesParam{BytesParam: make([]byte, 2<<20)}},
		},
	})
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted || !strings.HasPrefix(s.Message(), want) ||
		!strings.Contains(s.Message(), "max_payload") {
		t.Fatalf("oversized load over gRPC: %v, want RESOURCE_EXHAUSTED %q…max_payload", err, want)
	}
	if !ready(t, base, "simple", "") {
		t.Fatal("simple not ready after the refused load")
	}
}

// TestModelControlNames: a load or unload of a model whose name is empty,
// only white space, or could reach outside the model repository is refused
// with Triton's messages over HTTP and gRPC, before anything reaches an
// executor.
func TestModelControlNames(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	repo := controlRepo(t)
	startExplicitExecutor(t, ns, "ex1", repo, "simple")
	waitModelReady(t, g, "simple")
	base := "http://" + g.HTTPAddr()
	c, _ := grpcClient(t, g)
	const (
		empty     = "Model name cannot be empty. Please enter a valid name to deploy."
		traversal = "model name must not contain path traversal characters"
	)
	for _, tc := range []struct {
		name, path string // path: the name as it goes in the URL
		want       string
	}{
		{"", "", empty},
		{"   ", "%20%20%20", empty},
		{"\t", "%09", empty},
		{"../simple", "..%2Fsimple", traversal},
		{"..", "%2E%2E", traversal},
		{"a..b", "a..b", traversal},
		{"a/b", "a%2Fb", traversal},
		{`a\b`, "a%5Cb", traversal},
	} {
		for _, action := range []string{"load", "unload"} {
			for _, url := range []string{base + "/v2/repository/models/" + tc.path + "/" + action,
				base + "/v2/repository/models-dir/models/" + tc.path + "/" + action} {
				r := post(t, url, "")
				if r.status != 400 || !strings.Contains(string(r.body), tc.want) {
					t.Errorf("HTTP %s of %q (%s): %d %s, want 400 %q", action, tc.name, url, r.status, r.body, tc.want)
				}
			}
		}
		_, err := c.RepositoryModelLoad(context.Background(), &inference.RepositoryModelLoadRequest{ModelName: tc.name})
		if s := status.Convert(err); s.Code() != codes.InvalidArgument || s.Message() != tc.want {
			t.Errorf("gRPC load of %q: %v, want INVALID_ARGUMENT %q", tc.name, err, tc.want)
		}
		_, err = c.RepositoryModelUnload(context.Background(), &inference.RepositoryModelUnloadRequest{ModelName: tc.name})
		if s := status.Convert(err); s.Code() != codes.InvalidArgument || s.Message() != tc.want {
			t.Errorf("gRPC unload of %q: %v, want INVALID_ARGUMENT %q", tc.name, err, tc.want)
		}
	}
	if !ready(t, base, "simple", "") {
		t.Fatal("simple not ready after the refused loads and unloads")
	}
}

// TestModelControlUnloadDependents: the repository API's unload_dependents
// reaches the executors over HTTP ({"parameters":{"unload_dependents":
// true}}) and gRPC (a bool parameter): the ensemble's composing model,
// loaded with it, is unloaded with it; without the parameter it stays.
func TestModelControlUnloadDependents(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	repo := controlRepo(t)
	writeModel(t, repo, "ens", `name: "ens"
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [ { model_name: "simple" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" } } ] }
`, 1)
	startExplicitExecutor(t, ns, "ex1", repo)
	waitExecutors(t, g, 1)
	base := "http://" + g.HTTPAddr()
	c, _ := grpcClient(t, g)
	ctx := context.Background()
	load := func() {
		t.Helper()
		if r := post(t, base+"/v2/repository/models/ens/load", ""); r.status != 200 {
			t.Fatalf("load ens: %d %s", r.status, r.body)
		}
		if !ready(t, base, "ens", "") || !ready(t, base, "simple", "") {
			t.Fatal("ens and simple not both ready after loading ens")
		}
	}

	load()
	if r := post(t, base+"/v2/repository/models/ens/unload", ""); r.status != 200 {
		t.Fatalf("unload ens: %d %s", r.status, r.body)
	}
	if ready(t, base, "ens", "") || !ready(t, base, "simple", "") {
		t.Fatal("HTTP unload without unload_dependents: want ens unloaded and simple still ready")
	}
	if r := post(t, base+"/v2/repository/models/simple/unload", ""); r.status != 200 {
		t.Fatalf("unload simple: %d %s", r.status, r.body)
	}

	load()
	if r := post(t, base+"/v2/repository/models/ens/unload", `{"parameters":{"unload_dependents":true}}`); r.status != 200 {
		t.Fatalf("unload ens with its dependents: %d %s", r.status, r.body)
	}
	if ready(t, base, "ens", "") || ready(t, base, "simple", "") {
		t.Fatal("HTTP unload with unload_dependents: want ens and simple unloaded")
	}

	load()
	dependents := map[string]*inference.ModelRepositoryParameter{
		"unload_dependents": {ParameterChoice: &inference.ModelRepositoryParameter_BoolParam{BoolParam: true}}}
	if _, err := c.RepositoryModelUnload(ctx, &inference.RepositoryModelUnloadRequest{ModelName: "ens", Parameters: dependents}); err != nil {
		t.Fatalf("gRPC unload ens with its dependents: %v", err)
	}
	if ready(t, base, "ens", "") || ready(t, base, "simple", "") {
		t.Fatal("gRPC unload with unload_dependents: want ens and simple unloaded")
	}
}
