//go:build cgo

package cbackend

/*
#define NEREID_TYPES_ONLY
#include <stdlib.h>
#include "abi.h"
*/
import "C"

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// The cgo exports below are the functions of the API that reach the
// executor. Their C names are Triton's; cgo declares them with its own
// pointer qualifiers, which is why this file includes the types alone.

var logger atomic.Pointer[slog.Logger]

func setLogger(l *slog.Logger) { logger.Store(l) }

func logLevel(level C.TRITONSERVER_LogLevel) slog.Level {
	switch level {
	case C.TRITONSERVER_LOG_WARN:
		return slog.LevelWarn
	case C.TRITONSERVER_LOG_ERROR:
		return slog.LevelError
	case C.TRITONSERVER_LOG_VERBOSE:
		return slog.LevelDebug
	default:
		return slog.LevelInfo
	}
}

// logEnabled is TRITONSERVER_LogIsEnabled, which answers in C during an
// execution (exec.c).
func logEnabled(level C.TRITONSERVER_LogLevel) bool {
	l := logger.Load()
	return l != nil && l.Enabled(context.Background(), logLevel(level))
}

//export nereid_log_is_enabled
func nereid_log_is_enabled(level C.TRITONSERVER_LogLevel) C.bool { return C.bool(logEnabled(level)) }

//export TRITONSERVER_LogMessage
func TRITONSERVER_LogMessage(level C.TRITONSERVER_LogLevel, file *C.char, line C.int, msg *C.char) *C.TRITONSERVER_Error {
	l := logger.Load()
	if l == nil {
		return nil
	}
	lv := logLevel(level)
	if !l.Enabled(context.Background(), lv) {
		return nil
	}
	l.Log(context.Background(), lv, C.GoString(msg), "source", "backend", "file", C.GoString(file), "line", int(line))
	return nil
}

func request(r *C.TRITONBACKEND_Request) (*cRequest, *C.TRITONSERVER_Error) {
	if r == nil {
		return nil, newError(tritonerr.InvalidArgf("request must not be null"))
	}
	cr := lookup[*cRequest](r.h)
	if cr == nil {
		return nil, newError(tritonerr.InvalidArgf("request is no longer valid"))
	}
	return cr, nil
}

//export TRITONBACKEND_RequestIsCancelled
func TRITONBACKEND_RequestIsCancelled(r *C.TRITONBACKEND_Request, out *C.bool) *C.TRITONSERVER_Error {
	cr, e := request(r)
	if e != nil {
		return e
	}
	*out = C.bool(cr.r.IsCancelled())
	return nil
}

// nereid_request_cancelled is TRITONBACKEND_ResponseSend's question, for a
// recorded response that is not the last, whether the client has gone
// (exec.c).
//
//export nereid_request_cancelled
func nereid_request_cancelled(h C.uintptr_t) C.bool {
	cr := lookup[*cRequest](h)
	return C.bool(cr != nil && cr.r.IsCancelled())
}

// nereid_request_release is TRITONBACKEND_RequestRelease (exec.c) outside
// a recorded execution but for freeing the request's memory, which it
// leaves to C (*free set) once it is done with: one call into C fewer per
// request.
//
//export nereid_request_release
func nereid_request_release(r *C.TRITONBACKEND_Request, flags C.uint32_t, free *C.bool) *C.TRITONSERVER_Error {
	cr, e := request(r)
	if e != nil {
		return e
	}
	if !cr.live() {
		return newError(tritonerr.InvalidArgf("request is no longer valid"))
	}
	if flags&C.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE != 0 {
		// Triton executes a rescheduled request again only under its
		// iterative sequence scheduler (sequence_batching with
		// iterative_sequence), which the executor does not have: every
		// model answers as a Triton model under any other scheduler, and
		// the request stays the backend's (to release with
		// TRITONSERVER_REQUEST_RELEASE_ALL).
		return newError(tritonerr.InvalidArgf("Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag."))
	}
	*free = C.bool(cr.release())
	return nil
}

