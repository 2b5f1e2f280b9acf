package dynbatch

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

// item is a queued request of the tests: its batch size and whether its
// client gave up.
type item struct {
	id        int
	size      int
	cancelled bool
}

func (i *item) Cancelled() bool { return i.cancelled }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ms is a time d milliseconds after t0.
func ms(d int) time.Time { return t0.Add(time.Duration(d) * time.Millisecond) }

// ids are the ids of a batch's items, in order.
func ids(batch []*item) []int {
	var out []int
	for _, it := range batch {
		out = append(out, it.id)
	}
	return out
}

// TestNext checks the batch cut from a queue at a given time against
// Triton's rules, and the wait returned when none is due.
func TestNext(t *testing.T) {
	const delay = 100 * time.Millisecond
	for _, tc := range []struct {
		name  string
		cfg   Config
		sizes []int // batch sizes, queued at t0 one millisecond apart
		now   int   // milliseconds after t0
		idle  int   // idle instances; 1 when 0
		want  []int // ids (index in sizes) of the batch, nil: none
		wait  time.Duration
	}{
		{name: "no batching: one at a time, oldest first",
			cfg: Config{}, sizes: []int{1, 1, 1}, want: []int{0}},
		{name: "no batching ignores the delay",
			cfg: Config{MaxQueueDelay: delay}, sizes: []int{2, 1}, want: []int{0}},
		{name: "no delay: what is queued goes",
			cfg: Config{MaxBatchSize: 8}, sizes: []int{1, 2, 1}, want: []int{0, 1, 2}},
		{name: "max_batch_size bounds the batch",
			cfg: Config{MaxBatchSize: 8}, sizes: []int{4, 3, 2}, want: []int{0, 1}},
		{name: "a request larger than what remains ends the batch, which goes at once",
			cfg: Config{MaxBatchSize: 8, MaxQueueDelay: delay}, sizes: []int{5, 4}, want: []int{0}},
		{name: "requests behind the larger one wait their turn",
			cfg: Config{MaxBatchSize: 8, MaxQueueDelay: delay}, sizes: []int{5, 4, 1}, want: []int{0}},
		{name: "exactly max_batch_size goes at once",
			cfg: Config{MaxBatchSize: 8, MaxQueueDelay: delay}, sizes: []int{4, 2, 2}, want: []int{0, 1, 2}},
		{name: "below max_batch_size waits for the delay of the oldest",
			cfg: Config{MaxBatchSize: 8, MaxQueueDelay: delay}, sizes: []int{1, 1, 1}, now: 30, wait: 70 * time.Millisecond},
		{name: "just before the delay: still waits",
			cfg: Config{MaxBatchSize: 8, MaxQueueDelay: delay}, sizes: []int{1, 1, 1}, now: 99, wait: time.Millisecond},
		{name: "the delay passed: what is queued goes",
			cfg: Config{MaxBatchSize: 8, MaxQueueDelay: delay}, sizes: []int{1, 1, 1}, now: 100, want: []int{0, 1, 2}},
		{name: "the delay passed: never above max_batch_size",
			cfg: Config{MaxBatchSize: 8, MaxQueueDelay: delay}, sizes: []int{3, 3, 3}, now: 500, want: []int{0, 1}},
		{name: "a preferred size reached goes at once",
			cfg: Config{MaxBatchSize: 8, Preferred: []int{4}, MaxQueueDelay: delay}, sizes: []int{1, 1, 1, 1}, want: []int{0, 1, 2, 3}},
		{name: "the largest preferred size caps the batch",
			cfg: Config{MaxBatchSize: 8, Preferred: []int{4}, MaxQueueDelay: delay}, sizes: []int{1, 1, 1, 1, 1, 1}, want: []int{0, 1, 2, 3}},
		{name: "a smaller preferred size goes when the larger is out of reach",
			cfg: Config{MaxBatchSize: 8, Preferred: []int{2, 4}, MaxQueueDelay: delay}, sizes: []int{1, 1, 1}, want: []int{0, 1}},
		{name: "the largest preferred size reached wins",
			cfg: Config{MaxBatchSize: 8, Preferred: []int{2, 4}, MaxQueueDelay: delay}, sizes: []int{1, 1, 1, 1, 1}, want: []int{0, 1, 2, 3}},
		{name: "past the largest preferred size: what came before goes",
			cfg: Config{MaxBatchSize: 8, Preferred: []int{4}, MaxQueueDelay: delay}, sizes: []int{3, 3}, want: []int{0}},
		{name: "below the preferred size: waits",
			cfg: Config{MaxBatchSize: 8, Preferred: []int{4}, MaxQueueDelay: delay}, sizes: []int{1, 1, 1}, now: 10, wait: 90 * time.Millisecond},
		{name: "below the preferred size without a delay: goes",
			cfg: Config{MaxBatchSize: 8, Preferred: []int{4}}, sizes: []int{1, 1, 1}, want: []int{0, 1, 2}},
		{name: "the delay passed: everything that fits goes, past the preferred size",
			cfg: Config{MaxBatchSize: 8, Preferred: []int{4}, MaxQueueDelay: delay}, sizes: []int{1, 1, 1, 1, 1, 1}, now: 100, want: []int{0, 1, 2, 3, 4, 5}},
		{name: "the delay passed: a batch past the preferred size",
			cfg: Config{MaxBatchSize: 8, Preferred: []int{4}, MaxQueueDelay: delay}, sizes: []int{3, 3}, now: 100, want: []int{0, 1}},
		{name: "no idle instance: nothing, and no timer",
			cfg: Config{MaxBatchSize: 8}, sizes: []int{8}, idle: -1},
		{name: "an empty queue: nothing, and no timer",
			cfg: Config{MaxBatchSize: 8, MaxQueueDelay: delay}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New[*item](tc.cfg)
			for i, size := range tc.sizes {
				if q.Enqueue(ms(i), &item{id: i, size: size}, size, 0) {
					t.Fatal("ran alone with no idle instance")
				}
			}
			idle := tc.idle
			if idle == 0 {
				idle = 1
			} else if idle < 0 {
				idle = 0
			}
			batch, wait := q.Next(ms(tc.now), idle)
			if !slices.Equal(ids(batch), tc.want) || wait != tc.wait {
				t.Fatalf("batch %v, wait %s; want %v, wait %s", ids(batch), wait, tc.want, tc.wait)
			}
			if q.Len() != len(tc.sizes)-len(batch) {
				t.Fatalf("%d left queued of %d, batch of %d", q.Len(), len(tc.sizes), len(batch))
			}
		})
	}
}

