package sequence

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// accumulate drives simple_string_dyna_sequence, whose state lives in the
// executor: a wrong routing after a failover shows as a wrong sum. A request
// that reached the router just as it died is failed with UNAVAILABLE and
// "the request was not run" (never left to the client's timeout); a client
// may send it again, as this one does, once.
func accumulate(t *testing.T, base, id string, v int32, start, end bool) int32 {
	t.Helper()
	got, code, msg := httpInfer(t, base, "simple_string_dyna_sequence", id, v, start, end, nil)
	if code == 503 && strings.HasSuffix(msg, "the request was not run") {
		t.Logf("sequence %s: %s; sending it again", id, msg)
		got, code, msg = httpInfer(t, base, "simple_string_dyna_sequence", id, v, start, end, nil)
	}
	if code != 200 {
		t.Fatalf("sequence %s: %d %s", id, code, msg)
	}
	return got
}

// Two routers; the active one is killed mid-sequence; the standby takes the
// lease, reads the bindings from Redis and the sequences continue on the
// executor instances that hold their state, each request run once.
func TestRouterFailover(t *testing.T) {
	e := start(t, opts{routers: 2, models: []string{"simple_string_dyna_sequence"}})
	h := e.g.HTTP()
	ids := []string{"10", "20", "30"}
	for _, id := range ids {
		if got := accumulate(t, h, id, 1, true, false); got != 1 {
			t.Fatalf("start %s: %d", id, got)
		}
	}
	// Whichever router holds the lease goes down hard.
	active := -1
	for i := range e.routers {
		if strings.Contains(e.routers[i].Output(), "active: serving sequences") {
			active = i
		}
	}
	if active < 0 {
		t.Fatal("no active router")
	}
	e.routers[active].Kill()
	for _, id := range ids {
		if got := accumulate(t, h, id, 2, false, false); got != 3 {
			t.Fatalf("after the failover, sequence %s: %d, want 3", id, got)
		}
	}
	for _, id := range ids {
		n, _ := strconv.Atoi(id)
		if got := accumulate(t, h, id, 3, false, true); got != 6+int32(n) {
			t.Fatalf("end %s: %d", id, got)
		}
	}
	exec, inf, _ := stats(t, h, "simple_string_dyna_sequence")
	if inf != 9 || exec > 9 {
		t.Fatalf("a request ran twice or was lost: execution_count %d inference_count %d", exec, inf)
	}
}

// An executor killed mid-sequence: its sequences' next request fails with
// the START error (their state is gone) and new sequences go to the
// surviving executor.
func TestExecutorLost(t *testing.T) {
	e := start(t, opts{executors: 2, models: []string{"simple_string_dyna_sequence"}, routerArgs: []string{"--log-verbose", "1"}})
	h := e.g.HTTP()
	// Four sequences over 2 executors x 2 instances: every instance has one,
	// once the router knows the instances of both executors.
	if !constellation.WaitFor(20*time.Second, func() bool {
		out := e.routers[0].Output()
		return strings.Count(out, `msg="instance adds its slots"`) >= 4 &&
			strings.Contains(out, "executor=exec0") && strings.Contains(out, "executor=exec1")
	}) {
		t.Fatalf("the router did not learn both executors' instances:\n%s", e.routers[0].Output())
	}
	ids := []string{"1", "2", "3", "4"}
	for _, id := range ids {
		accumulate(t, h, id, 1, true, false)
	}
	e.execs[0].Kill()
	time.Sleep(3500 * time.Millisecond) // heartbeat expiry
	lost, kept := 0, 0
	for _, id := range ids {
		_, code, msg := httpInfer(t, h, "simple_string_dyna_sequence", id, 1, false, false, nil)
		switch {
		case code == 200:
			kept++
		case code == 400 && strings.Contains(msg, "must specify the START flag"):
			lost++
		default:
			t.Fatalf("sequence %s: %d %s", id, code, msg)
		}
	}
	if lost == 0 || kept == 0 {
		t.Fatalf("lost %d, kept %d: want both", lost, kept)
	}
	if got := accumulate(t, h, "99", 5, true, true); got != 5+99 {
		t.Fatalf("new sequence: %d", got)
	}
}

