package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
)

// pipeConfig is an ensemble of one step, ident_plain.
const pipeConfig = `platform: "ensemble"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "ident_plain" model_version: -1
  input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } } ] }
`

// twoGateways runs NATS, an executor serving cacheRepo's ident and
// ident_plain and the ensemble pipe, and two gateways with local response
// caches that know each other.
func twoGateways(t *testing.T) (*server.Server, *Gateway, *Gateway) {
	t.Helper()
	ns := startNATS(t)
	repo := cacheRepo(t)
	writeModel(t, repo, "pipe", pipeConfig, 1)
	startExplicitExecutor(t, ns, "ex1", repo, "ident", "ident_plain", "pipe")
	a := startGateway(t, ns, localCache(1<<20))
	b := startGateway(t, ns, localCache(1<<20))
	for _, g := range []*Gateway{a, b} {
		for _, m := range []string{"ident", "pipe"} {
			waitModelReady(t, g, m)
		}
	}
	knows := func(g, other *Gateway) bool {
		return slices.ContainsFunc(g.gateways.list(time.Now(), bus.HeartbeatExpiry), func(p *adminv1.Gateway) bool { return p.GetId() == other.id })
	}
	waitFor(t, "the gateways to know each other", 5*time.Second, func() bool { return knows(a, b) && knows(b, a) })
	return ns, a, b
}

// gatewayCounts are the statistics a test checks of one version.
type gatewayCounts struct {
	Success, CacheHit, CacheMiss, Queue, Inferences, Executions uint64
}

func countsOf(ms *inference.ModelStatistics) gatewayCounts {
	is := ms.GetInferenceStats()
	return gatewayCounts{
		Success: is.GetSuccess().GetCount(), CacheHit: is.GetCacheHit().GetCount(), CacheMiss: is.GetCacheMiss().GetCount(),
		Queue: is.GetQueue().GetCount(), Inferences: ms.GetInferenceCount(), Executions: ms.GetExecutionCount(),
	}
}

// httpCounts reads the statistics of the models over HTTP, by name (one
// request per model) and in the answer without a name.
func httpCounts(t *testing.T, g *Gateway, models ...string) (byName, all map[string]gatewayCounts) {
	t.Helper()
	read := func(path string) map[string]gatewayCounts {
		r := do(t, "GET", "http://"+g.HTTPAddr()+path, nil, nil)
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		var s struct {
			ModelStats []struct {
				Name           string `json:"name"`
				InferenceCount uint64 `json:"inference_count"`
				ExecutionCount uint64 `json:"execution_count"`
				InferenceStats map[string]struct {
					Count uint64 `json:"count"`
				} `json:"inference_stats"`
			} `json:"model_stats"`
		}
		if err := json.Unmarshal(r.body, &s); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, r.body)
		}
		out := map[string]gatewayCounts{}
		for _, ms := range s.ModelStats {
			is := ms.InferenceStats
			out[ms.Name] = gatewayCounts{Success: is["success"].Count, CacheHit: is["cache_hit"].Count, CacheMiss: is["cache_miss"].Count,
				Queue: is["queue"].Count, Inferences: ms.InferenceCount, Executions: ms.ExecutionCount}
		}
		return out
	}
	byName = map[string]gatewayCounts{}
	for _, m := range models {
		byName[m] = read("/v2/models/" + m + "/versions/1/stats")[m]
	}
	return byName, read("/v2/models/stats")
}

// grpcCounts reads the statistics of the models over gRPC, as httpCounts.
func grpcCounts(t *testing.T, g *Gateway, models ...string) (byName, all map[string]gatewayCounts) {
	t.Helper()
	client, _ := grpcClient(t, g)
	read := func(name string) map[string]gatewayCounts {
		resp, err := client.ModelStatistics(context.Background(), &inference.ModelStatisticsRequest{Name: name})
		if err != nil {
			t.Fatalf("ModelStatistics(%q): %v", name, err)
		}
		out := map[string]gatewayCounts{}
		for _, ms := range resp.GetModelStats() {
			out[ms.GetName()] = countsOf(ms)
		}
		return out
	}
	byName = map[string]gatewayCounts{}
	for _, m := range models {
		byName[m] = read(m)[m]
	}
	return byName, read("")
}

