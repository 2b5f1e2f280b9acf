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
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func kindOf(code C.TRITONSERVER_Error_Code) tritonerr.Kind {
	if code < 0 || code > C.TRITONSERVER_ERROR_CANCELLED {
		return tritonerr.Unknown
	}
	return tritonerr.Kind(code)
}

// newError makes a TRITONSERVER_Error for the backend to own.
func newError(err error) *C.TRITONSERVER_Error {
	if err == nil {
		return nil
	}
	te := tritonerr.From(err)
	cs := C.CString(te.Msg)
	defer C.free(unsafe.Pointer(cs))
	return C.nereid_error(C.TRITONSERVER_Error_Code(te.Kind), cs)
}

// objects maps the handles stored in C structures to Go objects
// (handles.go).
var objects handleTable

func register(v any) uintptr { return objects.add(v) }

func unregister(h uintptr) { objects.remove(h) }

func lookup[T any](h C.uintptr_t) T {
	if isRequestHandle(uintptr(h)) {
		v, _ := any(requests.get(uintptr(h))).(T)
		return v
	}
	v, _ := objects.get(uintptr(h)).(T)
	return v
}

// NewModel is TRITONBACKEND_ModelInitialize.
func (b *cBackend) NewModel(ctx context.Context, info backend.ModelInfo) (backend.Model, error) {
	m := &cModel{b: b, info: info, cfg: info.Config}
	cm := (*C.TRITONBACKEND_Model)(C.calloc(1, C.sizeof_TRITONBACKEND_Model))
	cm.name = C.CString(info.Name)
	cm.version = C.uint64_t(info.Version)
	cm.location = C.CString(absPath(info.Dir)) // TRITONBACKEND_ModelRepository: absolute and clean, as the backend directory
	cm.backend = b.sb.c
	// Auto-complete is asked for when the configuration leaves the tensors
	// to the backend, as Triton's default (no --disable-auto-complete-config).
	cm.auto_complete = C.bool(len(info.Config.GetInput()) == 0 || len(info.Config.GetOutput()) == 0)
	m.server = (*C.TRITONSERVER_Server)(C.calloc(1, C.sizeof_TRITONSERVER_Server))
	cm.server = m.server
	m.c = cm
	m.h = register(m)
	cm.h = C.uintptr_t(m.h)
	m.server.h = cm.h
	m.initializing = true
	if f := b.sb.lib.fns.modelInit; f != nil {
		if err := takeError(C.nereid_call_model(f, cm)); err != nil {
			m.free()
			return nil, err
		}
	}
	m.mu.Lock()
	m.initializing = false
	m.dec = modelconfig.IsDecoupled(m.cfg)
	m.mu.Unlock()
	return m, nil
}

// Unguarded marks the model as running C code, which Go's fault guard for
// client-owned shared memory cannot cover: the executor gives it private
// copies of inputs in shared memory.
func (m *cModel) Unguarded() {}

// RunsNativeCode marks the model's executions as native code in the
// executor's process: a fault in them ends the process, not just the
// execution (the executor says so in its catalog).
func (m *cModel) RunsNativeCode() {}

// decoupled reports the model's transaction policy.
func (m *cModel) decoupled() bool { return m.dec }

// ReportsResponseStatistics implements backend.ResponseStatsOwner: as in
// Triton, a C backend's response_stats are what it reports
// (TRITONBACKEND_ModelInstanceReportResponseStatistics), nothing else.
func (m *cModel) ReportsResponseStatistics() bool { return true }

// cModel is one loaded model version of a C backend.
type cModel struct {
	b    *cBackend
	info backend.ModelInfo
	c    *C.TRITONBACKEND_Model
	h    uintptr

	server *C.TRITONSERVER_Server

	bls sync.WaitGroup // BLS calls in flight

	mu           sync.Mutex
	cfg          *inference.ModelConfig // changed by ModelSetConfig during initialization
	completed    bool
	initializing bool

	dec bool // decoupled, once initialized (the configuration is fixed then)
}

// CompletedConfig returns the configuration the backend set with
// TRITONBACKEND_ModelSetConfig, or nil when it set none.
func (m *cModel) CompletedConfig() *inference.ModelConfig {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.completed {
		return nil
	}
	return m.cfg
}

