//go:build cgo

package cbackend

/*
#include <stdlib.h>
#include <string.h>
#include "abi.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"

	"github.com/nereid-io/nereid/pkg/backend"
)

// cRequest is a request while a backend holds it.
type cRequest struct {
	in *cInstance
	r  *backend.Request
	c  *C.TRITONBACKEND_Request
	h  uintptr

	pin    runtime.Pinner
	pinned bool // anything pinned: Unpin costs a call into the runtime even when not

	// replayMu orders the replay of the request's record with calls on it
	// made after its execution; recorded is true until the replay.
	replayMu sync.Mutex
	recorded bool

	mu       sync.Mutex
	gone     bool // disposed of (disposeGo): no more buffers
	released bool
	final    bool
	ended_   bool          // released and answered
	finished chan struct{} // closed once ended_; made only for a waiter
	trace    *cTrace       // the request's trace, once the backend asked for it
	more     *crExtra      // made on first use
	// reusable: disposed of, and never found by a lookup (disposeGo), so
	// that only its execution holds it; written by that execution's
	// goroutine alone.
	reusable bool
	// orphan: its execution ended without waiting for it (dropRequests),
	// so that its disposal gives up its handle's slot; cr.mu held.
	orphan bool
	// slot is h's slot in requestTable, nil when h is handleTable's (the
	// table full); the object keeps it while the instance keeps the
	// object (keepRequests).
	slot *reqSlot
	// endedHere: the execution's replay of the record ended the request,
	// so that it need not wait for it; the execution's goroutine alone
	// reads and writes it.
	endedHere bool
}

// crExtra is what a request needs only when its backend asks Go for
// output buffers or makes state: kept apart, the request allocated for
// every execution stays small.
type crExtra struct {
	bufs     outBuffers       // output buffers handed out
	bufStore [2]outBuffer     // bufs' first buffers, without an allocation
	states   []unsafe.Pointer // TRITONBACKEND_State objects made for the request
}

// extra returns the request's crExtra, made on first use; cr.mu held.
func (cr *cRequest) extra() *crExtra {
	if cr.more == nil {
		cr.more = &crExtra{}
		cr.more.bufs = cr.more.bufStore[:0]
	}
	return cr.more
}

// buffers returns the output buffers handed out for the request; cr.mu
// held.
func (cr *cRequest) buffers() outBuffers {
	if cr.more == nil {
		return nil
	}
	return cr.more.bufs
}

func parameterValue(p *C.TRITONSERVER_Parameter) any {
	switch p._type {
	case C.TRITONSERVER_PARAMETER_BOOL:
		return bool(p.b)
	case C.TRITONSERVER_PARAMETER_INT:
		return int64(p.i)
	case C.TRITONSERVER_PARAMETER_DOUBLE:
		return float64(p.d)
	default:
		return C.GoString(p.s)
	}
}

// release is TRITONBACKEND_RequestRelease.
// It reports whether the request is done with, its C side left for the
// caller to free (TRITONBACKEND_RequestRelease frees it in C, once back
// from Go).
func (cr *cRequest) release() (free bool) { return cr.releaseAnswered(false) }

// releaseAnswered is release, and with final the bookkeeping of a final
// send made before it (answered's) under the same lock.
func (cr *cRequest) releaseAnswered(final bool) (free bool) {
	cr.mu.Lock()
	if final {
		cr.final = true
	}
	if cr.released {
		if !final || !cr.ended() {
			cr.mu.Unlock()
			return false
		}
		return cr.disposeGoLocked()
	}
	cr.released = true
	cr.c.released = true
	if !cr.ended() {
		cr.mu.Unlock()
		return false
	}
	return cr.disposeGoLocked()
}

// ended reports, once, that the request is released and its final
// response sent; cr.mu held.
func (cr *cRequest) ended() bool {
	if !cr.released || !cr.final || cr.ended_ {
		return false
	}
	cr.ended_ = true
	if cr.finished != nil {
		close(cr.finished)
	}
	return true
}

// finishedChan is closed once the request is released and answered (most
// are by the time anyone asks: no channel is made for those).
func (cr *cRequest) finishedChan() <-chan struct{} {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.finished == nil {
		if cr.ended_ {
			return closedChan
		}
		cr.finished = make(chan struct{})
	}
	return cr.finished
}

// closedChan is a channel closed for good.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// abandon frees a request the backend gave back by failing Execute.
func (cr *cRequest) abandon() { cr.dispose() }

// dispose frees the request's C side and unpins its memory: the backend
// holds nothing of it anymore. The outputs live on in the responses.
func (cr *cRequest) dispose() {
	c := cr.c
	if cr.disposeGo() {
		unrefArena(c.arena)
	}
}

// disposeGo is dispose but for freeing the request's C side, which it
// leaves to the caller when it reports true (the first time).
func (cr *cRequest) disposeGo() bool {
	cr.mu.Lock()
	return cr.disposeGoLocked()
}

// disposeGoLocked is disposeGo with cr.mu held, which it unlocks: the
// release or final send that ends the request disposes of it under the
// lock it took.
func (cr *cRequest) disposeGoLocked() bool {
	if cr.gone {
		cr.mu.Unlock()
		return false
	}
	// A request no lookup ever found is held by its execution alone: the
	// instance reuses its object (see keepRequests). One that a call into
	// Go found may still be in that call's hands.
	var found, exhausted bool
	if cr.slot != nil {
		found, exhausted = requests.remove(cr.slot, cr.h)
	} else {
		found = objects.remove(cr.h)
	}
	if !found && cr.more == nil && cr.trace == nil && !cr.orphan {
		cr.reusable = true // unwritten otherwise: the execution may be reading it
		if exhausted {
			requests.release(cr.slot) // retired: the object goes on without it
			cr.slot = nil
		}
	} else {
		requests.release(cr.slot)
	}
	cr.c = nil
	cr.gone = true
	if x := cr.more; x != nil {
		x.bufs = nil
		for _, p := range x.states {
			unregister(uintptr((*C.TRITONBACKEND_State)(p).h))
			C.free(p)
		}
		x.states = nil
	}
	t := cr.trace
	if cr.pinned {
		cr.pin.Unpin()
	}
	cr.mu.Unlock()
	if t != nil {
		t.free()
	}
	return true
}
