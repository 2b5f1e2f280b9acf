package admin

import (
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/e2e/constellation"
)

const durableModel = "implicit_accumulate_durable"

// With durable state (state_durability "redis") a draining executor hands
// its sequences over instead of waiting for their END: each moves to the
// other executor between two of its requests, resumes there from Redis,
// and the drained executor reports drained while the sequences are still
// open; it then stops, and every sum stays right.
func TestDrainHandsDurableSequencesOver(t *testing.T) {
	e := start(t, nil)
	for _, id := range []string{"exec-a", "exec-b"} {
		e.execs[id] = e.c.Executor(e.repo, id, "--load-model", durableModel, "--redis-url", e.redis)
	}
	waitFor(t, "the router knowing both executors' instances", func() bool {
		_, m := e.routerModelOf(t, durableModel)
		return len(m.GetExecutors()) == 2
	})

	const n = 6
	sum := make([]int32, n+1)
	send := func(id int, v int32, start, end bool) {
		t.Helper()
		params := map[string]any{"sequence_id": id}
		if start {
			params["sequence_start"] = true
		}
		if end {
			params["sequence_end"] = true
		}
		sum[id] += v
		got := e.infer(t, durableModel, params, []any{map[string]any{"name": "INPUT", "datatype": "INT32", "shape": []int{1, 1}, "data": []int32{v}}})
		if got != sum[id] {
			t.Fatalf("sequence %d: %d, want %d", id, got, sum[id])
		}
	}
	for id := 1; id <= n; id++ {
		send(id, int32(id), true, false)
	}
	var before map[string]int64
	waitFor(t, "the router counting the sequences", func() bool {
		_, m := e.routerModelOf(t, durableModel)
		before = map[string]int64{}
		for _, x := range m.GetExecutors() {
			before[x.GetId()] = x.GetActiveSequences()
		}
		return before["exec-a"]+before["exec-b"] == n
	})
	drained, other := "exec-a", "exec-b"
	if before["exec-b"] > before["exec-a"] {
		drained, other = other, drained
	}
	if before[drained] == 0 {
		t.Fatalf("no sequence on either executor: %v", before)
	}
	if _, err := e.admin.DrainExecutor(ctx(t), &adminv1.DrainExecutorRequest{ExecutorId: drained}); err != nil {
		t.Fatal(err)
	}
	// The sequences keep going while the executor drains; it is drained
	// with all of them still open.
	v := int32(10)
	if !constellation.WaitFor(60*time.Second, func() bool {
		for id := 1; id <= n; id++ {
			send(id, v, false, false)
		}
		v++
		st, err := e.admin.GetDrainStatus(ctx(t), &adminv1.GetDrainStatusRequest{ExecutorId: drained})
		return err == nil && st.GetState() == adminv1.DrainState_DRAIN_STATE_DRAINED
	}) {
		t.Fatalf("%s not drained while its durable sequences stayed open", drained)
	}
	waitFor(t, "every sequence on "+other, func() bool {
		_, m := e.routerModelOf(t, durableModel)
		for _, x := range m.GetExecutors() {
			if x.GetId() == drained && x.GetActiveSequences() != 0 || x.GetId() == other && x.GetActiveSequences() != n {
				return false
			}
		}
		return true
	})
	e.execs[drained].Stop()
	for id := 1; id <= n; id++ {
		send(id, 100, false, false)
	}
	for id := 1; id <= n; id++ {
		send(id, 1000, false, true)
	}
}
