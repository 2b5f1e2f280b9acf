package containers

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/compose"
	"github.com/nereid-io/nereid/pkg/bus"
)

// Faults across containers. Each test starts from three executors, puts a
// load of "simple" requests (four clients) on the gateway, injects its fault,
// prints the failed requests and the recovery time (the fault to the end of
// the last failed request), and asserts what the design promises.

const loadWorkers = 4

// gone waits until one of before stops being live and returns it.
func (e *executors) waitGone(t *testing.T, before []string, timeout time.Duration) string {
	t.Helper()
	var victim string
	if !waitFor(timeout, func() bool {
		live := e.live()
		for _, id := range before {
			if !slices.Contains(live, id) {
				victim = id
				return true
			}
		}
		return false
	}) {
		t.Fatalf("every executor of %v still live after %v", before, timeout)
	}
	return victim
}

// settle waits until the load has n successes started after at.
func settle(t *testing.T, l *load, at time.Time, n int) {
	t.Helper()
	if !waitFor(2*time.Minute, func() bool { return l.succeededSince(at) >= n }) {
		t.Fatalf("fewer than %d requests succeeded in two minutes after the fault", n)
	}
}

// noHang fails the test when a request ran into the client's timeout.
func noHang(t *testing.T, s summary) {
	t.Helper()
	if s.hung > 0 || s.slowest >= requestTimeout {
		t.Errorf("%d requests hung: slowest %v (client timeout %v)", s.hung, s.slowest, requestTimeout)
	}
}

// lostBound is how long a request in flight on an executor that is killed
// or cut off may take to end: the bus's liveness probes fail it after three
// to four seconds of silence (bus.DefaultLiveness), with room for a loaded
// machine; before them it waited for the client's deadline.
const lostBound = 15 * time.Second

// endsWithin fails the test when a request took longer than lostBound.
func endsWithin(t *testing.T, s summary) {
	t.Helper()
	noHang(t, s)
	if s.slowest > lostBound {
		t.Errorf("the slowest request took %v: requests in flight on a lost executor must end within %v", s.slowest, lostBound)
	}
}

// lostCount counts the failures saying that the executor handling the
// request was lost (the liveness probes').
func (s summary) lostCount() int {
	n := 0
	for m, k := range s.errors {
		if strings.Contains(m, "handling it was lost") {
			n += k
		}
	}
	return n
}

// TestFaultRollingRestart: every executor restarted in turn (docker restart:
// SIGTERM, so each withdraws and drains before it exits) under load, with no
// failed request.
func TestFaultRollingRestart(t *testing.T) {
	e := watchExecutors(t)
	scale(t, e, 3)
	l := startLoad(loadWorkers, inferSimple)
	start := time.Now()
	for _, c := range executorContainers(t) {
		before := e.live()
		docker(t, "restart", "--time", "20", c)
		// The restarted executor comes back under a new id.
		if !waitFor(time.Minute, func() bool {
			live := e.live()
			fresh := 0
			for _, id := range live {
				if !slices.Contains(before, id) {
					fresh++
				}
			}
			return len(live) == 3 && fresh == 1
		}) {
			t.Fatalf("executor %s did not come back: live %v, before %v", c, e.live(), before)
		}
	}
	settle(t, l, time.Now(), 20)
	s := l.finish(start)
	s.report(t, "rolling restart of 3 executors")
	noHang(t, s)
	if s.failed != 0 {
		t.Errorf("%d of %d requests failed during a rolling restart with drains", s.failed, s.total)
	}
}

