//go:build cgo

package cbackend

/*
#define NEREID_TYPES_ONLY
#include <stdlib.h>
#include "abi.h"
*/
import "C"

import (
	"encoding/binary"
	"strconv"
	"unsafe"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// The accessors and setters of TRITONSERVER_InferenceRequest that BLS code
// uses beside the ones in bls.go. A request keeps what they set in its
// ModelInferRequest, as the bus carries it: the flags and correlation id
// as Triton's sequence parameters, the priority as its "priority"
// parameter.

// cstring returns s as a C string the request owns until it is deleted.
func (b *blsRequest) cstring(s string) *C.char {
	cs := C.CString(s)
	b.strs = append(b.strs, cs)
	return cs
}

func (b *blsRequest) freeStrings() {
	for _, s := range b.strs {
		C.free(unsafe.Pointer(s))
	}
	b.strs = nil
}

func (b *blsRequest) boolParam(key string) bool {
	return b.req.GetParameters()[key].GetBoolParam()
}

//export TRITONSERVER_InferenceRequestId
func TRITONSERVER_InferenceRequestId(r *C.TRITONSERVER_InferenceRequest, id **C.char) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	*id = b.cstring(b.req.GetId())
	return nil
}

//export TRITONSERVER_InferenceRequestFlags
func TRITONSERVER_InferenceRequestFlags(r *C.TRITONSERVER_InferenceRequest, flags *C.uint32_t) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	var f C.uint32_t
	if b.boolParam("sequence_start") {
		f |= C.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
	}
	if b.boolParam("sequence_end") {
		f |= C.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
	}
	*flags = f
	return nil
}

//export TRITONSERVER_InferenceRequestCorrelationId
func TRITONSERVER_InferenceRequestCorrelationId(r *C.TRITONSERVER_InferenceRequest, id *C.uint64_t) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	p := b.req.GetParameters()["sequence_id"]
	if _, isString := p.GetParameterChoice().(*inference.InferParameter_StringParam); isString {
		return newError(tritonerr.InvalidArgf("given request's correlation id is not an unsigned int"))
	}
	*id = C.uint64_t(p.GetUint64Param())
	if v := p.GetInt64Param(); v > 0 {
		*id = C.uint64_t(v)
	}
	return nil
}

//export TRITONSERVER_InferenceRequestCorrelationIdString
func TRITONSERVER_InferenceRequestCorrelationIdString(r *C.TRITONSERVER_InferenceRequest, id **C.char) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	p, ok := b.req.GetParameters()["sequence_id"]
	if _, isString := p.GetParameterChoice().(*inference.InferParameter_StringParam); ok && !isString {
		return newError(tritonerr.InvalidArgf("given request's correlation id is not a string"))
	}
	*id = b.cstring(p.GetStringParam())
	return nil
}

//export TRITONSERVER_InferenceRequestIsCancelled
func TRITONSERVER_InferenceRequestIsCancelled(r *C.TRITONSERVER_InferenceRequest, out *C.bool) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.mu.Lock()
	cancelled := b.cancelled
	b.mu.Unlock()
	*out = C.bool(cancelled)
	return nil
}

func (b *blsRequest) priority() uint64 {
	p := b.req.GetParameters()["priority"]
	if v := p.GetInt64Param(); v > 0 {
		return uint64(v)
	}
	return p.GetUint64Param()
}

//export TRITONSERVER_InferenceRequestPriority
func TRITONSERVER_InferenceRequestPriority(r *C.TRITONSERVER_InferenceRequest, out *C.uint32_t) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	*out = C.uint32_t(b.priority())
	return nil
}

//export TRITONSERVER_InferenceRequestPriorityUInt64
func TRITONSERVER_InferenceRequestPriorityUInt64(r *C.TRITONSERVER_InferenceRequest, out *C.uint64_t) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	*out = C.uint64_t(b.priority())
	return nil
}

//export TRITONSERVER_InferenceRequestSetPriority
func TRITONSERVER_InferenceRequestSetPriority(r *C.TRITONSERVER_InferenceRequest, p C.uint32_t) *C.TRITONSERVER_Error {
	return TRITONSERVER_InferenceRequestSetPriorityUInt64(r, C.uint64_t(p))
}

