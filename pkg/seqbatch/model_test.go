package seqbatch

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

var t0 = time.Unix(1000, 0)

type memStore struct {
	ops   []string
	fail  bool
	bound map[ID]SlotRef
}

func (s *memStore) Bind(id ID, at SlotRef) error {
	if s.fail {
		return fmt.Errorf("down")
	}
	s.ops = append(s.ops, fmt.Sprintf("bind %s %s/%d", id.Key(), at.Instance.Executor, at.Slot))
	if s.bound == nil {
		s.bound = map[ID]SlotRef{}
	}
	for other, ref := range s.bound {
		if ref == at && other != id {
			delete(s.bound, other) // stale (Store)
		}
	}
	s.bound[id] = at
	return nil
}
func (s *memStore) Backlog(id ID) error {
	if s.fail {
		return fmt.Errorf("down")
	}
	s.ops = append(s.ops, "backlog "+id.Key())
	return nil
}
func (s *memStore) Unbind(id ID) error {
	s.ops = append(s.ops, "unbind "+id.Key())
	delete(s.bound, id)
	return nil
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func req(id uint64, start, end bool) *Request {
	return &Request{ID: UintID(id), Start: start, End: end, Data: id}
}

// batchString prints a batch as "1S 2 _ 3E": id, S for START, E for END,
// _ for padding.
func batchString(b *Batch) string {
	if b == nil {
		return "<nil>"
	}
	var parts []string
	for _, e := range b.Entries {
		if e.Req == nil {
			if e.Ready {
				parts = append(parts, "?")
			} else {
				parts = append(parts, "_")
			}
			continue
		}
		s := e.ID.text()
		if e.Start {
			s += "S"
		}
		if e.End {
			s += "E"
		}
		if e.Resume {
			s += "R"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func direct(slots int) (*Model, *memStore, InstanceKey) {
	st := &memStore{}
	m := NewModel(Config{Model: "m", SlotsPerInstance: slots, MaxBatch: slots, Idle: time.Second}, st, quiet)
	k := InstanceKey{Executor: "e1", Index: 0}
	m.AddInstance(t0, k)
	return m, st, k
}

func mustEnqueue(t *testing.T, m *Model, now time.Time, rs ...*Request) {
	t.Helper()
	for _, r := range rs {
		if err := m.Enqueue(now, r); err != nil {
			t.Fatalf("enqueue %v: %v", r.ID, err)
		}
	}
}

// answer tells m that b's requests were answered.
func answer(m *Model, b *Batch) {
	for _, e := range b.Entries {
		if e.Req != nil {
			m.Answered(e.Req)
		}
	}
}

func wantBatch(t *testing.T, m *Model, now time.Time, k InstanceKey, want string) {
	t.Helper()
	b, _ := m.Next(now, k)
	if got := batchString(b); got != want {
		t.Fatalf("batch = %q, want %q", got, want)
	}
}

func TestNoStart(t *testing.T) {
	m, _, _ := direct(2)
	err := m.Enqueue(t0, req(7, false, false))
	want := "inference request for sequence 7 to model 'm' must specify the START flag on the first request of the sequence"
	if tritonerr.KindOf(err) != tritonerr.InvalidArg || err.Error() != want {
		t.Fatalf("got %v", err)
	}
	// Typed ids: "42" does not continue 42.
	mustEnqueue(t, m, t0, req(42, true, false))
	if err := m.Enqueue(t0, &Request{ID: StringID("42")}); err == nil || !strings.Contains(err.Error(), "sequence 42 ") {
		t.Fatalf("string id continued a numeric sequence: %v", err)
	}
}

func TestDirectBatchesAndPadding(t *testing.T) {
	m, st, k := direct(3)
	mustEnqueue(t, m, t0, req(1, true, false), req(2, true, false), req(1, false, false))
	wantBatch(t, m, t0, k, "1S 2S")
	wantBatch(t, m, t0, k, "1 _") // slot 1 is active with nothing queued: padding
	wantBatch(t, m, t0, k, "<nil>")
	mustEnqueue(t, m, t0, req(1, false, true), req(2, false, false))
	b, _ := m.Next(t0, k)
	if got := batchString(b); got != "1E 2" {
		t.Fatalf("batch = %q, want %q", got, "1E 2")
	}
	answer(m, b)
	// Slot 0 is free now; sequence 2 in slot 1 pads slot 0.
	mustEnqueue(t, m, t0, req(2, false, true))
	b, _ = m.Next(t0, k)
	if got := batchString(b); got != "_ 2E" {
		t.Fatalf("batch = %q, want %q", got, "_ 2E")
	}
	answer(m, b)
	wantBatch(t, m, t0, k, "<nil>")
	if s := m.Snapshot(); s.Active != 0 || s.Queued != 0 {
		t.Fatalf("left %+v", s)
	}
	want := "bind u:1 e1/0,bind u:2 e1/1,unbind u:1,unbind u:2"
	if got := strings.Join(st.ops, ","); got != want {
		t.Fatalf("store ops %s, want %s", got, want)
	}
}

func TestLengthOneAndRestartSameID(t *testing.T) {
	m, _, k := direct(1)
	mustEnqueue(t, m, t0, req(5, true, true))
	// END dropped the mapping: the same id starts again, into the backlog
	// since the slot is busy until the END leaves.
	mustEnqueue(t, m, t0, req(5, true, false))
	if s := m.Snapshot(); s.Backlog != 1 {
		t.Fatalf("want the restart in the backlog: %+v", s)
	}
	wantBatch(t, m, t0, k, "5SE")
	wantBatch(t, m, t0, k, "5S")
}

func TestBacklog(t *testing.T) {
	m, _, k := direct(1)
	// 1 in the slot; 2 and 3 fully queued in the backlog, in order.
	mustEnqueue(t, m, t0, req(1, true, false), req(2, true, false), req(2, false, true), req(3, true, false), req(3, false, false))
	if s := m.Snapshot(); s.Backlog != 2 || s.Active != 1 {
		t.Fatalf("%+v", s)
	}
	wantBatch(t, m, t0, k, "1S")
	mustEnqueue(t, m, t0, req(1, false, true))
	wantBatch(t, m, t0, k, "1E")
	// 2 took the slot with its whole sequence.
	wantBatch(t, m, t0, k, "2S")
	wantBatch(t, m, t0, k, "2E")
	wantBatch(t, m, t0, k, "3S")
	wantBatch(t, m, t0, k, "3")
	if _, ok := m.Where(UintID(3)); !ok {
		t.Fatal("3 should hold the slot")
	}
	// Same id in the backlog twice: START while backlogged continues the
	// same queue (Triton's conflict).
	m2, _, k2 := direct(1)
	mustEnqueue(t, m2, t0, req(1, true, false), req(9, true, false), req(9, true, true))
	mustEnqueue(t, m2, t0, req(1, false, true))
	wantBatch(t, m2, t0, k2, "1S")
	wantBatch(t, m2, t0, k2, "1E")
	wantBatch(t, m2, t0, k2, "9S")
	wantBatch(t, m2, t0, k2, "9SE")
}

func TestIdleReleasesSlotToBacklog(t *testing.T) {
	m, st, k := direct(1)
	mustEnqueue(t, m, t0, req(1, true, false), req(2, true, false))
	wantBatch(t, m, t0, k, "1S")
	if w := m.Wake(); !w.Equal(t0.Add(time.Second)) {
		t.Fatalf("wake %v", w)
	}
	t1 := t0.Add(999 * time.Millisecond)
	mustEnqueue(t, m, t1, req(1, false, false)) // the idle clock restarts
	wantBatch(t, m, t1, k, "1")
	m.Tick(t0.Add(1500 * time.Millisecond))
	if _, ok := m.Where(UintID(1)); !ok {
		t.Fatal("released too early: the clock runs from the last arrival")
	}
	t2 := t1.Add(time.Second)
	m.Tick(t2)
	if _, ok := m.Where(UintID(2)); !ok {
		t.Fatal("the backlog sequence did not get the idle slot")
	}
	wantBatch(t, m, t2, k, "2S")
	if err := m.Enqueue(t2, req(1, false, false)); err == nil {
		t.Fatal("an idle-released sequence continued")
	}
	if !strings.Contains(strings.Join(st.ops, ","), "unbind u:1,bind u:2 e1/0") {
		t.Fatalf("ops %v", st.ops)
	}
}

func TestBacklogTimeoutAndBound(t *testing.T) {
	m, _, _ := direct(1)
	mustEnqueue(t, m, t0, req(1, true, false))
	r2 := req(2, true, false)
	r2.Timeout = 100 * time.Millisecond
	r2b := req(2, false, false)
	mustEnqueue(t, m, t0, r2, r2b)
	if f := m.Tick(t0.Add(99 * time.Millisecond)); len(f) != 0 {
		t.Fatalf("expired early: %v", f)
	}
	f := m.Tick(t0.Add(100 * time.Millisecond))
	if len(f) != 2 || f[0].Err.Error() != "timeout of the corresponding sequence has been expired" || tritonerr.KindOf(f[0].Err) != tritonerr.Unavailable {
		t.Fatalf("failures %v", f)
	}
	if err := m.Enqueue(t0, req(2, false, false)); err == nil {
		t.Fatal("expired sequence continued")
	}

	b := NewModel(Config{Model: "m", SlotsPerInstance: 1, MaxBacklog: 1, Idle: time.Hour}, nil, quiet)
	b.AddInstance(t0, InstanceKey{Executor: "e"})
	mustEnqueue(t, b, t0, req(1, true, false), req(2, true, false))
	err := b.Enqueue(t0, req(3, true, false))
	if tritonerr.KindOf(err) != tritonerr.Unavailable || !strings.Contains(err.Error(), "backlog of model 'm' is full") {
		t.Fatalf("got %v", err)
	}
	// A continuing request is never refused by the bound.
	mustEnqueue(t, b, t0, req(2, false, false))
}

func TestStoreFailureFailsStart(t *testing.T) {
	m, st, _ := direct(1)
	st.fail = true
	if err := m.Enqueue(t0, req(1, true, false)); tritonerr.KindOf(err) != tritonerr.Unavailable {
		t.Fatalf("got %v", err)
	}
	st.fail = false
	mustEnqueue(t, m, t0, req(1, true, false))
}

// A backlog sequence takes a freed slot only once the store recorded it
// there: while Bind fails it stays first in the backlog (the slot stays
// free, nothing of it runs), tries again at Wake, and takes the slot when
// the store works again. A new sequence meanwhile does not take the free
// slot ahead of it.
func TestBindFailureKeepsBacklog(t *testing.T) {
	m, st, k := direct(1)
	mustEnqueue(t, m, t0, req(1, true, false), req(2, true, false))
	wantBatch(t, m, t0, k, "1S")
	mustEnqueue(t, m, t0, req(1, false, true))
	st.fail = true
	wantBatch(t, m, t0, k, "1E")
	wantBatch(t, m, t0, k, "<nil>")
	if _, ok := m.Where(UintID(2)); ok || m.Snapshot().Backlog != 1 {
		t.Fatalf("sequence 2 took the slot without its binding: %+v", m.Snapshot())
	}
	w := m.Wake()
	if w.Before(t0.Add(bindRetryMin/4)) || w.After(t0.Add(bindRetryMin)) {
		t.Fatalf("wake %v, want the retry within [%v, %v] of t0", w.Sub(t0), bindRetryMin/4, bindRetryMin)
	}
	// Still failing: it keeps waiting, the tries spaced further.
	t1 := w
	m.Tick(t1)
	wantBatch(t, m, t1, k, "<nil>")
	if w2 := m.Wake(); !w2.After(t1) || w2.After(t1.Add(2*bindRetryMin)) {
		t.Fatalf("second retry at %v after the first, want within %v", w2.Sub(t1), 2*bindRetryMin)
	}
	// A new sequence arriving while the store still fails is refused, not
	// placed ahead of the waiting one.
	if err := m.Enqueue(t1, req(3, true, false)); tritonerr.KindOf(err) != tritonerr.Unavailable {
		t.Fatalf("START while the store fails: %v, want UNAVAILABLE", err)
	}
	st.fail = false
	// The store works again: the next new sequence lets the waiting one
	// go first, and waits behind it.
	mustEnqueue(t, m, t1, req(3, true, false))
	if at, ok := m.Where(UintID(2)); !ok || at.Slot != 0 || st.bound[UintID(2)] != at {
		t.Fatalf("sequence 2 not bound in the store and in memory: %v %v %v", at, ok, st.bound)
	}
	wantBatch(t, m, t1, k, "2S")
	if s := m.Snapshot(); s.Backlog != 1 {
		t.Fatalf("sequence 3 did not wait behind 2: %+v", s)
	}

	// The retry itself (Tick at Wake) binds the waiting sequence.
	m, st, k = direct(1)
	mustEnqueue(t, m, t0, req(1, true, true), req(2, true, false))
	st.fail = true
	wantBatch(t, m, t0, k, "1SE")
	st.fail = false
	m.Tick(m.Wake())
	wantBatch(t, m, t0, k, "2S")
}

func TestHold(t *testing.T) {
	m := NewModel(Config{Model: "m", SlotsPerInstance: 2, HoldSlots: 3, Idle: time.Second}, nil, quiet)
	k := InstanceKey{Executor: "e"}
	m.AddInstance(t0, k)
	mustEnqueue(t, m, t0, req(1, true, false), req(1, false, false))
	wantBatch(t, m, t0, k, "<nil>")
	mustEnqueue(t, m, t0, req(2, true, false))
	wantBatch(t, m, t0, k, "1S 2S")
	wantBatch(t, m, t0, k, "1 _")
}

func TestTwoInstancesSpreadBySlot(t *testing.T) {
	m := NewModel(Config{Model: "m", SlotsPerInstance: 2, Idle: time.Second}, nil, quiet)
	a, b := InstanceKey{Executor: "e", Index: 0}, InstanceKey{Executor: "e", Index: 1}
	m.AddInstance(t0, a)
	m.AddInstance(t0, b)
	mustEnqueue(t, m, t0, req(1, true, false), req(2, true, false), req(3, true, false))
	wantBatch(t, m, t0, a, "1S 3S")
	wantBatch(t, m, t0, b, "2S")
}

func TestOldest(t *testing.T) {
	m := NewModel(Config{Model: "m", Strategy: Oldest, SlotsPerInstance: 4, MaxBatch: 2, Preferred: []int{2},
		MaxQueueDelay: 10 * time.Millisecond, Idle: time.Second}, nil, quiet)
	k := InstanceKey{Executor: "e"}
	m.AddInstance(t0, k)
	mustEnqueue(t, m, t0, req(1, true, false), req(1, false, false))
	// One ready request, preferred 2 not reached: wait out the queue delay.
	if b, wait := m.Next(t0, k); b != nil || wait != 10*time.Millisecond {
		t.Fatalf("got %s, wait %v", batchString(b), wait)
	}
	wantBatch(t, m, t0.Add(10*time.Millisecond), k, "1S")
	// Never two requests of one sequence in a batch; oldest first.
	t1 := t0.Add(20 * time.Millisecond)
	mustEnqueue(t, m, t1, req(2, true, false))
	mustEnqueue(t, m, t1.Add(time.Millisecond), req(3, true, false))
	wantBatch(t, m, t1.Add(time.Millisecond), k, "1 2S")
	wantBatch(t, m, t1.Add(20*time.Millisecond), k, "3S")
}

func TestRemoveExecutorAndRestore(t *testing.T) {
	m, st, k := direct(2)
	mustEnqueue(t, m, t0, req(1, true, false), req(2, true, false))
	wantBatch(t, m, t0, k, "1S 2S")
	mustEnqueue(t, m, t0, req(1, false, false))
	f := m.RemoveExecutor(t0, "e1", 0, nil)
	if len(f) != 1 || !strings.Contains(f[0].Err.Error(), "was lost") {
		t.Fatalf("failures %v", f)
	}
	if err := m.Enqueue(t0, req(2, false, false)); err == nil || !strings.Contains(err.Error(), "START flag") ||
		!strings.Contains(err.Error(), "lost with executor 'e1'") {
		t.Fatalf("got %v", err)
	}
	// A new START on the id forgets the loss: once that sequence ended, a
	// request without START gets Triton's message alone.
	mustEnqueue(t, m, t0, req(2, true, true))
	if err := m.Enqueue(t0, req(2, false, false)); err == nil || strings.Contains(err.Error(), "lost with") {
		t.Fatalf("got %v", err)
	}
	if len(st.bound) != 0 {
		t.Fatalf("bindings left: %v", st.bound)
	}

	// A new router rebuilds from the store.
	n := NewModel(Config{Model: "m", SlotsPerInstance: 2, Idle: time.Second}, nil, quiet)
	n.Restore(t0, map[ID]SlotRef{UintID(8): {k, 1}}, []ID{StringID("x")})
	mustEnqueue(t, n, t0, req(8, false, false), &Request{ID: StringID("x")})
	wantBatch(t, n, t0, k, "x 8")
	n.AddInstance(t0, k) // a pull from the known instance changes nothing
	wantBatch(t, n, t0, k, "<nil>")
}

// With durable state, the sequences of a lost executor move to the other
// instances: the request that was running goes first, then those queued,
// and the first request on the new slot is marked Resume. Sequences that
// find no free slot wait at the front of the backlog; nothing fails.
func TestRemoveExecutorDurable(t *testing.T) {
	st := &memStore{}
	m := NewModel(Config{Model: "m", SlotsPerInstance: 2, MaxBatch: 2, Idle: time.Second, Durable: true}, st, quiet)
	a, b := InstanceKey{Executor: "a", Index: 0}, InstanceKey{Executor: "b", Index: 0}
	m.AddInstance(t0, a)
	m.AddInstance(t0, b)
	// Slots fill slot number first: 1 on a/0, 2 on b/0, 3 on a/1.
	mustEnqueue(t, m, t0, req(1, true, false), req(2, true, false), req(3, true, false))
	wantBatch(t, m, t0, a, "1S 3S")
	wantBatch(t, m, t0, b, "2S")
	running1, running3 := req(1, false, false), req(3, false, true)
	mustEnqueue(t, m, t0, running1, running3)
	wantBatch(t, m, t0, a, "1 3E") // running on a when a is lost
	mustEnqueue(t, m, t0, req(1, false, false))
	mustEnqueue(t, m, t0, req(4, true, false)) // a/1 is free again: 4 takes it

	f := m.RemoveExecutor(t0, "a", 0, []*Request{running1, running3})
	if len(f) != 0 {
		t.Fatalf("failures %v", f)
	}
	// 1 takes b's free slot 1, its running request first; 3 (its END was
	// running) and 4 (never ran) find no slot and wait at the front of the
	// backlog in that order.
	if ref, ok := m.Where(UintID(1)); !ok || ref != (SlotRef{b, 1}) {
		t.Fatalf("sequence 1 at %+v %v", ref, ok)
	}
	if st.bound[UintID(1)] != (SlotRef{b, 1}) {
		t.Fatalf("store binding of 1: %+v", st.bound[UintID(1)])
	}
	if s := m.Snapshot(); s.Backlog != 2 {
		t.Fatalf("backlog %+v", s)
	}
	wantBatch(t, m, t0, b, "_ 1R")
	wantBatch(t, m, t0, b, "_ 1")
	wantBatch(t, m, t0, b, "<nil>")
	mustEnqueue(t, m, t0, req(1, false, true))
	wantBatch(t, m, t0, b, "_ 1E")
	// The slot freed by 1's END goes to 3, whose END runs again, then to 4.
	wantBatch(t, m, t0, b, "_ 3ER")
	wantBatch(t, m, t0, b, "_ 4SR")
	if s := m.Snapshot(); s.Backlog != 0 || s.Queued != 0 {
		t.Fatalf("left: %+v", s)
	}

	// A running request whose id has started again elsewhere since is
	// failed, not run again.
	old := req(2, false, true)
	mustEnqueue(t, m, t0, old)
	wantBatch(t, m, t0, b, "2E _")
	mustEnqueue(t, m, t0, req(2, true, false))
	c := InstanceKey{Executor: "c", Index: 0}
	m.AddInstance(t0, c)
	f = m.RemoveExecutor(t0, "c", 0, []*Request{old})
	if len(f) != 1 || !strings.Contains(f[0].Err.Error(), "has started again") {
		t.Fatalf("failures %v", f)
	}
}

func TestDrain(t *testing.T) {
	m, st, k := direct(1)
	mustEnqueue(t, m, t0, req(1, true, false), req(1, false, false), req(2, true, false))
	got := m.Drain()
	if len(got) != 3 {
		t.Fatalf("drained %d requests, want 3", len(got))
	}
	if s := m.Snapshot(); s.Queued != 0 || s.Active != 0 || s.Backlog != 0 {
		t.Fatalf("after drain: %+v", s)
	}
	if b, _ := m.Next(t0, k); b != nil {
		t.Fatalf("batch after drain: %s", batchString(b))
	}
	// The store keeps the binding for the router that takes over.
	if _, ok := st.bound[UintID(1)]; !ok {
		t.Fatal("drain dropped the stored binding")
	}
}

func TestRaggedShapesDoNotBatch(t *testing.T) {
	m, _, k := direct(3)
	shaped := func(id uint64, start, end bool, shape string) *Request {
		r := req(id, start, end)
		r.Shape = shape
		return r
	}
	mustEnqueue(t, m, t0, shaped(1, true, false, "2"), shaped(2, true, false, "1"), shaped(3, true, false, "2"))
	wantBatch(t, m, t0, k, "1S _ 3S")
	wantBatch(t, m, t0, k, "_ 2S _")
}

// TestRemoveInstanceOnUnload: an instance whose model version was unloaded
// leaves; its sequences end with the reason, now and for their later
// requests, until they START again or the idle time passes. Sequences of
// the other instance go on; once no instance is left the backlog ends too.
func TestRemoveInstanceOnUnload(t *testing.T) {
	m, st, k := direct(1)
	k2 := InstanceKey{Executor: "e2", Index: 0}
	m.AddInstance(t0, k2)
	mustEnqueue(t, m, t0, req(1, true, false), req(2, true, false), req(3, true, false))
	wantBatch(t, m, t0, k, "1S")
	wantBatch(t, m, t0, k2, "2S")
	mustEnqueue(t, m, t0, req(1, false, false)) // queued in k's slot
	const why = "model 'm' version 1 was unloaded"
	f := m.RemoveInstance(t0, k, why)
	if len(f) != 1 || f[0].Req.ID != UintID(1) || f[0].Err.Error() != "sequence 1 of model 'm' ended: "+why ||
		tritonerr.KindOf(f[0].Err) != tritonerr.Unavailable {
		t.Fatalf("failures %v", f)
	}
	if _, ok := st.bound[UintID(1)]; ok {
		t.Fatal("the ended sequence is still bound in the store")
	}
	err := m.Enqueue(t0.Add(time.Millisecond), req(1, false, false))
	if err == nil || err.Error() != "sequence 1 of model 'm' ended: "+why {
		t.Fatalf("later request of the ended sequence: %v", err)
	}
	// The other instance's sequence goes on; 3 waits in the backlog.
	mustEnqueue(t, m, t0, req(2, false, false))
	wantBatch(t, m, t0, k2, "2")
	// A START begins a new sequence with the id.
	mustEnqueue(t, m, t0, req(1, true, false))

	f = m.RemoveInstance(t0, k2, why)
	ids := map[ID]bool{}
	for _, x := range f {
		ids[x.Req.ID] = true
	}
	// 2's slot held no request; the backlog held 3S and the new 1S.
	if len(f) != 2 || !ids[UintID(3)] || !ids[UintID(1)] {
		t.Fatalf("failures once no instance is left: %v", f)
	}
	for _, id := range []uint64{2, 3} {
		if err := m.Enqueue(t0, req(id, false, false)); err == nil || !strings.Contains(err.Error(), "ended: "+why) {
			t.Fatalf("later request of sequence %d: %v", id, err)
		}
	}
	// After the idle time Triton's START error is back.
	m.Tick(t0.Add(2 * time.Second))
	if err := m.Enqueue(t0.Add(2*time.Second), req(2, false, false)); err == nil || !strings.Contains(err.Error(), "START flag") {
		t.Fatalf("request long after the unload: %v", err)
	}
}

// An END request waiting in its slot when the router steps down fails as
// not run (Drain) and its gateway sends it again, to the router that takes
// over from the store: the sequence must still be bound there. It leaves
// the store once an END request is answered.
func TestEndNotRunKeepsTheBinding(t *testing.T) {
	m, st, k := direct(2)
	mustEnqueue(t, m, t0, req(1, true, false))
	wantBatch(t, m, t0, k, "1S")
	mustEnqueue(t, m, t0, req(1, false, true))
	if got := len(m.Drain()); got != 1 {
		t.Fatalf("drained %d requests, want the END request", got)
	}
	if _, ok := st.bound[UintID(1)]; !ok {
		t.Fatalf("sequence 1 left the store before its END request ran: %v", st.ops)
	}

	next := NewModel(Config{Model: "m", Strategy: Direct, SlotsPerInstance: 2, MaxBatch: 2, Idle: time.Second}, st, quiet)
	next.AddInstance(t0, k)
	next.Restore(t0, st.bound, nil)
	end := req(1, false, true)
	mustEnqueue(t, next, t0, end) // sent again: no START error
	b, _ := next.Next(t0, k)
	if got := batchString(b); got != "1E" {
		t.Fatalf("batch = %q, want 1E", got)
	}
	if _, ok := st.bound[UintID(1)]; !ok {
		t.Fatal("sequence 1 left the store while its END request runs")
	}
	next.Answered(end)
	if _, ok := st.bound[UintID(1)]; ok {
		t.Fatalf("sequence 1 still bound after its END request was answered: %v", st.ops)
	}
	if err := next.Enqueue(t0, req(1, false, false)); tritonerr.KindOf(err) != tritonerr.InvalidArg {
		t.Fatalf("a request after the END: %v, want the START error", err)
	}
}

// A new START of an id whose END request is not answered yet takes the
// binding over; the old END's answer then leaves it alone.
func TestRestartWhileEndRuns(t *testing.T) {
	m, st, k := direct(2)
	mustEnqueue(t, m, t0, req(1, true, false))
	wantBatch(t, m, t0, k, "1S")
	end := req(1, false, true)
	mustEnqueue(t, m, t0, end)
	wantBatch(t, m, t0, k, "1E")
	mustEnqueue(t, m, t0, req(1, true, false))
	m.Answered(end)
	if _, ok := st.bound[UintID(1)]; !ok {
		t.Fatalf("the restarted sequence 1 lost its binding when the old END was answered: %v", st.ops)
	}
}
