package sequence

import (
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// Redis restarts with a data set that takes seconds to load, and a START
// arrives while it answers LOADING: the router cannot record the new
// sequence's binding, refuses the START as not run, and the gateway sends
// it again until Redis is back (Triton's clients do not retry), so the
// START succeeds after the load instead of failing with LOADING.
func TestStartWhileRedisLoads(t *testing.T) {
	const model = "simple_string_dyna_sequence"
	c := constellation.NewCluster(t)
	port, dir := constellation.FreePort(t), t.TempDir()
	constellation.RedisDataset(t, dir, 3_000_000)
	// Redis reads dir/dump.rdb at every start; nothing else is kept.
	args := []string{"--appendonly", "no", "--dbfilename", "dump.rdb"}
	url, rp := constellation.StartRedisWith(t, port, dir, true, args...)
	e := &env{c: c, redis: url, repo: constellation.RepoPath(t, "e2e/sequence/testdata/model_repository")}
	e.startRouter(t, nil)
	e.startExecutor(t, "exec0", model)
	e.g = c.Gateway()
	e.waitReady(t, model)
	h := e.g.HTTP()
	if got, code, msg := httpInfer(t, h, model, "5", 1, true, true, nil); code != 200 || got != 1+5 {
		t.Fatalf("a sequence before the restart: %d %d %s", got, code, msg)
	}

	rp.Kill()
	constellation.StartRedisWith(t, port, dir, false, args...)
	if !constellation.WaitFor(30*time.Second, func() bool { return constellation.RedisLoading(t, port, dir) }) {
		t.Fatal("the restarted Redis never answered LOADING: the data set loaded too fast for this test")
	}
	t0 := time.Now()
	got, code, msg := httpInfer(t, h, model, "6", 4, true, true, nil)
	took := time.Since(t0)
	if code != 200 || got != 4+6 {
		t.Fatalf("a START sent while Redis loads its data set: %d %d %s (after %v)", got, code, msg, took)
	}
	t.Logf("a START sent while Redis loaded its data set succeeded %v later", took.Round(time.Millisecond))
	if got, code, msg := httpInfer(t, h, model, "7", 2, true, true, nil); code != 200 || got != 2+7 {
		t.Fatalf("a sequence after the load: %d %d %s", got, code, msg)
	}
}
