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

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

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
