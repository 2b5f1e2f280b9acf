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

// objects maps the handles stored in C structures to Go objects. Handles
// are never reused, so a stale one finds nothing instead of another object.
var objects struct {
	sync.RWMutex
	next uintptr
	m    map[uintptr]any
}

func register(v any) uintptr {
	objects.Lock()
	defer objects.Unlock()
	if objects.m == nil {
		objects.m = map[uintptr]any{}
	}
	objects.next++
	objects.m[objects.next] = v
	return objects.next
}

func unregister(h uintptr) {
	objects.Lock()
	delete(objects.m, h)
	objects.Unlock()
}

func lookup[T any](h C.uintptr_t) T {
	objects.RLock()
	v, _ := objects.m[uintptr(h)].(T)
	objects.RUnlock()
	return v
}

// NewModel is TRITONBACKEND_ModelInitialize.
func (b *cBackend) NewModel(ctx context.Context, info backend.ModelInfo) (backend.Model, error) {
	m := &cModel{b: b, info: info, cfg: info.Config}
	cm := (*C.TRITONBACKEND_Model)(C.calloc(1, C.sizeof_TRITONBACKEND_Model))
	cm.name = C.CString(info.Name)
	cm.version = C.uint64_t(info.Version)
	cm.location = C.CString(info.Dir)
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
	m.mu.Unlock()
	return m, nil
}

// Unguarded marks the model as running C code, which Go's fault guard for
// client-owned shared memory cannot cover: the executor gives it private
// copies of inputs in shared memory.
func (m *cModel) Unguarded() {}

// decoupled reports the model's transaction policy.
func (m *cModel) decoupled() bool { return modelconfig.IsDecoupled(m.config()) }

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
	c      *C.TRITONBACKEND_ModelInstance
	h      uintptr
	thread runner
	once   sync.Once

	// arr is the array of requests Execute gets, kept from one execution
	// to the next (executions never overlap; a backend may not keep the
	// array past Execute). Its capacity is narr.
	arr  unsafe.Pointer
	narr int
}

// requestArray returns the instance's array of n request pointers.
func (in *cInstance) requestArray(n int) []*C.TRITONBACKEND_Request {
	if n > in.narr {
		C.free(in.arr)
		in.narr = max(n, 2*in.narr)
		// Zeroed: Go stores pointers in it (see outparam.go).
		in.arr = C.calloc(C.size_t(in.narr), C.size_t(unsafe.Sizeof(uintptr(0))))
	}
	return unsafe.Slice((**C.TRITONBACKEND_Request)(in.arr), n)
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
	crs = crs[:n]
	for i, r := range reqs {
		crs[i] = newCRequest(in, r)
		arr[i] = crs[i].c
	}
	if err := takeError(C.nereid_call_execute(in.m.b.sb.lib.fns.execute, in.c, &arr[0], C.uint32_t(n))); err != nil {
		// Ownership of the requests is the server's again.
		for _, cr := range crs {
			cr.abandon()
		}
		return err
	}
	// A model that is not decoupled answers during Execute (Triton's
	// blocking policy); a decoupled one may go on from its own threads, and
	// each request is disposed of when released and ended.
	if in.m.decoupled() {
		return nil
	}
	for _, cr := range crs {
		select {
		case <-cr.finishedChan():
		case <-ctx.Done():
			// Shutting down with a backend that holds a request: leave its
			// memory to it rather than free what it may still touch.
			return tritonerr.Unavailablef("model '%s' is unloading", in.m.info.Name)
		}
	}
	return nil
}

// cRequest is a request while a backend holds it.
type cRequest struct {
	in *cInstance
	r  *backend.Request
	c  *C.TRITONBACKEND_Request
	h  uintptr

	pin runtime.Pinner

	mu       sync.Mutex
	bufs     outBuffers // output buffers handed out
	gone     bool       // disposed of: no more buffers
	released bool
	final    bool
	ended_   bool          // released and answered
	finished chan struct{} // closed once ended_; made only for a waiter
	bufStore [2]outBuffer  // bufs' first buffers, without an allocation
	disposed sync.Once
	states   []unsafe.Pointer // TRITONBACKEND_State objects made for the request
	trace    *cTrace          // the request's trace, once the backend asked for it
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
func (cr *cRequest) release() (free bool) {
	cr.mu.Lock()
	if cr.released {
		cr.mu.Unlock()
		return false
	}
	cr.released = true
	cr.c.released = true
	done := cr.ended()
	cr.mu.Unlock()
	return done && cr.disposeGo()
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
		C.nereid_free_request(c)
	}
}