// TestDrivenClock drives one queue through time: the oldest request's
// delay sets the wait, requests joining do not reset it, a batch goes when
// it runs out, and the next oldest's delay counts from its own arrival.
func TestDrivenClock(t *testing.T) {
	q := New[*item](Config{MaxBatchSize: 4, MaxQueueDelay: 100 * time.Millisecond})
	if !q.Timed() {
		t.Fatal("a queue delay does not make the queue read the clock")
	}
	next := func(now, idle int, want []int, wait time.Duration) {
		t.Helper()
		batch, w := q.Next(ms(now), idle)
		if !slices.Equal(ids(batch), want) || w != wait {
			t.Fatalf("at %d ms: batch %v, wait %s; want %v, wait %s", now, ids(batch), w, want, wait)
		}
	}
	// With an instance idle, a lone request of 1 waits for company.
	if q.Enqueue(ms(0), &item{id: 0, size: 1}, 1, 1) {
		t.Fatal("a request below max_batch_size ran at once despite the delay")
	}
	next(0, 1, nil, 100*time.Millisecond)
	q.Enqueue(ms(40), &item{id: 1, size: 1}, 1, 1)
	next(40, 1, nil, 60*time.Millisecond) // the oldest's delay, not the newest's
	q.Enqueue(ms(70), &item{id: 2, size: 1}, 1, 1)
	next(99, 1, nil, time.Millisecond)
	next(100, 0, nil, 0) // due, but no instance to take it
	next(100, 1, []int{0, 1, 2}, 0)
	next(100, 1, nil, 0) // empty: wait for a request

	// Four of 1 fill max_batch_size and go at once; the fifth stays, and
	// its delay counts from when it came.
	for i := 3; i < 8; i++ {
		q.Enqueue(ms(200+i), &item{id: i, size: 1}, 1, 0)
	}
	next(210, 1, []int{3, 4, 5, 6}, 0)
	next(210, 1, nil, 97*time.Millisecond)
	next(307, 1, []int{7}, 0)
}