// TestFaultExecutorKilled: docker kill of an executor under load and with
// sequences open. It leaves the catalog within the heartbeat expiry and the
// others serve every request after; each sequence either continues with its
// sum or, if it lived on the killed executor, ends with an error saying its
// state is gone (or, once the router has forgotten it, Triton's error for a
// sequence without START), and new sequences start on the others; every
// sequence of a model with durable state continues with its sum. Requests
// that were in flight on the killed executor end within lostBound: the bus's
// liveness probes find their executor lost, and the gateway runs them again
// on the others (they are stateless), so no request fails and none is
// answered wrong; the test prints the slowest request. A load of durable
// sequences (four clients) runs through the kill with no failed request and
// every sum right: the router runs the request in flight on the killed
// executor again from the state in Redis.
func TestFaultExecutorKilled(t *testing.T) {
	e := watchExecutors(t)
	before := scale(t, e, 3)
	seqs := []string{"k1", "k2", "k3", "k4", "k5", "k6"}
	for _, id := range seqs {
		accumulate(t, id, 1, true, false)
	}
	// Load, and durable sequences (the executors have --redis-url) from
	// four clients; the executor that ran the most durable requests is
	// the one killed.
	was := e.counts(t, before, "implicit_accumulate_durable")
	l := startLoad(loadWorkers, inferSimple)
	d := startDurableLoad(1_000_000)
	t.Cleanup(l.halt)
	t.Cleanup(d.halt)
	settle(t, l, time.Time{}, 10)
	settle(t, d, time.Time{}, 20)
	held := e.counts(t, before, "implicit_accumulate_durable")
	target := before[0]
	for _, id := range before {
		held[id] -= was[id]
		if held[id] > held[target] {
			target = id
		}
	}
	if held[target] == 0 {
		t.Fatalf("no executor counts the durable load's requests: %v", held)
	}
	victimC := containerOf(t, target)
	fault := time.Now()
	docker(t, "kill", victimC)
	victim := e.waitGone(t, before, time.Minute)
	left := time.Since(fault)
	gone := time.Now()
	if victim != target {
		t.Fatalf("killed the container of %s, but %s left", target, victim)
	}
	settle(t, l, gone, 30)
	settle(t, d, gone, 30)
	s := l.finish(fault)
	s.report(t, "docker kill of an executor")
	sd := d.finish(fault)
	sd.report(t, fmt.Sprintf("docker kill of an executor, durable sequences (%d clients)", seqWorkers))
	noFailure(t, sd, "executor killed, durable sequences")
	if s.wrong > 0 {
		t.Errorf("%d requests answered wrong", s.wrong)
	}
	// The requests in flight on the killed executor ran again on the others.
	if s.failed != 0 {
		t.Errorf("%d of %d requests failed (%d of them as lost on the killed executor): want none", s.failed, s.total, s.lostCount())
	}
	t.Logf("  executor %s left the catalog %v after the kill; no request failed, the slowest request took %v (bound %v, client deadline %v)",
		victim, left.Round(time.Millisecond), s.slowest.Round(time.Millisecond), lostBound, requestTimeout)
	endsWithin(t, s)
	if left > bus.HeartbeatExpiry+5*time.Second {
		t.Errorf("the killed executor was live for %v (heartbeat expiry %v)", left, bus.HeartbeatExpiry)
	}
	if n := s.failedAfter(gone); n > 0 {
		t.Errorf("%d requests sent after the executor left the catalog failed", n)
	}

	kept, lost := 0, 0
	for _, id := range seqs {
		got, code, msg, err := seqInfer("simple_string_dyna_sequence", id, 2, false, true)
		switch {
		case err != nil:
			t.Fatalf("sequence %s: %v", id, err)
		case code == http.StatusOK && got == 3:
			kept++
		case code == http.StatusServiceUnavailable && strings.Contains(msg, "was lost; the sequence's state is gone"),
			code == http.StatusBadRequest && strings.Contains(msg, "must specify the START flag"):
			lost++
		default:
			t.Errorf("sequence %s after the kill: %d %q (sum %d)", id, code, msg, got)
		}
	}
	t.Logf("  sequences: %d continued, %d ended with an error (state lost)", kept, lost)
	if got := accumulate(t, "k-new", 5, true, true); got != 5 {
		t.Errorf("a new sequence after the kill: %d, want 5", got)
	}
	// Requests after the executor left all succeed.
	for range 20 {
		if err := inferSimple(); err != nil {
			t.Fatalf("after the executor left: %v", err)
		}
	}
}

// consecutive sends requests one after another, each given 5 s (a request
// NATS hands to an executor it cannot reach fails after three to four
// seconds, when the liveness probes find nobody holding it), until n in a
// row succeed, and returns when that run began.
func consecutive(t *testing.T, n int, timeout time.Duration) time.Time {
	t.Helper()
	var begin time.Time
	run := 0
	if !waitFor(timeout, func() bool {
		s := time.Now()
		if err := inferSimpleWithin(5 * time.Second); err != nil {
			run = 0
			return false
		}
		if run == 0 {
			begin = s
		}
		run++
		return run >= n
	}) {
		t.Fatalf("no %d requests in a row succeeded within %v", n, timeout)
	}
	return begin
}