//export TRITONSERVER_InferenceRequestSetPriorityUInt64
func TRITONSERVER_InferenceRequestSetPriorityUInt64(r *C.TRITONSERVER_InferenceRequest, p C.uint64_t) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.param("priority", &inference.InferParameter{ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: uint64(p)}})
	return nil
}

//export TRITONSERVER_InferenceRequestTimeoutMicroseconds
func TRITONSERVER_InferenceRequestTimeoutMicroseconds(r *C.TRITONSERVER_InferenceRequest, out *C.uint64_t) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	*out = C.uint64_t(b.timeout.Microseconds())
	return nil
}

//export TRITONSERVER_InferenceRequestSetDoubleParameter
func TRITONSERVER_InferenceRequestSetDoubleParameter(r *C.TRITONSERVER_InferenceRequest, key *C.char, v C.double) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.param(C.GoString(key), &inference.InferParameter{ParameterChoice: &inference.InferParameter_DoubleParam{DoubleParam: float64(v)}})
	return nil
}

// AddRawInput adds the request's one input, whose name, datatype and
// shape Triton deduces from the model's configuration when the request
// runs; Nereid deduces them when the request is sent (deduceRaw), from
// the configuration the constellation serves.
//
//export TRITONSERVER_InferenceRequestAddRawInput
func TRITONSERVER_InferenceRequestAddRawInput(r *C.TRITONSERVER_InferenceRequest, name *C.char) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	n := C.GoString(name)
	if len(b.req.Inputs) > 0 {
		return newError(tritonerr.InvalidArgf("raw input '%s' can't be added to request with other inputs", n))
	}
	b.req.Inputs = append(b.req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: n})
	b.req.RawInputContents = append(b.req.RawInputContents, nil)
	b.raw = n
	return nil
}

// deduceRaw gives the raw input the name, datatype and shape of the
// model's one configured input, as Triton's request normalization does:
// [1] first when the model batches; a variable-sized dimension (one at
// most) from the data's size; BYTES data (one element only) prefixed with
// its 4-byte length.
func (b *blsRequest) deduceRaw() error {
	q, ok := b.srv.(ServerQueries)
	if !ok {
		return tritonerr.Unsupportedf("raw inputs are not supported: this executor answers no model configuration queries")
	}
	version := int64(-1)
	if v, err := strconv.ParseInt(b.req.GetModelVersion(), 10, 64); err == nil {
		version = v
	}
	cfg, err := modelConfig(q, b.req.GetModelName(), version)
	if err != nil {
		return err
	}
	return deduceRawInput(b.req, b.raw, cfg)
}

// deduceRawInput is deduceRaw on the request and configuration given.
func deduceRawInput(req *inference.ModelInferRequest, raw string, cfg *inference.ModelConfig) error {
	prefix := ""
	if req.GetId() != "" {
		prefix = "[request id: " + req.GetId() + "] "
	}
	if len(req.Inputs) != 1 || len(cfg.GetInput()) != 1 {
		return tritonerr.InvalidArgf("%sRaw request must only have 1 input (found %d) to be deduced but got %d inputs in '%s' model configuration",
			prefix, len(req.Inputs), len(cfg.GetInput()), req.GetModelName())
	}
	in := req.Inputs[0]
	if in.Name != raw {
		return tritonerr.InvalidArgf("%sRaw request input '%s' is not found in the request", prefix, raw)
	}
	ci := cfg.GetInput()[0]
	var shape []int64
	if cfg.GetMaxBatchSize() != 0 {
		shape = append(shape, 1)
	}
	dynamic, count := -1, int64(1)
	for _, d := range ci.GetDims() {
		if d == -1 {
			if dynamic != -1 {
				return tritonerr.InvalidArgf("%sThe shape of the raw input '%s' can not be deduced because there are more than one variable-sized dimension", prefix, ci.GetName())
			}
			dynamic = len(shape)
		} else {
			count *= d
		}
		shape = append(shape, d)
	}
	dt := tensor.FromConfig(ci.GetDataType())
	data := req.RawInputContents[0]
	if dt == tensor.Bytes {
		if dynamic != -1 || count != 1 {
			return tritonerr.InvalidArgf("%sFor BYTE datatype raw input '%s', the model must have input shape [1]", prefix, ci.GetName())
		}
		req.RawInputContents[0] = append(binary.LittleEndian.AppendUint32(nil, uint32(len(data))), data...)
	} else if dynamic != -1 {
		size := int64(dt.Size())
		if count == 0 || size == 0 || int64(len(data))%(count*size) != 0 {
			return tritonerr.InvalidArgf("%sThe shape of the raw input '%s' can not be deduced because the input byte size %d is not a multiple of the element count %d times the datatype size %d",
				prefix, ci.GetName(), len(data), count, size)
		}
		shape[dynamic] = int64(len(data)) / count / size
	}
	in.Name, in.Datatype, in.Shape = ci.GetName(), dt.String(), shape
	return nil
}