// TestEnqueueAlone checks when a request arriving at an empty queue with an
// instance idle runs at once, alone, rather than being queued.
func TestEnqueueAlone(t *testing.T) {
	const delay = time.Second
	for _, tc := range []struct {
		name   string
		cfg    Config
		queued int // requests of 1 already queued
		size   int
		idle   int
		alone  bool
	}{
		{"no batching", Config{}, 0, 1, 1, true},
		{"no batching, all instances busy", Config{}, 0, 1, 0, false},
		{"no batching, others queued", Config{}, 1, 1, 1, false},
		{"no delay", Config{MaxBatchSize: 8}, 0, 1, 2, true},
		{"a delay: waits for company", Config{MaxBatchSize: 8, MaxQueueDelay: delay}, 0, 1, 1, false},
		{"a delay, but a full batch", Config{MaxBatchSize: 8, MaxQueueDelay: delay}, 0, 8, 1, true},
		{"a delay, but a preferred size", Config{MaxBatchSize: 8, Preferred: []int{2, 8}, MaxQueueDelay: delay}, 0, 2, 1, true},
		{"a delay, max_batch_size 1", Config{MaxBatchSize: 1, MaxQueueDelay: delay}, 0, 1, 1, true},
		{"no delay, others queued", Config{MaxBatchSize: 8}, 2, 1, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New[*item](tc.cfg)
			for i := range tc.queued {
				q.Enqueue(ms(0), &item{id: i, size: 1}, 1, 0)
			}
			it := &item{id: 99, size: tc.size}
			if alone := q.Enqueue(ms(1), it, tc.size, tc.idle); alone != tc.alone {
				t.Fatalf("alone %v, want %v", alone, tc.alone)
			}
			want := tc.queued + 1
			if tc.alone {
				want = tc.queued
			}
			if q.Len() != want {
				t.Fatalf("%d queued, want %d", q.Len(), want)
			}
			if !tc.alone {
				left := q.Drain(nil)
				if left[len(left)-1] != it {
					t.Fatal("the request is not last in the queue")
				}
			}
		})
	}
}

// TestDropCancelled checks that cancelled requests leave the queue, in
// order, and that the others keep theirs, with their arrival times.
func TestDropCancelled(t *testing.T) {
	q := New[*item](Config{MaxBatchSize: 8, MaxQueueDelay: 100 * time.Millisecond})
	var all []*item
	for i, c := range []bool{true, false, true, true, false, false, true} {
		it := &item{id: i, size: 1, cancelled: c}
		all = append(all, it)
		q.Enqueue(ms(10*i), it, 1, 0)
	}
	buf := make([]*item, 0, 8)
	dropped := q.DropCancelled(buf)
	if !slices.Equal(ids(dropped), []int{0, 2, 3, 6}) || &dropped[0] != &buf[:1][0] {
		t.Fatalf("dropped %v (in the buffer given: %v), want [0 2 3 6]", ids(dropped), &dropped[0] == &buf[:1][0])
	}
	if q.Len() != 3 {
		t.Fatalf("%d left, want 3", q.Len())
	}
	// The oldest left arrived at 10 ms: its delay runs out at 110 ms.
	if batch, wait := q.Next(ms(50), 1); batch != nil || wait != 60*time.Millisecond {
		t.Fatalf("at 50 ms: batch %v, wait %s; want none, 60ms", ids(batch), wait)
	}
	// Nothing cancelled: nothing moves.
	if dropped := q.DropCancelled(nil); len(dropped) != 0 || q.Len() != 3 {
		t.Fatalf("dropped %v with nothing cancelled", ids(dropped))
	}
	// A request cancelled later leaves too, wherever it is.
	all[5].cancelled = true
	if dropped := q.DropCancelled(nil); !slices.Equal(ids(dropped), []int{5}) {
		t.Fatalf("dropped %v, want [5]", ids(dropped))
	}
	if batch, _ := q.Next(ms(110), 1); !slices.Equal(ids(batch), []int{1, 4}) {
		t.Fatalf("batch %v, want [1 4]", ids(batch))
	}
	all[1].cancelled, all[4].cancelled = true, true
	if dropped := q.DropCancelled(nil); len(dropped) != 0 {
		t.Fatalf("dropped %v from an empty queue", ids(dropped))
	}
}

// TestDrain checks that Drain empties the queue in order.
func TestDrain(t *testing.T) {
	q := New[*item](Config{MaxBatchSize: 8, MaxQueueDelay: time.Second})
	for i := range 3 {
		q.Enqueue(ms(i), &item{id: i, size: 1}, 1, 0)
	}
	if left := q.Drain(nil); !slices.Equal(ids(left), []int{0, 1, 2}) || q.Len() != 0 {
		t.Fatalf("drained %v, %d left", ids(left), q.Len())
	}
	if batch, wait := q.Next(ms(5000), 1); batch != nil || wait != 0 {
		t.Fatalf("a drained queue cut %v, wait %s", ids(batch), wait)
	}
}

