package dynbatch

import (
	"errors"
	"slices"
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

	// PriorityLevels is priority_levels: the levels a request may ask for
	// are 1 (served first) to PriorityLevels; 0 means one level only.
	PriorityLevels uint64
	// DefaultPriority is default_priority_level: the level of a request
	// that asks for none (priority 0) or for one past PriorityLevels.
	DefaultPriority uint64
	// DefaultPolicy is default_queue_policy: the policy of every level
	// that Policies does not name.
	DefaultPolicy Policy
	// Policies is priority_queue_policy: the policy of a level by its
	// number.
	Policies map[uint64]Policy
}

// Policy is a ModelQueuePolicy: how much one priority level's queue holds
// and what happens to its items that wait too long.
type Policy struct {
	// MaxQueueSize is max_queue_size: the most items the level holds
	// (those delayed after a timeout included); 0 means unbounded.
	MaxQueueSize int
	// Timeout is default_timeout_microseconds: how long an item may stay
	// queued; 0 means forever.
	Timeout time.Duration
	// Delay is timeout_action DELAY: an item that timed out stays queued
	// behind the level's items that did not; else (REJECT) it leaves the
	// queue (Expire) to be answered with an error.
	Delay bool
	// AllowOverride is allow_timeout_override: a request's own timeout
	// applies when it is shorter than Timeout (never when Timeout is 0:
	// a request may shorten its level's timeout, not set one).
	AllowOverride bool
}

// ConfigFrom reads a model config. Dynamic batching needs both a
// dynamic_batching section and a batch dimension (max_batch_size > 0);
// without either every request runs alone, as in Triton's default
// scheduler. The priority levels and queue policies come with the section
// alone, as Triton's dynamic batcher applies them to a model without a
// batch dimension too.
func ConfigFrom(cfg *inference.ModelConfig) Config {
	db := cfg.GetDynamicBatching()
	if db == nil {
		return Config{}
	}
	c := Config{
		PriorityLevels:  db.GetPriorityLevels(),
		DefaultPriority: db.GetDefaultPriorityLevel(),
		DefaultPolicy:   policyFrom(db.GetDefaultQueuePolicy()),
	}
	for level, p := range db.GetPriorityQueuePolicy() {
		if c.Policies == nil {
			c.Policies = map[uint64]Policy{}
		}
		c.Policies[level] = policyFrom(p)
	}
	if cfg.GetMaxBatchSize() <= 0 {
		return c
	}
	c.MaxBatchSize = int(cfg.GetMaxBatchSize())
	c.MaxQueueDelay = time.Duration(db.GetMaxQueueDelayMicroseconds()) * time.Microsecond
	for _, n := range db.GetPreferredBatchSize() {
		c.Preferred = append(c.Preferred, int(n))
	}
	return c
}

// maxTimeout bounds a timeout read in microseconds so that it stays a
// time.Duration (about 292 years): longer is forever in practice.
const maxTimeout = time.Duration(1<<63 - 1)

// micros is n microseconds as a duration, saturating.
func micros(n uint64) time.Duration {
	if n > uint64(maxTimeout/time.Microsecond) {
		return maxTimeout
	}
	return time.Duration(n) * time.Microsecond
}

func policyFrom(p *inference.ModelQueuePolicy) Policy {
	return Policy{
		MaxQueueSize:  int(p.GetMaxQueueSize()),
		Timeout:       micros(p.GetDefaultTimeoutMicroseconds()),
		Delay:         p.GetTimeoutAction() == inference.ModelQueuePolicy_DELAY,
		AllowOverride: p.GetAllowTimeoutOverride(),
	}
}

// Ask is what a request asks of the queue: its priority and timeout
// parameters.
type Ask struct {
	// Priority is the request's priority: 1 is the highest level; 0, or a
	// level past priority_levels, means the default level.
	Priority uint64
	// Timeout is the request's timeout; 0 means none of its own.
	Timeout time.Duration
}

