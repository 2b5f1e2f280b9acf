package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
)

// ensembleIO is the inputs and outputs of Triton's simple and of the
// ensembles over it here.
const ensembleIO = `platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
`

// ensembleOver is an ensemble named name whose one step is model (the
// tensors of simple), with extra in its configuration.
func ensembleOver(name, model, extra string) string {
	return `name: "` + name + `"
` + ensembleIO + extra + `ensemble_scheduling { step [ { model_name: "` + model + `" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" } } ] }
`
}

// ensembleCacheRepo is a repository with Triton's simple (add and
// subtract, a Go backend), "simple_cached": an ensemble over it with the
// response cache on, which runs whole on the executor serving simple;
// "outer_cached": one with the cache on over "inner" (an ensemble over
// simple without it), which runs from the gateway, its step being an
// ensemble; and two the cache refuses, as Triton refuses a decoupled
// model with it: "dec_cached_ensemble" (configured decoupled) and
// "square_cached" (decoupled through its step, square_int32).
func ensembleCacheRepo(t *testing.T) string {
	t.Helper()
	repo := t.TempDir()
	for _, m := range []string{"simple", "square_int32"} {
		cfg, err := os.ReadFile(filepath.Join(repository, m, "config.pbtxt"))
		if err != nil {
			t.Fatal(err)
		}
		writeModel(t, repo, m, string(cfg), 1)
	}
	writeModel(t, repo, "simple_cached", ensembleOver("simple_cached", "simple", cacheOn), 1)
	writeModel(t, repo, "inner", ensembleOver("inner", "simple", ""), 1)
	writeModel(t, repo, "outer_cached", ensembleOver("outer_cached", "inner", cacheOn), 1)
	writeModel(t, repo, "dec_cached_ensemble", ensembleOver("dec_cached_ensemble", "simple", "model_transaction_policy { decoupled: true }\n"+cacheOn), 1)
	writeModel(t, repo, "square_cached", `name: "square_cached"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
`+cacheOn+`ensemble_scheduling { step [ { model_name: "square_int32" model_version: -1
  input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } } ] }
`, 1)
	return repo
}

// cachedModelStats is what the statistics extension says of a model.
type cachedModelStats struct {
	InferenceCount int `json:"inference_count"`
	ExecutionCount int `json:"execution_count"`
	InferenceStats map[string]struct {
		Count int   `json:"count"`
		Ns    int64 `json:"ns"`
	} `json:"inference_stats"`
}

func modelStatistics(t testing.TB, base, model string) cachedModelStats {
	t.Helper()
	var s struct {
		ModelStats []cachedModelStats `json:"model_stats"`
	}
	r := do(t, "GET", base+"/v2/models/"+model+"/stats", nil, nil)
	if r.status != 200 || json.Unmarshal(r.body, &s) != nil || len(s.ModelStats) != 1 {
		t.Fatalf("stats of %s: %d %s", model, r.status, r.body)
	}
	return s.ModelStats[0]
}

// busWatch counts the inference requests on the bus: to the models
// watched, and to the executor's whole-ensemble subject.
type busWatch struct {
	nc   *nats.Conn
	subs []*nats.Subscription
}