//export TRITONBACKEND_ResponseFactoryNew
func TRITONBACKEND_ResponseFactoryNew(f **C.TRITONBACKEND_ResponseFactory, r *C.TRITONBACKEND_Request) *C.TRITONSERVER_Error {
	if _, e := request(r); e != nil {
		return e
	}
	if r.released {
		return newError(tritonerr.InvalidArgf("request has been released"))
	}
	rf := (*C.TRITONBACKEND_ResponseFactory)(C.calloc(1, C.sizeof_TRITONBACKEND_ResponseFactory))
	rf.h = r.h
	rf.req, rf.exec, rf.gen = r, r.exec, r.gen
	if cr := lookup[*cRequest](r.h); cr != nil {
		factories.Store(rf, cr.r)
	}
	setOut(f, rf)
	return nil
}

//export TRITONBACKEND_ResponseFactoryDelete
func TRITONBACKEND_ResponseFactoryDelete(f *C.TRITONBACKEND_ResponseFactory) *C.TRITONSERVER_Error {
	factories.Delete(f)
	C.free(unsafe.Pointer(f))
	return nil
}

// nereid_factory_send_flags is TRITONBACKEND_ResponseFactorySendFlags
// (exec.c) outside a recorded execution.
//
//export nereid_factory_send_flags
func nereid_factory_send_flags(f *C.TRITONBACKEND_ResponseFactory, flags C.uint32_t) *C.TRITONSERVER_Error {
	cr := lookup[*cRequest](f.h)
	if cr == nil || !cr.live() {
		return newError(tritonerr.InvalidArgf("response factory is no longer valid"))
	}
	return newError(cr.send(nil, uint32(flags), nil))
}

// nereid_factory_is_cancelled is TRITONBACKEND_ResponseFactoryIsCancelled
// (exec.c) but for a recorded request gone; replay says whether the
// request's record has ended.
//
//export nereid_factory_is_cancelled
func nereid_factory_is_cancelled(f *C.TRITONBACKEND_ResponseFactory, out *C.bool, replay C.bool) *C.TRITONSERVER_Error {
	cr := lookup[*cRequest](f.h)
	*out = C.bool(cr == nil || (bool(replay) && !cr.live()) || cr.r.IsCancelled())
	return nil
}

// nereid_response_send is TRITONBACKEND_ResponseSend (exec.c) outside a
// recorded execution but for freeing the response, which C does once back
// from Go.
//
//export nereid_response_send
func nereid_response_send(resp *C.TRITONBACKEND_Response, flags C.uint32_t, errp *C.TRITONSERVER_Error) *C.TRITONSERVER_Error {
	cr := lookup[*cRequest](resp.h)
	if cr == nil || !cr.live() {
		return newError(tritonerr.InvalidArgf("response's request is no longer valid"))
	}
	return newError(cr.send(resp, uint32(flags), errp))
}

// nereid_output_buffer is TRITONBACKEND_OutputBuffer (exec.c) for the
// buffers C does not allocate itself: outside a recorded execution, larger
// ones, and those that may be bound for a client's region; replay says
// whether the request's record has ended.
//
//export nereid_output_buffer
func nereid_output_buffer(o *C.TRITONBACKEND_Output, buf *unsafe.Pointer, size C.uint64_t, mt *C.TRITONSERVER_MemoryType, mid *C.int64_t, replay C.bool) *C.TRITONSERVER_Error {
	cr := lookup[*cRequest](o.response.h)
	if cr == nil || (bool(replay) && !cr.live()) {
		return newError(tritonerr.InvalidArgf("output's request is no longer valid"))
	}
	if o.buffer != nil {
		return newError(tritonerr.New(tritonerr.AlreadyExists, "output '%s' already has a buffer", C.GoString(o.name)))
	}
	// Triton's negotiation: *mt and *mid say what the backend prefers, and
	// the server's allocator decides, as Triton's HTTP and gRPC frontends
	// do: an output bound for a client's CUDA shared-memory region is
	// written there, on its GPU, whatever the preference; any other goes
	// to host memory (the client's system region, or the response's own
	// buffer), and the backend hears which.
	if dev, ok := cr.deviceOutput(o.name, int(size)); ok {
		o.buffer = C.nereid_ptr(C.uintptr_t(dev.Ptr)) // a device address, never dereferenced here
		o.byte_size = size
		o.attributes.memory_type = C.TRITONSERVER_MEMORY_GPU
		o.attributes.memory_type_id = C.int64_t(dev.ID)
		o.attributes.byte_size = C.size_t(size)
		setOutPointer(buf, o.buffer)
		setMemory(mt, mid, C.TRITONSERVER_MEMORY_GPU, dev.ID)
		return nil
	}
	p, err := cr.placeOutput(o.name, int(size))
	if err == nil && p == nil {
		p, err = cr.allocOutput(int(size))
	}
	if err != nil {
		return newError(err)
	}
	o.buffer = p
	o.byte_size = size
	o.attributes.memory_type = C.TRITONSERVER_MEMORY_CPU
	o.attributes.memory_type_id = 0
	o.attributes.byte_size = C.size_t(size)
	setOutPointer(buf, p)
	setMemory(mt, mid, C.TRITONSERVER_MEMORY_CPU, 0)
	return nil
}

