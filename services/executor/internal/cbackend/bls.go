//go:build cgo

package cbackend

/*
#define NEREID_TYPES_ONLY
#include <stdlib.h>
#include <string.h>
#include "abi.h"
*/
import "C"

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Server is what backends reach through TRITONSERVER_Server: inference
// from inside a backend (BLS) through the constellation, model readiness
// and transaction policy, model control.
type Server interface {
	// Infer runs a request with the same routing as a client's request
	// and hands its responses to emit in order, the last one with final
	// set: one response from a model that is not decoupled; any number
	// from a decoupled one, whose final flag may come alone (resp and err
	// nil). A response may be an error (err). Infer returns once emit had
	// the final one, or with the error that ended the call before it
	// (emit is then not called again); emit's error ends the call.
	Infer(ctx context.Context, req *inference.ModelInferRequest, emit func(resp *inference.ModelInferResponse, err error, final bool) error) error
	// ModelReady reports whether a version (-1: the one the policy picks)
	// is ready somewhere in the constellation.
	ModelReady(ctx context.Context, name string, version int64) (bool, error)
	// ModelDecoupled reports a model's transaction policy.
	ModelDecoupled(ctx context.Context, name string, version int64) (bool, error)
	// LoadModel loads (or reloads) a model as the repository API does:
	// config, when not empty, is a configuration in JSON that replaces
	// config.pbtxt; files are model files by path in the model directory
	// ("1/model.onnx"). It returns once the model is loaded.
	LoadModel(ctx context.Context, name, config string, files map[string][]byte) error
	// UnloadModel starts unloading a model (and, with dependents, the
	// models loaded along with it) and returns without waiting for the
	// unload to finish, as Triton's does.
	UnloadModel(ctx context.Context, name string, dependents bool) error
}

// blsTimeout bounds a backend's call into the server when the request sets
// no timeout of its own.
const blsTimeout = 5 * time.Minute

func serverOf(s *C.TRITONSERVER_Server) (*cModel, Server, *C.TRITONSERVER_Error) {
	if s == nil {
		return nil, nil, newError(tritonerr.InvalidArgf("server must not be null"))
	}
	m := lookup[*cModel](s.h)
	if m == nil {
		return nil, nil, newError(tritonerr.InvalidArgf("server is no longer valid"))
	}
	srv := m.b.loader.cfg.Server
	if srv == nil {
		return nil, nil, newError(tritonerr.Unsupportedf("this executor serves no requests from backends"))
	}
	return m, srv, nil
}

func versionString(v C.int64_t) string {
	if v < 0 {
		return ""
	}
	return strconv.FormatInt(int64(v), 10)
}

// blsRequest is a TRITONSERVER_InferenceRequest being built by a backend.
type blsRequest struct {
	m       *cModel
	srv     Server
	req     *inference.ModelInferRequest
	c       *C.TRITONSERVER_InferenceRequest
	h       uintptr
	mu      sync.Mutex
	cancel  context.CancelFunc
	timeout time.Duration
	// strs are the C strings its accessors returned (requestapi.go),
	// freed with it.
	strs []*C.char
	// cancelled: TRITONSERVER_InferenceRequestCancel was called (b.mu).
	cancelled bool
	// raw names the one input added with AddRawInput, whose name,
	// datatype and shape come from the model's configuration when the
	// request is sent (deduceRaw).
	raw string
}

func blsOf(r *C.TRITONSERVER_InferenceRequest) (*blsRequest, *C.TRITONSERVER_Error) {
	if r == nil {
		return nil, newError(tritonerr.InvalidArgf("inference request must not be null"))
	}
	b := lookup[*blsRequest](r.h)
	if b == nil {
		return nil, newError(tritonerr.InvalidArgf("inference request is no longer valid"))
	}
	return b, nil
}

func (b *blsRequest) param(key string, p *inference.InferParameter) {
	if b.req.Parameters == nil {
		b.req.Parameters = map[string]*inference.InferParameter{}
	}
	b.req.Parameters[key] = p
}