func (m *cModel) config() *inference.ModelConfig {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

// setConfig is TRITONBACKEND_ModelSetConfig: the new configuration is
// checked like one read from config.pbtxt and becomes the model's.
func (m *cModel) setConfig(js []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.initializing {
		return tritonerr.InvalidArgf("TRITONBACKEND_ModelSetConfig can only be called from TRITONBACKEND_ModelInitialize")
	}
	cfg := &inference.ModelConfig{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, cfg); err != nil {
		return tritonerr.InvalidArgf("failed to parse the model configuration set by the backend of model '%s': %v", m.info.Name, err)
	}
	// Triton keeps what the backend may not change.
	cfg.Name = m.info.Name
	if cfg.Backend == "" {
		cfg.Backend = m.cfg.GetBackend()
	}
	modelconfig.Normalize(cfg)
	if err := modelconfig.Validate(cfg); err != nil {
		return err
	}
	m.cfg = cfg
	m.completed = true
	return nil
}

// Finalize is TRITONBACKEND_ModelFinalize.
func (m *cModel) Finalize() error {
	m.bls.Wait()
	var err error
	if f := m.b.sb.lib.fns.modelFini; f != nil {
		err = takeError(C.nereid_call_model(f, m.c))
	}
	m.free()
	return err
}

func (m *cModel) free() {
	unregister(m.h)
	C.free(unsafe.Pointer(m.c.name))
	C.free(unsafe.Pointer(m.c.location))
	C.free(unsafe.Pointer(m.server))
	C.free(unsafe.Pointer(m.c))
}

// configJSON is the model configuration as TRITONBACKEND_ModelConfig gives
// it: the JSON of the model configuration endpoint.
func (m *cModel) configJSON() []byte {
	b, _ := modelconfig.JSON(m.config())
	return b
}

// runner runs an instance's calls into the backend one at a time: on a
// dedicated locked OS thread (thread) or on the caller's (callerThread).
type runner interface {
	do(f func())
	stop()
}

// thread runs functions on one locked OS thread, one at a time.
type thread struct {
	work chan func()
	done chan struct{}
}

func startThread() *thread {
	t := &thread{work: make(chan func()), done: make(chan struct{})}
	go func() {
		// Never unlocked: the thread ends with the goroutine, so thread-local
		// state a backend left behind dies with it.
		runtime.LockOSThread()
		defer close(t.done)
		for f := range t.work {
			f()
		}
	}()
	return t
}

func (t *thread) do(f func()) {
	ch := make(chan struct{})
	t.work <- func() { f(); close(ch) }
	<-ch
}

func (t *thread) stop() {
	close(t.work)
	<-t.done
}

// callerThread runs functions on the calling goroutine's OS thread (a cgo
// call keeps its thread until it returns, callbacks into Go included),
// one at a time. Handing each execution to a dedicated thread and back
// costs two wake-ups of sleeping threads, which for a small request is
// most of the time an execution takes.
type callerThread struct{ mu sync.Mutex }

func (t *callerThread) do(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f()
}

func (t *callerThread) stop() {}

// runnerFor chooses where an instance's calls run. Triton runs each
// instance on a thread of its own; what a backend can observe of that is
// thread-local state kept from one call to the next. That matters on a
// GPU: CUDA's current device and context are per thread, set by the
// backend (or by Triton) once and relied on by every later Execute, so GPU
// and MODEL instances (a MODEL instance places itself, usually on GPUs)
// keep a dedicated locked thread. A CPU instance has no such state worth
// the two thread wake-ups per execution: it runs on the scheduler's
// goroutine, still never two calls at once. Within one call the thread
// does not change, so locks a backend takes and releases in a call, and
// thread-local state of a call, behave as on Triton's thread.
func runnerFor(kind inference.ModelInstanceGroup_Kind) runner {
	switch kind {
	case inference.ModelInstanceGroup_KIND_GPU, inference.ModelInstanceGroup_KIND_MODEL:
		return startThread()
	}
	return &callerThread{}
}

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

// outBuffers are the output buffers handed out for a request: a few, so
// a slice searched in order.
type outBuffers []outBuffer

type outBuffer struct {
	p unsafe.Pointer
	b []byte
}

func (bs outBuffers) find(p unsafe.Pointer) ([]byte, bool) {
	for _, x := range bs {
		if x.p == p {
			return x.b, true
		}
	}
	return nil, false
}

// allocOutput returns a buffer for an output: Go memory pinned until the
// request is disposed of, then owned by the response.
func (cr *cRequest) allocOutput(size int) (unsafe.Pointer, error) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.gone {
		return nil, tritonerr.InvalidArgf("request has been released and answered")
	}
	b := make([]byte, max(size, 1))
	p := unsafe.Pointer(unsafe.SliceData(b))
	cr.pin.Pin(p)
	cr.pinned = true
	x := cr.extra()
	x.bufs = append(x.bufs, outBuffer{p, b[:size]})
	return p, nil
}

