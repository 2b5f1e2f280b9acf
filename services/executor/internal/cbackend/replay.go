//go:build cgo

package cbackend

/*
#include <stdlib.h>
#include <string.h>
#include "abi.h"
*/
import "C"

import (
	"unsafe"
)

// replayBatch gives the instance's statistics the batch statistics the
// last execution recorded.
func (in *cInstance) replayBatch() {
	memo := &in.start
	x := in.c.exec
	if x.has_batch {
		in.replayBatchStatistics(x.batch_instance, int(x.batch_size), memo, &x.batch_ts)
	}
	if x.batch_first == 0 {
		return
	}
	events := cArray(x.events, int(x.n_events))
	for at := x.batch_first; at != 0; {
		ev := &events[at-1]
		at = ev.next
		in.replayBatchStatistics(ev.instance, int(ev.batch_size), memo, &ev.ts)
	}
}

// replayBatchStatistics gives instance i's statistics a recorded
// execution's batch statistics.
func (in *cInstance) replayBatchStatistics(i *C.TRITONBACKEND_ModelInstance, n int, memo *startMemo, ts *[4]C.uint64_t) {
	target := in
	if i != in.c {
		target = instance(i)
	}
	if target != nil {
		target.reportBatchStatistics(n, memo, ts[0], ts[1], ts[2], ts[3])
	}
}

// replaySend delivers a recorded send (resp nil: the factory's flags) and
// reports whether it was final, leaving its bookkeeping to the caller.
func (cr *cRequest) replaySend(resp *C.TRITONBACKEND_Response, flags C.uint32_t, errp *C.TRITONSERVER_Error) (final bool) {
	_ = cr.deliver(resp, uint32(flags), errp)
	// The response's memory stays until the next execution: it keeps no
	// Go pointer that long (outputs, which a response without an error
	// went through, drops them).
	if resp != nil && errp != nil {
		dropGoBuffers(resp)
	}
	return flags&C.TRITONSERVER_RESPONSE_COMPLETE_FINAL != 0
}

// replayStatistics gives instance i's statistics a recorded request's
// statistics.
func (cr *cRequest) replayStatistics(i *C.TRITONBACKEND_ModelInstance, success bool, memo *startMemo, ts *[4]C.uint64_t) {
	target := cr.in
	if i != cr.in.c {
		target = instance(i)
	}
	if target != nil {
		target.reportStatistics(cr.r, success, memo, ts[0], ts[1], ts[2], ts[3])
	}
}

// live replays the request's record, if any, and reports whether the
// request is still the backend's: a call made after the record ended it
// finds it gone, as it would have without the record.
func (cr *cRequest) live() bool {
	cr.replay(nil)
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return !cr.gone
}

// replay gives the executor, in order, what the backend did to the
// request while its execution was recorded (exec.c): responses sent, the
// release, statistics. It runs once, when Execute has returned, or before
// a call on the request that came after that and got to Go first (memo
// is the execution's, nil there). It reports whether the record it
// replayed ended the request (released and answered), which the replay
// has then done.
//
// The record holds a request's first send, its release and its first
// statistics in the request itself, its other calls as events (exec.c):
// the replay gives the statistics first, then the first send, the events
// in order, and the release last, which Go's side takes as it would in
// the order the backend made them (a send does not depend on the
// release, nor statistics on either). The final send's bookkeeping
// (send's) waits for the release, or the record's end, so that the usual
// request is marked answered, released and disposed of under one lock:
// nothing sees the request between its calls but through live, which
// waits for the replay.
func (cr *cRequest) replay(memo *startMemo) (ended bool) {
	cr.replayMu.Lock() // no defer: nothing here panics, and a defer costs
	if !cr.recorded {
		cr.replayMu.Unlock()
		return false
	}
	cr.recorded = false
	c := cr.c // nil once disposed of, which the events may do
	ended = bool(c.ended)
	if c.has_stats {
		cr.replayStatistics(c.stats_instance, bool(c.stats_success), memo, &c.stats_ts)
	}
	final := false // a final send made, its bookkeeping not yet done
	if c.has_send {
		final = cr.replaySend(c.send_resp, c.send_flags, c.send_error)
	}
	if c.first != 0 {
		x := c.exec
		events := cArray(x.events, int(x.n_events))
		for at := c.first; at != 0; {
			ev := &events[at-1]
			at = ev.next
			switch ev.kind {
			case C.NEREID_EVENT_SEND, C.NEREID_EVENT_FLAGS:
				final = cr.replaySend(ev.response, ev.flags, ev.error) || final
			case C.NEREID_EVENT_STATS:
				cr.replayStatistics(ev.instance, bool(ev.success), memo, &ev.ts)
			}
		}
	}
	if c.release_recorded {
		if cr.releaseAnswered(final) {
			unrefArena(c.arena)
		}
	} else if final {
		cr.answered()
	}
	cr.replayMu.Unlock()
	return ended
}

// dropGoBuffers forgets the buffers of resp's outputs that are not its
// own: Go memory (or a client's), which C memory may not keep.
func dropGoBuffers(resp *C.TRITONBACKEND_Response) {
	for _, o := range unsafe.Slice(resp.outputs, int(resp.n_outputs)) {
		if !o.owned {
			o.buffer = nil
		}
	}
}
