package executor

import (
	"testing"
	"time"

	"github.com/nereid-io/nereid/services/executor/internal/dynbatch"
)

// TestCutRules checks the batch the dynamic batcher forms from a queue
// against Triton's rules (dynamic_batch_scheduler.cc, GetDynamicBatch):
// max_batch_size bounds a batch, the largest preferred size caps it while
// the queue delay runs, a preferred size reached goes at once, and once
// the oldest request has waited max_queue_delay_microseconds everything
// that fits goes.
func TestCutRules(t *testing.T) {
	const long = time.Hour
	for _, tc := range []struct {
		name      string
		dynamic   bool
		preferred []int
		delay     time.Duration
		expired   bool  // the oldest request has waited the delay out
		sizes     []int // batch sizes of the queued requests, oldest first
		want      int   // requests in the batch; 0: wait
	}{
		{"no batching: one at a time", false, nil, 0, false, []int{1, 1, 1}, 1},
		{"no delay: what is there goes", true, nil, 0, false, []int{1, 1, 1}, 3},
		{"no delay: never above max_batch_size", true, nil, 0, false, []int{4, 3, 2}, 2},
		{"delay: waits for a full batch", true, nil, long, false, []int{1, 1, 1}, 0},
		{"delay: a full batch goes at once", true, nil, long, false, []int{4, 2, 2}, 3},
		{"delay: a batch that cannot grow goes at once", true, nil, long, false, []int{4, 3, 2}, 2},
		{"delay passed: what is there goes", true, nil, long, true, []int{1, 1, 1}, 3},
		{"preferred reached goes at once", true, []int{4}, long, false, []int{1, 1, 1, 1}, 4},
		{"largest preferred caps the batch", true, []int{4}, long, false, []int{1, 1, 1, 1, 1, 1}, 4},
		{"largest preferred caps a full queue", true, []int{4}, long, false, []int{2, 2, 2, 2}, 2},
		{"smaller preferred goes at once", true, []int{2, 4}, long, false, []int{1, 1, 1}, 2},
		{"largest preferred reached among several", true, []int{2, 4}, long, false, []int{1, 1, 1, 1, 1}, 4},
		{"past the largest preferred: what came before goes", true, []int{4}, long, false, []int{3, 3}, 1},
		{"below preferred: waits", true, []int{4}, long, false, []int{1, 1, 1}, 0},
		{"below preferred, no delay: goes", true, []int{4}, 0, false, []int{1, 1, 1}, 3},
		{"delay passed: everything that fits goes", true, []int{4}, long, true, []int{1, 1, 1, 1, 1, 1}, 6},
		{"delay passed: past the largest preferred too", true, []int{4}, long, true, []int{3, 3}, 2},
		{"delay passed: never above max_batch_size", true, []int{4}, long, true, []int{3, 3, 3}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := dynbatch.Config{MaxQueueDelay: tc.delay, Preferred: tc.preferred}
			if tc.dynamic {
				cfg.MaxBatchSize = 8
			}
			s := &scheduler{queue: dynbatch.New[*pending](cfg)}
			now := time.Now()
			queued := now
			if tc.expired {
				queued = queued.Add(-2 * tc.delay)
			}
			for _, size := range tc.sizes {
				s.queue.Enqueue(queued, &pending{size: size, queued: queued}, size, 0)
			}
			batch, wait := s.queue.Next(now, 1)
			n := len(batch)
			if n != tc.want {
				t.Fatalf("batch of %d requests, want %d", n, tc.want)
			}
			if n == 0 && (wait <= 0 || wait > tc.delay) {
				t.Fatalf("waits %s with a queue delay of %s", wait, tc.delay)
			}
		})
	}
}

// TestPreferredBatchSizes runs models with preferred_batch_size set
// (testdata/batcher) and checks the batch sizes their statistics' batch_stats
// record, as Triton's dynamic batcher forms them whatever order the
// requests arrive in.
func TestPreferredBatchSizes(t *testing.T) {
	h := start(t, "testdata/batcher")

	// Eight requests of one: two batches of the preferred 4, never 8.
	h.concurrently(t, "preferred_wait", []int{1, 1, 1, 1, 1, 1, 1, 1})
	st := h.stats("preferred_wait", "1").GetModelStats()[0]
	if st.GetInferenceCount() != 8 || st.GetExecutionCount() != 2 || !mapsEqual(sizesOf(st), map[uint64]uint64{4: 2}) {
		t.Errorf("preferred_wait: inference %d execution %d batches %v", st.GetInferenceCount(), st.GetExecutionCount(), sizesOf(st))
	}

	// Two requests of 3: together they would pass the preferred 4, so
	// each goes alone, the second once the queue delay has passed.
	h.concurrently(t, "preferred_delay", []int{3, 3})
	st = h.stats("preferred_delay", "1").GetModelStats()[0]
	if st.GetInferenceCount() != 6 || st.GetExecutionCount() != 2 || !mapsEqual(sizesOf(st), map[uint64]uint64{3: 2}) {
		t.Errorf("preferred_delay: inference %d execution %d batches %v", st.GetInferenceCount(), st.GetExecutionCount(), sizesOf(st))
	}
	// One request of 3 waits out the 200 ms delay for company, then goes.
	queuedBefore := st.GetInferenceStats().GetQueue().GetNs()
	h.concurrently(t, "preferred_delay", []int{3})
	st = h.stats("preferred_delay", "1").GetModelStats()[0]
	if !mapsEqual(sizesOf(st), map[uint64]uint64{3: 3}) {
		t.Errorf("preferred_delay: batches %v after a lone request", sizesOf(st))
	}
	if q := time.Duration(st.GetInferenceStats().GetQueue().GetNs() - queuedBefore); q < 200*time.Millisecond {
		t.Errorf("a lone request queued %s, less than the 200 ms queue delay", q)
	}
}