// disposeGo is dispose but for freeing the request's C side, which it
// leaves to the caller when it reports true (the first time).
func (cr *cRequest) disposeGo() bool {
	first := false
	cr.disposed.Do(func() {
		first = true
		unregister(cr.h)
		cr.mu.Lock()
		cr.c = nil
		cr.bufs = nil
		cr.gone = true
		for _, p := range cr.states {
			unregister(uintptr((*C.TRITONBACKEND_State)(p).h))
			C.free(p)
		}
		cr.states = nil
		t := cr.trace
		cr.pin.Unpin()
		cr.mu.Unlock()
		if t != nil {
			t.free()
		}
	})
	return first
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
	cr.bufs = append(cr.bufs, outBuffer{p, b[:size]})
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
	if _, taken := cr.bufs.find(p); taken {
		return nil, nil // two outputs bound to the same place: one gets its own
	}
	cr.bufs = append(cr.bufs, outBuffer{p, b})
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

// send is TRITONBACKEND_ResponseSend (resp nil: ResponseFactorySendFlags).
func (cr *cRequest) send(resp *C.TRITONBACKEND_Response, flags uint32, errp *C.TRITONSERVER_Error) error {
	final := flags&C.TRITONSERVER_RESPONSE_COMPLETE_FINAL != 0
	var outs []backend.Output
	var missing string
	if resp != nil && errp == nil && resp.n_outputs > 0 {
		outs = make([]backend.Output, 0, int(resp.n_outputs))
		cr.mu.Lock()
		for _, o := range unsafe.Slice(resp.outputs, int(resp.n_outputs)) {
			name := C.GoString(o.name)
			shape := make([]int64, int(o.dims_count))
			if o.dims_count > 0 {
				for j, d := range unsafe.Slice(o.shape, int(o.dims_count)) {
					shape[j] = int64(d)
				}
			}
			data, ok := cr.bufs.find(o.buffer)
			switch {
			case o.buffer == nil:
				data = []byte{}
			case o.attributes.memory_type == C.TRITONSERVER_MEMORY_GPU:
				// Written in its CUDA region (deviceOutput): the region
				// holds it, the response carries its shape alone.
				data = []byte{}
			case !ok:
				missing = name
			}
			outs = append(outs, backend.Output{Name: name, DataType: dataTypeFromC(int(o.datatype)), Shape: shape, Data: data})
		}
		cr.mu.Unlock()
	}
	var params map[string]any
	if resp != nil && resp.n_params > 0 {
		params = make(map[string]any, int(resp.n_params))
		for _, p := range unsafe.Slice(resp.params, int(resp.n_params)) {
			params[C.GoString(p.name)] = parameterValue(p)
		}
	}
	f := backend.ResponseFlags(0)
	if final {
		f = backend.ResponseFinal
	}
	// Sends may block for flow control: no lock held.
	s := cr.r.ResponseSender()
	var err error
	switch {
	case resp == nil:
		err = s.SendFlags(f)
	case errp != nil:
		err = s.SendError(f, tritonerr.New(kindOf(errp.code), "%s", C.GoString(errp.msg)))
	case missing != "":
		err = s.SendError(f, tritonerr.Internalf("output '%s' has no buffer from TRITONBACKEND_OutputBuffer", missing))
	default:
		err = s.SendResponse(f, backend.Response{Outputs: outs, Parameters: params})
	}
	if final {
		cr.mu.Lock()
		cr.final = true
		done := cr.ended()
		cr.mu.Unlock()
		if done {
			cr.dispose()
		}
	}
	return err
}
