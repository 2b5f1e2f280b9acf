package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/respcache"
)

const cacheOn = "response_cache { enable: true }\n"

// cacheRepo is a repository of identity models with the response cache
// on ("ident", "classify": FP32 with labels), one without it
// ("ident_plain"), and two the cache refuses, as Triton does
// ("dec_cached": decoupled, "seq_cached": a sequence batcher).
func cacheRepo(t testing.TB) string {
	t.Helper()
	repo := t.TempDir()
	writeModel(t, repo, "ident", identConfig+cacheOn, 1)
	writeModel(t, repo, "ident_plain", identConfig, 1)
	writeModel(t, repo, "classify", `backend: "identity"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
`+cacheOn, 1)
	if err := os.WriteFile(filepath.Join(repo, "classify", "labels.txt"), []byte("a\nb\nc\nd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeModel(t, repo, "dec_cached", identConfig+"model_transaction_policy { decoupled: true }\n"+cacheOn, 1)
	writeModel(t, repo, "seq_cached", `backend: "identity"
max_batch_size: 1
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] } ]
sequence_batching { }
`+cacheOn, 1)
	return repo
}

func localCache(size int64) func(*Config) {
	return func(c *Config) { c.ResponseCache = respcache.Config{Kind: respcache.KindLocal, Size: size} }
}

// cacheSetup runs NATS, an explicit-mode executor over cacheRepo with the
// models loaded, and a gateway with cfg's cache.
func cacheSetup(t *testing.T, mutate ...func(*Config)) (*server.Server, *Gateway, string) {
	ns := startNATS(t)
	repo := cacheRepo(t)
	startExplicitExecutor(t, ns, "ex1", repo, "ident", "ident_plain", "classify")
	g := startGateway(t, ns, mutate...)
	for _, m := range []string{"ident", "ident_plain", "classify"} {
		waitModelReady(t, g, m)
	}
	return ns, g, "http://" + g.HTTPAddr()
}

// executions is the model's execution_count in the statistics extension.
func executions(t testing.TB, base, model string) int {
	t.Helper()
	var s struct {
		ModelStats []struct {
			ExecutionCount int `json:"execution_count"`
			InferenceCount int `json:"inference_count"`
		} `json:"model_stats"`
	}
	r := do(t, "GET", base+"/v2/models/"+model+"/stats", nil, nil)
	if r.status != 200 || json.Unmarshal(r.body, &s) != nil || len(s.ModelStats) != 1 {
		t.Fatalf("stats of %s: %d %s", model, r.status, r.body)
	}
	return s.ModelStats[0].ExecutionCount
}

// stored waits until the gateway's cache holds n entries.
func stored(t testing.TB, g *Gateway, n int) {
	t.Helper()
	waitFor(t, fmt.Sprint(n, " cached entries"), 5*time.Second, func() bool { e, _ := g.cache.Local(); return e >= n })
}

func inferJSON(model string, datatype string, shape []int, vals []int, extra string) string {
	d, _ := json.Marshal(vals)
	s, _ := json.Marshal(shape)
	return `{"inputs":[{"name":"IN","datatype":"` + datatype + `","shape":` + string(s) + `,"data":` + string(d) + `}]` + extra + `}`
}

func int32Raw(vals ...int) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

func TestResponseCacheHit(t *testing.T) {
	_, g, base := cacheSetup(t, localCache(1<<20))
	url := base + "/v2/models/ident/infer"
	body := inferJSON("ident", "INT32", []int{4}, []int{1, 2, 3, 4}, `,"id":"first"`)
	r := post(t, url, body)
	if r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	first := r.body
	if n := executions(t, base, "ident"); n != 1 {
		t.Fatalf("execution_count %d after the first request", n)
	}
	stored(t, g, 1)

	// HTTP, JSON: the same answer, the executor not asked.
	r = post(t, url, body)
	if r.status != 200 {
		t.Fatalf("JSON hit: %d %s", r.status, r.body)
	}
	jsonEqual(t, r.body, string(first))
	// HTTP, binary output, another id.
	r = post(t, url, inferJSON("ident", "INT32", []int{4}, []int{1, 2, 3, 4}, `,"id":"bin","parameters":{"binary_data_output":true}`))
	if r.status != 200 || !bytes.Contains(r.body, int32Raw(1, 2, 3, 4)) || !bytes.Contains(r.body, []byte(`"id":"bin"`)) {
		t.Fatalf("binary hit: %d %q", r.status, r.body)
	}
	// HTTP, binary input.
	hdr := `{"inputs":[{"name":"IN","datatype":"INT32","shape":[4],"parameters":{"binary_data_size":16}}]}`
	rb := do(t, "POST", url, append([]byte(hdr), int32Raw(1, 2, 3, 4)...), map[string]string{"Inference-Header-Content-Length": strconv.Itoa(len(hdr))})
	if rb.status != 200 {
		t.Fatalf("binary input hit: %d %s", rb.status, rb.body)
	}
	// gRPC, with and without an id.
	client, _ := grpcClient(t, g)
	for _, id := range []string{"", "grpc-id"} {
		resp, err := client.ModelInfer(context.Background(), &inference.ModelInferRequest{ModelName: "ident", Id: id,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{4}}},
			RawInputContents: [][]byte{int32Raw(1, 2, 3, 4)}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Id != id || resp.ModelName != "ident" || resp.ModelVersion != "1" || !bytes.Equal(resp.RawOutputContents[0], int32Raw(1, 2, 3, 4)) {
			t.Fatalf("gRPC hit: %v", resp)
		}
	}
	// gRPC with typed contents: the same key as raw bytes.
	if _, err := client.ModelInfer(context.Background(), &inference.ModelInferRequest{ModelName: "ident",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{4},
			Contents: &inference.InferTensorContents{IntContents: []int32{1, 2, 3, 4}}}}}); err != nil {
		t.Fatal(err)
	}
	if n := executions(t, base, "ident"); n != 1 {
		t.Fatalf("execution_count %d: a hit reached the executor", n)
	}

	// Statistics as Triton fills them: 6 hits and 1 miss; inference and
	// execution counts exclude hits, success includes them.
	var s struct {
		ModelStats []struct {
			InferenceCount int `json:"inference_count"`
			InferenceStats map[string]struct {
				Count int   `json:"count"`
				Ns    int64 `json:"ns"`
			} `json:"inference_stats"`
		} `json:"model_stats"`
	}
	st := do(t, "GET", base+"/v2/models/ident/versions/1/stats", nil, nil)
	if err := json.Unmarshal(st.body, &s); err != nil {
		t.Fatal(err)
	}
	is := s.ModelStats[0].InferenceStats
	if s.ModelStats[0].InferenceCount != 1 || is["cache_hit"].Count != 6 || is["cache_hit"].Ns <= 0 ||
		is["cache_miss"].Count != 1 || is["cache_miss"].Ns <= 0 || is["success"].Count != 7 {
		t.Fatalf("statistics: %s", st.body)
	}
	// Triton's metrics.
	m := do(t, "GET", "http://"+g.MetricsAddr()+"/metrics", nil, nil)
	for _, want := range []string{
		`nv_cache_num_hits_per_model{model="ident",version="1"} 6`,
		`nv_cache_num_misses_per_model{model="ident",version="1"} 1`,
		`# HELP nv_cache_hit_duration_per_model Total cache hit duration per model, in microseconds`,
		`# HELP nv_cache_miss_duration_per_model Total cache miss (insert+lookup) duration per model, in microseconds`,
	} {
		if !strings.Contains(string(m.body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// A model without response_cache is never cached.
	for range 2 {
		if r := post(t, base+"/v2/models/ident_plain/infer", body); r.status != 200 {
			t.Fatal(r.status)
		}
	}
	if n := executions(t, base, "ident_plain"); n != 2 {
		t.Fatalf("ident_plain executed %d times, want 2", n)
	}
}

func TestResponseCacheKeyMisses(t *testing.T) {
	_, g, base := cacheSetup(t, localCache(1<<20))
	url := base + "/v2/models/ident/infer"
	base4 := inferJSON("ident", "INT32", []int{4}, []int{1, 2, 3, 4}, "")
	if r := post(t, url, base4); r.status != 200 {
		t.Fatal(r.status, string(r.body))
	}
	stored(t, g, 1)
	cases := []struct {
		name, body string
		status     int
	}{
		// Triton's key has neither shape nor datatype: these would hit.
		{"another shape", inferJSON("ident", "INT32", []int{1, 4}, []int{1, 2, 3, 4}, ""), 400},
		{"another datatype", inferJSON("ident", "UINT32", []int{4}, []int{1, 2, 3, 4}, ""), 400},
		{"an output requested", inferJSON("ident", "INT32", []int{4}, []int{1, 2, 3, 4}, `,"outputs":[{"name":"OUT"}]`), 200},
		{"a parameter for the backend", inferJSON("ident", "INT32", []int{4}, []int{1, 2, 3, 4}, `,"parameters":{"scale":2}`), 200},
	}
	want := executions(t, base, "ident")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, url, tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d %s", r.status, r.body)
			}
			if tc.status == 200 {
				want++
				if n := executions(t, base, "ident"); n != want {
					t.Fatalf("execution_count %d, want %d: answered from the cache", n, want)
				}
			}
		})
	}
	// Classification: top-1 and top-2 are different answers.
	curl := base + "/v2/models/classify/infer"
	in := `{"inputs":[{"name":"IN","datatype":"FP32","shape":[4],"data":[0.1,0.9,0.3,0.2]}],"outputs":[{"name":"OUT","parameters":{"classification":%d}}]}`
	r1 := post(t, curl, fmt.Sprintf(in, 1))
	stored(t, g, 4)
	r2 := post(t, curl, fmt.Sprintf(in, 2))
	if r1.status != 200 || r2.status != 200 || bytes.Equal(r1.body, r2.body) {
		t.Fatalf("classification 1 and 2: %s / %s", r1.body, r2.body)
	}
	if n := executions(t, base, "classify"); n != 2 {
		t.Fatalf("classify executed %d times, want 2", n)
	}
}