func watchBus(t *testing.T, ns *server.Server, executor string, models ...string) *busWatch {
	t.Helper()
	w := &busWatch{nc: connect(t, ns, "watch")}
	subjects := []string{bus.ExecutorEnsembleSubject(executor)}
	for _, m := range models {
		subjects = append(subjects, bus.InferSubject(m, "1"), bus.InferSubject(m, "1")+".>")
	}
	for _, s := range subjects {
		// Synchronous: a message is pending as soon as the connection
		// has read it, so a flush makes the count exact.
		sub, err := w.nc.SubscribeSync(s)
		if err != nil {
			t.Fatal(err)
		}
		w.subs = append(w.subs, sub)
	}
	if err := w.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

// seen is the number of requests the bus carried so far: a request
// answered has reached the server, which delivers it to this connection
// before the answer to the flush's ping.
func (w *busWatch) seen(t *testing.T) int {
	t.Helper()
	if err := w.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range w.subs {
		p, _, err := s.Pending()
		if err != nil {
			t.Fatal(err)
		}
		n += p
	}
	return n
}

// TestResponseCacheEnsemble: an ensemble whose configuration enables
// response_cache is cached at the ensemble level, whichever way it runs
// (whole on one executor; from the gateway, its step a nested ensemble).
// The second identical request, over HTTP and gRPC, is a hit: it puts no
// request on the bus, simple's execution count does not move, and the
// ensemble counts it once as a success with cache_hit and no execution.
// A different input misses. A reload of simple through the repository
// API invalidates the ensembles over it, in this gateway and in another
// one's local cache: the next request is a miss.
func TestResponseCacheEnsemble(t *testing.T) {
	in0 := seq(16, func(i int) int { return i })
	in1 := seq(16, func(int) int { return 1 })
	sum := seq(16, func(i int) int { return i + 1 })
	diff := seq(16, func(i int) int { return i - 1 })
	request := func(id string, a, b []int) string {
		return `{"id":"` + id + `","inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":` + intsJSON(a) +
			`},{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":` + intsJSON(b) + `}]}`
	}
	for _, tc := range []struct {
		name, model string
		inner       string // the uncached ensemble the model's step is, if any
	}{
		{"whole on the executor", "simple_cached", ""},
		{"from the gateway", "outer_cached", "inner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := startNATS(t)
			startExplicitExecutor(t, ns, "ex1", ensembleCacheRepo(t), tc.model)
			g := startGateway(t, ns, localCache(1<<20))
			g2 := startGateway(t, ns, localCache(1<<20))
			for _, gw := range []*Gateway{g, g2} {
				waitModelReady(t, gw, tc.model)
			}
			base := "http://" + g.HTTPAddr()
			url := base + "/v2/models/" + tc.model + "/infer"
			watched := []string{"simple", tc.model}
			if tc.inner != "" {
				watched = append(watched, tc.inner)
			}
			w := watchBus(t, ns, "ex1", watched...)

			// A miss runs the steps and stores the final response.
			first := post(t, url, request("first", in0, in1))
			if first.status != 200 {
				t.Fatalf("miss: %d %s", first.status, first.body)
			}
			want := `{"id":"first","model_name":"` + tc.model + `","model_version":"1","outputs":[` +
				`{"name":"OUTPUT0","datatype":"INT32","shape":[1,16],"data":` + intsJSON(sum) + `},` +
				`{"name":"OUTPUT1","datatype":"INT32","shape":[1,16],"data":` + intsJSON(diff) + `}]}`
			jsonEqual(t, first.body, want)
			if n := w.seen(t); n == 0 {
				t.Fatal("the miss put no request on the bus")
			}
			if n := executions(t, base, "simple"); n != 1 {
				t.Fatalf("simple executed %d times on the miss, want 1", n)
			}
			stored(t, g, 1)

			// Hits, over HTTP and gRPC: nothing on the bus, no step.
			sent := w.seen(t)
			hit := post(t, url, request("first", in0, in1))
			if hit.status != 200 {
				t.Fatalf("HTTP hit: %d %s", hit.status, hit.body)
			}
			jsonEqual(t, hit.body, want)
			client, _ := grpcClient(t, g)
			resp, err := client.ModelInfer(context.Background(), &inference.ModelInferRequest{ModelName: tc.model, Id: "grpc",
				Inputs: []*inference.ModelInferRequest_InferInputTensor{
					{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
					{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}}},
				RawInputContents: [][]byte{int32Raw(in0...), int32Raw(in1...)}})
			if err != nil {
				t.Fatalf("gRPC hit: %v", err)
			}
			if resp.Id != "grpc" || resp.ModelName != tc.model || resp.ModelVersion != "1" || len(resp.RawOutputContents) != 2 ||
				!bytes.Equal(resp.RawOutputContents[0], int32Raw(sum...)) || !bytes.Equal(resp.RawOutputContents[1], int32Raw(diff...)) {
				t.Fatalf("gRPC hit: %v", resp)
			}
			if n := w.seen(t) - sent; n != 0 {
				t.Fatalf("the hits put %d requests on the bus", n)
			}
			if n := executions(t, base, "simple"); n != 1 {
				t.Fatalf("simple executed %d times, want 1: a hit ran the steps", n)
			}
			// Triton's figures of a hit: a success with cache_hit, no
			// inference or execution; the miss counted its lookup and
			// insertion.
			s := modelStatistics(t, base, tc.model)
			is := s.InferenceStats
			if is["success"].Count != 3 || is["cache_hit"].Count != 2 || is["cache_hit"].Ns <= 0 ||
				is["cache_miss"].Count != 1 || is["cache_miss"].Ns <= 0 || s.ExecutionCount != 1 || s.InferenceCount != 1 {
				t.Fatalf("%s statistics after a miss and two hits: %+v", tc.model, s)
			}
			if tc.inner != "" {
				if s := modelStatistics(t, base, tc.inner); s.InferenceStats["success"].Count != 1 || s.ExecutionCount != 1 {
					t.Fatalf("%s ran %d times, want 1 (the miss's step)", tc.inner, s.InferenceStats["success"].Count)
				}
			}

			// Another input misses.
			if r := post(t, url, request("other", in1, in0)); r.status != 200 {
				t.Fatalf("other input: %d %s", r.status, r.body)
			}
			if n := executions(t, base, "simple"); n != 2 {
				t.Fatalf("simple executed %d times, want 2: another input was answered from the cache", n)
			}
			stored(t, g, 2)

			// The other gateway caches it too, then a reload of simple
			// through this one drops the ensemble's entries from both.
			if r := post(t, "http://"+g2.HTTPAddr()+"/v2/models/"+tc.model+"/infer", request("g2", in0, in1)); r.status != 200 {
				t.Fatalf("second gateway: %d %s", r.status, r.body)
			}
			stored(t, g2, 1)
			if r := post(t, base+"/v2/repository/models/simple/load", ""); r.status != 200 {
				t.Fatalf("reload of simple: %d %s", r.status, r.body)
			}
			waitModelReady(t, g, tc.model)
			if e, _ := g.cache.Local(); e != 0 {
				t.Fatalf("%d entries left after the reload of simple", e)
			}
			waitFor(t, "the other gateway to drop the ensemble's entries", 5*time.Second, func() bool { e, _ := g2.cache.Local(); return e == 0 })
			before := executions(t, base, "simple") // the reload made a new instance: count anew
			misses := modelStatistics(t, base, tc.model).InferenceStats["cache_miss"].Count
			sent = w.seen(t)
			r := post(t, url, request("first", in0, in1))
			if r.status != 200 {
				t.Fatalf("after the reload: %d %s", r.status, r.body)
			}
			jsonEqual(t, r.body, want)
			if n := w.seen(t) - sent; n == 0 {
				t.Fatal("answered from the cache after simple was reloaded")
			}
			if n := executions(t, base, "simple"); n != before+1 {
				t.Fatalf("simple executed %d times after the reload, want %d", n, before+1)
			}
			if m := modelStatistics(t, base, tc.model).InferenceStats["cache_miss"].Count; m != misses+1 {
				t.Fatalf("cache_miss %d after the reload, want %d", m, misses+1)
			}
		})
	}
}