// Redis restarted with its data (append-only file): sequences bound before
// continue, and new ones start.
func TestRedisRestart(t *testing.T) {
	c := constellation.NewCluster(t)
	port := constellation.FreePort(t)
	dir := t.TempDir()
	startRedis := func() *constellation.Proc {
		_, p := constellation.StartRedis(t, port, dir)
		return p
	}
	rp := startRedis()
	e := &env{c: c, redis: fmt.Sprintf("rediss://127.0.0.1:%d/0", port), repo: constellation.RepoPath(t, "e2e/sequence/testdata/model_repository")}
	e.startRouter(t, nil)
	e.startExecutor(t, "exec0", "simple_string_dyna_sequence")
	e.g = c.Gateway()
	e.waitReady(t, "simple_string_dyna_sequence")
	h := e.g.HTTP()
	accumulate(t, h, "5", 1, true, false)
	rp.Stop()
	// Mid-sequence requests need no Redis.
	if got := accumulate(t, h, "5", 1, false, false); got != 2 {
		t.Fatalf("while Redis is down: %d", got)
	}
	startRedis()
	if got := accumulate(t, h, "5", 1, false, true); got != 3+5 {
		t.Fatalf("after the restart: %d", got)
	}
	// The binding goes once the executor reports the END request's batch
	// done (its next pull), just after the answer.
	bound := func() string { return e.redisCLI(t, "hgetall", "nereid:seq:{simple_string_dyna_sequence.1}:bind") }
	if !constellation.WaitFor(10*time.Second, func() bool { return bound() == "" }) {
		t.Fatalf("binding left in Redis after END: %s", bound())
	}
	if got := accumulate(t, h, "6", 4, true, true); got != 4+6 {
		t.Fatalf("new sequence after the restart: %d", got)
	}
}

func mustLook(t *testing.T, name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed", name)
	}
	return p
}

// redisCLI runs redis-cli against the env's Redis as the router's ACL
// user (the keys these tests touch are the router's).
func (e *env) redisCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := constellation.RedisCLI(t, e.redis, "sequence-router", args...)
	if err != nil {
		t.Fatalf("redis-cli %v: %v %s", args, err, out)
	}
	return out
}

// backlogged starts sequences 11 and 12 in seq_direct's two slots and
// sends the START of 13, which waits in the router's backlog; the result
// of 13 ("<status> <OUTPUT> <error> (after <time>)") arrives on the
// channel.
func backlogged(t *testing.T, h string) <-chan string {
	t.Helper()
	for _, id := range []uint64{11, 12} {
		if _, code, msg := httpInfer(t, h, "seq_direct", id, 1, true, false, nil); code != 200 {
			t.Fatal(msg)
		}
	}
	got := make(chan string, 1)
	go func() {
		t0 := time.Now()
		v, code, msg := httpInfer(t, h, "seq_direct", 13, 5, true, false, nil)
		got <- fmt.Sprintf("%d %d %s (after %v)", code, v, msg, time.Since(t0).Round(time.Millisecond))
	}()
	time.Sleep(300 * time.Millisecond)
	return got
}

// The router serving a model is killed while it holds a request in the
// backlog: the router that takes the model over tells the gateway that the
// request was never run, and the gateway sends it again to that router
// (Triton's clients do not retry), where it waits in the backlog as before
// and runs once the bound sequences, which continue, free a slot.
func TestRouterFailoverHeldRequest(t *testing.T) {
	e := start(t, opts{routers: 2, models: []string{"seq_direct"}})
	h := e.g.HTTP()
	got := backlogged(t, h)
	active := -1
	for i := range e.routers {
		if strings.Contains(e.routers[i].Output(), "active: serving sequences") {
			active = i
		}
	}
	if active < 0 {
		t.Fatal("no active router")
	}
	e.routers[active].Kill()
	select {
	case r := <-got:
		t.Fatalf("the held request was answered before a slot was free: %s", r)
	case <-time.After(6 * time.Second): // the takeover and its resolve
	}
	for _, id := range []uint64{11, 12} {
		if v, code, msg := httpInfer(t, h, "seq_direct", id, 4, false, true, nil); code != 200 || v != 4 {
			t.Fatalf("sequence %d after the failover: %d %d %s", id, v, code, msg)
		}
	}
	select {
	case r := <-got:
		// START of 13 with INPUT 5: READY x (INPUT + START).
		if !strings.HasPrefix(r, "200 6 ") {
			t.Fatalf("held request: %s", r)
		}
		t.Logf("the request the dead router held: %s", r)
	case <-time.After(15 * time.Second):
		t.Fatal("the request the dead router held was not answered")
	}
	if !strings.Contains(e.g.Output(), "sequence router lost requests in a takeover; sending them again") {
		t.Fatalf("the gateway did not say it sent the lost request again:\n%s", e.g.Output())
	}
}

