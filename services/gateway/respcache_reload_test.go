package gateway

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/nereid-io/nereid/services/executor"
)

// Reloads an executor makes by itself (poll mode, a restart under the same
// id) invalidate the response cache as the repository API's do; scaling
// out or in does not.

// repeatConfig is an identity model with the response cache on whose
// output is its input repeated n times (output_repeat): its answer to
// one request tells which configuration it was loaded from.
func repeatConfig(n int) string {
	return fmt.Sprintf(`backend: "identity"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
parameters { key: "output_repeat" value { string_value: "%d" } }
`, n) + cacheOn
}

// startPollingExecutor runs a real executor in poll mode over repo,
// rescanning it every 50 ms.
func startPollingExecutor(t testing.TB, ns *server.Server, id, repo string) *runningExecutor {
	t.Helper()
	return runExecutorWith(t, ns, executor.Config{RepositoryPath: repo, ID: id, ControlMode: executor.ControlPoll, PollInterval: 50 * time.Millisecond})
}

// expectRepeat asks g for "rep" with the input [1 2] and checks that the
// answer is the input repeated n times, and that the cache answered it
// (hit) or not.
func expectRepeat(t *testing.T, g *Gateway, n int, hit bool) {
	t.Helper()
	if got := askRepeat(t, g, n); got != hit {
		t.Fatalf("a hit: %v, want %v", got, hit)
	}
}