func (b *blsRequest) input(name *C.char) *inference.ModelInferRequest_InferInputTensor {
	n := C.GoString(name)
	for _, in := range b.req.Inputs {
		if in.Name == n {
			return in
		}
	}
	return nil
}

//export TRITONSERVER_InferenceRequestNew
func TRITONSERVER_InferenceRequestNew(out **C.TRITONSERVER_InferenceRequest, s *C.TRITONSERVER_Server, model *C.char, version C.int64_t) *C.TRITONSERVER_Error {
	m, srv, e := serverOf(s)
	if e != nil {
		return e
	}
	b := &blsRequest{m: m, srv: srv, req: &inference.ModelInferRequest{ModelName: C.GoString(model), ModelVersion: versionString(version)}}
	c := (*C.TRITONSERVER_InferenceRequest)(C.calloc(1, C.sizeof_struct_TRITONSERVER_InferenceRequest))
	b.h = register(b)
	c.h = C.uintptr_t(b.h)
	b.c = c
	setOut(out, c)
	return nil
}

//export TRITONSERVER_InferenceRequestDelete
func TRITONSERVER_InferenceRequestDelete(r *C.TRITONSERVER_InferenceRequest) *C.TRITONSERVER_Error {
	if r == nil {
		return nil // as Triton: deleting nothing succeeds
	}
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	unregister(b.h)
	b.freeStrings()
	C.free(unsafe.Pointer(r))
	return nil
}

//export TRITONSERVER_InferenceRequestSetId
func TRITONSERVER_InferenceRequestSetId(r *C.TRITONSERVER_InferenceRequest, id *C.char) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.req.Id = C.GoString(id)
	return nil
}

//export TRITONSERVER_InferenceRequestSetFlags
func TRITONSERVER_InferenceRequestSetFlags(r *C.TRITONSERVER_InferenceRequest, flags C.uint32_t) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.param("sequence_start", &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: flags&C.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START != 0}})
	b.param("sequence_end", &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: flags&C.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END != 0}})
	return nil
}

//export TRITONSERVER_InferenceRequestSetCorrelationId
func TRITONSERVER_InferenceRequestSetCorrelationId(r *C.TRITONSERVER_InferenceRequest, id C.uint64_t) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.param("sequence_id", &inference.InferParameter{ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: uint64(id)}})
	return nil
}

//export TRITONSERVER_InferenceRequestSetCorrelationIdString
func TRITONSERVER_InferenceRequestSetCorrelationIdString(r *C.TRITONSERVER_InferenceRequest, id *C.char) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.param("sequence_id", &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: C.GoString(id)}})
	return nil
}

//export TRITONSERVER_InferenceRequestSetTimeoutMicroseconds
func TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(r *C.TRITONSERVER_InferenceRequest, us C.uint64_t) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.timeout = time.Duration(us) * time.Microsecond
	b.param("timeout", &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(us)}})
	return nil
}

//export TRITONSERVER_InferenceRequestSetStringParameter
func TRITONSERVER_InferenceRequestSetStringParameter(r *C.TRITONSERVER_InferenceRequest, key, v *C.char) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.param(C.GoString(key), &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: C.GoString(v)}})
	return nil
}

//export TRITONSERVER_InferenceRequestSetIntParameter
func TRITONSERVER_InferenceRequestSetIntParameter(r *C.TRITONSERVER_InferenceRequest, key *C.char, v C.int64_t) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.param(C.GoString(key), &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(v)}})
	return nil
}

//export TRITONSERVER_InferenceRequestSetBoolParameter
func TRITONSERVER_InferenceRequestSetBoolParameter(r *C.TRITONSERVER_InferenceRequest, key *C.char, v C.bool) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.param(C.GoString(key), &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: bool(v)}})
	return nil
}

