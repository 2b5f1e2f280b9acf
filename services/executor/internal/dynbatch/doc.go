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
//	if q.Enqueue(now, r, size, idle) { /* run r alone, now */ }
//	dropped = q.DropCancelled(dropped[:0])   // answer what was given up
//	batch, wait := q.Next(now, idle)         // nil: look again after wait
//	left := q.Drain(nil)                     // unloading: fail the rest
//
// An item is whatever the caller answers a request through; the queue
// keeps beside it the two properties the rules read (its batch size and
// when it was queued) and asks the item only whether it was cancelled.
//
// # Rules
//
// Items are taken in arrival order and a batch is a prefix of the queue:
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
// # Not yet
//
// Triton's priority levels and queue policies (priority_levels,
// default_queue_policy, priority_queue_policy: max_queue_size, timeout
// with REJECT or DELAY, allow_timeout_override) and preserve_ordering are
// not implemented: the executor answers requests as they finish. Queue is
// where they belong: a queue per level inside it, Enqueue taking the
// level and refusing past max_queue_size, Next taking from the highest
// level first, and the timeouts dropped beside the cancelled items.
package dynbatch