func setMemory(mt *C.TRITONSERVER_MemoryType, mid *C.int64_t, t C.TRITONSERVER_MemoryType, id int64) {
	if mt != nil {
		*mt = t
	}
	if mid != nil {
		*mid = C.int64_t(id)
	}
}

//export TRITONBACKEND_RequestOutputBufferProperties
func TRITONBACKEND_RequestOutputBufferProperties(r *C.TRITONBACKEND_Request, name *C.char, size *C.size_t, mt *C.TRITONSERVER_MemoryType, mid *C.int64_t) *C.TRITONSERVER_Error {
	cr, e := request(r)
	if e != nil {
		return e
	}
	if r.released {
		return newError(tritonerr.InvalidArgf("request has been released"))
	}
	if name == nil {
		return newError(tritonerr.InvalidArgf("output name must not be null"))
	}
	// What TRITONBACKEND_OutputBuffer will give the output: its CUDA
	// region on the GPU, else host memory.
	if dev, ok := cr.deviceOutput(name, 1); ok {
		setMemory(mt, mid, C.TRITONSERVER_MEMORY_GPU, dev.ID)
		return nil
	}
	setMemory(mt, mid, C.TRITONSERVER_MEMORY_CPU, 0)
	return nil
}

// ---- implicit state (state.go) ----

//export TRITONBACKEND_StateNew
func TRITONBACKEND_StateNew(state **C.TRITONBACKEND_State, r *C.TRITONBACKEND_Request, name *C.char, dt C.TRITONSERVER_DataType, shape *C.int64_t, dims C.uint32_t) *C.TRITONSERVER_Error {
	cr, e := request(r)
	if e != nil {
		return e
	}
	var sh []int64
	if dims > 0 {
		for _, d := range unsafe.Slice(shape, int(dims)) {
			sh = append(sh, int64(d))
		}
	}
	bs, err := cr.r.StateNew(C.GoString(name), dataTypeFromC(int(dt)), sh)
	if err != nil {
		return newError(err)
	}
	st := &cState{cr: cr, s: bs}
	cs := (*C.TRITONBACKEND_State)(C.calloc(1, C.sizeof_TRITONBACKEND_State))
	cs.h = C.uintptr_t(register(st))
	// Its lifetime is the request's: freed when the request is.
	cr.mu.Lock()
	x := cr.extra()
	x.states = append(x.states, unsafe.Pointer(cs))
	cr.mu.Unlock()
	setOut(state, cs)
	return nil
}

func stateOf(s *C.TRITONBACKEND_State) (*cState, *C.TRITONSERVER_Error) {
	if s == nil {
		return nil, newError(tritonerr.InvalidArgf("state must not be null"))
	}
	st := lookup[*cState](s.h)
	if st == nil {
		return nil, newError(tritonerr.InvalidArgf("state is no longer valid"))
	}
	return st, nil
}