//export TRITONSERVER_InferenceRequestAddInput
func TRITONSERVER_InferenceRequestAddInput(r *C.TRITONSERVER_InferenceRequest, name *C.char, dt C.TRITONSERVER_DataType, shape *C.int64_t, dims C.uint64_t) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	if b.raw != "" {
		return newError(tritonerr.InvalidArgf("input '%s' can't be added to request with raw input", C.GoString(name)))
	}
	if b.input(name) != nil {
		return newError(tritonerr.New(tritonerr.AlreadyExists, "input '%s' already exists in request", C.GoString(name)))
	}
	in := &inference.ModelInferRequest_InferInputTensor{Name: C.GoString(name), Datatype: dataTypeFromC(int(dt)).String()}
	if dims > 0 {
		for _, d := range unsafe.Slice(shape, int(dims)) {
			in.Shape = append(in.Shape, int64(d))
		}
	}
	b.req.Inputs = append(b.req.Inputs, in)
	b.req.RawInputContents = append(b.req.RawInputContents, nil)
	return nil
}

//export TRITONSERVER_InferenceRequestAppendInputData
func TRITONSERVER_InferenceRequestAppendInputData(r *C.TRITONSERVER_InferenceRequest, name *C.char, base unsafe.Pointer, size C.size_t, mt C.TRITONSERVER_MemoryType, mid C.int64_t) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	if mt == C.TRITONSERVER_MEMORY_GPU {
		return newError(tritonerr.Unsupportedf("input data in GPU memory is not supported for inference requests from backends"))
	}
	for i, in := range b.req.Inputs {
		if in.Name == C.GoString(name) {
			if size > 0 {
				// Copied now: the request may outlive the caller's buffer on
				// its way through the bus.
				b.req.RawInputContents[i] = append(b.req.RawInputContents[i], C.GoBytes(base, C.int(size))...)
			}
			return nil
		}
	}
	return newError(tritonerr.InvalidArgf("input '%s' does not exist in request", C.GoString(name)))
}

//export TRITONSERVER_InferenceRequestAddRequestedOutput
func TRITONSERVER_InferenceRequestAddRequestedOutput(r *C.TRITONSERVER_InferenceRequest, name *C.char) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.req.Outputs = append(b.req.Outputs, &inference.ModelInferRequest_InferRequestedOutputTensor{Name: C.GoString(name)})
	return nil
}

//export TRITONSERVER_InferenceRequestCancel
func TRITONSERVER_InferenceRequestCancel(r *C.TRITONSERVER_InferenceRequest) *C.TRITONSERVER_Error {
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	b.mu.Lock()
	b.cancelled = true
	if b.cancel != nil {
		b.cancel()
	}
	b.mu.Unlock()
	return nil
}