// placeOutput returns the memory an output of size bytes is bound for in
// a client's shared-memory region, so that the backend writes it there and
// no copy follows; nil when the output is not bound to a region it fits
// in. A decoupled model's responses each need memory of their own: they
// get private buffers.
func (cr *cRequest) placeOutput(name *C.char, size int) (unsafe.Pointer, error) {
	if cr.r.OutputPlace == nil || size == 0 || cr.in.m.decoupled() {
		return nil, nil
	}
	b := cr.r.OutputPlace(C.GoString(name), size)
	if len(b) != size {
		return nil, nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.gone {
		return nil, tritonerr.InvalidArgf("request has been released and answered")
	}
	if _, taken := cr.buffers().find(p); taken {
		return nil, nil // two outputs bound to the same place: one gets its own
	}
	x := cr.extra()
	x.bufs = append(x.bufs, outBuffer{p, b})
	return p, nil
}

// deviceOutput returns the GPU memory an output of size bytes is bound
// for (a client's CUDA shared-memory region), where the backend writes it
// in place; false for any other output, and for every output of a
// decoupled model, whose responses each need memory of their own.
func (cr *cRequest) deviceOutput(name *C.char, size int) (backend.Device, bool) {
	if cr.r.OutputDevice == nil || size <= 0 || cr.in.m.decoupled() {
		return backend.Device{}, false
	}
	return cr.r.OutputDevice(C.GoString(name), size)
}

// goName is the C string c of n bytes as a Go string: one of known when
// it is one (an output's name is usually a requested output's), without a
// copy.
func goName(c *C.char, n int, known []string) string {
	s := unsafe.String((*byte)(unsafe.Pointer(c)), n)
	for _, k := range known {
		if k == s {
			return k
		}
	}
	return C.GoStringN(c, C.int(n))
}

// shapeAndBytes returns a shape of dims dimensions and, with bytes, a
// buffer of size bytes, together: an output's shape and the copy of a
// small output's C memory. They are taken from the front of spare when
// they fit (rest is what is left of it), else made in one allocation.
func shapeAndBytes(dims, size int, bytes bool, spare []int64) (shape []int64, data []byte, rest []int64) {
	need := dims
	if bytes {
		need += (size + 7) / 8
	}
	words := spare
	if need <= len(spare) {
		rest = spare[need:]
	} else {
		words, rest = make([]int64, need), spare
	}
	shape = words[:dims:dims]
	switch {
	case !bytes:
	case size == 0:
		data = []byte{}
	default:
		data = unsafe.Slice((*byte)(unsafe.Pointer(&words[dims])), size)
	}
	return shape, data, rest
}

// oneOutput is a response's only output with room for its shape and the
// copy of a small output, in one allocation: the usual response of a
// small request then costs the executor what the Go identity's does.
type oneOutput struct {
	out   [1]backend.Output
	words [oneOutputWords]int64
}

// ownedOutput is the usual response's outputs, as outputs makes them:
// one small output in C memory (exec.c), which fits a oneOutput. Without
// outputs' loop it costs less than half as much.
func (cr *cRequest) ownedOutput(o *C.TRITONBACKEND_Output) []backend.Output {
	x := new(oneOutput)
	dims, size := int(o.dims_count), int(o.byte_size)
	for j, d := range cArray(o.shape, dims) {
		x.words[j] = int64(d)
	}
	data := []byte{}
	if size > 0 {
		data = unsafe.Slice((*byte)(unsafe.Pointer(&x.words[dims])), size)
		copy(data, cArray((*byte)(o.buffer), size))
	}
	x.out[0] = backend.Output{Name: goName(o.name, int(o.name_len), cr.r.RequestedOutputs), DataType: dataTypeFromC(int(o.datatype)), Shape: x.words[:dims:dims], Data: data}
	return x.out[:]
}

// oneOutputWords is oneOutput's room: a 64-byte output of up to three
// dimensions fits, and the object fills the 160-byte size class, the bytes
// the two allocations it replaces took.
const oneOutputWords = 11

// send is TRITONBACKEND_ResponseSend (resp nil: ResponseFactorySendFlags).
func (cr *cRequest) send(resp *C.TRITONBACKEND_Response, flags uint32, errp *C.TRITONSERVER_Error) error {
	err := cr.deliver(resp, flags, errp)
	if flags&C.TRITONSERVER_RESPONSE_COMPLETE_FINAL != 0 {
		cr.answered()
	}
	return err
}

// answered is the bookkeeping of a final send: the request is ended, and
// disposed of, once it is released too.
func (cr *cRequest) answered() {
	cr.mu.Lock()
	cr.final = true
	if !cr.ended() {
		cr.mu.Unlock()
	} else if c := cr.c; cr.disposeGoLocked() {
		unrefArena(c.arena)
	}
}

// deliver is send but for the final send's bookkeeping (answered).
func (cr *cRequest) deliver(resp *C.TRITONBACKEND_Response, flags uint32, errp *C.TRITONSERVER_Error) error {
	f := backend.ResponseFlags(0)
	if flags&C.TRITONSERVER_RESPONSE_COMPLETE_FINAL != 0 {
		f = backend.ResponseFinal
	}
	var err error
	if resp != nil && errp == nil {
		var outs []backend.Output
		var missing string
		if resp.n_outputs > 0 {
			outs, missing = cr.outputs(resp)
		}
		if missing == "" {
			var params map[string]any
			if resp.n_params > 0 {
				params = responseParams(resp)
			}
			// Sends may block for flow control: no lock held.
			err = cr.r.ResponseSender().SendResponse(f, backend.Response{Outputs: outs, Parameters: params})
		} else {
			err = cr.sendWithout(resp, f, nil, missing)
		}
	} else {
		err = cr.sendWithout(resp, f, errp, "")
	}
	return err
}

// The rarer sends and a response's parameters are functions of their own,
// as execute's rare ends are: send's code stays small.

// sendWithout sends what is not a response's outputs: the flags alone
// (resp nil), the backend's error errp, or the error of the output named
// missing, which has no buffer.
func (cr *cRequest) sendWithout(resp *C.TRITONBACKEND_Response, f backend.ResponseFlags, errp *C.TRITONSERVER_Error, missing string) error {
	s := cr.r.ResponseSender()
	switch {
	case resp == nil:
		return s.SendFlags(f)
	case errp != nil:
		return s.SendError(f, tritonerr.New(kindOf(errp.code), "%s", C.GoString(errp.msg)))
	default:
		return s.SendError(f, tritonerr.Internalf("output '%s' has no buffer from TRITONBACKEND_OutputBuffer", missing))
	}
}

// responseParams are the parameters the backend set on resp.
func responseParams(resp *C.TRITONBACKEND_Response) map[string]any {
	params := make(map[string]any, int(resp.n_params))
	for _, p := range unsafe.Slice(resp.params, int(resp.n_params)) {
		params[C.GoString(p.name)] = parameterValue(p)
	}
	return params
}

// outputs are resp's outputs as the executor takes them, and the name of
// one that has no buffer ("" when each has one).
func (cr *cRequest) outputs(resp *C.TRITONBACKEND_Response) (outs []backend.Output, missing string) {
	routs := cArray(resp.outputs, int(resp.n_outputs))
	var spare []int64
	if o := routs[0]; len(routs) == 1 && int(o.dims_count)+(int(o.byte_size)+7)/8 <= oneOutputWords {
		if o.buffer != nil && o.owned {
			return cr.ownedOutput(o), ""
		}
		x := new(oneOutput)
		outs, spare = x.out[:0:1], x.words[:]
	} else {
		outs = make([]backend.Output, 0, len(routs))
	}
	for _, o := range routs {
		name := goName(o.name, int(o.name_len), cr.r.RequestedOutputs)
		owned := o.buffer != nil && bool(o.owned)
		var shape []int64
		var data []byte
		shape, data, spare = shapeAndBytes(int(o.dims_count), int(o.byte_size), owned, spare)
		if o.dims_count > 0 {
			for j, d := range cArray(o.shape, int(o.dims_count)) {
				shape[j] = int64(d)
			}
		}
		switch {
		case owned:
			// C memory (exec.c), freed with the response: data is its
			// copy.
			copy(data, unsafe.Slice((*byte)(o.buffer), int(o.byte_size)))
		case o.buffer == nil:
			data = []byte{}
		case o.attributes.memory_type == C.TRITONSERVER_MEMORY_GPU:
			// Written in its CUDA region (deviceOutput): the region
			// holds it, the response carries its shape alone.
			data = []byte{}
			o.buffer = nil
		default:
			// A buffer from Go (allocOutput, placeOutput), which the
			// response takes; C memory keeps no Go pointer past the
			// response's send.
			cr.mu.Lock()
			b, ok := cr.buffers().find(o.buffer)
			cr.mu.Unlock()
			if !ok {
				missing = name
			}
			data = b
			o.buffer = nil
		}
		outs = append(outs, backend.Output{Name: name, DataType: dataTypeFromC(int(o.datatype)), Shape: shape, Data: data})
	}
	return outs, missing
}
