// Package seqbatch is Triton's sequence batcher as pure logic: slots per
// model instance, the backlog, the idle reaper, request timeouts in the
// backlog, and batch formation for the direct and oldest strategies, with
// the exact rules and messages of Triton's SequenceBatchScheduler. It holds
// no goroutines, timers or connections: every call takes the current time,
// so tests drive the clock, and the sequence router
// (services/sequence-router) wires it to NATS and to its state store.
//
// # Use
//
//	m := seqbatch.NewModel(seqbatch.ConfigFrom(cfg), store, log)
//	m.AddInstance(now, seqbatch.InstanceKey{Executor: "e1", Index: 0})
//	err := m.Enqueue(now, req)               // a request arrives
//	batch, wait := m.Next(now, inst)         // the instance is idle
//	failures := m.Tick(now)                  // at m.Wake() or later
//	failures = m.Cancel(now, req)            // its client cancelled req
//
// (Example runs it.)
//
// Requests carry an opaque payload (Request.Data) the caller uses to answer
// them. Entries of a batch give each request its control values (START,
// END, READY, CORRID); Controls turns those into the model's control
// tensors (int32/fp32/bool *_false_true forms, CORRID as UINT64, INT64,
// UINT32, INT32 or STRING).
//
// # What differs from Triton
//
//   - Slots are released when the request carrying END (or the last request
//     of an idle sequence) leaves the queue in a batch, for both strategies;
//     instances run one batch at a time and ask for the next one only when
//     done, so the next sequence's requests can never overtake.
//   - An idle sequence whose slot has nothing queued releases the slot at
//     once instead of sending a null request through the model first.
//   - A cancelled request (Cancel) ends its sequence as in Triton, but at
//     once rather than when the batcher next looks at its queue.
//   - The backlog may be bounded (Config.MaxBacklog): a START that would
//     wait beyond the bound is refused with UNAVAILABLE, "Exceeds maximum
//     queue size" as Triton's dynamic batcher words a full queue.
//   - The wait of a request may be bounded (Config.QueueTimeout, shortened
//     by the request's own timeout): a request still waiting in the
//     backlog or in its slot when it passes fails with UNAVAILABLE,
//     "Request timeout expired" as Triton's queue policy words it, and so
//     do the requests of its sequence queued behind it; the sequence ends
//     (a START that timed out leaves no sequence). Without it, Triton's
//     rule alone: a request's timeout expires a sequence in the backlog.
//     Errors of these limits unwrap to ErrRejected.
//
// Store is told about every binding change (START, END, idle release,
// backlog moves), so that another router can rebuild the state with
// Restore. Requests in the middle of a sequence never reach the Store.
package seqbatch
