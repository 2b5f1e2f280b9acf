package admin

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// An executor drained (by nereidctl, as the chart's preStop hook does)
// while sequences run on it loses none: its sequences continue there to
// their END with correct sums, new sequences go to the other executor,
// stateless requests keep being answered, and it reports drained once its
// sequences are over; then it stops and nothing that ran elsewhere
// notices.
func TestDrainLosesNoSequence(t *testing.T) {
	e := start(t, []string{"exec-a", "exec-b"})
	waitFor(t, "the router knowing both executors' instances", func() bool {
		_, m := e.routerModel(t)
		return len(m.GetExecutors()) == 2 && m.GetExecutors()[0].GetInstances() == 2 && m.GetExecutors()[1].GetInstances() == 2
	})

	// Eight sequences spread over the four instances.
	sum := map[string]int32{}
	var old []string
	for i := 1; i <= 8; i++ {
		id := strconv.Itoa(i)
		old = append(old, id)
		if got := e.seqInfer(t, id, 1, true, false); got != 1 {
			t.Fatalf("start %s: %d", id, got)
		}
		sum[id] = 1
	}
	var before map[string]int64
	waitFor(t, "the router counting eight sequences", func() bool {
		before, _ = e.activeOn(t)
		return before["exec-a"]+before["exec-b"] == 8
	})
	// Drain the executor holding more of them (at least four).
	drained, other := "exec-a", "exec-b"
	if before["exec-b"] > before["exec-a"] {
		drained, other = other, drained
	}
	t.Logf("sequences per executor: %v; draining %s", before, drained)

	ctl := constellation.Start(t, "nereidctl", e.c.Bin.Path("nereidctl"), "--addr", e.adminRPC, "drain", drained)
	waitFor(t, "the drain to start", func() bool {
		st, err := e.admin.GetDrainStatus(ctx(t), &adminv1.GetDrainStatusRequest{ExecutorId: drained})
		return err == nil && st.GetState() == adminv1.DrainState_DRAIN_STATE_DRAINING
	})
	waitFor(t, "the router to know the executor drains", func() bool {
		_, draining := e.activeOn(t)
		return draining[drained] && !draining[other]
	})
	if st, _ := e.admin.GetDrainStatus(ctx(t), &adminv1.GetDrainStatusRequest{ExecutorId: drained}); st.GetState() != adminv1.DrainState_DRAIN_STATE_DRAINING ||
		!strings.Contains(st.GetWaitingFor(), "sequence") {
		t.Fatalf("with sequences bound the drain is %v waiting for %q", st.GetState(), st.GetWaitingFor())
	}

	// New sequences while it drains: all on the other executor.
	var fresh []string
	for i := 11; i <= 14; i++ {
		id := strconv.Itoa(i)
		fresh = append(fresh, id)
		if got := e.seqInfer(t, id, 5, true, false); got != 5 {
			t.Fatalf("start %s: %d", id, got)
		}
		sum[id] = 5
	}
	waitFor(t, "the router counting the new sequences", func() bool {
		now, _ := e.activeOn(t)
		return now[drained]+now[other] == 12
	})
	now, _ := e.activeOn(t)
	if now[drained] != before[drained] || now[other] != before[other]+4 {
		t.Fatalf("while %s drains, sequences per executor went from %v to %v: new sequences must all go to %s", drained, before, now, other)
	}
	// Stateless requests are answered throughout, none by the draining
	// executor once its subscriptions are drained.
	waitFor(t, "the drain to hold only sequences", func() bool {
		st, err := e.admin.GetDrainStatus(ctx(t), &adminv1.GetDrainStatusRequest{ExecutorId: drained})
		return err == nil && !strings.Contains(st.GetWaitingFor(), "request")
	})
	ran := e.inferenceCount(t, drained, "simple")
	for i := range 10 {
		e.simple(t, int32(i))
	}
	if now := e.inferenceCount(t, drained, "simple"); now != ran {
		t.Fatalf("the draining executor ran %d stateless requests", now-ran)
	}

	// Every sequence goes on, with the right sums.
	step := func(ids []string, v int32) {
		for _, id := range ids {
			sum[id] += v
			if got := e.seqInfer(t, id, v, false, false); got != sum[id] {
				t.Fatalf("sequence %s: %d, want %d", id, got, sum[id])
			}
		}
	}
	step(old, 2)
	step(fresh, 3)
	if st, _ := e.admin.GetDrainStatus(ctx(t), &adminv1.GetDrainStatusRequest{ExecutorId: drained}); st.GetState() != adminv1.DrainState_DRAIN_STATE_DRAINING {
		t.Fatalf("drained with sequences still bound: %v", st)
	}
	// The old sequences end: the drain completes, and nereidctl returns.
	end := func(ids []string, v int32) {
		for _, id := range ids {
			n, _ := strconv.Atoi(id)
			sum[id] += v + int32(n)
			if got := e.seqInfer(t, id, v, false, true); got != sum[id] {
				t.Fatalf("end of sequence %s: %d, want %d", id, got, sum[id])
			}
		}
	}
	end(old, 4)
	waitFor(t, "nereidctl drain to return", ctl.Exited)
	if out := ctl.Output(); !strings.Contains(out, "executor "+drained+": drained") {
		t.Fatalf("nereidctl drain:\n%s", out)
	}
	st, err := e.admin.GetDrainStatus(ctx(t), &adminv1.GetDrainStatusRequest{ExecutorId: drained})
	if err != nil || st.GetState() != adminv1.DrainState_DRAIN_STATE_DRAINED || st.GetInflightRequests() != 0 || st.GetBusySequenceInstances() != 0 {
		t.Fatalf("drain status %v %v", st, err)
	}
	r, err := e.admin.ListExecutors(ctx(t), &adminv1.ListExecutorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range r.GetExecutors() {
		want := adminv1.DrainState_DRAIN_STATE_SERVING
		if x.GetId() == drained {
			want = adminv1.DrainState_DRAIN_STATE_DRAINED
		}
		if x.GetDrainState() != want {
			t.Errorf("executor %s listed %v, want %v", x.GetId(), x.GetDrainState(), want)
		}
	}

	// The drained executor stops; the sequences on the other one finish.
	e.execs[drained].Stop()
	step(fresh, 6)
	end(fresh, 7)
	for i := range 5 {
		e.simple(t, int32(100+i))
	}
	// A sequence started now runs on the one executor left.
	if got := e.seqInfer(t, "21", 9, true, false); got != 9 {
		t.Fatalf("start after the drain: %d", got)
	}
	if got := e.seqInfer(t, "21", 1, false, true); got != 9+1+21 {
		t.Fatalf("end after the drain: %d", got)
	}
	t.Log(fmt.Sprintf("nereidctl drain:\n%s", ctl.Output()))
}
