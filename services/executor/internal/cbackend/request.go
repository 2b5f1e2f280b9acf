//go:build cgo

package cbackend

/*
#include <stdlib.h>
#include "abi.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/nereid-io/nereid/pkg/backend"
)

// arena lays out the C side of an execution's requests — each
// TRITONBACKEND_Request, its inputs, shapes, requested output names,
// parameters, every string and the bytes of small inputs — in one C
// allocation, the instance's, reused from one execution to the next (see
// cInstance.memory): no cgo call makes or frees it. It is used in two
// passes over the same layout: the first (base nil) only adds up the size,
// the second fills the memory in, zeroed beforehand.
type arena struct {
	base unsafe.Pointer
	off  uintptr
}

func (a *arena) take(n, align uintptr) unsafe.Pointer {
	a.off = alignUp(a.off, align)
	off := a.off
	a.off += n
	if a.base == nil {
		return nil
	}
	return unsafe.Add(a.base, off)
}

// str places s with its terminating NUL.
func (a *arena) str(s string) *C.char {
	p := a.take(uintptr(len(s))+1, 1)
	if p == nil {
		return nil
	}
	copy(unsafe.Slice((*byte)(p), len(s)), s) // the NUL is the arena's zero
	return (*C.char)(p)
}

// array places n elements of T.
func array[T any](a *arena, n int) []T {
	var z T
	p := a.take(uintptr(n)*unsafe.Sizeof(z), unsafe.Alignof(z))
	if p == nil || n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(p), n)
}

// smallInput is the largest input copied into the request's C memory:
// pinning the request's bytes instead costs more than copying that many.
const smallInput = 4096

// requestLayout is what an execution lays out for one request.
type requestLayout struct {
	r       *backend.Request
	outputs []string // sorted, as Triton keeps them
	params  []string // parameter names, sorted
	corrStr string
	isStr   bool
	corr    uint64
	gpu     bool // the instance is on a GPU: inputs in CUDA memory stay there
}

func newLayout(r *backend.Request, gpu bool) requestLayout {
	l := requestLayout{r: r, outputs: sortedCopy(r.RequestedOutputs), params: sortedKeys(r.Parameters), gpu: gpu}
	if r.CorrelationID.IsString() {
		l.isStr = true
		l.corrStr, _ = r.CorrelationID.StringID()
	} else {
		l.corr, _ = r.CorrelationID.Uint64()
	}
	return l
}

// clearRefs drops what the layout refers to (the request, its names), so
// that a layout kept for reuse keeps nothing alive.
func (l *requestLayout) clearRefs() {
	l.r, l.outputs, l.params, l.corrStr = nil, nil, nil, ""
}

// copiedInput reports whether input x is given to an instance (gpu: on a
// GPU) as a copy in the request's C memory.
func copiedInput(x *backend.Input, gpu bool) bool {
	return len(x.Data) > 0 && len(x.Data) <= smallInput && !(x.Device != nil && gpu)
}

// place lays the request out in a; in the filling pass it returns the
// request, its inputs' buffers still to set (setInputs).
func (l *requestLayout) place(a *arena) *C.TRITONBACKEND_Request {
	c := (*C.TRITONBACKEND_Request)(a.take(C.sizeof_TRITONBACKEND_Request, 8))
	r := l.r
	id := a.str(r.ID)
	var corrStr *C.char
	if l.isStr {
		corrStr = a.str(l.corrStr)
	}
	ins := array[C.TRITONBACKEND_Input](a, len(r.Inputs))
	for i := range r.Inputs {
		x := &r.Inputs[i]
		name := a.str(x.Name)
		shape := array[C.int64_t](a, max(1, len(x.Shape)))
		var data unsafe.Pointer
		if copiedInput(x, l.gpu) {
			data = a.take(uintptr(len(x.Data)), 16)
		}
		if ins == nil {
			continue
		}
		ci := &ins[i]
		ci.name = name
		ci.shape = &shape[0]
		ci.buffer = data
		fillInput(ci, x, data != nil)
	}
	outs := array[*C.char](a, len(l.outputs))
	for i, o := range l.outputs {
		s := a.str(o)
		if outs != nil {
			outs[i] = s
		}
	}
	ps := array[C.TRITONSERVER_Parameter](a, len(l.params))
	for i, k := range l.params {
		name := a.str(k)
		v := r.Parameters[k]
		var sv *C.char
		if _, scalar := v.(bool); !scalar && !isNumber(v) {
			sv = a.str(fmt.Sprint(v))
		}
		if ps != nil {
			setParameter(&ps[i], name, v, sv)
		}
	}
	if c == nil {
		return nil
	}
	c.id = id
	c.correlation_is_string = C.bool(l.isStr)
	c.correlation_id_string = corrStr
	fillRequest(c, r, l.corr)
	if len(ins) > 0 {
		c.inputs = &ins[0]
		c.n_inputs = C.uint32_t(len(ins))
	}
	if len(outs) > 0 {
		c.outputs = &outs[0]
		c.n_outputs = C.uint32_t(len(outs))
	}
	if len(ps) > 0 {
		c.params = &ps[0]
		c.n_params = C.uint32_t(len(ps))
	}
	return c
}

// fillRequest writes what of request r varies between requests of the same
// layout into c: the numeric correlation id (corr), flags and timeout.
func fillRequest(c *C.TRITONBACKEND_Request, r *backend.Request, corr uint64) {
	c.correlation_id = C.uint64_t(corr)
	c.flags = C.uint32_t(r.Flags)
	if dl, ok := r.Context().Deadline(); ok {
		if us := timeUntilMicros(dl); us > 0 {
			c.timeout_us = C.uint64_t(us)
		}
	}
}

// fillInput writes what of input x varies between requests of the same
// layout into ci, whose name, shape array and buffer are placed: its data
// type, shape, size, attributes, and its bytes when they are copied into
// the request's memory.
func fillInput(ci *C.TRITONBACKEND_Input, x *backend.Input, copied bool) {
	ci.datatype = C.TRITONSERVER_DataType(dataTypeToC(x.DataType))
	ci.dims_count = C.uint32_t(len(x.Shape))
	shape := cArray(ci.shape, len(x.Shape))
	for j, d := range x.Shape {
		shape[j] = C.int64_t(d)
	}
	ci.byte_size = C.uint64_t(len(x.Data))
	ci.attributes = C.TRITONSERVER_BufferAttributes{memory_type: C.TRITONSERVER_MEMORY_CPU, byte_size: C.size_t(len(x.Data))}
	if copied {
		copy(unsafe.Slice((*byte)(ci.buffer), len(x.Data)), x.Data)
	}
}

// relayOut lays request r, for an instance on a GPU or not, out again in
// c, a request an earlier execution laid out in arena mem of size bytes,
// that is still there, when r's layout is c's: the same id and string
// correlation id, inputs of the same names and dimension counts (with the
// same bytes copied into mem, or none), the same requested outputs, no
// parameters. It writes what may differ, as place writes it into zeroed
// memory; its strings, arrays and the copies' places stay. It reports
// false when the layouts differ, having written part of c maybe: the
// request is then laid out afresh.
func relayOut(c *C.TRITONBACKEND_Request, r *backend.Request, gpu bool, mem unsafe.Pointer, size uintptr) bool {
	if len(r.Parameters) != 0 || c.n_params != 0 || int(c.n_inputs) != len(r.Inputs) || int(c.n_outputs) != len(r.RequestedOutputs) {
		return false
	}
	end := uintptr(mem) + size
	if !cStringIs(c.id, r.ID, end) {
		return false
	}
	var corr uint64
	if r.CorrelationID.IsString() {
		s, _ := r.CorrelationID.StringID()
		if !bool(c.correlation_is_string) || !cStringIs(c.correlation_id_string, s, end) {
			return false
		}
	} else if c.correlation_is_string {
		return false
	} else {
		corr, _ = r.CorrelationID.Uint64()
	}
	outs := cArray(c.outputs, len(r.RequestedOutputs))
	for i, o := range r.RequestedOutputs {
		// Names not in strictly increasing order are laid out sorted and
		// without duplicates (sortedCopy): not compared here.
		if i > 0 && r.RequestedOutputs[i-1] >= o || !cStringIs(outs[i], o, end) {
			return false
		}
	}
	ins := cArray(c.inputs, len(r.Inputs))
	for i := range r.Inputs {
		x, ci := &r.Inputs[i], &ins[i]
		// A copy lies in the arena; any other buffer (the request's own
		// bytes, device memory, the empty buffer) is elsewhere.
		inArena := uintptr(ci.buffer)-uintptr(mem) < size
		copied := copiedInput(x, gpu)
		if int(ci.dims_count) != len(x.Shape) || inArena != copied || copied && int(ci.byte_size) != len(x.Data) || !cStringIs(ci.name, x.Name, end) {
			return false
		}
		fillInput(ci, x, copied)
	}
	// What the last execution changed, field by field rather than the
	// whole struct: the rest is the layout's, unchanged, or what
	// newCRequest writes (the handle, instance, arena, index, record and
	// outputs_bound). No parameters: c.params stayed nil.
	c.released = false
	c.first, c.last, c.sent = 0, 0, 0
	c.has_send, c.release_recorded, c.has_stats = false, false, false
	c.answered, c.final, c.ended = false, false, false
	c.timeout_us = 0
	fillRequest(c, r, corr)
	return true
}

// cStringIs reports whether the NUL-terminated c, which lies in an arena
// that ends at end, is s, reading nothing past end.
func cStringIs(c *C.char, s string, end uintptr) bool {
	if c == nil || uintptr(unsafe.Pointer(c))+uintptr(len(s)) >= end {
		return false
	}
	p := (*byte)(unsafe.Pointer(c))
	return unsafe.String(p, len(s)) == s && *(*byte)(unsafe.Add(unsafe.Pointer(p), len(s))) == 0
}

// size is the arena's offset after the request is placed at offset off:
// what place adds up in its sizing pass, without the work of a pass. A
// request with parameters, whose string values need formatting, has the
// pass itself.
func (l *requestLayout) size(off uintptr) uintptr {
	if len(l.params) > 0 {
		a := arena{off: off}
		l.place(&a)
		return a.off
	}
	const word = unsafe.Sizeof(uintptr(0))
	r := l.r
	off = alignUp(off, 8) + C.sizeof_TRITONBACKEND_Request
	off += uintptr(len(r.ID)) + 1
	if l.isStr {
		off += uintptr(len(l.corrStr)) + 1
	}
	off = alignUp(off, unsafe.Alignof(C.TRITONBACKEND_Input{})) + uintptr(len(r.Inputs))*C.sizeof_TRITONBACKEND_Input
	for i := range r.Inputs {
		x := &r.Inputs[i]
		off += uintptr(len(x.Name)) + 1
		off = alignUp(off, unsafe.Alignof(C.int64_t(0))) + uintptr(max(1, len(x.Shape)))*unsafe.Sizeof(C.int64_t(0))
		if copiedInput(x, l.gpu) {
			off = alignUp(off, 16) + uintptr(len(x.Data))
		}
	}
	off = alignUp(off, word) + uintptr(len(l.outputs))*word
	for _, o := range l.outputs {
		off += uintptr(len(o)) + 1
	}
	return alignUp(off, unsafe.Alignof(C.TRITONSERVER_Parameter{}))
}

// cArray is the n elements of T at p, C memory, as unsafe.Slice makes
// them but for its checks (n >= 0, p non-nil, no overflow), which cost
// more than the rest on the paths every execution runs; n is bounded by
// maxCArray instead.
func cArray[T any](p *T, n int) []T {
	return (*[maxCArray]T)(unsafe.Pointer(p))[:n:n]
}

// maxCArray bounds the elements cArray gives: more than any request,
// record or response has.
const maxCArray = 1 << 24

func alignUp(off, align uintptr) uintptr { return (off + align - 1) &^ (align - 1) }

func isNumber(v any) bool {
	switch v.(type) {
	case int64, uint64, float64:
		return true
	}
	return false
}

// newCRequest makes the Go side of request r laid out at c: the handle
// the C side carries, the inputs' buffers not copied into c (the request's
// bytes, pinned while the backend holds them, or device memory), and the
// record of the execution gen of exec, 0 for none.
func newCRequest(in *cInstance, r *backend.Request, gpu bool, c *C.TRITONBACKEND_Request, mem *C.nereid_arena, index int, gen uint64) *cRequest {
	cr, slot := in.spareRequest()
	cr.in, cr.r, cr.c, cr.recorded = in, r, c, gen != 0
	if cr.h, cr.slot = requests.add(cr, slot); cr.h == 0 {
		cr.h = register(cr) // the table is full
	}
	c.h = C.uintptr_t(cr.h)
	c.instance = in.c
	c.arena = mem
	c.index = C.uint32_t(index)
	if gen != 0 {
		c.exec = in.c.exec
		c.gen = C.uint64_t(gen)
		// OutputPlace and OutputDevice are not asked for a decoupled
		// model's outputs (placeOutput, deviceOutput); recorded requests
		// are never a decoupled model's.
		c.outputs_bound = C.bool(r.OutputPlace != nil || r.OutputDevice != nil)
	} else {
		// Laid out again (relayOut), c keeps what it had.
		c.exec, c.gen, c.outputs_bound = nil, 0, false
	}
	ins := cArray(c.inputs, len(r.Inputs))
	for i := range r.Inputs {
		x := &r.Inputs[i]
		ci := &ins[i]
		switch {
		case x.Device != nil && gpu:
			// An input that came in CUDA shared memory, for an instance on
			// a GPU: its device memory, as Triton gives it (the host copy
			// in Data serves CPU instances).
			ci.buffer = C.nereid_ptr(C.uintptr_t(x.Device.Ptr))
			ci.attributes.memory_type = C.TRITONSERVER_MEMORY_GPU
			ci.attributes.memory_type_id = C.int64_t(x.Device.ID)
		case copiedInput(x, gpu):
			// in c already
		case len(x.Data) > 0:
			p := unsafe.Pointer(unsafe.SliceData(x.Data))
			cr.pin.Pin(p)
			cr.pinned = true
			ci.buffer = p
		default:
			ci.buffer = unsafe.Pointer(&emptyBuffer[0])
		}
	}
	return cr
}

// emptyBuffer is where empty inputs point: C memory, so never moved.
var emptyBuffer = (*[1]byte)(C.calloc(1, 1))

// setParameter fills p, whose name and string value (for a value neither
// bool nor number) are already placed.
func setParameter(p *C.TRITONSERVER_Parameter, name *C.char, v any, s *C.char) {
	p.name = name
	switch x := v.(type) {
	case bool:
		p._type = C.TRITONSERVER_PARAMETER_BOOL
		p.b = C.bool(x)
	case int64:
		p._type = C.TRITONSERVER_PARAMETER_INT
		p.i = C.int64_t(x)
	case uint64:
		p._type = C.TRITONSERVER_PARAMETER_INT
		p.i = C.int64_t(x)
	case float64:
		p._type = C.TRITONSERVER_PARAMETER_DOUBLE
		p.d = C.double(x)
	default:
		p._type = C.TRITONSERVER_PARAMETER_STRING
		p.s = s
	}
}