func TestResponseCacheEvictsLRU(t *testing.T) {
	// Room for two entries of the ident model's response.
	_, g, base := cacheSetup(t, localCache(2*respcache.Cost(64)+respcache.Cost(64)/2))
	url := base + "/v2/models/ident/infer"
	req := func(v int) {
		t.Helper()
		if r := post(t, url, inferJSON("ident", "INT32", []int{4}, []int{v, v, v, v}, "")); r.status != 200 {
			t.Fatal(r.status, string(r.body))
		}
	}
	req(1)
	stored(t, g, 1)
	req(2)
	stored(t, g, 2)
	req(1) // a hit: 1 is now the most recently used
	if n := executions(t, base, "ident"); n != 2 {
		t.Fatalf("execution_count %d, want 2", n)
	}
	req(3) // evicts 2
	waitFor(t, "an eviction", 5*time.Second, func() bool { return g.cache.Counts().Evicted.Load() == 1 })
	if e, used := g.cache.Local(); e != 2 || used > g.cfg.ResponseCache.Size {
		t.Fatalf("%d entries, %d bytes", e, used)
	}
	req(1) // still cached
	if n := executions(t, base, "ident"); n != 3 {
		t.Fatalf("execution_count %d, want 3: 1 was evicted", n)
	}
	req(2) // evicted: runs again
	if n := executions(t, base, "ident"); n != 4 {
		t.Fatalf("execution_count %d, want 4: 2 was not evicted", n)
	}
}

