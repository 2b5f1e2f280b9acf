package executor

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/infer"
	"github.com/nereid-io/nereid/pkg/infercodec"
)

// Field numbers of Triton's ModelInferResponse and its InferOutputTensor
// (grpc_service.proto).
const (
	fieldRespModelName    = 1
	fieldRespModelVersion = 2
	fieldRespID           = 3
	fieldRespOutputs      = 5
	fieldRespRawOutputs   = 6
	fieldTensorName       = 1
	fieldTensorDatatype   = 2
	fieldTensorShape      = 3
)

// encodeResponse appends to dst the encoding of the reply response would
// build (the requested outputs in the requested order, all data raw), for
// the common case of a decoupled model's responses: no response
// parameters, no classification, no shared memory. ok is false outside
// that case. It spares each response of a stream the message's
// allocations and protobuf's reflective encoding.
func (mv *modelVersion) encodeResponse(dst []byte, req *inference.ModelInferRequest, r *backend.Request, resp *backend.Response) (_ []byte, ok bool) {
	if len(resp.Parameters) > 0 {
		return dst, false
	}
	if dst == nil {
		// One allocation: an upper bound of the encoding's size.
		n := 32 + len(mv.name) + len(mv.vstr) + len(req.GetId())
		for i := range resp.Outputs {
			o := &resp.Outputs[i]
			n += 40 + len(o.Name) + 10*len(o.Shape) + len(o.Data)
		}
		dst = make([]byte, 0, n)
	}
	dst = appendString(dst, fieldRespModelName, mv.name)
	dst = appendString(dst, fieldRespModelVersion, mv.vstr)
	dst = appendString(dst, fieldRespID, req.GetId())
	var found [8]int // indexes into resp.Outputs, in requested order
	picked := found[:0]
	for _, name := range r.RequestedOutputs {
		for i := range resp.Outputs {
			if resp.Outputs[i].Name == name {
				picked = append(picked, i)
				break
			}
		}
	}
	for _, i := range picked {
		o := &resp.Outputs[i]
		dt := o.DataType.String()
		shape := 0
		for _, d := range o.Shape {
			shape += protowire.SizeVarint(uint64(d))
		}
		n := protowire.SizeTag(fieldTensorName) + protowire.SizeBytes(len(o.Name)) +
			protowire.SizeTag(fieldTensorDatatype) + protowire.SizeBytes(len(dt))
		if len(o.Shape) > 0 {
			n += protowire.SizeTag(fieldTensorShape) + protowire.SizeBytes(shape)
		}
		dst = protowire.AppendTag(dst, fieldRespOutputs, protowire.BytesType)
		dst = protowire.AppendVarint(dst, uint64(n))
		dst = appendString(dst, fieldTensorName, o.Name)
		dst = appendString(dst, fieldTensorDatatype, dt)
		if len(o.Shape) > 0 {
			dst = protowire.AppendTag(dst, fieldTensorShape, protowire.BytesType)
			dst = protowire.AppendVarint(dst, uint64(shape))
			for _, d := range o.Shape {
				dst = protowire.AppendVarint(dst, uint64(d))
			}
		}
	}
	for _, i := range picked {
		dst = protowire.AppendTag(dst, fieldRespRawOutputs, protowire.BytesType)
		dst = protowire.AppendBytes(dst, resp.Outputs[i].Data)
	}
	return dst, true
}

// encodeSmall encodes into enc the reply of a request whose outputs are
// small and need nothing of response's further steps (no classification, no
// shared memory, no hand-off: the caller checks the last two), straight from
// the backend's response, and reports whether it did: the bus sends the
// bytes as they are. It spares the
// reply message, its tensors and protobuf's reflective encoding, which
// small requests pay on every call.
func (mv *modelVersion) encodeSmall(enc *infercodec.Encoded, req *inference.ModelInferRequest, r *backend.Request, resp *backend.Response) bool {
	size := 0
	for i := range resp.Outputs {
		size += len(resp.Outputs[i].Data)
	}
	if size >= infercodec.MinParts || size >= handoff.Threshold || len(resp.Parameters) > 0 {
		return false
	}
	for _, o := range req.GetOutputs() {
		if _, ok, _ := infer.ClassificationCount(o); ok {
			return false
		}
	}
	b, ok := mv.encodeResponse(nil, req, r, resp)
	if !ok {
		return false
	}
	enc.Bytes = b
	return true
}

// appendString appends a string field, left out when empty as proto3 does.
func appendString(dst []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return dst
	}
	dst = protowire.AppendTag(dst, num, protowire.BytesType)
	return protowire.AppendString(dst, s)
}
