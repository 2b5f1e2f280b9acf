// Package dynbatch is Triton's dynamic batcher as pure logic: the queue of
// a model version's pending requests and the decision of which of them
// form the next batch, with the rules of Triton's DynamicBatchScheduler
// (dynamic_batch_scheduler.cc, GetDynamicBatch). It holds no goroutines,
// timers or channels and never reads the clock: every call that decides
// takes the current time, so tests drive the clock, and the executor's
// scheduler (services/executor/scheduler.go) wires it to its instances,
// its batcher goroutine and its timer.
//
// # Use
//
//	q := dynbatch.New[*req](dynbatch.ConfigFrom(cfg))
//	alone, err := q.Add(now, r, size, idle, ask)  // ErrFull: refuse r
//	if alone { /* run r alone, now */ }
//	dropped = q.DropCancelled(dropped[:0])        // answer what was given up
//	rejected, soon := q.Expire(now, rejected[:0]) // answer what timed out
//	batch, wait := q.Next(now, idle)              // nil: look again after wait or soon
//	left := q.Drain(nil)                          // unloading: fail the rest
//
// An item is whatever the caller answers a request through; the queue
// keeps beside it what the rules read (its batch size, when it was
// queued, its level and when it times out) and asks the item only whether
// it was cancelled.
//
// # Rules
//
// Items are taken in queue order (arrival order, by priority level when
// there are levels) and a batch is a prefix of the queue:
//
//   - without dynamic batching (Config.MaxBatchSize 0) every item is a
//     batch of its own, as in Triton's default scheduler;
//   - items are taken while their summed batch sizes fit max_batch_size;
//     an item that would overflow it ends the batch, which goes at once
//     (the first item is always taken);
//   - the batch is the largest preferred_batch_size reached on the way, or,
//     once the next item would take it past the largest preferred size,
//     what was gathered before it; such a batch goes at once unless the
//     oldest item has waited max_queue_delay_microseconds, in which case
//     everything that fits goes;
//   - otherwise the batch goes at once when it reached the largest
//     preferred size (max_batch_size without preferred sizes), when no
//     queue delay is set, or when the oldest item has waited it out; else
//     Next says how long until it has.
//
// # Priorities and queue policies
//
// With priority_levels set, a request asks for a level with its priority
// parameter (1 is served first); 0, or a level past priority_levels, is
// default_priority_level. The queue is then the levels one after the
// other, highest first, each oldest first, and the rules above cut the
// batch from that order: a higher level always runs before a lower one,
// and a batch takes from the lower levels only what the higher ones leave
// room for. The queue delay counts from the oldest item in the batch.
//
// Each level has its queue policy (priority_queue_policy, else
// default_queue_policy):
//
//   - max_queue_size bounds the items the level holds: Add refuses one
//     more with ErrFull, Triton's "Exceeds maximum queue size". An item
//     that runs at once, alone, is never queued and never counts;
//   - default_timeout_microseconds bounds how long an item stays queued,
//     shortened by the request's timeout parameter when
//     allow_timeout_override is set (a request never lengthens it, and
//     cannot set one where the level has none). Expire applies it: under
//     timeout_action REJECT the item leaves the queue, for the caller to
//     answer with Triton's "Request timeout expired"; under DELAY it moves
//     behind the level's items that have not timed out.
//
// Triton applies the timeouts lazily, when forming a batch walks over an
// item; Expire applies them when they pass (the caller looks again after
// the wait it returns), so a request rejected by its timeout hears so on
// time even while every instance is busy.
//
// preserve_ordering is not the queue's: the executor's scheduler answers
// requests in the order they were queued.
package dynbatch
