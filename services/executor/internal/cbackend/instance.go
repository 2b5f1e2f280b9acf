//go:build cgo

package cbackend

/*
#include <stdlib.h>
#include <string.h>
#include "abi.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// NewInstance is TRITONBACKEND_ModelInstanceInitialize, run where the
// instance's executions run (runnerFor).
func (m *cModel) NewInstance(ctx context.Context, info backend.InstanceInfo) (backend.Instance, error) {
	in := &cInstance{m: m, info: info, thread: runnerFor(info.Kind)}
	in.steady, _ = info.Stats.(backend.SteadyStatsReporter)
	ci := (*C.TRITONBACKEND_ModelInstance)(C.calloc(1, C.sizeof_TRITONBACKEND_ModelInstance))
	ci.name = C.CString(info.Name)
	switch info.Kind {
	case inference.ModelInstanceGroup_KIND_GPU:
		ci.kind = C.TRITONSERVER_INSTANCEGROUPKIND_GPU
	case inference.ModelInstanceGroup_KIND_MODEL:
		ci.kind = C.TRITONSERVER_INSTANCEGROUPKIND_MODEL
	default:
		ci.kind = C.TRITONSERVER_INSTANCEGROUPKIND_CPU
	}
	ci.device_id = C.int32_t(info.DeviceID)
	ci.model = m.c
	// Triton's host policy: one member, named for the instance's device.
	policy := `{"cpu":{}}`
	if info.Kind == inference.ModelInstanceGroup_KIND_GPU {
		policy = fmt.Sprintf(`{"gpu_%d":{}}`, info.DeviceID)
	}
	ci.host_policy.json = C.CString(policy)
	ci.host_policy.size = C.size_t(len(policy))
	ci.exec = C.nereid_exec_new()
	ci.exec.fn = m.b.sb.lib.fns.execute
	in.c = ci
	in.h = register(in)
	ci.h = C.uintptr_t(in.h)
	var err error
	if f := m.b.sb.lib.fns.instInit; f != nil {
		in.thread.do(func() { err = takeError(C.nereid_call_instance(f, ci)) })
	}
	if err == nil {
		if f := m.b.sb.lib.fns.instReady; f != nil {
			in.thread.do(func() { err = takeError(C.nereid_call_instance(f, ci)) })
		}
	}
	if err != nil {
		// Finalize runs even after a failed initialize, as in Triton, so the
		// backend can free what it made.
		_ = in.Finalize()
		return nil, err
	}
	return in, nil
}

// cInstance is one model instance of a C backend.
type cInstance struct {
	m      *cModel
	info   backend.InstanceInfo
	steady backend.SteadyStatsReporter // info.Stats, when it takes SteadyStamps
	c      *C.TRITONBACKEND_ModelInstance
	h      uintptr
	thread runner
	once   sync.Once

	// arr is the array of requests Execute gets, kept from one execution
	// to the next (executions never overlap; a backend may not keep the
	// array past Execute). Its capacity is narr.
	arr  unsafe.Pointer
	narr int

	// mem is the arena the requests of the next execution are laid out
	// in, of memCap bytes, its header included; nil before the first.
	mem    *C.nereid_arena
	memCap uintptr

	// levels are logLevels' answer at logAt (nereid_steady_ns's clock),
	// reused by executions for up to LOG_CACHE_NS, as exec.c's cache of
	// TRITONSERVER_LogIsEnabled's answers is, and asked again once an
	// execution has found them past half of it.
	levels C.uint32_t
	logAt  uint64

	start   startMemo       // the executions' start stamp, converted
	layouts []requestLayout // the last execution's, cleared
	// laid are the last execution's requests, in mem: the next one's when
	// they have the same layout (layOut).
	laid  []*C.TRITONBACKEND_Request
	spare []*cRequest // request objects for the next executions (keepRequests)
	// spareSlots are the requestTable slots spare's objects hold, nil for
	// none.
	spareSlots []*reqSlot
}

// generations numbers recorded executions, process-wide: a response that
// outlives its execution never matches another's record.
var generations atomic.Uint64

// memory returns the instance's arena, at least size bytes, holding one
// reference for the instance. The last execution's is reused when every
// request laid out in it has been disposed of; one that still has
// requests (a decoupled model's, or a backend's that kept one) is left to
// them, freed by the last one disposed of.
func (in *cInstance) memory(size uintptr) *C.nereid_arena {
	if in.mem != nil && (size > in.memCap || atomic.LoadUint32((*uint32)(unsafe.Pointer(&in.mem.refs))) != 1) {
		in.dropMemory()
	}
	if in.mem == nil {
		if size > in.memCap {
			in.memCap = max(size, 2*in.memCap, 4096)
		}
		in.mem = (*C.nereid_arena)(C.malloc(C.size_t(in.memCap)))
		in.mem.refs = 1
	}
	return in.mem
}

// dropMemory gives up the instance's reference to its arena, and with it
// the requests laid out there.
func (in *cInstance) dropMemory() {
	if in.mem != nil {
		unrefArena(in.mem)
		in.mem = nil
	}
	in.laid = in.laid[:0]
}

// unrefArena drops a reference to arena a, freeing it with the last.
func unrefArena(a *C.nereid_arena) {
	if atomic.AddUint32((*uint32)(unsafe.Pointer(&a.refs)), ^uint32(0)) == 0 {
		C.free(unsafe.Pointer(a))
	}
}

// layOut lays the C side of reqs out in the instance's arena, which it
// returns, and sets in.laid to their places there. When the last
// execution's requests, all disposed of, lie there in the layout reqs
// need (the usual steady stream of one model's requests), only what
// differs is written again (relayOut); else they are laid out afresh.
func (in *cInstance) layOut(reqs []*backend.Request, gpu bool) *C.nereid_arena {
	if in.mem != nil && len(in.laid) == len(reqs) && atomic.LoadUint32((*uint32)(unsafe.Pointer(&in.mem.refs))) == 1 {
		same := true
		for i, r := range reqs {
			if same = relayOut(in.laid[i], r, gpu, unsafe.Pointer(in.mem), in.memCap); !same {
				break
			}
		}
		if same {
			return in.mem
		}
	}
	// The layouts are the instance's, reused (executions never overlap),
	// and cleared once laid out: they would keep the requests alive.
	ls := in.layouts[:0]
	size := uintptr(C.NEREID_ARENA_HEADER)
	for _, r := range reqs {
		ls = append(ls, newLayout(r, gpu))
		size = ls[len(ls)-1].size(size)
	}
	in.layouts = ls
	mem := in.memory(size)
	clear(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(mem), C.NEREID_ARENA_HEADER)), size-C.NEREID_ARENA_HEADER))
	a := arena{base: unsafe.Pointer(mem), off: C.NEREID_ARENA_HEADER}
	in.laid = in.laid[:0]
	for i := range ls {
		in.laid = append(in.laid, ls[i].place(&a))
		ls[i].clearRefs()
	}
	return mem
}

// logLevels are the TRITONSERVER_LogLevel values the executor's log takes
// now, a bit each, for TRITONSERVER_LogIsEnabled to answer during an
// execution without calling into Go (exec.c).
func logLevels() C.uint32_t {
	var v C.uint32_t
	for level := C.TRITONSERVER_LOG_INFO; level <= C.TRITONSERVER_LOG_VERBOSE; level++ {
		if logEnabled(C.TRITONSERVER_LogLevel(level)) {
			v |= 1 << level
		}
	}
	return v
}

// requestArray returns the instance's array of n request pointers.
func (in *cInstance) requestArray(n int) []*C.TRITONBACKEND_Request {
	if n > in.narr {
		C.free(in.arr)
		in.narr = max(n, 2*in.narr)
		// Zeroed: Go stores pointers in it (see outparam.go).
		in.arr = C.calloc(C.size_t(in.narr), C.size_t(unsafe.Sizeof(uintptr(0))))
		in.c.exec.requests = (**C.TRITONBACKEND_Request)(in.arr)
	}
	return cArray((**C.TRITONBACKEND_Request)(in.arr), n)
}

// Finalize is TRITONBACKEND_ModelInstanceFinalize.
func (in *cInstance) Finalize() error {
	var err error
	in.once.Do(func() {
		if f := in.m.b.sb.lib.fns.instFini; f != nil {
			in.thread.do(func() { err = takeError(C.nereid_call_instance(f, in.c)) })
		}
		in.thread.stop()
		unregister(in.h)
		for _, slot := range in.spareSlots {
			requests.release(slot)
		}
		in.spare, in.spareSlots = nil, nil
		in.dropMemory()
		C.nereid_exec_free(in.c.exec)
		C.free(in.arr)
		C.free(unsafe.Pointer(in.c.name))
		C.free(unsafe.Pointer(in.c.host_policy.json))
		C.free(unsafe.Pointer(in.c))
	})
	return err
}

// Execute is TRITONBACKEND_ModelInstanceExecute, where the instance's
// calls run (runnerFor).
// It returns once the backend has released every request and sent its
// final response: the requests' memory is the executor's again after that.
func (in *cInstance) Execute(ctx context.Context, reqs []*backend.Request) error {
	if t, ok := in.thread.(*callerThread); ok {
		t.mu.Lock() // no closure: nothing to allocate on this path
		defer t.mu.Unlock()
		return in.execute(ctx, reqs)
	}
	var err error
	in.thread.do(func() { err = in.execute(ctx, reqs) })
	return err
}

func (in *cInstance) execute(ctx context.Context, reqs []*backend.Request) error {
	n := len(reqs)
	arr := in.requestArray(n)
	var few [8]*cRequest // no allocation for the usual batch
	crs := few[:0]
	if n > len(few) {
		crs = make([]*cRequest, 0, n)
	}
	gpu := in.info.Kind == inference.ModelInstanceGroup_KIND_GPU
	// A model that is not decoupled has its requests recorded (exec.c):
	// its responses reach the client once Execute has returned anyway.
	var gen uint64
	if !in.m.decoupled() {
		gen = generations.Add(1)
	}
	mem := in.layOut(reqs, gpu)
	atomic.AddUint32((*uint32)(unsafe.Pointer(&mem.refs)), uint32(n))
	crs = crs[:n]
	for i, r := range reqs {
		crs[i] = newCRequest(in, r, gpu, in.laid[i], mem, i, gen)
		arr[i] = crs[i].c
	}
	// Asked again once C has found them past half their life (exec.c):
	// an execution that starts with them near the end of it would find
	// them stale and call into Go for each TRITONSERVER_LogIsEnabled.
	// No clock is read here for it.
	if x := in.c.exec; in.logAt == 0 || bool(x.log_refresh) {
		x.log_refresh = false
		in.levels, in.logAt = logLevels(), steadyNow()
	}
	err := takeError(C.nereid_execute(C.uintptr_t(uintptr(unsafe.Pointer(in.c))), C.uint32_t(n), C.uint64_t(gen), in.levels, C.uint64_t(in.logAt)))
	ended := true // by the replay, each request: the usual case, without a lock
	if gen != 0 {
		for _, cr := range crs {
			cr.endedHere = cr.replay(&in.start)
			ended = ended && cr.endedHere
		}
		in.replayBatch()
	}
	if err != nil {
		return in.failed(crs, err)
	}
	// A model that is not decoupled answers during Execute (Triton's
	// blocking policy); a decoupled one may go on from its own threads, and
	// each request is disposed of when released and ended.
	if gen == 0 {
		return nil
	}
	if !ended {
		return in.awaitEnded(ctx, crs)
	}
	in.keepRequests(crs)
	return nil
}

// The rare ends of an execution are functions of their own: kept out of
// execute, they leave the code every execution runs smaller, which is
// most of what a small request's execution costs when that code has
// left the processor's caches since the last one.

// failed ends an execution whose Execute returned err: ownership of the
// requests is the server's again.
func (in *cInstance) failed(crs []*cRequest, err error) error {
	for _, cr := range crs {
		cr.abandon()
	}
	in.keepRequests(crs)
	return err
}

// awaitEnded waits until the backend has released and answered each of
// the execution's requests that its own replay did not end, then keeps
// the reusable request objects as execute does.
func (in *cInstance) awaitEnded(ctx context.Context, crs []*cRequest) error {
	for _, cr := range crs {
		if cr.endedHere {
			continue
		}
		ch := cr.finishedChan()
		if ch == closedChan {
			continue // the usual case, without a select
		}
		select {
		case <-ch:
		case <-ctx.Done():
			// Shutting down with a backend that holds a request: leave its
			// memory to it rather than free what it may still touch.
			in.dropRequests(crs)
			return tritonerr.Unavailablef("model '%s' is unloading", in.m.info.Name)
		}
	}
	in.keepRequests(crs)
	return nil
}

// maxSpareRequests bounds the request objects an instance keeps.
const maxSpareRequests = 64

// keepRequests keeps the reusable request objects of an execution that
// is over for the instance's next ones, cleared: they would keep the
// requests alive. A kept object keeps its handle's slot (requestTable)
// for its next request; one not kept gives the slot up.
func (in *cInstance) keepRequests(crs []*cRequest) {
	for _, cr := range crs {
		if !cr.reusable {
			continue
		}
		if len(in.spare) < maxSpareRequests {
			slot := cr.slot
			*cr = cRequest{}
			in.spare = append(in.spare, cr)
			in.spareSlots = append(in.spareSlots, slot)
		} else {
			requests.release(cr.slot)
		}
	}
}

// dropRequests leaves an execution's request objects behind: their
// handles' slots are given up by the objects disposed of, and by the rest
// when they are.
func (in *cInstance) dropRequests(crs []*cRequest) {
	for _, cr := range crs {
		cr.mu.Lock()
		cr.orphan = true
		if cr.gone && cr.reusable {
			cr.reusable = false
			requests.release(cr.slot)
		}
		cr.mu.Unlock()
	}
}

// spareRequest returns a request object kept by keepRequests, or a new
// one, and the slot its handle may take (nil: none).
func (in *cInstance) spareRequest() (*cRequest, *reqSlot) {
	if n := len(in.spare); n > 0 {
		cr, slot := in.spare[n-1], in.spareSlots[n-1]
		in.spare[n-1], in.spareSlots[n-1] = nil, nil
		in.spare = in.spare[:n-1]
		in.spareSlots = in.spareSlots[:n-1]
		return cr, slot
	}
	return new(cRequest), nil
}