// AskMicros is an Ask from the parameters as the protocol carries them:
// the priority, and the timeout in microseconds (0 or less: none).
func AskMicros(priority uint64, timeoutUs int64) Ask {
	a := Ask{Priority: priority}
	if timeoutUs > 0 {
		a.Timeout = micros(uint64(timeoutUs))
	}
	return a
}

// ErrFull is Add's refusal of an item whose priority level already holds
// its policy's max_queue_size items.
var ErrFull = errors.New("Exceeds maximum queue size")

// Item is what the queue asks of the items it holds.
type Item interface {
	// Cancelled reports whether the item's client gave up on it, so that
	// it leaves the queue (DropCancelled) without running.
	Cancelled() bool
}

// Queue is a model version's queue of pending items, by priority level
// and oldest first within a level, and the rules that cut batches from
// it. It is not safe for concurrent use: its owner serializes calls.
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

	maxLevel, defLevel uint64
	defPolicy          Policy
	policies           map[uint64]Policy
	// timeouts says whether any level has a timeout.
	timeouts bool

	// levels are the levels holding items, highest priority (lowest
	// number) first; the default level is always there, so that a queue
	// without priorities is levels[0].
	levels []*level[T]
	def    *level[T] // the default level, one of levels
	n      int       // items queued, all levels together
	// soonest is a time no queued item's timeout comes before (the zero
	// time: no item has one); Expire has nothing to do until then.
	soonest time.Time
}

// level is one priority level's queue.
type level[T any] struct {
	priority uint64
	policy   Policy
	items    []entry[T] // oldest first
	// delayed are the items that timed out under timeout_action DELAY:
	// they come after items, in the order they timed out.
	delayed []entry[T]
}

func (l *level[T]) size() int { return len(l.items) + len(l.delayed) }

// entry is a queued item with what the rules read of it.
type entry[T any] struct {
	item     T
	size     int       // inferences it holds: its batch size, at least 1
	queued   time.Time // when it was enqueued
	deadline time.Time // when it times out; the zero time: never
}