// TestTimed checks that only a queue delay with batching makes the
// decisions read the clock, and that without one the zero time will do.
func TestTimed(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		timed bool
	}{
		{Config{}, false},
		{Config{MaxQueueDelay: time.Second}, false}, // no batching
		{Config{MaxBatchSize: 8}, false},
		{Config{MaxBatchSize: 8, MaxQueueDelay: time.Microsecond}, true},
	} {
		q := New[*item](tc.cfg)
		if q.Timed() != tc.timed {
			t.Errorf("%+v: timed %v, want %v", tc.cfg, q.Timed(), tc.timed)
		}
		if tc.timed {
			continue
		}
		q.Enqueue(time.Now(), &item{size: 1}, 1, 0)
		if batch, _ := q.Next(time.Time{}, 1); len(batch) != 1 {
			t.Errorf("%+v: no batch at the zero time", tc.cfg)
		}
	}
}

func dyn(db *inference.ModelDynamicBatching) *inference.ModelConfig_DynamicBatching {
	return &inference.ModelConfig_DynamicBatching{DynamicBatching: db}
}

// TestConfigFrom checks what is read of a model config: dynamic batching
// needs the section and a batch dimension.
func TestConfigFrom(t *testing.T) {
	db := &inference.ModelDynamicBatching{PreferredBatchSize: []int32{2, 4}, MaxQueueDelayMicroseconds: 1500}
	for _, tc := range []struct {
		name string
		cfg  *inference.ModelConfig
		want Config
	}{
		{"no dynamic_batching", &inference.ModelConfig{MaxBatchSize: 8}, Config{}},
		{"no batch dimension", &inference.ModelConfig{SchedulingChoice: dyn(db)}, Config{}},
		{"dynamic batching", &inference.ModelConfig{MaxBatchSize: 8, SchedulingChoice: dyn(db)},
			Config{MaxBatchSize: 8, Preferred: []int{2, 4}, MaxQueueDelay: 1500 * time.Microsecond}},
		{"defaults", &inference.ModelConfig{MaxBatchSize: 4, SchedulingChoice: dyn(&inference.ModelDynamicBatching{})},
			Config{MaxBatchSize: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ConfigFrom(proto.Clone(tc.cfg).(*inference.ModelConfig))
			if got.MaxBatchSize != tc.want.MaxBatchSize || got.MaxQueueDelay != tc.want.MaxQueueDelay || !slices.Equal(got.Preferred, tc.want.Preferred) {
				t.Fatalf("%+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestAllocations checks the hot path's allocations: one per batch (the
// batch handed to an instance), none to queue or drop a request once the
// queue and the caller's buffer have grown.
func TestAllocations(t *testing.T) {
	q := New[*item](Config{MaxBatchSize: 8, MaxQueueDelay: time.Second})
	items := make([]*item, 8)
	for i := range items {
		items[i] = &item{id: i, size: 1}
	}
	buf := make([]*item, 0, 8)
	cycle := func() {
		for _, it := range items {
			q.Enqueue(t0, it, 1, 0)
		}
		buf = q.DropCancelled(buf[:0])
		if batch, _ := q.Next(t0, 1); len(batch) != 8 {
			t.Fatalf("batch of %d, want 8", len(batch))
		}
	}
	cycle()
	if n := testing.AllocsPerRun(100, cycle); n != 1 {
		t.Fatalf("%v allocations per batch of 8, want 1", n)
	}
}

// BenchmarkCycle queues eight requests and cuts them into a batch: the
// core's own work per batch on the executor's hot path.
func BenchmarkCycle(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no-delay", Config{MaxBatchSize: 8}},
		{"delay", Config{MaxBatchSize: 8, MaxQueueDelay: time.Millisecond}},
		{"preferred", Config{MaxBatchSize: 16, Preferred: []int{4, 8}, MaxQueueDelay: time.Millisecond}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			q := New[*item](tc.cfg)
			items := make([]*item, 8)
			for i := range items {
				items[i] = &item{id: i, size: 1}
			}
			var buf []*item
			b.ReportAllocs()
			for b.Loop() {
				for _, it := range items {
					q.Enqueue(t0, it, 1, 0)
				}
				buf = q.DropCancelled(buf[:0])
				if batch, _ := q.Next(t0, 1); len(batch) != 8 {
					b.Fatalf("batch of %d", len(batch))
				}
			}
		})
	}
}