// TestResponseCacheEnsembleRefused: an ensemble with the response cache
// loads unless it is decoupled, configured so or through a decoupled
// step; then it is refused as Triton refuses a decoupled model with the
// cache.
func TestResponseCacheEnsembleRefused(t *testing.T) {
	ns := startNATS(t)
	startExplicitExecutor(t, ns, "ex1", ensembleCacheRepo(t), "simple_cached")
	g := startGateway(t, ns, localCache(1<<20))
	waitModelReady(t, g, "simple_cached")
	base := "http://" + g.HTTPAddr()
	for model, want := range map[string]string{
		"dec_cached_ensemble": "Response Cache does not currently support model dec_cached_ensemble with 'decoupled' transaction policy. Please disable the response cache.",
		"square_cached":       "Response Cache does not currently support model square_cached with 'decoupled' transaction policy. Please disable the response cache.",
	} {
		r := post(t, base+"/v2/repository/models/"+model+"/load", "")
		if r.status != 400 || !strings.Contains(string(r.body), want) {
			t.Errorf("%s: %d %s, want 400 with %q", model, r.status, r.body, want)
		}
	}
	if r := post(t, base+"/v2/repository/models/outer_cached/load", ""); r.status != 200 {
		t.Errorf("outer_cached: %d %s", r.status, r.body)
	}
}
