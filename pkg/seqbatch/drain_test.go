package seqbatch

import (
	"testing"
	"time"
)

// A draining instance keeps its sequences to their END but takes no new
// one: new sequences go to the other executor's slots, then to the backlog
// (which a draining instance's freed slot never takes).
func TestDrainInstance(t *testing.T) {
	m := NewModel(Config{Model: "m", SlotsPerInstance: 1, MaxBatch: 1, Idle: time.Second}, nil, quiet)
	a, b := InstanceKey{Executor: "old", Index: 0}, InstanceKey{Executor: "new", Index: 0}
	m.AddInstance(t0, a)
	mustEnqueue(t, m, t0, req(1, true, false))
	if m.DrainInstance(InstanceKey{Executor: "nobody"}) {
		t.Fatal("an unknown instance was drained")
	}
	if !m.DrainInstance(a) {
		t.Fatal("instance not found")
	}
	if m.Idle(a) {
		t.Fatal("a draining instance holding a sequence reads idle")
	}
	m.AddInstance(t0, b)
	mustEnqueue(t, m, t0, req(2, true, false), req(3, true, false), req(1, false, false))
	u := m.Usage()
	if u.Active != 2 || u.Backlog != 1 || u.Slots != 2 || u.SlotsInUse != 2 {
		t.Fatalf("usage %+v, want 2 active, 1 in the backlog, 2 of 2 slots in use", u)
	}
	if !u.Instances[0].Draining || u.Instances[0].Active != 1 || u.Instances[1].Draining {
		t.Fatalf("instances %+v", u.Instances)
	}
	wantBatch(t, m, t0, a, "1S")
	wantBatch(t, m, t0, b, "2S")
	// Sequence 1 continues on the draining instance and ends there; its
	// slot is not given to sequence 3.
	wantBatch(t, m, t0, a, "1")
	mustEnqueue(t, m, t0, req(1, false, true))
	wantBatch(t, m, t0, a, "1E")
	if !m.Idle(a) {
		t.Fatal("the drained instance still holds something")
	}
	wantBatch(t, m, t0, a, "<nil>")
	if m.Usage().Backlog != 1 {
		t.Fatal("the backlog sequence took the draining instance's slot")
	}
	// Sequence 2 ends: its slot on the serving instance takes 3.
	mustEnqueue(t, m, t0, req(2, false, true))
	wantBatch(t, m, t0, b, "2E")
	wantBatch(t, m, t0, b, "3S")
}

// A sequence that goes idle on a draining instance frees it.
func TestDrainInstanceIdleRelease(t *testing.T) {
	m, _, k := direct(1)
	mustEnqueue(t, m, t0, req(1, true, false))
	wantBatch(t, m, t0, k, "1S")
	m.DrainInstance(k)
	if m.Idle(k) {
		t.Fatal("idle while its sequence is bound")
	}
	m.Tick(t0.Add(2 * time.Second))
	if !m.Idle(k) {
		t.Fatal("the idle sequence's slot was not released")
	}
}