// A router whose lease another router took (here: overwritten in Redis)
// steps down at its next renewal and refuses the request it holds as not
// run; the gateway sends it again until a router serves the model (once
// the lease is free again a router takes the model back with a new epoch),
// the bound sequences continue, and the request runs once they free a
// slot.
func TestRouterLeaseLost(t *testing.T) {
	e := start(t, opts{models: []string{"seq_direct"}})
	h := e.g.HTTP()
	got := backlogged(t, h)
	e.redisCLI(t, "SET", "nereid:seq:{seq_direct.1}:lease", "intruder|99", "PX", "2500")
	if !constellation.WaitFor(10*time.Second, func() bool {
		return strings.Contains(e.routers[0].Output(), "another router holds the model's lease")
	}) {
		t.Fatalf("the router did not step down:\n%s", e.routers[0].Output())
	}
	for _, id := range []uint64{11, 12} {
		if v, code, msg := httpInfer(t, h, "seq_direct", id, 4, false, true, nil); code != 200 || v != 4 {
			t.Fatalf("sequence %d after the lease came back: %d %d %s", id, v, code, msg)
		}
	}
	select {
	case r := <-got:
		if !strings.HasPrefix(r, "200 6 ") {
			t.Fatalf("held request: %s", r)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the request the router held when it stepped down was not answered")
	}
	if ep := e.redisCLI(t, "GET", "nereid:seq:{seq_direct.1}:epoch"); ep != "2" {
		t.Fatalf("epoch %s, want 2", ep)
	}
}

// The active router is killed (SIGKILL) under a load of sequences: every
// request still gets its right answer. Requests the dead router held are
// sent again by the gateway once the router taking over says they were
// never run; requests sent while no router serves the model wait for the
// takeover; requests already handed to an executor are answered by it.
// Each sum is the accumulator of the executor instance holding the
// sequence, so a request run twice or lost shows as a wrong sum.
func TestRouterKilledUnderLoad(t *testing.T) {
	const model = "simple_string_dyna_sequence"
	e := start(t, opts{routers: 2, models: []string{model}})
	h := e.g.HTTP()
	active := -1
	if !constellation.WaitFor(20*time.Second, func() bool {
		for i := range e.routers {
			if strings.Contains(e.routers[i].Output(), "active: serving sequences") {
				active = i
			}
		}
		return active >= 0
	}) {
		t.Fatal("no active router")
	}

	var stop atomic.Bool
	var load tally
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				id := strconv.Itoa(10000*(w+1) + n)
				sum := int32(0)
				for step := range 4 {
					v := int32(step + 1)
					t0 := time.Now()
					got, code, msg := httpInfer(t, h, model, id, v, step == 0, step == 3, nil)
					took := time.Since(t0)
					if code != 200 {
						load.add(fmt.Sprintf("FAILED %d %s", code, msg), took)
						break // the sequence's state is unknown: start another
					}
					sum += v
					if step == 3 {
						sum += int32(10000*(w+1) + n) // END adds the correlation id
					}
					if got != sum {
						load.add(fmt.Sprintf("WRONG SUM sequence %s step %d: %d, want %d", id, step, got, sum), took)
						break
					}
					load.add("200 ok", took)
				}
			}
		})
	}
	time.Sleep(2 * time.Second) // load before the kill
	killed := time.Now()
	e.routers[active].Kill()
	other := e.routers[1-active]
	if !constellation.WaitFor(20*time.Second, func() bool { return strings.Contains(other.Output(), "active: serving sequences") }) {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("the standby router did not take over:\n%s", other.Output())
	}
	took := time.Since(killed)
	time.Sleep(6 * time.Second) // load after the takeover (resolves, resends)
	stop.Store(true)
	wg.Wait()
	t.Logf("active router killed under load; the standby served %v later; answers:%s", took.Round(time.Millisecond), load.String())

	load.mu.Lock()
	defer load.mu.Unlock()
	for k, n := range load.counts {
		if k != "200 ok" {
			t.Errorf("%d requests: %s", n, k)
		}
	}
	if load.counts["200 ok"] == 0 {
		t.Error("no request succeeded")
	}
	if strings.Contains(e.g.Output(), "sequence router lost requests in a takeover") {
		t.Log("the takeover found requests the dead router held; the gateway sent them again")
	}
}