// askRepeat asks g for "rep" with the input [1 2], checks that the answer
// is the input repeated n times, and reports whether the cache answered
// it. It returns once the response is stored.
func askRepeat(t *testing.T, g *Gateway, n int) (hit bool) {
	t.Helper()
	s := g.cache.Stats("rep", "1")
	hits, misses := s.Hits.Load(), s.Misses.Load()
	r := post(t, "http://"+g.HTTPAddr()+"/v2/models/rep/infer", inferJSON("rep", "INT32", []int{2}, []int{1, 2}, ""))
	if r.status != 200 {
		t.Fatalf("infer: %d %s", r.status, r.body)
	}
	var resp struct {
		Outputs []struct {
			Data []int `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(r.body, &resp); err != nil || len(resp.Outputs) != 1 {
		t.Fatalf("infer: %s", r.body)
	}
	want := slices.Repeat([]int{1, 2}, n)
	if got := resp.Outputs[0].Data; !slices.Equal(got, want) {
		t.Fatalf("answer %v, want %v (output_repeat %d): answered for the model loaded before", got, want, n)
	}
	h, m := s.Hits.Load()-hits, s.Misses.Load()-misses
	if h+m != 1 {
		t.Fatalf("hits %d and misses %d for one request", h, m)
	}
	waitFor(t, "the response stored", 5*time.Second, func() bool { return g.cache.Pending() == 0 })
	return h == 1
}

// waitRepeatServed waits until g's view has "rep" ready with output_repeat
// n: the catalog that says so is the one that shows the reload.
func waitRepeatServed(t *testing.T, g *Gateway, n int) {
	t.Helper()
	want := fmt.Sprintf(`"output_repeat":{"string_value":"%d"}`, n)
	waitFor(t, fmt.Sprint("rep served with output_repeat ", n), 10*time.Second, func() bool {
		r := do(t, "GET", "http://"+g.HTTPAddr()+"/v2/models/rep/config", nil, nil)
		return r.status == 200 && strings.Contains(string(r.body), want) && ready(t, "http://"+g.HTTPAddr(), "rep", "1")
	})
}

// waitRepExecutors waits until g's view has n executors serving rep 1.
func waitRepExecutors(t *testing.T, g *Gateway, n int) {
	t.Helper()
	waitFor(t, fmt.Sprint(n, " executors serving rep"), 10*time.Second, func() bool {
		vv, err := g.cat.current().resolve("rep", 1)
		return err == nil && len(vv.execNodes) == n
	})
}

// TestResponseCacheExecutorReload: with the local cache, a second executor
// joining and leaving keeps the cache; a reload the executor makes by
// itself in poll mode (a changed configuration, a model removed and put
// back), and its restart under the same id with another configuration,
// each make the next request a miss answered by the new model.
func TestResponseCacheExecutorReload(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns, localCache(1<<20))
	repo := t.TempDir()
	writeModel(t, repo, "rep", repeatConfig(1), 1)
	ex := startPollingExecutor(t, ns, "poll0", repo)
	waitModelReady(t, g, "rep")
	expectRepeat(t, g, 1, false)
	expectRepeat(t, g, 1, true)

	// Scale out and in: no reload, the cache keeps answering.
	other := t.TempDir()
	writeModel(t, other, "rep", repeatConfig(1), 1)
	ex2 := startExplicitExecutor(t, ns, "ex2", other, "rep")
	waitRepExecutors(t, g, 2)
	expectRepeat(t, g, 1, true)
	ex2.stop()
	waitRepExecutors(t, g, 1)
	expectRepeat(t, g, 1, true)

	// The configuration changed on disk: the executor reloads the version.
	writeModel(t, repo, "rep", repeatConfig(2))
	waitRepeatServed(t, g, 2)
	expectRepeat(t, g, 2, false)

	// The model removed, then put back with another configuration: an
	// unload and a load.
	if err := os.RemoveAll(filepath.Join(repo, "rep")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rep unloaded", 10*time.Second, func() bool { return !ready(t, "http://"+g.HTTPAddr(), "rep", "1") })
	writeModel(t, repo, "rep", repeatConfig(3), 1)
	waitRepeatServed(t, g, 3)
	expectRepeat(t, g, 3, false)
	expectRepeat(t, g, 3, true)

	// The executor restarted under the same id with another configuration.
	ex.stop()
	waitFor(t, "rep without an executor", 10*time.Second, func() bool { return !ready(t, "http://"+g.HTTPAddr(), "rep", "1") })
	writeModel(t, repo, "rep", repeatConfig(4))
	startPollingExecutor(t, ns, "poll0", repo)
	waitRepeatServed(t, g, 4)
	expectRepeat(t, g, 4, false)
}

// TestResponseCacheRedisExecutorReload: with the Redis cache shared by two
// gateways, a second executor joining and leaving keeps the cache; a
// reload an executor makes by itself in poll mode moves the model's
// generation: neither gateway answers from before it. Both see the reload
// and both invalidate, which changes nothing the first did not.
func TestResponseCacheRedisExecutorReload(t *testing.T) {
	rs := startRedis(t)
	ns := startNATS(t)
	g1 := startGateway(t, ns, redisCache(rs, 0))
	g2 := startGateway(t, ns, redisCache(rs, 0))
	repo := t.TempDir()
	writeModel(t, repo, "rep", repeatConfig(1), 1)
	startPollingExecutor(t, ns, "poll0", repo)
	waitModelReady(t, g1, "rep")
	waitModelReady(t, g2, "rep")
	expectRepeat(t, g1, 1, false)
	expectRepeat(t, g2, 1, true) // stored by g1

	// Scale out and in: no reload, the cache keeps answering.
	other := t.TempDir()
	writeModel(t, other, "rep", repeatConfig(1), 1)
	ex2 := startExplicitExecutor(t, ns, "ex2", other, "rep")
	waitRepExecutors(t, g1, 2)
	waitRepExecutors(t, g2, 2)
	expectRepeat(t, g1, 1, true)
	expectRepeat(t, g2, 1, true)
	ex2.stop()
	waitRepExecutors(t, g1, 1)
	waitRepExecutors(t, g2, 1)
	expectRepeat(t, g1, 1, true)

	// The configuration changed on disk: the executor reloads the version.
	writeModel(t, repo, "rep", repeatConfig(2))
	waitRepeatServed(t, g1, 2)
	waitRepeatServed(t, g2, 2)
	expectRepeat(t, g2, 2, false)
	// Each gateway invalidated once or more; the generation they settle on
	// is one: what one stores, the other answers.
	waitFor(t, "hits again at both gateways", 10*time.Second, func() bool {
		return askRepeat(t, g1, 2) && askRepeat(t, g2, 2)
	})
}
