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

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
)

// arena lays out a request's C side — the TRITONBACKEND_Request, its
// inputs, shapes, requested output names, parameters and every string —
// in one zeroed C allocation: one cgo call makes it and one frees it,
// where an allocation per object made a dozen per request. It is used in
// two passes over the same layout: the first (base nil) only adds up the
// size, the second fills the memory in.
type arena struct {
	base unsafe.Pointer
	off  uintptr
}

func (a *arena) take(n, align uintptr) unsafe.Pointer {
	a.off = (a.off + align - 1) &^ (align - 1)
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

// requestLayout is what newCRequest lays out for one request.
type requestLayout struct {
	r       *backend.Request
	outputs []string // sorted, as Triton keeps them
	params  []string // parameter names, sorted
	corrStr string
	isStr   bool
	corr    uint64
}

// place lays the request out in a; in the filling pass it returns the
// request.
func (l *requestLayout) place(a *arena, h uintptr, in *C.TRITONBACKEND_ModelInstance) *C.TRITONBACKEND_Request {
	c := (*C.TRITONBACKEND_Request)(a.take(C.sizeof_TRITONBACKEND_Request, 8))
	r := l.r
	id := a.str(r.ID)
	var corrStr *C.char
	if l.isStr {
		corrStr = a.str(l.corrStr)
	}
	ins := array[C.TRITONBACKEND_Input](a, len(r.Inputs))
	for i, x := range r.Inputs {
		name := a.str(x.Name)
		shape := array[C.int64_t](a, max(1, len(x.Shape)))
		if ins == nil {
			continue
		}
		ci := &ins[i]
		ci.name = name
		ci.datatype = C.TRITONSERVER_DataType(dataTypeToC(x.DataType))
		ci.dims_count = C.uint32_t(len(x.Shape))
		for j, d := range x.Shape {
			shape[j] = C.int64_t(d)
		}
		ci.shape = &shape[0]
		ci.byte_size = C.uint64_t(len(x.Data))
		ci.attributes.memory_type = C.TRITONSERVER_MEMORY_CPU
		ci.attributes.byte_size = C.size_t(len(x.Data))
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
	c.h = C.uintptr_t(h)
	c.instance = in
	c.id = id
	c.correlation_is_string = C.bool(l.isStr)
	c.correlation_id_string = corrStr
	c.correlation_id = C.uint64_t(l.corr)
	c.flags = C.uint32_t(r.Flags)
	if dl, ok := r.Context().Deadline(); ok {
		if us := timeUntilMicros(dl); us > 0 {
			c.timeout_us = C.uint64_t(us)
		}
	}
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

func isNumber(v any) bool {
	switch v.(type) {
	case int64, uint64, float64:
		return true
	}
	return false
}

func newCRequest(in *cInstance, r *backend.Request) *cRequest {
	cr := &cRequest{in: in, r: r}
	cr.bufs = cr.bufStore[:0]
	cr.h = register(cr)
	l := requestLayout{r: r, outputs: sortedCopy(r.RequestedOutputs), params: sortedKeys(r.Parameters)}
	if r.CorrelationID.IsString() {
		l.isStr = true
		l.corrStr, _ = r.CorrelationID.StringID()
	} else {
		l.corr, _ = r.CorrelationID.Uint64()
	}
	var sizing arena
	l.place(&sizing, 0, nil)
	a := arena{base: C.calloc(1, C.size_t(sizing.off))}
	c := l.place(&a, cr.h, in.c)
	// Inputs point at the request's bytes, pinned while the backend holds
	// them.
	gpu := in.info.Kind == inference.ModelInstanceGroup_KIND_GPU
	for i, x := range r.Inputs {
		ci := &unsafe.Slice(c.inputs, len(r.Inputs))[i]
		if x.Device != nil && gpu {
			// An input that came in CUDA shared memory, for an instance on
			// a GPU: its device memory, as Triton gives it (the host copy
			// in Data serves CPU instances).
			ci.buffer = C.nereid_ptr(C.uintptr_t(x.Device.Ptr))
			ci.attributes.memory_type = C.TRITONSERVER_MEMORY_GPU
			ci.attributes.memory_type_id = C.int64_t(x.Device.ID)
			continue
		}
		if len(x.Data) > 0 {
			p := unsafe.Pointer(unsafe.SliceData(x.Data))
			cr.pin.Pin(p)
			ci.buffer = p
		} else {
			ci.buffer = unsafe.Pointer(&emptyBuffer[0])
		}
	}
	cr.c = c
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