// New returns an empty queue that batches as cfg says.
func New[T Item](cfg Config) *Queue[T] {
	q := &Queue[T]{
		maxLevel: cfg.PriorityLevels, defLevel: cfg.DefaultPriority,
		defPolicy: cfg.DefaultPolicy, policies: cfg.Policies,
		timeouts: cfg.DefaultPolicy.Timeout > 0,
	}
	for _, p := range cfg.Policies {
		q.timeouts = q.timeouts || p.Timeout > 0
	}
	q.def = &level[T]{priority: q.defLevel, policy: q.policyOf(q.defLevel)}
	q.levels = []*level[T]{q.def}
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

// policyOf is the policy of a level.
func (q *Queue[T]) policyOf(priority uint64) Policy {
	if p, ok := q.policies[priority]; ok {
		return p
	}
	return q.defPolicy
}

// Level is the priority level a request asking for priority goes to, as
// Triton's InferenceRequest::SetPriority decides it: the default level for
// 0 or a level past priority_levels.
func (q *Queue[T]) Level(priority uint64) uint64 {
	if priority == 0 || priority > q.maxLevel {
		return q.defLevel
	}
	return priority
}

// Len is the number of queued items.
func (q *Queue[T]) Len() int { return q.n }

// Timed reports whether the decisions read the clock: only a queue delay
// or a timeout makes them depend on it. When not, the now passed to Next
// and Add may be the zero time, sparing their caller a read of the clock
// per batch.
func (q *Queue[T]) Timed() bool { return q.batching && q.maxDelay > 0 || q.timeouts }

// Enqueue is Add for an item that asks for nothing of its own (the
// default priority level, its timeout). It is for queues that refuse
// nothing, without a max_queue_size: it panics if the item is refused.
func (q *Queue[T]) Enqueue(now time.Time, item T, size, idle int) (alone bool) {
	alone, err := q.Add(now, item, size, idle, Ask{})
	if err != nil {
		panic("dynbatch: Enqueue on a bounded queue: " + err.Error())
	}
	return alone
}

// Add queues item, which holds size inferences (at least 1), at now,
// with idle instances free to run a batch, at the priority level and
// with the timeout ask says and the level's policy allows. It returns
// ErrFull, and does not queue item, when the level already holds its
// max_queue_size items. It reports whether item should rather run at
// once, alone: nothing else was queued, an instance is idle, and the
// batch the rules would cut now is item by itself. Item is then not
// queued.
func (q *Queue[T]) Add(now time.Time, item T, size, idle int, ask Ask) (alone bool, err error) {
	l := q.def
	if ask.Priority != 0 && q.maxLevel > 0 {
		l = q.level(q.Level(ask.Priority))
	}
	if bound := l.policy.MaxQueueSize; bound > 0 && l.size() >= bound {
		return false, ErrFull
	}
	e := entry[T]{item: item, size: size, queued: now}
	if timeout := l.policy.Timeout; timeout > 0 {
		if l.policy.AllowOverride && ask.Timeout > 0 && ask.Timeout < timeout {
			timeout = ask.Timeout
		}
		e.deadline = now.Add(timeout)
		if q.soonest.IsZero() || e.deadline.Before(q.soonest) {
			q.soonest = e.deadline
		}
	}
	l.items = append(l.items, e)
	q.n++
	if q.n == 1 && idle > 0 {
		if n, _ := q.cut(now); n == 1 {
			l.items[0] = entry[T]{}
			l.items = l.items[:0]
			q.n = 0
			q.prune()
			return true, nil
		}
	}
	return false, nil
}

// level is the queue of a priority level, made when first asked for.
func (q *Queue[T]) level(priority uint64) *level[T] {
	i, found := slices.BinarySearchFunc(q.levels, priority, func(l *level[T], p uint64) int {
		switch {
		case l.priority < p:
			return -1
		case l.priority > p:
			return 1
		}
		return 0
	})
	if !found {
		q.levels = slices.Insert(q.levels, i, &level[T]{priority: priority, policy: q.policyOf(priority)})
	}
	return q.levels[i]
}

// prune forgets the empty levels other than the default one, so that the
// levels a queue keeps are the ones holding items.
func (q *Queue[T]) prune() {
	if len(q.levels) == 1 {
		return
	}
	q.levels = slices.DeleteFunc(q.levels, func(l *level[T]) bool {
		return l.size() == 0 && l != q.def
	})
}

// Next is the batch due at now, taken from the queue, when idle instances
// are free to run one: a new slice of the items, highest priority first
// and oldest first within a level. With none due it returns nil and how
// long to wait before one is due without more items arriving (the oldest
// item's queue delay running out); a wait of 0 means until an item arrives
// or an instance becomes idle. Timeouts are Expire's: call it first, at
// the same now, so that no item that timed out under REJECT runs.
func (q *Queue[T]) Next(now time.Time, idle int) (batch []T, wait time.Duration) {
	if idle <= 0 {
		return nil, 0
	}
	n, wait := q.cut(now)
	if n == 0 {
		return nil, wait
	}
	return q.take(n), 0
}

// take takes the n first items off the queue, in queue order, clearing
// their slots so that the queue keeps no item alive.
func (q *Queue[T]) take(n int) []T {
	batch := make([]T, n)
	k := 0
	for _, l := range q.levels {
		for _, part := range [2]*[]entry[T]{&l.items, &l.delayed} {
			m := min(n-k, len(*part))
			for i := range m {
				batch[k+i] = (*part)[i].item
			}
			k += m
			*part = shift(*part, m)
		}
		if k == n {
			break
		}
	}
	q.n -= n
	q.prune()
	return batch
}

// shift drops the m first entries of s, in place.
func shift[E any](s []E, m int) []E {
	if m == 0 {
		return s
	}
	k := copy(s, s[m:])
	clear(s[k:])
	return s[:k]
}

// Expire applies the levels' timeouts at now: an item whose timeout has
// passed moves behind its level's other items (timeout_action DELAY), or
// leaves the queue (REJECT), appended to rejected, which is returned, for
// the caller to answer with Triton's "Request timeout expired". It
// returns too how long until the next item times out (0: none will).
func (q *Queue[T]) Expire(now time.Time, rejected []T) ([]T, time.Duration) {
	if q.soonest.IsZero() {
		return rejected, 0
	}
	if now.Before(q.soonest) {
		return rejected, q.soonest.Sub(now)
	}
	var soonest time.Time
	for _, l := range q.levels {
		kept := 0
		for i := range l.items {
			e := l.items[i]
			if e.deadline.IsZero() || now.Before(e.deadline) {
				if !e.deadline.IsZero() && (soonest.IsZero() || e.deadline.Before(soonest)) {
					soonest = e.deadline
				}
				l.items[kept] = e
				kept++
				continue
			}
			if l.policy.Delay {
				e.deadline = time.Time{}
				l.delayed = append(l.delayed, e)
				continue
			}
			rejected = append(rejected, e.item)
			q.n--
		}
		clear(l.items[kept:])
		l.items = l.items[:kept]
	}
	q.soonest = soonest
	q.prune()
	if soonest.IsZero() {
		return rejected, 0
	}
	return rejected, soonest.Sub(now)
}

// DropCancelled takes the cancelled items off the queue, appends them to
// dropped in queue order and returns it, for the caller to answer them.
func (q *Queue[T]) DropCancelled(dropped []T) []T {
	for _, l := range q.levels {
		for _, part := range [2]*[]entry[T]{&l.items, &l.delayed} {
			before := len(dropped)
			*part, dropped = dropFrom(*part, dropped)
			q.n -= len(dropped) - before
		}
	}
	q.prune()
	return dropped
}

// dropFrom moves the cancelled entries of s to dropped.
func dropFrom[T Item](s []entry[T], dropped []T) ([]entry[T], []T) {
	kept := 0
	for kept < len(s) && !s[kept].item.Cancelled() {
		kept++ // the common case: nothing to move
	}
	for i := kept; i < len(s); i++ {
		if s[i].item.Cancelled() {
			dropped = append(dropped, s[i].item)
			continue
		}
		s[kept] = s[i]
		kept++
	}
	clear(s[kept:])
	return s[:kept], dropped
}

// Drain empties the queue, appending its items to dst in queue order.
func (q *Queue[T]) Drain(dst []T) []T {
	for _, l := range q.levels {
		for _, part := range [2]*[]entry[T]{&l.items, &l.delayed} {
			for i := range *part {
				dst = append(dst, (*part)[i].item)
			}
			clear(*part)
			*part = (*part)[:0]
		}
	}
	q.n = 0
	q.soonest = time.Time{}
	q.prune()
	return dst
}

// cut decides how many of the first items, in queue order, form the batch
// due at now (n > 0), or how long to wait for more (n == 0; wait 0 means
// until an item arrives), by the rules of the package documentation.
func (q *Queue[T]) cut(now time.Time) (n int, wait time.Duration) {
	if q.n == 0 {
		return 0, 0
	}
	if !q.batching {
		return 1, 0
	}
	size, best, full := 0, 0, false
	var oldest time.Time // of the items taken so far
walk:
	for _, l := range q.levels {
		for _, part := range [2][]entry[T]{l.items, l.delayed} {
			for i := range part {
				next := part[i].size
				if n > 0 {
					if size+next > q.maxPreferred && best == 0 {
						best = n
					}
					if size+next > q.maxBatch {
						full = true
						break walk
					}
				}
				size += next
				n++
				if n == 1 || part[i].queued.Before(oldest) {
					oldest = part[i].queued
				}
				if size < len(q.preferred) && q.preferred[size] {
					best = n
				}
			}
		}
	}
	var age time.Duration
	if q.maxDelay > 0 {
		age = now.Sub(oldest)
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