// TestFaultExecutorPartition: docker network disconnect of an executor (it
// can reach nothing, NATS included). Its models leave the catalog within the
// heartbeat expiry; requests move to the others once NATS drops the silent
// connection (deploy/docker/nats.conf: ping_interval, ping_max; until then the
// queue group may still hand it requests, which the bus's liveness probes
// fail within lostBound, as those in flight on it when it was cut off); it
// rejoins and serves again once reconnected.
func TestFaultExecutorPartition(t *testing.T) {
	e := watchExecutors(t)
	before := scale(t, e, 3)
	l := startLoad(loadWorkers, inferSimple)
	settle(t, l, time.Time{}, 10)
	victimC := executorContainers(t)[0]
	fault := time.Now()
	docker(t, "network", "disconnect", proj.Network(), victimC)
	reconnected := false
	t.Cleanup(func() {
		if !reconnected {
			_, _ = compose.Docker(ctxFor(t, time.Minute), "network", "connect", proj.Network(), victimC)
		}
	})
	victim := e.waitGone(t, before, time.Minute)
	left := time.Since(fault)
	moved := consecutive(t, 20, 3*time.Minute).Sub(fault)
	s := l.finish(fault)
	s.report(t, "network disconnect of an executor")
	t.Logf("  executor %s left the catalog %v after the disconnect; requests all went to the others %v after it; %d requests failed as lost, the slowest request took %v (bound %v, client deadline %v)",
		victim, left.Round(time.Millisecond), moved.Round(time.Millisecond), s.lostCount(), s.slowest.Round(time.Millisecond), lostBound, requestTimeout)
	endsWithin(t, s)
	if left > bus.HeartbeatExpiry+5*time.Second {
		t.Errorf("the partitioned executor was live for %v (heartbeat expiry %v)", left, bus.HeartbeatExpiry)
	}
	// NATS's default would keep the silent connection for minutes.
	if moved > time.Minute {
		t.Errorf("requests still reached the partitioned executor %v after the disconnect", moved)
	}

	docker(t, "network", "connect", proj.Network(), victimC)
	reconnected = true
	back := time.Now()
	if !waitFor(3*time.Minute, func() bool { return slices.Contains(e.live(), victim) }) {
		t.Fatalf("executor %s did not rejoin after the reconnect (live %v)", victim, e.live())
	}
	t.Logf("  executor %s rejoined %v after the reconnect", victim, time.Since(back).Round(time.Millisecond))
	// It serves again: its statistics count some of the next requests.
	was := e.counts(t, []string{victim}, "simple")[victim]
	if !waitFor(time.Minute, func() bool {
		for range 15 {
			if err := inferSimple(); err != nil {
				t.Fatal(err)
			}
		}
		return e.counts(t, []string{victim}, "simple")[victim] > was
	}) {
		t.Errorf("executor %s rejoined but serves no request", victim)
	}
}

// containerOf is the executor container whose executor has id.
func containerOf(t *testing.T, id string) string {
	t.Helper()
	for _, c := range executorContainers(t) {
		if strings.Contains(compose.Logs(ctxFor(t, time.Minute), c), "executor="+id+" ") {
			return c
		}
	}
	t.Fatalf("no executor container logs executor=%s", id)
	return ""
}

// activeRouter is the sequence-router container holding the lease.
func activeRouter(t *testing.T) string {
	t.Helper()
	var active string
	if !waitFor(time.Minute, func() bool {
		ids, err := proj.Containers(ctxFor(t, time.Minute), "sequence-router")
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if strings.Contains(compose.Logs(ctxFor(t, time.Minute), id), "active: serving sequences") {
				active = id
				return true
			}
		}
		return false
	}) {
		t.Fatal("no sequence-router says it is active")
	}
	return active
}

// seqWorkers is how many clients run sequences through a fault, and
// seqSteps how many requests each of their sequences has.
const (
	seqWorkers = 4
	seqSteps   = 5
)

// startSeqLoad runs sequences of model from seqWorkers clients, each sequence
// named by prefix, its client and its number (ids for a model with string
// correlation ids).
func startSeqLoad(model, prefix string) *load {
	return startLoadEach(seqWorkers, func(w int) func() error {
		return seqClient(model, seqSteps, func(n int) any { return fmt.Sprintf("%s-%d-%d-%d", prefix, os.Getpid(), w, n) })
	})
}

// startDurableLoad runs sequences of implicit_accumulate_durable (numeric
// correlation ids from base) from seqWorkers clients.
func startDurableLoad(base uint64) *load {
	return startLoadEach(seqWorkers, func(w int) func() error {
		return seqClient("implicit_accumulate_durable", seqSteps, func(n int) any { return base + uint64(w)*100000 + uint64(n) })
	})
}

// noFailure fails the test unless every request of a load succeeded with the
// right answer.
func noFailure(t *testing.T, s summary, what string) {
	t.Helper()
	noHang(t, s)
	if s.wrong > 0 {
		t.Errorf("%s: %d of %d requests answered wrong", what, s.wrong, s.total)
	}
	if s.failed > 0 {
		t.Errorf("%s: %d of %d requests failed", what, s.failed, s.total)
	}
}

