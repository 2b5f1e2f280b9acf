package dynbatch

import (
	"time"

	"github.com/nereid-io/nereid/api/inference"
)

// Config is what the dynamic batcher needs from a model config.
type Config struct {
	// MaxBatchSize is max_batch_size, the most inferences a batch holds;
	// 0 turns dynamic batching off: every item runs alone.
	MaxBatchSize int
	// Preferred are the preferred_batch_size values.
	Preferred []int
	// MaxQueueDelay is max_queue_delay_microseconds: how long the oldest
	// item may wait for a batch to fill; 0 means not at all.
	MaxQueueDelay time.Duration
}

// ConfigFrom reads a model config: dynamic batching needs both a
// dynamic_batching section and a batch dimension (max_batch_size > 0);
// without either every request runs alone, as in Triton's default
// scheduler.
func ConfigFrom(cfg *inference.ModelConfig) Config {
	db := cfg.GetDynamicBatching()
	if db == nil || cfg.GetMaxBatchSize() <= 0 {
		return Config{}
	}
	c := Config{
		MaxBatchSize:  int(cfg.GetMaxBatchSize()),
		MaxQueueDelay: time.Duration(db.GetMaxQueueDelayMicroseconds()) * time.Microsecond,
	}
	for _, n := range db.GetPreferredBatchSize() {
		c.Preferred = append(c.Preferred, int(n))
	}
	return c
}

// Item is what the queue asks of the items it holds.
type Item interface {
	// Cancelled reports whether the item's client gave up on it, so that
	// it leaves the queue (DropCancelled) without running.
	Cancelled() bool
}

// Queue is a model version's queue of pending items, oldest first, and
// the rules that cut batches from it. It is not safe for concurrent use:
// its owner serializes calls.
type Queue[T Item] struct {
	batching bool
	maxBatch int
	// maxPreferred is the largest preferred batch size, max_batch_size
	// when none is set: batches grow no further unless the queue delay
	// has passed.
	maxPreferred int
	// preferred[n] says whether a batch of n inferences is a preferred
	// size; it has maxPreferred+1 entries.
	preferred []bool
	maxDelay  time.Duration

	items []entry[T]
}

// entry is a queued item with what the rules read of it.
type entry[T any] struct {
	item   T
	size   int       // inferences it holds: its batch size, at least 1
	queued time.Time // when it was enqueued
}

// New returns an empty queue that batches as cfg says.
func New[T Item](cfg Config) *Queue[T] {
	q := &Queue[T]{}
	if cfg.MaxBatchSize <= 0 {
		return q
	}
	q.batching = true
	q.maxBatch = cfg.MaxBatchSize
	q.maxDelay = cfg.MaxQueueDelay
	for _, n := range cfg.Preferred {
		q.maxPreferred = max(q.maxPreferred, n)
	}
	if q.maxPreferred == 0 {
		q.maxPreferred = q.maxBatch
	}
	q.preferred = make([]bool, q.maxPreferred+1)
	for _, n := range cfg.Preferred {
		if n > 0 {
			q.preferred[n] = true
		}
	}
	return q
}

// Len is the number of queued items.
func (q *Queue[T]) Len() int { return len(q.items) }

// Timed reports whether the decisions read the clock: only a queue delay
// makes them depend on it. When not, the now passed to Next may be the
// zero time, sparing its caller a read of the clock per batch.
func (q *Queue[T]) Timed() bool { return q.batching && q.maxDelay > 0 }

// Enqueue queues item, which holds size inferences (at least 1), at now,
// with idle instances free to run a batch. It reports whether item should
// rather run at once, alone: nothing else was queued, an instance is idle,
// and the batch the rules would cut now is item by itself. Item is then
// not queued.
func (q *Queue[T]) Enqueue(now time.Time, item T, size, idle int) (alone bool) {
	q.items = append(q.items, entry[T]{item: item, size: size, queued: now})
	if len(q.items) == 1 && idle > 0 {
		if n, _ := q.cut(now); n == 1 {
			q.items[0] = entry[T]{}
			q.items = q.items[:0]
			return true
		}
	}
	return false
}

// Next is the batch due at now, taken from the queue, when idle instances
// are free to run one: a new slice of the items, oldest first. With none
// due it returns nil and how long to wait before one is due without more
// items arriving (the oldest item's queue delay running out); a wait of 0
// means until an item arrives or an instance becomes idle.
func (q *Queue[T]) Next(now time.Time, idle int) (batch []T, wait time.Duration) {
	if idle <= 0 {
		return nil, 0
	}
	n, wait := q.cut(now)
	if n == 0 {
		return nil, wait
	}
	batch = make([]T, n)
	for i := range batch {
		batch[i] = q.items[i].item
	}
	q.remove(n)
	return batch, 0
}

// remove takes the n oldest items off the queue, clearing their slots so
// that the queue keeps no item alive.
func (q *Queue[T]) remove(n int) {
	m := copy(q.items, q.items[n:])
	clear(q.items[m:])
	q.items = q.items[:m]
}

// DropCancelled takes the cancelled items off the queue, appends them to
// dropped in queue order and returns it, for the caller to answer them.
func (q *Queue[T]) DropCancelled(dropped []T) []T {
	kept := 0
	for kept < len(q.items) && !q.items[kept].item.Cancelled() {
		kept++ // the common case: nothing to move
	}
	for i := kept; i < len(q.items); i++ {
		if q.items[i].item.Cancelled() {
			dropped = append(dropped, q.items[i].item)
			continue
		}
		q.items[kept] = q.items[i]
		kept++
	}
	clear(q.items[kept:])
	q.items = q.items[:kept]
	return dropped
}

// Drain empties the queue, appending its items to dst in queue order.
func (q *Queue[T]) Drain(dst []T) []T {
	for i := range q.items {
		dst = append(dst, q.items[i].item)
	}
	clear(q.items)
	q.items = q.items[:0]
	return dst
}

// cut decides how many of the oldest items form the batch due at now
// (n > 0), or how long to wait for more (n == 0; wait 0 means until an
// item arrives), by the rules of the package documentation.
func (q *Queue[T]) cut(now time.Time) (n int, wait time.Duration) {
	if len(q.items) == 0 {
		return 0, 0
	}
	if !q.batching {
		return 1, 0
	}
	size, best, full := 0, 0, false
	for n < len(q.items) {
		next := q.items[n].size
		if n > 0 {
			if size+next > q.maxPreferred && best == 0 {
				best = n
			}
			if size+next > q.maxBatch {
				full = true
				break
			}
		}
		size += next
		n++
		if size < len(q.preferred) && q.preferred[size] {
			best = n
		}
	}
	var age time.Duration
	if q.maxDelay > 0 {
		age = now.Sub(q.items[0].queued)
	}
	expired := q.maxDelay > 0 && age >= q.maxDelay
	switch {
	case best > 0 && !expired:
		return best, 0
	case full, size >= q.maxPreferred, q.maxDelay == 0, expired:
		return n, 0
	}
	return 0, q.maxDelay - age
}