// TestResponseCacheReloadInvalidates: a reload through one gateway drops
// the model's entries from every gateway's local cache.
func TestResponseCacheReloadInvalidates(t *testing.T) {
	ns, g, base := cacheSetup(t, localCache(1<<20))
	g2 := startGateway(t, ns, localCache(1<<20))
	waitModelReady(t, g2, "ident")
	body := inferJSON("ident", "INT32", []int{4}, []int{5, 6, 7, 8}, "")
	for _, gw := range []*Gateway{g, g2} {
		for range 2 {
			if r := post(t, "http://"+gw.HTTPAddr()+"/v2/models/ident/infer", body); r.status != 200 {
				t.Fatal(r.status)
			}
			stored(t, gw, 1) // stores are written after the response has gone
		}
	}
	if n := executions(t, base, "ident"); n != 2 {
		t.Fatalf("execution_count %d, want 2 (one miss per gateway)", n)
	}
	if r := post(t, base+"/v2/repository/models/ident/load", ""); r.status != 200 {
		t.Fatalf("reload: %d %s", r.status, r.body)
	}
	waitFor(t, "the other gateway to drop its entries", 5*time.Second, func() bool { e, _ := g2.cache.Local(); return e == 0 })
	// The reload reset the model's statistics (a new instance): count anew.
	before := executions(t, base, "ident")
	for _, gw := range []*Gateway{g, g2} {
		if r := post(t, "http://"+gw.HTTPAddr()+"/v2/models/ident/infer", body); r.status != 200 {
			t.Fatal(r.status)
		}
	}
	if n := executions(t, base, "ident"); n != before+2 {
		t.Fatalf("execution_count %d, want %d: a gateway answered from before the reload", n, before+2)
	}
}

// TestResponseCacheRefused: decoupled and sequence models with the cache
// on fail to load with Triton's messages.
func TestResponseCacheRefused(t *testing.T) {
	_, _, base := cacheSetup(t, localCache(1<<20))
	for model, want := range map[string]string{
		"dec_cached": "Response Cache does not currently support model dec_cached with 'decoupled' transaction policy. Please disable the response cache.",
		"seq_cached": "Response Cache does not currently support model seq_cached with sequence batching scheduler. Please disable the response cache.",
	} {
		r := post(t, base+"/v2/repository/models/"+model+"/load", "")
		if r.status != 400 || !strings.Contains(string(r.body), want) {
			t.Errorf("%s: %d %s", model, r.status, r.body)
		}
	}
}

// metricValue reads one sample of a metrics page.
func metricValue(t testing.TB, url, sample string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(regexp.QuoteMeta(sample) + ` (\S+)`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}