// With durable state a draining instance's sequences move to other
// instances (resume there from the store) once nothing of theirs is
// queued; without it they stay.
func TestHandOverDurable(t *testing.T) {
	for _, durable := range []bool{false, true} {
		st := &memStore{}
		m := NewModel(Config{Model: "m", SlotsPerInstance: 2, MaxBatch: 2, Idle: time.Second, Durable: durable}, st, quiet)
		a, b := InstanceKey{Executor: "old"}, InstanceKey{Executor: "new"}
		m.AddInstance(t0, a)
		mustEnqueue(t, m, t0, req(1, true, false), req(2, true, false))
		wantBatch(t, m, t0, a, "1S 2S")
		mustEnqueue(t, m, t0, req(2, false, false)) // queued: 2 stays for now
		m.AddInstance(t0, b)
		m.DrainInstance(a)
		moved := m.HandOver(t0, a)
		if !durable {
			if moved != 0 || m.Idle(a) {
				t.Fatalf("without durable state %d sequences moved", moved)
			}
			continue
		}
		if moved != 1 {
			t.Fatalf("moved %d, want sequence 1 only (2 has a request queued)", moved)
		}
		if ref := st.bound[UintID(1)]; ref.Instance != b || ref.Slot != 0 {
			t.Fatalf("sequence 1 bound to %+v in the store", ref)
		}
		mustEnqueue(t, m, t0, req(1, false, false))
		wantBatch(t, m, t0, b, "1R")
		wantBatch(t, m, t0, a, "_ 2")
		if m.HandOver(t0, a) != 1 || !m.Idle(a) {
			t.Fatal("sequence 2 did not move once its request ran")
		}
		mustEnqueue(t, m, t0, req(2, false, true))
		wantBatch(t, m, t0, b, "_ 2ER")
	}
}

// One instance's word that its executor drains keeps new sequences off all
// of that executor's instances (of that generation), not only the one that
// said so: the others may be busy and pull only later.
func TestDrainExecutor(t *testing.T) {
	m := NewModel(Config{Model: "m", SlotsPerInstance: 1, MaxBatch: 1, Idle: time.Second}, nil, quiet)
	a0, a1 := InstanceKey{Executor: "a", Index: 0}, InstanceKey{Executor: "a", Index: 1}
	later := InstanceKey{Executor: "a", Generation: 2, Index: 0} // a restarted "a"
	b := InstanceKey{Executor: "b", Index: 0}
	for _, k := range []InstanceKey{a0, a1, later, b} {
		m.AddInstance(t0, k)
	}
	if n := m.DrainExecutor(a1); n != 2 {
		t.Fatalf("%d instances drained, want a's two of its generation", n)
	}
	mustEnqueue(t, m, t0, req(1, true, false), req(2, true, false), req(3, true, false))
	for _, in := range m.Usage().Instances {
		switch in.Key {
		case a0, a1:
			if !in.Draining || in.Active != 0 {
				t.Errorf("instance %+v of the draining executor: %+v", in.Key, in)
			}
		case later, b:
			if in.Draining || in.Active != 1 {
				t.Errorf("instance %+v of a serving executor: %+v, want one sequence", in.Key, in)
			}
		}
	}
	if u := m.Usage(); u.Backlog != 1 {
		t.Fatalf("usage %+v: the third sequence must wait in the backlog", u)
	}
}

// Undraining an instance (its executor's drain was undone) gives its free
// slots to the backlog at once and binds new sequences to it again.
func TestUndrainInstance(t *testing.T) {
	m := NewModel(Config{Model: "m", SlotsPerInstance: 1, MaxBatch: 1, Idle: time.Second}, nil, quiet)
	a := InstanceKey{Executor: "only", Index: 0}
	m.AddInstance(t0, a)
	if m.UndrainInstance(t0, InstanceKey{Executor: "nobody"}) {
		t.Fatal("an unknown instance was undrained")
	}
	m.DrainInstance(a)
	mustEnqueue(t, m, t0, req(1, true, false))
	if u := m.Usage(); u.Backlog != 1 || u.Active != 0 {
		t.Fatalf("usage %+v: a new sequence must wait in the backlog while the only instance drains", u)
	}
	if !m.UndrainInstance(t0, a) {
		t.Fatal("instance not found")
	}
	if u := m.Usage(); u.Backlog != 0 || u.Active != 1 || u.Instances[0].Draining {
		t.Fatalf("usage %+v: the undrained instance's slot must take the backlog", u)
	}
	wantBatch(t, m, t0, a, "1S")
	mustEnqueue(t, m, t0, req(1, false, true))
	wantBatch(t, m, t0, a, "1E")
	mustEnqueue(t, m, t0, req(2, true, false))
	wantBatch(t, m, t0, a, "2S")
}