//export TRITONBACKEND_StateBuffer
func TRITONBACKEND_StateBuffer(state *C.TRITONBACKEND_State, buf *unsafe.Pointer, size C.uint64_t, mt *C.TRITONSERVER_MemoryType, mid *C.int64_t) *C.TRITONSERVER_Error {
	st, e := stateOf(state)
	if e != nil {
		return e
	}
	p, err := st.cr.allocOutput(int(size))
	if err != nil {
		return newError(err)
	}
	st.cr.mu.Lock()
	st.buf, _ = st.cr.buffers().find(p)
	st.cr.mu.Unlock()
	setOutPointer(buf, p)
	if mt != nil {
		*mt = C.TRITONSERVER_MEMORY_CPU
	}
	if mid != nil {
		*mid = 0
	}
	return nil
}

//export TRITONBACKEND_StateUpdate
func TRITONBACKEND_StateUpdate(state *C.TRITONBACKEND_State) *C.TRITONSERVER_Error {
	st, e := stateOf(state)
	if e != nil {
		return e
	}
	if st.buf == nil {
		return newError(tritonerr.InvalidArgf("state '%s' has no buffer: call TRITONBACKEND_StateBuffer first", st.s.Name))
	}
	if err := st.update(); err != nil {
		return newError(err)
	}
	return nil
}

// ---- model configuration ----

func model(m *C.TRITONBACKEND_Model) *cModel {
	if m == nil {
		return nil
	}
	return lookup[*cModel](m.h)
}

//export TRITONBACKEND_ModelConfig
func TRITONBACKEND_ModelConfig(m *C.TRITONBACKEND_Model, version C.uint32_t, out **C.TRITONSERVER_Message) *C.TRITONSERVER_Error {
	cm := model(m)
	if cm == nil {
		return newError(tritonerr.InvalidArgf("model must not be null"))
	}
	if version != 1 {
		return newError(tritonerr.Unsupportedf("model configuration version %d not supported, supported versions are: 1", version))
	}
	js := cm.configJSON()
	msg := (*C.TRITONSERVER_Message)(C.calloc(1, C.sizeof_TRITONSERVER_Message)) // zeroed: Go stores a pointer in it
	msg.json = (*C.char)(C.CBytes(append(js, 0)))
	msg.size = C.size_t(len(js))
	setOut(out, msg)
	return nil
}

//export TRITONBACKEND_ModelSetConfig
func TRITONBACKEND_ModelSetConfig(m *C.TRITONBACKEND_Model, version C.uint32_t, msg *C.TRITONSERVER_Message) *C.TRITONSERVER_Error {
	cm := model(m)
	if cm == nil || msg == nil {
		return newError(tritonerr.InvalidArgf("model and configuration must not be null"))
	}
	if version != 1 {
		return newError(tritonerr.Unsupportedf("model configuration version %d not supported, supported versions are: 1", version))
	}
	return newError(cm.setConfig(C.GoBytes(unsafe.Pointer(msg.json), C.int(msg.size))))
}

//export TRITONBACKEND_ModelReportMemoryUsage
func TRITONBACKEND_ModelReportMemoryUsage(m *C.TRITONBACKEND_Model, usage **C.TRITONSERVER_BufferAttributes, n C.uint32_t) *C.TRITONSERVER_Error {
	if model(m) == nil {
		return newError(tritonerr.InvalidArgf("model must not be null"))
	}
	return nil
}

//export TRITONBACKEND_ModelInstanceReportMemoryUsage
func TRITONBACKEND_ModelInstanceReportMemoryUsage(i *C.TRITONBACKEND_ModelInstance, usage **C.TRITONSERVER_BufferAttributes, n C.uint32_t) *C.TRITONSERVER_Error {
	if i == nil {
		return newError(tritonerr.InvalidArgf("model instance must not be null"))
	}
	return nil
}

// ---- statistics ----

// The two clocks are tied together by reading the steady clock, Go's, then
// the steady clock again. steadyNow counts from the first reading: it runs
// behind the clock by the time between the reads, never ahead of it, and a
// cached answer's age (exec.c) is never underestimated. A backend's
// reading is placed on Go's clock from the second: it comes out behind
// the instant it was taken, never after anything Go read later.
var (
	baseSteady      = uint64(C.nereid_steady_ns())
	baseWall        = time.Now()
	baseSteadyAfter = uint64(C.nereid_steady_ns())
)