//export TRITONSERVER_ServerInferAsync
func TRITONSERVER_ServerInferAsync(s *C.TRITONSERVER_Server, r *C.TRITONSERVER_InferenceRequest, trace *C.TRITONSERVER_InferenceTrace) *C.TRITONSERVER_Error {
	_, srv, e := serverOf(s)
	if e != nil {
		return e
	}
	b, e := blsOf(r)
	if e != nil {
		return e
	}
	timeout := b.timeout
	if timeout <= 0 {
		timeout = blsTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	var traced func(error)
	var made *cTrace // a trace the backend made: its callbacks hear of the call
	if trace != nil {
		t, e := traceOf(trace)
		if e != nil {
			cancel()
			return e
		}
		var err error
		if ctx, traced, err = t.run(ctx, b.req); err != nil {
			cancel()
			return newError(err)
		}
		if t.made {
			made = t
		}
	}
	if b.raw != "" {
		if err := b.deduceRaw(); err != nil {
			if traced != nil {
				traced(err)
			}
			cancel()
			return newError(err)
		}
	}
	if made != nil {
		made.activity(C.TRITONSERVER_TRACE_REQUEST_START)
		tensors(made, C.TRITONSERVER_TRACE_TENSOR_QUEUE_INPUT, b.req.GetInputs(), b.req.GetRawInputContents())
	}
	b.mu.Lock()
	b.cancel = cancel
	b.mu.Unlock()
	req, c := b.req, b.c
	b.m.bls.Add(1) // the model waits for its calls before it is finalized
	go func() {
		defer b.m.bls.Done()
		defer cancel()
		end := func(err error) {
			if traced != nil {
				// The call's span ends, and the trace is released, before
				// the backend hears of the final response: it may be done
				// with the request as soon as it does.
				traced(err)
				traced = nil
			}
		}
		final := false
		err := srv.Infer(ctx, req, func(resp *inference.ModelInferResponse, err error, last bool) error {
			if made != nil && resp != nil {
				tensors(made, C.TRITONSERVER_TRACE_TENSOR_BACKEND_OUTPUT, resp.GetOutputs(), resp.GetRawOutputContents())
			}
			if last {
				end(err)
				final = true
			}
			deliver(c, resp, err, last)
			return nil
		})
		if !final {
			if err == nil {
				err = tritonerr.Internalf("inference request for model '%s' ended without its final response", req.GetModelName())
			}
			end(err)
			deliver(c, nil, err, true)
		}
		C.nereid_bls_release(c)
	}()
	return nil
}

// deliver hands one response of a BLS call to the backend in Triton's
// order: the allocator's start, the allocator for each output, then the
// response callback (with FINAL on the last). A final flag that comes
// alone (no response, no error) reaches the callback as a null response.
func deliver(c *C.TRITONSERVER_InferenceRequest, resp *inference.ModelInferResponse, err error, final bool) {
	var flags C.uint32_t
	if final {
		flags = C.TRITONSERVER_RESPONSE_COMPLETE_FINAL
	}
	if resp == nil && err == nil {
		C.nereid_bls_complete(c, nil, flags)
		return
	}
	C.nereid_bls_start(c)
	cr := (*C.TRITONSERVER_InferenceResponse)(C.calloc(1, C.sizeof_struct_TRITONSERVER_InferenceResponse))
	if err == nil && resp != nil {
		cr.model = C.CString(resp.GetModelName())
		v, _ := strconv.ParseInt(resp.GetModelVersion(), 10, 64)
		cr.version = C.int64_t(v)
		cr.id = C.CString(resp.GetId())
		n := len(resp.GetOutputs())
		if n > 0 {
			outs := unsafe.Slice((*C.nereid_bls_output)(C.calloc(C.size_t(n), C.sizeof_nereid_bls_output)), n)
			cr.outputs = &outs[0]
			for i, o := range resp.GetOutputs() {
				var data []byte
				if i < len(resp.GetRawOutputContents()) {
					data = resp.GetRawOutputContents()[i]
				}
				co := &outs[i]
				co.name = C.CString(o.GetName())
				dt, _ := parseDataType(o.GetDatatype())
				co.datatype = C.TRITONSERVER_DataType(dt)
				co.dims_count = C.uint64_t(len(o.GetShape()))
				co.shape = (*C.int64_t)(C.malloc(C.size_t(max(1, len(o.GetShape()))) * 8))
				for j, d := range o.GetShape() {
					unsafe.Slice(co.shape, len(o.GetShape()))[j] = C.int64_t(d)
				}
				co.byte_size = C.size_t(len(data))
				cr.n_outputs = C.uint32_t(i + 1)
				if e := C.nereid_bls_alloc(c, co); e != nil {
					err = takeError(e)
					break
				}
				if len(data) > 0 && co.buffer != nil && co.memory_type != C.TRITONSERVER_MEMORY_GPU {
					C.memcpy(co.buffer, unsafe.Pointer(&data[0]), C.size_t(len(data)))
				}
			}
		}
	}
	if err != nil {
		te := tritonerr.From(err)
		cs := C.CString(te.Msg)
		cr.error = C.nereid_error(C.TRITONSERVER_Error_Code(te.Kind), cs)
		C.free(unsafe.Pointer(cs))
	}
	C.nereid_bls_complete(c, cr, flags)
}

//export TRITONSERVER_ServerModelIsReady
func TRITONSERVER_ServerModelIsReady(s *C.TRITONSERVER_Server, name *C.char, version C.int64_t, ready *C.bool) *C.TRITONSERVER_Error {
	_, srv, e := serverOf(s)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok, err := srv.ModelReady(ctx, C.GoString(name), int64(version))
	*ready = C.bool(ok)
	return newError(err)
}

//export TRITONSERVER_ServerModelTransactionProperties
func TRITONSERVER_ServerModelTransactionProperties(s *C.TRITONSERVER_Server, name *C.char, version C.int64_t, flags *C.uint32_t, voidp *unsafe.Pointer) *C.TRITONSERVER_Error {
	_, srv, e := serverOf(s)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dec, err := srv.ModelDecoupled(ctx, C.GoString(name), int64(version))
	if err != nil {
		return newError(err)
	}
	*flags = C.TRITONSERVER_TXN_ONE_TO_ONE
	if dec {
		*flags = C.TRITONSERVER_TXN_DECOUPLED
	}
	if voidp != nil {
		setOutPointer(voidp, nil)
	}
	return nil
}

//export TRITONSERVER_ServerLoadModel
func TRITONSERVER_ServerLoadModel(s *C.TRITONSERVER_Server, name *C.char) *C.TRITONSERVER_Error {
	return TRITONSERVER_ServerLoadModelWithParameters(s, name, nil, 0)
}

// fileParamPrefix starts the load parameters that carry model files
// ("file:1/model.onnx"), as in Triton's repository API.
const fileParamPrefix = "file:"

//export TRITONSERVER_ServerLoadModelWithParameters
func TRITONSERVER_ServerLoadModelWithParameters(s *C.TRITONSERVER_Server, name *C.char, params **C.TRITONSERVER_Parameter, n C.uint64_t) *C.TRITONSERVER_Error {
	_, srv, e := serverOf(s)
	if e != nil {
		return e
	}
	if name == nil {
		return newError(tritonerr.InvalidArgf("model name must not be null"))
	}
	if params == nil && n > 0 {
		return newError(tritonerr.InvalidArgf("load parameters are null but the parameter count is %d", uint64(n)))
	}
	var config string
	var files map[string][]byte
	if n > 0 {
		for _, p := range unsafe.Slice(params, int(n)) {
			if p == nil {
				return newError(tritonerr.InvalidArgf("load parameters must not be null"))
			}
			key := C.GoString(p.name)
			switch {
			case key == "config":
				if p._type != C.TRITONSERVER_PARAMETER_STRING {
					return newError(tritonerr.InvalidArgf("load parameter 'config' must be a string"))
				}
				config = C.GoString(p.s)
			case strings.HasPrefix(key, fileParamPrefix):
				if p._type != C.TRITONSERVER_PARAMETER_BYTES {
					return newError(tritonerr.InvalidArgf("load parameter '%s' must be bytes", key))
				}
				if files == nil {
					files = map[string][]byte{}
				}
				files[strings.TrimPrefix(key, fileParamPrefix)] = C.GoBytes(p.bytes, C.int(p.size))
			default:
				return newError(tritonerr.InvalidArgf("unrecognized load parameter '%s'", key))
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), blsTimeout)
	defer cancel()
	return newError(srv.LoadModel(ctx, C.GoString(name), config, files))
}

//export TRITONSERVER_ServerUnloadModel
func TRITONSERVER_ServerUnloadModel(s *C.TRITONSERVER_Server, name *C.char) *C.TRITONSERVER_Error {
	return unloadModel(s, name, false)
}

//export TRITONSERVER_ServerUnloadModelAndDependents
func TRITONSERVER_ServerUnloadModelAndDependents(s *C.TRITONSERVER_Server, name *C.char) *C.TRITONSERVER_Error {
	return unloadModel(s, name, true)
}

func unloadModel(s *C.TRITONSERVER_Server, name *C.char, dependents bool) *C.TRITONSERVER_Error {
	_, srv, e := serverOf(s)
	if e != nil {
		return e
	}
	if name == nil {
		return newError(tritonerr.InvalidArgf("model name must not be null"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), blsTimeout)
	defer cancel()
	return newError(srv.UnloadModel(ctx, C.GoString(name), dependents))
}
