package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tensor"
)

func (h *harness) status() *adminv1.Executor {
	h.t.Helper()
	st := &adminv1.Executor{}
	if err := h.client.Request(context.Background(), bus.ExecutorStatusSubject(h.ex.ID()), &busv1.CatalogRequest{}, st); err != nil {
		h.t.Fatal(err)
	}
	return st
}

func (h *harness) drain(start bool) *adminv1.DrainStatus {
	h.t.Helper()
	st := &adminv1.DrainStatus{}
	if err := h.client.Request(context.Background(), bus.ExecutorDrainSubject(h.ex.ID()), &busv1.ExecutorDrainRequest{Start: start}, st); err != nil {
		h.t.Fatal(err)
	}
	return st
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A drained executor finishes the request it is running, then takes no
// new one, and says so in its status.
func TestDrainFinishesInFlightAndTakesNoMore(t *testing.T) {
	repo := t.TempDir()
	writeModel(t, repo, "slow", batchingModel("slow", 500, 0, 1))
	h := start(t, repo)
	if st := h.drain(false); st.GetState() != adminv1.DrainState_DRAIN_STATE_SERVING || st.GetExecutorId() != "ex-1" {
		t.Fatalf("before the drain: %v", st)
	}
	in := []tin{{"INPUT0", "FP32", []int64{1, 1}, tensor.AppendFloat32s(nil, 1)}}
	done := make(chan error, 1)
	go func() {
		_, err := h.infer("slow", request("", in))
		done <- err
	}()
	waitUntil(t, "the request in flight", func() bool { return h.status().GetInflightRequests() == 1 })

	st := h.drain(true)
	if st.GetState() != adminv1.DrainState_DRAIN_STATE_DRAINING || st.GetInflightRequests() != 1 || !strings.Contains(st.GetWaitingFor(), "1 request in flight") {
		t.Fatalf("draining with a request in flight: %v", st)
	}
	if err := <-done; err != nil {
		t.Fatalf("the request in flight failed: %v", err)
	}
	waitUntil(t, "drained", func() bool { return h.drain(false).GetState() == adminv1.DrainState_DRAIN_STATE_DRAINED })
	if st := h.drain(true); st.GetState() != adminv1.DrainState_DRAIN_STATE_DRAINED {
		t.Fatalf("a second drain: %v", st)
	}
	if _, err := h.infer("slow", request("", in)); err == nil || !strings.Contains(err.Error(), "no executor is serving model 'slow'") {
		t.Fatalf("a request after the drain: %v, want no executor serving it", err)
	}
	s := h.status()
	if s.GetDrainState() != adminv1.DrainState_DRAIN_STATE_DRAINED || s.GetNode() != "node-a" || len(s.GetModels()) != 1 {
		t.Fatalf("status %v", s)
	}
	m := s.GetModels()[0]
	if m.GetName() != "slow" || m.GetState() != StateReady || len(m.GetInstances()) != 1 || m.GetInstances()[0].GetKind() != "KIND_CPU" ||
		m.GetInstances()[0].GetDeviceId() != -1 || m.GetSequence() {
		t.Fatalf("model %v", m)
	}
}

// An undrain undoes a drain, finished or not: the executor serves its
// versions again, says it serves, and its catalog no longer says it
// drains (a new revision, so that gateways fetch it).
func TestUndrainServesAgain(t *testing.T) {
	repo := t.TempDir()
	writeModel(t, repo, "slow", batchingModel("slow", 0, 0, 1))
	h := start(t, repo)
	in := []tin{{"INPUT0", "FP32", []int64{1, 1}, tensor.AppendFloat32s(nil, 1)}}
	undrain := func() *adminv1.DrainStatus {
		t.Helper()
		st := &adminv1.DrainStatus{}
		if err := h.client.Request(context.Background(), bus.ExecutorDrainSubject(h.ex.ID()), &busv1.ExecutorDrainRequest{Undrain: true}, st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := undrain(); st.GetState() != adminv1.DrainState_DRAIN_STATE_SERVING {
		t.Fatalf("undrain of an executor serving: %v", st)
	}
	for round := range 2 {
		rev := h.catalog().GetRevision()
		h.drain(true)
		waitUntil(t, "drained", func() bool { return h.drain(false).GetState() == adminv1.DrainState_DRAIN_STATE_DRAINED })
		if cat := h.catalog(); !cat.GetDraining() || cat.GetRevision() <= rev {
			t.Fatalf("round %d: catalog of a drained executor: draining %v, revision %d after %d", round, cat.GetDraining(), cat.GetRevision(), rev)
		}
		if _, err := h.infer("slow", request("", in)); err == nil {
			t.Fatalf("round %d: a drained executor answered", round)
		}
		rev = h.catalog().GetRevision()
		if st := undrain(); st.GetState() != adminv1.DrainState_DRAIN_STATE_SERVING || st.GetWaitingFor() != "" {
			t.Fatalf("round %d: after undrain: %v", round, st)
		}
		if cat := h.catalog(); cat.GetDraining() || cat.GetRevision() <= rev {
			t.Fatalf("round %d: catalog after undrain: draining %v, revision %d after %d", round, cat.GetDraining(), cat.GetRevision(), rev)
		}
		if _, err := h.infer("slow", request("", in)); err != nil {
			t.Fatalf("round %d: a request after undrain: %v", round, err)
		}
		if s := h.status(); s.GetDrainState() != adminv1.DrainState_DRAIN_STATE_SERVING {
			t.Fatalf("round %d: status after undrain: %v", round, s)
		}
	}
	// Undone before the drain finished: the request in flight finishes,
	// new ones are served.
	slowRepo := t.TempDir()
	writeModel(t, slowRepo, "slow", batchingModel("slow", 300, 0, 1))
	h2 := start(t, slowRepo)
	done := make(chan error, 1)
	go func() {
		_, err := h2.infer("slow", request("", in))
		done <- err
	}()
	waitUntil(t, "the request in flight", func() bool { return h2.status().GetInflightRequests() == 1 })
	if st := h2.drain(true); st.GetState() != adminv1.DrainState_DRAIN_STATE_DRAINING {
		t.Fatalf("draining with a request in flight: %v", st)
	}
	st := &adminv1.DrainStatus{}
	if err := h2.client.Request(context.Background(), bus.ExecutorDrainSubject(h2.ex.ID()), &busv1.ExecutorDrainRequest{Undrain: true}, st); err != nil ||
		st.GetState() != adminv1.DrainState_DRAIN_STATE_SERVING {
		t.Fatalf("undrain while draining: %v %v", st, err)
	}
	if _, err := h2.infer("slow", request("", in)); err != nil {
		t.Fatalf("a request after an undrain during the drain: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the request in flight at the drain: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // the drain's end, had it been left to mark anything
	if s := h2.drain(false); s.GetState() != adminv1.DrainState_DRAIN_STATE_SERVING {
		t.Fatalf("the undone drain's end changed the state: %v", s)
	}
}