// steadyNow reads nereid_steady_ns's clock (CLOCK_MONOTONIC, as Go's
// monotonic time) without a call into C.
func steadyNow() uint64 { return baseSteady + uint64(time.Since(baseWall)) }

// steady turns a steady-clock reading in ns (std::chrono::steady_clock,
// CLOCK_MONOTONIC) into a time.Time on the same monotonic clock.
func steady(ns C.uint64_t) time.Time { return baseWall.Add(sinceBase(ns)) }

// sinceBase is a steady-clock reading in ns as the time after baseWall.
func sinceBase(ns C.uint64_t) time.Duration {
	return time.Duration(int64(uint64(ns) - baseSteadyAfter))
}

// steadyStamps are a backend's four steady-clock readings as
// SteadyStamps: no time.Time made.
func steadyStamps(a, b, c, d C.uint64_t) backend.SteadyStamps {
	return backend.SteadyStamps{Base: baseWall, ExecStart: sinceBase(a), ComputeStart: sinceBase(b), ComputeEnd: sinceBase(c), ExecEnd: sinceBase(d)}
}

// reportStatistics gives the instance's statistics a request's readings:
// as SteadyStamps when they take them (the executor's do), else as
// Timestamps (memo: the execution's start, or nil).
func (in *cInstance) reportStatistics(r *backend.Request, success bool, memo *startMemo, a, b, c, d C.uint64_t) {
	if in.steady != nil {
		in.steady.ReportSteadyStatistics(r, success, steadyStamps(a, b, c, d))
		return
	}
	in.info.Stats.ReportStatistics(r, success, stamps(memo, a, b, c, d))
}

// reportBatchStatistics is reportStatistics for an execution's batch.
func (in *cInstance) reportBatchStatistics(n int, memo *startMemo, a, b, c, d C.uint64_t) {
	if in.steady != nil {
		in.steady.ReportSteadyBatchStatistics(n, steadyStamps(a, b, c, d))
		return
	}
	in.info.Stats.ReportBatchStatistics(n, stamps(memo, a, b, c, d))
}

// startMemo remembers an execution's last converted start stamp: a
// backend that reads the clock once as its execution starts reports that
// reading as the start of each request and of the batch.
type startMemo struct {
	ns C.uint64_t
	t  time.Time
}

func stamps(m *startMemo, a, b, c, d C.uint64_t) backend.Timestamps {
	// Backends often pass one reading for two of them (exec and compute
	// start, compute and exec end): each is converted once. Locals rather
	// than the fields of a zeroed result, copied once.
	var es time.Time
	switch {
	case m == nil:
		es = steady(a)
	case m.ns == a && !m.t.IsZero():
		es = m.t
	default:
		es = steady(a)
		m.ns, m.t = a, es
	}
	cs := es
	if b != a {
		cs = steady(b)
	}
	ce := cs
	if c != b {
		ce = steady(c)
	}
	ee := ce
	if d != c {
		ee = steady(d)
	}
	return backend.Timestamps{ExecStart: es, ComputeStart: cs, ComputeEnd: ce, ExecEnd: ee}
}

func instance(i *C.TRITONBACKEND_ModelInstance) *cInstance {
	if i == nil {
		return nil
	}
	return lookup[*cInstance](i.h)
}

// nereid_report_statistics is
// TRITONBACKEND_ModelInstanceReportStatistics (exec.c) outside a recorded
// execution.
//
//export nereid_report_statistics
func nereid_report_statistics(i *C.TRITONBACKEND_ModelInstance, r *C.TRITONBACKEND_Request, success C.bool, a, b, c, d C.uint64_t) *C.TRITONSERVER_Error {
	in := instance(i)
	if in == nil {
		return newError(tritonerr.InvalidArgf("model instance must not be null"))
	}
	cr, e := request(r)
	if e != nil {
		return e
	}
	if !cr.live() {
		return newError(tritonerr.InvalidArgf("request is no longer valid"))
	}
	in.reportStatistics(cr.r, bool(success), nil, a, b, c, d)
	return nil
}

