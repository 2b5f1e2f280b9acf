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
	"unsafe"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Traces a backend makes itself (TRITONSERVER_InferenceTraceNew and
// ...TensorNew) and hands to TRITONSERVER_ServerInferAsync. They are the
// backend's: the executor calls their activity callback with
// REQUEST_START when the request is sent and REQUEST_END when its last
// response has come (trace levels MIN, MAX, TIMESTAMPS), their tensor
// callback with the request's inputs (TENSOR_QUEUE_INPUT) and each
// response's outputs (TENSOR_BACKEND_OUTPUT) at level TENSORS, then their
// release callback; the backend deletes them. They belong to no span:
// activities the backend reports on them itself are dropped (with a DEBUG
// log), as for a request that is not traced.

const (
	levelTimestamps = C.TRITONSERVER_TRACE_LEVEL_MIN | C.TRITONSERVER_TRACE_LEVEL_MAX | C.TRITONSERVER_TRACE_LEVEL_TIMESTAMPS
	levelTensors    = C.TRITONSERVER_TRACE_LEVEL_TENSORS
)

func newMadeTrace(out **C.TRITONSERVER_InferenceTrace, level C.TRITONSERVER_InferenceTraceLevel, parent C.uint64_t,
	activity C.TRITONSERVER_InferenceTraceActivityFn_t, tensor C.TRITONSERVER_InferenceTraceTensorActivityFn_t,
	release C.TRITONSERVER_InferenceTraceReleaseFn_t, userp unsafe.Pointer) *C.TRITONSERVER_Error {
	if out == nil {
		return newError(tritonerr.InvalidArgf("trace must not be null"))
	}
	t := newTrace(context.Background(), uint64(parent), false)
	t.made = true
	t.c.level = level
	t.c.activity_fn = activity
	t.c.tensor_fn = tensor
	t.c.release_fn = release
	t.c.userp = userp
	setOut(out, t.c)
	return nil
}

//export TRITONSERVER_InferenceTraceNew
func TRITONSERVER_InferenceTraceNew(out **C.TRITONSERVER_InferenceTrace, level C.TRITONSERVER_InferenceTraceLevel, parent C.uint64_t,
	activity C.TRITONSERVER_InferenceTraceActivityFn_t, release C.TRITONSERVER_InferenceTraceReleaseFn_t, userp unsafe.Pointer) *C.TRITONSERVER_Error {
	return newMadeTrace(out, level, parent, activity, nil, release, userp)
}

//export TRITONSERVER_InferenceTraceTensorNew
func TRITONSERVER_InferenceTraceTensorNew(out **C.TRITONSERVER_InferenceTrace, level C.TRITONSERVER_InferenceTraceLevel, parent C.uint64_t,
	activity C.TRITONSERVER_InferenceTraceActivityFn_t, tensor C.TRITONSERVER_InferenceTraceTensorActivityFn_t,
	release C.TRITONSERVER_InferenceTraceReleaseFn_t, userp unsafe.Pointer) *C.TRITONSERVER_Error {
	return newMadeTrace(out, level, parent, activity, tensor, release, userp)
}

// activity calls the trace's activity callback, at timestamp levels.
func (t *cTrace) activity(a C.TRITONSERVER_InferenceTraceActivity) {
	if t.c.level&levelTimestamps == 0 {
		return
	}
	C.nereid_trace_activity(t.c, a, C.nereid_steady_ns())
}

type tracedTensor interface {
	GetName() string
	GetDatatype() string
	GetShape() []int64
}

// tensors calls the trace's tensor callback for each tensor, at level
// TENSORS.
func tensors[T tracedTensor](t *cTrace, a C.TRITONSERVER_InferenceTraceActivity, ts []T, data [][]byte) {
	if t.c.level&levelTensors == 0 || t.c.tensor_fn == nil {
		return
	}
	for i, tt := range ts {
		var d []byte
		if i < len(data) {
			d = data[i]
		}
		name := C.CString(tt.GetName())
		shape := tt.GetShape()
		// Go memory passed for the call alone, holding no pointers.
		var base unsafe.Pointer
		if len(d) > 0 {
			base = unsafe.Pointer(&d[0])
		}
		var sp *C.int64_t
		if len(shape) > 0 {
			sp = (*C.int64_t)(unsafe.Pointer(&shape[0]))
		}
		dt, _ := parseDataType(tt.GetDatatype())
		C.nereid_trace_tensor(t.c, a, name, C.TRITONSERVER_DataType(dt), base, C.size_t(len(d)), sp, C.uint64_t(len(shape)))
		C.free(unsafe.Pointer(name))
	}
}