//export TRITONSERVER_InferenceRequestRemoveInput
func TRITONSERVER_InferenceRequestRemoveInput(r *C.TRITONSERVER_InferenceRequest, name *C.char) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	n := C.GoString(name)
	for i, in := range b.req.Inputs {
		if in.Name == n {
			b.req.Inputs = append(b.req.Inputs[:i], b.req.Inputs[i+1:]...)
			b.req.RawInputContents = append(b.req.RawInputContents[:i], b.req.RawInputContents[i+1:]...)
			if n == b.raw {
				b.raw = ""
			}
			return nil
		}
	}
	return newError(tritonerr.InvalidArgf("input '%s' does not exist in request", n))
}

//export TRITONSERVER_InferenceRequestRemoveAllInputs
func TRITONSERVER_InferenceRequestRemoveAllInputs(r *C.TRITONSERVER_InferenceRequest) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.req.Inputs, b.req.RawInputContents, b.raw = nil, nil, ""
	return nil
}

//export TRITONSERVER_InferenceRequestRemoveAllInputData
func TRITONSERVER_InferenceRequestRemoveAllInputData(r *C.TRITONSERVER_InferenceRequest, name *C.char) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	n := C.GoString(name)
	for i, in := range b.req.Inputs {
		if in.Name == n {
			b.req.RawInputContents[i] = nil
			return nil
		}
	}
	return newError(tritonerr.InvalidArgf("input '%s' does not exist in request", n))
}

// The host policy names where the data is for; an executor's instances
// all read the one buffer.
//
//export TRITONSERVER_InferenceRequestAppendInputDataWithHostPolicy
func TRITONSERVER_InferenceRequestAppendInputDataWithHostPolicy(r *C.TRITONSERVER_InferenceRequest, name *C.char, base unsafe.Pointer, size C.size_t, mt C.TRITONSERVER_MemoryType, mid C.int64_t, policy *C.char) *C.TRITONSERVER_Error {
	return TRITONSERVER_InferenceRequestAppendInputData(r, name, base, size, mt, mid)
}

//export TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes
func TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(r *C.TRITONSERVER_InferenceRequest, name *C.char, base unsafe.Pointer, attrs *C.TRITONSERVER_BufferAttributes) *C.TRITONSERVER_Error {
	if attrs == nil {
		return newError(tritonerr.InvalidArgf("buffer attributes must not be null"))
	}
	return TRITONSERVER_InferenceRequestAppendInputData(r, name, base, attrs.byte_size, attrs.memory_type, attrs.memory_type_id)
}

//export TRITONSERVER_InferenceRequestRemoveRequestedOutput
func TRITONSERVER_InferenceRequestRemoveRequestedOutput(r *C.TRITONSERVER_InferenceRequest, name *C.char) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	n := C.GoString(name)
	for i, o := range b.req.Outputs {
		if o.Name == n {
			b.req.Outputs = append(b.req.Outputs[:i], b.req.Outputs[i+1:]...)
			return nil
		}
	}
	return newError(tritonerr.InvalidArgf("requested output '%s' does not exist in request", n))
}

//export TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs
func TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs(r *C.TRITONSERVER_InferenceRequest) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.req.Outputs = nil
	return nil
}

//export TRITONSERVER_InferenceTraceSetContext
func TRITONSERVER_InferenceTraceSetContext(t *C.TRITONSERVER_InferenceTrace, ctx *C.char) *C.TRITONSERVER_Error {
	ct, e := traceOf(t)
	if e != nil {
		return e
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	C.free(unsafe.Pointer(t.context))
	t.context = nil
	if ctx != nil {
		t.context = C.CString(C.GoString(ctx))
	}
	return nil
}