// nereid_report_batch_statistics is
// TRITONBACKEND_ModelInstanceReportBatchStatistics (exec.c) outside an
// execution of the instance.
//
//export nereid_report_batch_statistics
func nereid_report_batch_statistics(i *C.TRITONBACKEND_ModelInstance, n, a, b, c, d C.uint64_t) *C.TRITONSERVER_Error {
	in := instance(i)
	if in == nil {
		return newError(tritonerr.InvalidArgf("model instance must not be null"))
	}
	in.reportBatchStatistics(int(n), nil, a, b, c, d)
	return nil
}

// factories maps the response factories backends hold to their requests,
// for response statistics reported after the request is released and
// answered (TRITONBACKEND_ModelInstanceReportResponseStatistics follows
// the send, which may be the final one).
var factories sync.Map // *C.TRITONBACKEND_ResponseFactory -> *backend.Request

// nereid_report_response_statistics is
// TRITONBACKEND_ModelInstanceReportResponseStatistics (respstats.c): the
// response counts at its request's next response index, as Triton's
// factory numbers them. code is the response's error code, -1 for none.
//
//export nereid_report_response_statistics
func nereid_report_response_statistics(i *C.TRITONBACKEND_ModelInstance, f *C.TRITONBACKEND_ResponseFactory, start, out, end C.uint64_t, code C.int) *C.TRITONSERVER_Error {
	in := instance(i)
	if in == nil {
		return newError(tritonerr.InvalidArgf("model instance is no longer valid"))
	}
	v, ok := factories.Load(f)
	if !ok {
		return newError(tritonerr.InvalidArgf("response factory is no longer valid"))
	}
	r := v.(*backend.Request)
	rep, ok := in.info.Stats.(backend.ResponseStatsReporter)
	if !ok {
		return nil
	}
	s := backend.ResponseStatistics{Start: steady(start), End: steady(end)}
	if out != 0 {
		s.ComputeOutputStart = steady(out)
	}
	if code >= 0 {
		s.Err = tritonerr.New(kindOf(C.TRITONSERVER_Error_Code(code)), "response error")
	}
	rep.ReportResponseStatistics(r, r.NextResponseIndex(), s)
	return nil
}

// ---- memory manager ----

//export TRITONBACKEND_MemoryManagerAllocate
func TRITONBACKEND_MemoryManagerAllocate(mgr *C.TRITONBACKEND_MemoryManager, buf *unsafe.Pointer, mt C.TRITONSERVER_MemoryType, mid C.int64_t, size C.uint64_t) *C.TRITONSERVER_Error {
	switch mt {
	case C.TRITONSERVER_MEMORY_CPU, C.TRITONSERVER_MEMORY_CPU_PINNED:
		p := C.malloc(C.size_t(max(uint64(size), 1)))
		if p == nil {
			return newError(tritonerr.Unavailablef("failed to allocate %d bytes of %s memory", size, memoryTypeName(mt)))
		}
		setOutPointer(buf, p)
		return nil
	case C.TRITONSERVER_MEMORY_GPU:
		p, err := gpuAlloc(int64(mid), uint64(size))
		if err != nil {
			return newError(err)
		}
		setOutPointer(buf, C.nereid_ptr(C.uintptr_t(p))) // a device address, never dereferenced here
		return nil
	}
	return newError(tritonerr.InvalidArgf("unknown memory type %d", mt))
}

//export TRITONBACKEND_MemoryManagerFree
func TRITONBACKEND_MemoryManagerFree(mgr *C.TRITONBACKEND_MemoryManager, buf unsafe.Pointer, mt C.TRITONSERVER_MemoryType, mid C.int64_t) *C.TRITONSERVER_Error {
	switch mt {
	case C.TRITONSERVER_MEMORY_CPU, C.TRITONSERVER_MEMORY_CPU_PINNED:
		C.free(buf)
		return nil
	case C.TRITONSERVER_MEMORY_GPU:
		return newError(gpuFree(int64(mid), buf))
	}
	return newError(tritonerr.InvalidArgf("unknown memory type %d", mt))
}

func memoryTypeName(mt C.TRITONSERVER_MemoryType) string {
	switch mt {
	case C.TRITONSERVER_MEMORY_CPU_PINNED:
		return "CPU_PINNED"
	case C.TRITONSERVER_MEMORY_GPU:
		return "GPU"
	}
	return "CPU"
}