// TestStatisticsSummedOverGateways: the parts of the statistics only
// gateways keep (response cache hits and misses, ensemble requests) are
// the constellation's, counted once per gateway, whichever gateway is
// asked, over HTTP and gRPC, by name or without, and on
// /metrics/constellation; each gateway's /metrics keeps its own cache
// counts.
func TestStatisticsSummedOverGateways(t *testing.T) {
	_, a, b := twoGateways(t)
	body := inferJSON("ident", "INT32", []int{4}, []int{1, 2, 3, 4}, "")
	infer := func(g *Gateway, model string) {
		t.Helper()
		if r := post(t, "http://"+g.HTTPAddr()+"/v2/models/"+model+"/infer", body); r.status != 200 {
			t.Fatalf("%s at %s: %d %s", model, g.HTTPAddr(), r.status, r.body)
		}
	}
	// Gateway A: a miss, then three hits, and two ensemble requests;
	// gateway B (its own local cache): a miss, a hit, one ensemble request.
	infer(a, "ident")
	stored(t, a, 1)
	for range 3 {
		infer(a, "ident")
	}
	infer(b, "ident")
	stored(t, b, 1)
	infer(b, "ident")
	for range 2 {
		infer(a, "pipe")
	}
	infer(b, "pipe")

	want := map[string]gatewayCounts{
		// Two misses ran on the executor; every request succeeded.
		"ident": {Success: 6, CacheHit: 4, CacheMiss: 2, Queue: 6, Inferences: 2, Executions: 2},
		"pipe":  {Success: 3, Queue: 3, Inferences: 3, Executions: 3},
	}
	for _, g := range []struct {
		name string
		g    *Gateway
	}{{"A", a}, {"B", b}} {
		for proto, read := range map[string]func(*testing.T, *Gateway, ...string) (map[string]gatewayCounts, map[string]gatewayCounts){
			"HTTP": httpCounts, "gRPC": grpcCounts,
		} {
			byName, all := read(t, g.g, "ident", "pipe")
			for m, w := range want {
				if byName[m] != w {
					t.Errorf("%s of %s, by name, asked of gateway %s: %+v, want %+v", proto, m, g.name, byName[m], w)
				}
				if all[m] != w {
					t.Errorf("%s of %s, every model, asked of gateway %s: %+v, want %+v", proto, m, g.name, all[m], w)
				}
			}
		}
		// The summed metrics page: the same totals.
		cons := "http://" + g.g.MetricsAddr() + "/metrics/constellation"
		if v := metricValue(t, cons, `nv_inference_request_success{model="ident",version="1"}`); v != 6 {
			t.Errorf("gateway %s's /metrics/constellation: ident successes %v, want 6", g.name, v)
		}
		if v := metricValue(t, cons, `nv_inference_request_success{model="pipe",version="1"}`); v != 3 {
			t.Errorf("gateway %s's /metrics/constellation: pipe successes %v, want 3", g.name, v)
		}
	}
	// /metrics stays each gateway's own, as Prometheus scrapes every one.
	for _, c := range []struct {
		g          *Gateway
		hits, miss float64
	}{{a, 3, 1}, {b, 1, 1}} {
		own := "http://" + c.g.MetricsAddr() + "/metrics"
		if h, m := metricValue(t, own, `nv_cache_num_hits_per_model{model="ident",version="1"}`),
			metricValue(t, own, `nv_cache_num_misses_per_model{model="ident",version="1"}`); h != c.hits || m != c.miss {
			t.Errorf("/metrics of %s: %v hits, %v misses, want %v and %v", c.g.HTTPAddr(), h, m, c.hits, c.miss)
		}
	}
}

// TestStatisticsGatewaySilent: a gateway that announces itself and does
// not answer fails no statistics request: after statsTimeout the answer
// has the parts that came.
func TestStatisticsGatewaySilent(t *testing.T) {
	ns, g, base := cacheSetup(t, localCache(1<<20))
	body := inferJSON("ident", "INT32", []int{4}, []int{1, 2, 3, 4}, "")
	for range 2 {
		if r := post(t, base+"/v2/models/ident/infer", body); r.status != 200 {
			t.Fatal(r.status, string(r.body))
		}
		stored(t, g, 1)
	}
	bc, err := bus.New(connect(t, ns, "silent-gateway"))
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Publish(bus.GatewayPresenceSubject, &adminv1.Gateway{Id: "silent"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the silent gateway to be known", 5*time.Second, func() bool {
		return slices.ContainsFunc(g.gateways.list(time.Now(), bus.HeartbeatExpiry), func(p *adminv1.Gateway) bool { return p.GetId() == "silent" })
	})
	start := time.Now()
	byName, _ := httpCounts(t, g, "ident")
	if got, want := byName["ident"], (gatewayCounts{Success: 2, CacheHit: 1, CacheMiss: 1, Queue: 2, Inferences: 1, Executions: 1}); got != want {
		t.Errorf("ident: %+v, want %+v", got, want)
	}
	if d := time.Since(start); d < statsTimeout {
		t.Errorf("answered in %v: the silent gateway was not waited for", d)
	}
}

// TestStatisticsGatewayGone: a gateway that shut down (and withdrew) is
// not waited for, and what it counted goes with it.
func TestStatisticsGatewayGone(t *testing.T) {
	ns, a, _ := cacheSetup(t, localCache(1<<20))
	b, err := New(Config{Conn: connect(t, ns, "gateway-b"), HTTPAddr: "127.0.0.1:0", Version: "test", Logger: discardLogger(),
		ResponseCache: a.cfg.ResponseCache})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("gateway B: %v", err)
			}
		}
	}
	defer stop()
	<-b.Ready()
	waitModelReady(t, b, "ident")
	waitFor(t, "gateway B to be known", 5*time.Second, func() bool {
		return slices.ContainsFunc(a.gateways.list(time.Now(), bus.HeartbeatExpiry), func(p *adminv1.Gateway) bool { return p.GetId() == b.id })
	})
	body := inferJSON("ident", "INT32", []int{4}, []int{1, 2, 3, 4}, "")
	for range 2 {
		if r := post(t, "http://"+b.HTTPAddr()+"/v2/models/ident/infer", body); r.status != 200 {
			t.Fatal(r.status, string(r.body))
		}
		stored(t, b, 1)
	}
	if byName, _ := httpCounts(t, a, "ident"); byName["ident"].CacheHit != 1 {
		t.Fatalf("B's hit not in A's statistics: %+v", byName["ident"])
	}
	stop()
	start := time.Now()
	byName, _ := httpCounts(t, a, "ident")
	if byName["ident"].CacheHit != 0 {
		t.Errorf("A still counts B's hit: %+v", byName["ident"])
	}
	if d := time.Since(start); d > statsTimeout/2 {
		t.Errorf("answered in %v: the gateway gone was waited for", d)
	}
}