// TestFaultRouterKilled: docker kill of the active sequence-router under a
// load of sequences (four clients, each running sequences of five requests
// through the whole fault, without sending anything twice). The standby
// takes the lease; requests the killed router held are provably not run
// and the gateway sends them again, so no request fails and every sum is
// right.
func TestFaultRouterKilled(t *testing.T) {
	e := watchExecutors(t)
	scale(t, e, 3)
	l := startSeqLoad("simple_string_dyna_sequence", "rk")
	t.Cleanup(l.halt)
	settle(t, l, time.Time{}, 20)
	active := activeRouter(t)
	fault := time.Now()
	docker(t, "kill", active)
	// The standby serves: sequences started and ended after the kill.
	settle(t, l, time.Now(), 40)
	s := l.finish(fault)
	s.report(t, fmt.Sprintf("docker kill of the active sequence-router under a load of sequences (%d clients)", seqWorkers))
	noFailure(t, s, "router killed")
	if err := proj.Up(ctxFor(t, 5*time.Minute)); err != nil {
		t.Fatal(err)
	}
}

// TestFaultRedisRestart: docker restart of Redis (appendonly) under a load of
// sequences (four clients of simple_string_dyna_sequence and four of
// implicit_accumulate_durable, whose executors write each state to Redis,
// through the whole fault, without sending anything twice): no request fails
// and every sum is right (a START the router cannot record is refused as not
// run and sent again by the gateway; Redis LOADING is waited out), and
// registered regions survive.
func TestFaultRedisRestart(t *testing.T) {
	e := watchExecutors(t)
	scale(t, e, 3)
	_, in := region(t, "redis_in", 128)
	_, out := region(t, "redis_out", 128)
	ids, err := proj.Containers(ctxFor(t, time.Minute), "redis")
	if err != nil || len(ids) != 1 {
		t.Fatalf("redis: %v %v", ids, err)
	}
	l := startSeqLoad("simple_string_dyna_sequence", "rr")
	d := startDurableLoad(3_000_000)
	t.Cleanup(l.halt)
	t.Cleanup(d.halt)
	settle(t, l, time.Time{}, 20)
	settle(t, d, time.Time{}, 20)
	fault := time.Now()
	docker(t, "restart", ids[0])
	restarted := time.Since(fault)
	after := time.Now()
	settle(t, l, after, 40)
	settle(t, d, after, 40)
	s := l.finish(fault)
	s.report(t, fmt.Sprintf("docker restart of Redis (%v) under a load of sequences (%d clients)", restarted.Round(time.Millisecond), seqWorkers))
	sd := d.finish(fault)
	sd.report(t, fmt.Sprintf("docker restart of Redis under a load of durable sequences (%d clients)", seqWorkers))
	noFailure(t, s, "Redis restart, sequences")
	noFailure(t, sd, "Redis restart, durable sequences")
	// Regions are still registered and usable.
	var status []struct {
		Name string `json:"name"`
	}
	if code, err := getJSON(httpBase+"/v2/systemsharedmemory/status", &status); err != nil || code != http.StatusOK {
		t.Fatalf("status: %d %v", code, err)
	}
	var names []string
	for _, s := range status {
		names = append(names, s.Name)
	}
	if !slices.Contains(names, "redis_in") || !slices.Contains(names, "redis_out") {
		t.Fatalf("after the Redis restart the registry lists %v", names)
	}
	inferSimpleShm(t, "redis_in", "redis_out", in, out, 7)
}

// TestFaultNATSRestart: docker restart of NATS under load. Every service
// reconnects; requests fail only while NATS is away, none hangs, and all
// succeed again afterwards.
func TestFaultNATSRestart(t *testing.T) {
	e := watchExecutors(t)
	scale(t, e, 3)
	ids, err := proj.Containers(ctxFor(t, time.Minute), "nats")
	if err != nil || len(ids) != 1 {
		t.Fatalf("nats: %v %v", ids, err)
	}
	l := startLoad(loadWorkers, inferSimple)
	settle(t, l, time.Time{}, 10)
	fault := time.Now()
	docker(t, "restart", ids[0])
	restarted := time.Since(fault)
	e.waitLive(t, 3, 2*time.Minute)
	settle(t, l, time.Now(), 30)
	s := l.finish(fault)
	s.report(t, fmt.Sprintf("docker restart of NATS (the restart itself took %v)", restarted.Round(time.Millisecond)))
	noHang(t, s)
	for range 20 {
		if err := inferSimple(); err != nil {
			t.Fatalf("after the NATS restart: %v", err)
		}
	}
}
