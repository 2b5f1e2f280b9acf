package respcache

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nereid-io/nereid/api/inference"
)

// Key identifies a cached response: a SHA-256 (Sum).
type Key [sha256.Size]byte

// Parameters that do not change a response, left out of the key: how the
// HTTP front end encodes tensors (binary_data_output, binary_data,
// binary_data_size) and what Triton turns into request fields rather than
// passing to the backend (common.h kReservedParameterKeys: priority,
// timeout, headers; the sequence ones cannot occur, a sequence model has no
// cache).
var (
	transportRequestParams = map[string]bool{
		"binary_data_output": true, "priority": true, "timeout": true, "headers": true,
		"sequence_id": true, "sequence_start": true, "sequence_end": true,
		"triton_enable_empty_final_response": true,
	}
	transportTensorParams = map[string]bool{"binary_data": true, "binary_data_size": true}
)

// paramShm starts the parameters of tensors in shared memory.
const paramShm = "shared_memory_"

// ErrNotCacheable is Sum's answer for a request whose response is not
// cached: a tensor in shared memory (its bytes are not in the request, and
// its output must be written into the region), or inputs not all in
// raw_input_contents.
var ErrNotCacheable = errors.New("respcache: request not cacheable")

// Sum is the key of req for version of its model at cache generation gen:
// every input's name, datatype, shape, parameters and bytes (in name
// order, so the order the client sent them in does not matter), the
// requested outputs with their parameters (none named: all outputs, told
// apart from any list), and the request's parameters, except those of
// the encoding on the wire and the scheduling (transportRequestParams).
// Every field is length-prefixed, so no two requests share a key unless
// SHA-256 collides.
func Sum(req *inference.ModelInferRequest, version string, gen uint64) (Key, error) {
	var k Key
	inputs, raw := req.GetInputs(), req.GetRawInputContents()
	if len(raw) != len(inputs) {
		return k, ErrNotCacheable
	}
	for _, in := range inputs {
		if in.GetContents() != nil || hasShm(in.GetParameters()) {
			return k, ErrNotCacheable
		}
	}
	for _, out := range req.GetOutputs() {
		if hasShm(out.GetParameters()) {
			return k, ErrNotCacheable
		}
	}
	h := hasher{h: sha256.New()}
	h.str("nereid.respcache.v1")
	h.str(req.GetModelName())
	h.str(version)
	h.u64(gen)

	order := make([]int, len(inputs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(inputs[a].GetName(), inputs[b].GetName()) })
	h.u64(uint64(len(inputs)))
	for _, i := range order {
		in := inputs[i]
		h.str(in.GetName())
		h.str(in.GetDatatype())
		h.u64(uint64(len(in.GetShape())))
		for _, d := range in.GetShape() {
			h.u64(uint64(d))
		}
		h.params(in.GetParameters(), transportTensorParams)
		h.bytes(raw[i])
	}

	outs := req.GetOutputs()
	if len(outs) == 0 {
		h.u64(math.MaxUint64) // every output
	} else {
		sorted := slices.Clone(outs)
		slices.SortFunc(sorted, func(a, b *inference.ModelInferRequest_InferRequestedOutputTensor) int {
			return strings.Compare(a.GetName(), b.GetName())
		})
		h.u64(uint64(len(sorted)))
		for _, o := range sorted {
			h.str(o.GetName())
			h.params(o.GetParameters(), transportTensorParams)
		}
	}
	h.params(req.GetParameters(), transportRequestParams)
	h.h.Sum(k[:0])
	return k, nil
}

func hasShm(params map[string]*inference.InferParameter) bool {
	for name := range params {
		if strings.HasPrefix(name, paramShm) {
			return true
		}
	}
	return false
}

type hasher struct {
	h   hash.Hash
	buf [binary.MaxVarintLen64]byte
}

func (h *hasher) u64(v uint64) {
	binary.BigEndian.PutUint64(h.buf[:8], v)
	h.h.Write(h.buf[:8])
}

func (h *hasher) str(s string) {
	h.u64(uint64(len(s)))
	h.h.Write([]byte(s)) // a string of the request: the compiler avoids the copy for small ones
}

func (h *hasher) bytes(b []byte) {
	h.u64(uint64(len(b)))
	h.h.Write(b)
}

// params hashes the parameters not in skip, in name order, each with its
// kind, so that the string "1" and the integer 1 differ.
func (h *hasher) params(params map[string]*inference.InferParameter, skip map[string]bool) {
	names := make([]string, 0, len(params))
	for name := range params {
		if !skip[name] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	h.u64(uint64(len(names)))
	for _, name := range names {
		h.str(name)
		switch v := params[name].GetParameterChoice().(type) {
		case *inference.InferParameter_BoolParam:
			h.u64(1)
			if v.BoolParam {
				h.u64(1)
			} else {
				h.u64(0)
			}
		case *inference.InferParameter_Int64Param:
			h.u64(2)
			h.u64(uint64(v.Int64Param))
		case *inference.InferParameter_StringParam:
			h.u64(3)
			h.str(v.StringParam)
		case *inference.InferParameter_DoubleParam:
			h.u64(4)
			h.u64(math.Float64bits(v.DoubleParam))
		case *inference.InferParameter_Uint64Param:
			h.u64(5)
			h.u64(v.Uint64Param)
		default:
			h.u64(0)
		}
	}
}

// fieldResponseID is ModelInferResponse.id (Triton's grpc_service.proto).
const fieldResponseID = 3

// Entry is the value kept for an encoded ModelInferResponse: a copy of
// it without its id, so that entries do not depend on the request that
// made them. An encoding that does not parse is refused.
func Entry(enc []byte) ([]byte, error) {
	out := make([]byte, 0, len(enc))
	for b := enc; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		if num != fieldResponseID {
			out = append(out, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return out, nil
}

// WithID is the response an entry answers a request of id id with: the
// entry itself when id is empty (the entry is shared: nobody may change
// it), else a copy with the id.
func WithID(entry []byte, id string) []byte {
	if id == "" {
		return entry
	}
	out := make([]byte, 0, len(entry)+len(id)+protowire.SizeVarint(uint64(len(id)))+1)
	out = protowire.AppendTag(out, fieldResponseID, protowire.BytesType)
	out = protowire.AppendString(out, id)
	return append(out, entry...)
}
