package dynbatch

import (
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

// add queues an item of size 1 with its own priority and timeout (ms) at
// the given millisecond, with no instance idle, and fails the test on a
// refusal.
func add(t *testing.T, q *Queue[*item], at, id int, priority uint64, timeoutMs int) {
	t.Helper()
	if _, err := q.Add(ms(at), &item{id: id, size: 1}, 1, 0, Ask{Priority: priority, Timeout: time.Duration(timeoutMs) * time.Millisecond}); err != nil {
		t.Fatalf("item %d refused: %v", id, err)
	}
}

// order takes every batch due at now, one instance at a time, and returns
// the ids in the order they would run.
func order(q *Queue[*item], now int) []int {
	var out []int
	for {
		batch, _ := q.Next(ms(now), 1)
		if batch == nil {
			return out
		}
		out = append(out, ids(batch)...)
	}
}

// TestLevel checks the level a request's priority puts it in, as Triton's
// InferenceRequest::SetPriority: 0 and anything past priority_levels are
// the default level; 1 is the highest.
func TestLevel(t *testing.T) {
	for _, tc := range []struct {
		levels, def, priority, want uint64
	}{
		{0, 0, 0, 0},
		{0, 0, 3, 0}, // no levels: everything at the default
		{3, 2, 0, 2},
		{3, 2, 1, 1},
		{3, 2, 3, 3},
		{3, 2, 4, 2},
		{3, 2, 1 << 63, 2},
	} {
		q := New[*item](Config{PriorityLevels: tc.levels, DefaultPriority: tc.def})
		if got := q.Level(tc.priority); got != tc.want {
			t.Errorf("priority_levels %d default %d: priority %d goes to level %d, want %d", tc.levels, tc.def, tc.priority, got, tc.want)
		}
	}
}

// TestPriorityOrder checks that the higher priority levels are served
// first, oldest first within a level, with and without batching, and that
// a batch is cut across levels in that order.
func TestPriorityOrder(t *testing.T) {
	levels := Config{PriorityLevels: 3, DefaultPriority: 2}
	batched := levels
	batched.MaxBatchSize = 4
	delayed := batched
	delayed.MaxQueueDelay = 100 * time.Millisecond
	// Items 0..5 arrive 1 ms apart with these priorities: 0 and 5 go to
	// the default level 2.
	priorities := []uint64{0, 3, 1, 5, 2, 1}
	for _, tc := range []struct {
		name    string
		cfg     Config
		now     int
		batches [][]int
	}{
		{"no batching: one at a time", levels, 10, [][]int{{2}, {5}, {0}, {3}, {4}, {1}}},
		{"batching: the highest levels fill the batch first", batched, 10, [][]int{{2, 5, 0, 3}, {4, 1}}},
		{"no levels: arrival order", Config{MaxBatchSize: 4}, 10, [][]int{{0, 1, 2, 3}, {4, 5}}},
		// The queue delay counts from the oldest item in the batch, not
		// from the first: item 0 arrived at 0 ms though item 2 leads.
		{"the delay passed for every item", delayed, 105, [][]int{{2, 5, 0, 3}, {4, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New[*item](tc.cfg)
			for i, p := range priorities {
				add(t, q, i, i, p, 0)
			}
			for _, want := range tc.batches {
				batch, wait := q.Next(ms(tc.now), 1)
				if !slices.Equal(ids(batch), want) {
					t.Fatalf("batch %v (wait %s), want %v", ids(batch), wait, want)
				}
			}
			if q.Len() != 0 {
				t.Fatalf("%d left", q.Len())
			}
		})
	}

	// Below max_batch_size with a delay the batch waits for the oldest
	// item of all, item 0 at 0 ms, even though item 2 (2 ms) leads it.
	q := New[*item](delayed)
	add(t, q, 0, 0, 2, 0)
	add(t, q, 2, 2, 1, 0)
	if batch, wait := q.Next(ms(50), 1); batch != nil || wait != 50*time.Millisecond {
		t.Fatalf("at 50 ms: batch %v, wait %s; want none, 50ms", ids(batch), wait)
	}
	if got := order(q, 100); !slices.Equal(got, []int{2, 0}) {
		t.Fatalf("at 100 ms: %v, want [2 0]", got)
	}
}

// TestHighPriorityUnderBacklog checks the property the priority
// benchmark measures: a high-priority item arriving behind any backlog of
// low-priority ones is the next to run.
func TestHighPriorityUnderBacklog(t *testing.T) {
	q := New[*item](Config{MaxBatchSize: 1, PriorityLevels: 2, DefaultPriority: 2})
	for i := range 1000 {
		add(t, q, 0, i, 2, 0)
	}
	q.Next(ms(1), 1) // one low-priority execution under way
	add(t, q, 2, 1000, 1, 0)
	if batch, _ := q.Next(ms(3), 1); !slices.Equal(ids(batch), []int{1000}) {
		t.Fatalf("next ran %v, want the high-priority [1000]", ids(batch))
	}
	if q.Len() != 999 {
		t.Fatalf("%d left, want 999", q.Len())
	}
}

// TestMaxQueueSize checks max_queue_size per level: a level holding its
// bound refuses with ErrFull ("Exceeds maximum queue size"), other levels
// keep their own bound, items delayed after a timeout count, and room
// made by a batch is room again.
func TestMaxQueueSize(t *testing.T) {
	cfg := Config{
		PriorityLevels: 2, DefaultPriority: 2,
		DefaultPolicy: Policy{MaxQueueSize: 2},
		Policies:      map[uint64]Policy{1: {MaxQueueSize: 1, Timeout: 10 * time.Millisecond, Delay: true}},
	}
	q := New[*item](cfg)
	try := func(at, id int, priority uint64) error {
		_, err := q.Add(ms(at), &item{id: id, size: 1}, 1, 0, Ask{Priority: priority})
		return err
	}
	for _, step := range []struct {
		id       int
		priority uint64
		full     bool
	}{
		{0, 0, false}, {1, 2, false},
		{2, 0, true}, // the default level holds 2
		{3, 1, false},
		{4, 1, true}, // level 1 holds 1
		{5, 9, true}, // past priority_levels: the default level
	} {
		err := try(0, step.id, step.priority)
		if step.full != (err != nil) || (err != nil && !errors.Is(err, ErrFull)) {
			t.Fatalf("item %d at priority %d: %v, want refused %v", step.id, step.priority, err, step.full)
		}
	}
	if ErrFull.Error() != "Exceeds maximum queue size" {
		t.Fatalf("ErrFull says %q", ErrFull)
	}
	// Item 3 times out and is delayed: it still counts.
	if rejected, _ := q.Expire(ms(10), nil); len(rejected) != 0 {
		t.Fatalf("DELAY rejected %v", ids(rejected))
	}
	if err := try(11, 6, 1); !errors.Is(err, ErrFull) {
		t.Fatalf("a level holding a delayed item took another: %v", err)
	}
	if got := order(q, 11); !slices.Equal(got, []int{3, 0, 1}) {
		t.Fatalf("ran %v, want [3 0 1]", got)
	}
	if err := try(12, 7, 0); err != nil {
		t.Fatalf("an emptied level refused: %v", err)
	}
	if err := try(12, 8, 1); err != nil {
		t.Fatalf("an emptied level refused: %v", err)
	}

	// An item that runs alone at once never counts against the bound.
	q = New[*item](Config{DefaultPolicy: Policy{MaxQueueSize: 1}})
	for i := range 3 {
		if alone, err := q.Add(ms(0), &item{id: i, size: 1}, 1, 1, Ask{}); !alone || err != nil {
			t.Fatalf("item %d: alone %v, %v", i, alone, err)
		}
	}
}

// TestTimeouts drives the clock through the queue policies' timeouts:
// REJECT takes an item out when its timeout passes, DELAY moves it
// behind the level's items that did not time out, a request's own
// timeout applies only when allow_timeout_override is set and it is
// shorter than the level's, and Expire says when to look next.
func TestTimeouts(t *testing.T) {
	const timeout = 100 * time.Millisecond
	reject := Policy{Timeout: timeout}
	delay := Policy{Timeout: timeout, Delay: true}
	override := Policy{Timeout: timeout, AllowOverride: true}
	type arrival struct {
		at, id, timeoutMs int // timeoutMs: the request's own, 0 for none
	}
	for _, tc := range []struct {
		name     string
		policy   Policy
		arrivals []arrival
		now      int   // when Expire runs (ms)
		rejected []int // ids rejected
		wait     time.Duration
		runs     []int // the order the rest runs in
	}{
		{"REJECT: not yet", reject, []arrival{{0, 0, 0}, {10, 1, 0}}, 99, nil, time.Millisecond, []int{0, 1}},
		{"REJECT: at its timeout", reject, []arrival{{0, 0, 0}, {10, 1, 0}}, 100, []int{0}, 10 * time.Millisecond, []int{1}},
		{"REJECT: all of them", reject, []arrival{{0, 0, 0}, {10, 1, 0}}, 500, []int{0, 1}, 0, nil},
		{"DELAY: behind the others", delay, []arrival{{0, 0, 0}, {10, 1, 0}, {20, 2, 0}}, 100, nil, 10 * time.Millisecond, []int{1, 2, 0}},
		{"DELAY: in the order they timed out", delay, []arrival{{0, 0, 0}, {10, 1, 0}, {20, 2, 0}}, 115, nil, 5 * time.Millisecond, []int{2, 0, 1}},
		{"override not allowed: the request's timeout is ignored", reject, []arrival{{0, 0, 10}}, 50, nil, 50 * time.Millisecond, []int{0}},
		{"override allowed: a shorter timeout applies", override, []arrival{{0, 0, 10}, {0, 1, 0}}, 10, []int{0}, 90 * time.Millisecond, []int{1}},
		{"override allowed: a longer timeout does not", override, []arrival{{0, 0, 500}}, 100, []int{0}, 0, nil},
		{"override allowed: no timeout at the level, none set", Policy{AllowOverride: true}, []arrival{{0, 0, 10}}, 1000, nil, 0, []int{0}},
		{"no timeout", Policy{}, []arrival{{0, 0, 0}}, 1 << 30, nil, 0, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New[*item](Config{DefaultPolicy: tc.policy})
			if q.Timed() != (tc.policy.Timeout > 0) {
				t.Fatalf("Timed %v with a timeout of %s", q.Timed(), tc.policy.Timeout)
			}
			for _, a := range tc.arrivals {
				add(t, q, a.at, a.id, 0, a.timeoutMs)
			}
			rejected, wait := q.Expire(ms(tc.now), nil)
			if !slices.Equal(ids(rejected), tc.rejected) || wait != tc.wait {
				t.Fatalf("rejected %v, next in %s; want %v, %s", ids(rejected), wait, tc.rejected, tc.wait)
			}
			if q.Len() != len(tc.arrivals)-len(rejected) {
				t.Fatalf("%d queued after rejecting %d of %d", q.Len(), len(rejected), len(tc.arrivals))
			}
			if got := order(q, tc.now); !slices.Equal(got, tc.runs) {
				t.Fatalf("ran %v, want %v", got, tc.runs)
			}
		})
	}
}

// TestTimeoutsPerLevel checks that each level applies its own policy and
// that a delayed item of a higher level still runs before a lower level.
func TestTimeoutsPerLevel(t *testing.T) {
	q := New[*item](Config{
		MaxBatchSize: 2, PriorityLevels: 2, DefaultPriority: 2,
		DefaultPolicy: Policy{Timeout: 50 * time.Millisecond},
		Policies:      map[uint64]Policy{1: {Timeout: 20 * time.Millisecond, Delay: true}},
	})
	add(t, q, 0, 0, 1, 0) // level 1, delayed at 20 ms
	add(t, q, 5, 1, 1, 0) // level 1, delayed at 25 ms
	add(t, q, 0, 2, 2, 0) // level 2, rejected at 50 ms
	add(t, q, 30, 3, 2, 0)
	add(t, q, 30, 4, 1, 0) // level 1, in time
	if _, wait := q.Expire(ms(0), nil); wait != 20*time.Millisecond {
		t.Fatalf("first timeout in %s, want 20ms", wait)
	}
	rejected, wait := q.Expire(ms(50), nil)
	// Item 4 (level 1) timed out at 50 ms too: delayed behind 0 and 1.
	// Item 3 (level 2) times out at 80 ms.
	if !slices.Equal(ids(rejected), []int{2}) || wait != 30*time.Millisecond {
		t.Fatalf("rejected %v, next in %s; want [2], 30ms", ids(rejected), wait)
	}
	if got := order(q, 50); !slices.Equal(got, []int{0, 1, 4, 3}) {
		t.Fatalf("ran %v, want [0 1 4 3]", got)
	}
}

// TestDropCancelledAcrossLevels checks that cancelled items leave every
// level, delayed ones included, and that what is left keeps its order.
func TestDropCancelledAcrossLevels(t *testing.T) {
	q := New[*item](Config{PriorityLevels: 2, DefaultPriority: 2, Policies: map[uint64]Policy{1: {Timeout: time.Millisecond, Delay: true}}})
	var all []*item
	for i, p := range []uint64{1, 2, 1, 2, 1} {
		it := &item{id: i, size: 1}
		all = append(all, it)
		if _, err := q.Add(ms(i), it, 1, 0, Ask{Priority: p}); err != nil {
			t.Fatal(err)
		}
	}
	q.Expire(ms(3), nil) // 0 and 2 are delayed
	all[0].cancelled, all[3].cancelled = true, true
	if dropped := q.DropCancelled(nil); !slices.Equal(ids(dropped), []int{0, 3}) {
		t.Fatalf("dropped %v, want [0 3]", ids(dropped))
	}
	if left := q.Drain(nil); !slices.Equal(ids(left), []int{4, 2, 1}) || q.Len() != 0 {
		t.Fatalf("left %v, %d queued; want [4 2 1]", ids(left), q.Len())
	}
	if _, wait := q.Expire(ms(10), nil); wait != 0 {
		t.Fatalf("a drained queue waits %s for a timeout", wait)
	}
}

// TestEnqueueRefusedPanics checks that Enqueue, for unbounded queues,
// does not lose an item silently on a bounded one.
func TestEnqueueRefusedPanics(t *testing.T) {
	q := New[*item](Config{DefaultPolicy: Policy{MaxQueueSize: 1}})
	q.Enqueue(ms(0), &item{id: 0, size: 1}, 1, 0)
	defer func() {
		if recover() == nil {
			t.Fatal("Enqueue refused an item without a word")
		}
	}()
	q.Enqueue(ms(0), &item{id: 1, size: 1}, 1, 0)
}

// TestConfigFromPolicies checks what is read of the priority and queue
// policy settings, with or without a batch dimension.
func TestConfigFromPolicies(t *testing.T) {
	db := &inference.ModelDynamicBatching{
		PriorityLevels: 3, DefaultPriorityLevel: 2,
		DefaultQueuePolicy: &inference.ModelQueuePolicy{MaxQueueSize: 4, DefaultTimeoutMicroseconds: 1000, AllowTimeoutOverride: true},
		PriorityQueuePolicy: map[uint64]*inference.ModelQueuePolicy{
			1: {TimeoutAction: inference.ModelQueuePolicy_DELAY, DefaultTimeoutMicroseconds: 1 << 63},
		},
	}
	want := Config{
		PriorityLevels: 3, DefaultPriority: 2,
		DefaultPolicy: Policy{MaxQueueSize: 4, Timeout: time.Millisecond, AllowOverride: true},
		Policies:      map[uint64]Policy{1: {Timeout: maxTimeout, Delay: true}},
	}
	for _, mbs := range []int32{0, 8} {
		got := ConfigFrom(proto.Clone(&inference.ModelConfig{MaxBatchSize: mbs, SchedulingChoice: dyn(db)}).(*inference.ModelConfig))
		if got.PriorityLevels != want.PriorityLevels || got.DefaultPriority != want.DefaultPriority ||
			got.DefaultPolicy != want.DefaultPolicy || len(got.Policies) != 1 || got.Policies[1] != want.Policies[1] {
			t.Fatalf("max_batch_size %d: %+v, want %+v", mbs, got, want)
		}
		if got.MaxBatchSize != int(mbs) {
			t.Fatalf("max_batch_size %d read as %d", mbs, got.MaxBatchSize)
		}
	}
	if got := AskMicros(3, 1500); got != (Ask{Priority: 3, Timeout: 1500 * time.Microsecond}) {
		t.Fatalf("AskMicros: %+v", got)
	}
	if got := AskMicros(0, -5); got != (Ask{}) {
		t.Fatalf("AskMicros of a negative timeout: %+v", got)
	}
}
