// Package infercodec encodes and decodes Triton's infer messages
// (inference.ModelInferRequest and ModelInferResponse) without copying
// their tensors: Marshal returns the small fields encoded, followed by each
// raw_input_contents / raw_output_contents entry as a part of its own (the
// tensor's own memory), and Unmarshal decodes the small fields with
// protobuf and slices the raw contents out of the buffer it is given, which
// the message then references. Codec plugs this into the bus
// (bus.WithCodec), so that a 256 MiB tensor crossing the bus in chunks is
// held once on each side instead of three times.
//
// Messages without large raw contents, and every other message, take
// protobuf's own path: for small messages one contiguous encoding is the
// cheapest.
package infercodec

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

// Field numbers of the raw contents (Triton's grpc_service.proto).
const (
	fieldRawInputContents  = 7 // ModelInferRequest.raw_input_contents
	fieldRawOutputContents = 6 // ModelInferResponse.raw_output_contents
)

// MinParts is the raw-content size from which messages are encoded in
// parts and decoded by aliasing; below it protobuf's own path is cheaper.
const MinParts = 64 << 10

// minParts is MinParts; the fuzz test lowers it to reach the aliasing path
// with small inputs.
var minParts = MinParts

// Codec implements bus.Codec for every message, with the zero-copy path
// for the infer messages.
type Codec struct{}

// Encoded is a ModelInferResponse encoded by its sender (small responses
// whose encoding is built directly, without the message): Codec.Marshal
// sends Bytes as they are. The embedded message is nil; it makes Encoded a
// proto.Message for code that passes replies around, and is never read.
type Encoded struct {
	*inference.ModelInferResponse
	Bytes []byte
	parts [1][]byte
}

// Marshal encodes m, in parts when it carries large raw contents. The infer
// messages use their generated MarshalVT (api/inference, vtprotobuf) rather
// than protobuf's reflection.
func (Codec) Marshal(m proto.Message) ([][]byte, error) {
	switch v := m.(type) {
	case *Encoded:
		v.parts[0] = v.Bytes
		return v.parts[:], nil
	case *inference.ModelInferRequest:
		if size(v.RawInputContents) >= minParts {
			raw := v.RawInputContents
			v.RawInputContents = nil
			head, err := v.MarshalVT()
			v.RawInputContents = raw
			return appendRaw(head, fieldRawInputContents, raw), err
		}
		b, err := v.MarshalVT()
		return [][]byte{b}, err
	case *inference.ModelInferResponse:
		if size(v.RawOutputContents) >= minParts {
			raw := v.RawOutputContents
			v.RawOutputContents = nil
			head, err := v.MarshalVT()
			v.RawOutputContents = raw
			return appendRaw(head, fieldRawOutputContents, raw), err
		}
		b, err := v.MarshalVT()
		return [][]byte{b}, err
	}
	b, err := proto.Marshal(m)
	return [][]byte{b}, err
}

// MarshalFramed implements bus.FramedMarshaler: a ModelInferRequest
// without large raw contents is encoded by its generated code behind room
// free bytes of the buffer (buf when its capacity suffices); anything else
// is left to Marshal (nil).
func (Codec) MarshalFramed(m proto.Message, room int, buf []byte) ([]byte, error) {
	v, ok := m.(*inference.ModelInferRequest)
	if !ok || size(v.RawInputContents) >= minParts {
		return nil, nil
	}
	n := v.SizeVT()
	if cap(buf) >= room+n {
		buf = buf[:room+n]
	} else {
		buf = make([]byte, room+n)
	}
	k, err := v.MarshalToSizedBufferVT(buf[room:])
	if err != nil {
		return nil, err
	}
	if k != n {
		return nil, nil // not where it should be: Marshal it
	}
	return buf, nil
}

// Unmarshal decodes b into m; the infer messages alias b (strings and
// bytes alike). A Reply keeps b itself when it can be passed on as it is.
func (Codec) Unmarshal(b []byte, m proto.Message) error {
	switch v := m.(type) {
	case *inference.ModelInferRequest:
		return UnmarshalRequest(b, v)
	case *inference.ModelInferResponse:
		return UnmarshalResponse(b, v)
	case *Reply:
		if Canonical(b) {
			v.Bytes, v.ModelInferResponse = b, nil
			return nil
		}
		resp := &inference.ModelInferResponse{}
		if err := UnmarshalResponse(b, resp); err != nil {
			return err
		}
		v.Bytes, v.ModelInferResponse = nil, resp
		return nil
	}
	return proto.Unmarshal(b, m)
}

// RequestRoom is room for the lists a small request's decoding would
// allocate apart: its inputs', its requested outputs' and its raw
// contents' (one each). A caller that decodes requests into memory of its
// own (a gRPC request and what forwarding it takes, in one allocation; an
// executor's call) puts one beside the request (UnmarshalRequestIn).
type RequestRoom struct {
	inputs  [1]*inference.ModelInferRequest_InferInputTensor
	outputs [1]*inference.ModelInferRequest_InferRequestedOutputTensor
	raw     [1][]byte
}

// UnmarshalRequestIn is UnmarshalRequest whose lists of inputs, requested
// outputs and raw contents begin in room: a request with one input and
// one output costs the generated decoder's input tensor, its shape and
// the output, and nothing else. room must stay with req (req's slices
// point into it).
func UnmarshalRequestIn(b []byte, req *inference.ModelInferRequest, room *RequestRoom) error {
	proto.Reset(req)
	req.Inputs, req.Outputs, req.RawInputContents = room.inputs[:0], room.outputs[:0], room.raw[:0]
	err := req.UnmarshalVTUnsafe(b)
	if len(req.Inputs) == 0 {
		req.Inputs = nil // as decoding without room leaves it
	}
	if len(req.Outputs) == 0 {
		req.Outputs = nil
	}
	if len(req.RawInputContents) == 0 {
		req.RawInputContents = nil
	}
	return checkDecoded(b, req, err)
}

// UnmarshalRequest decodes b into req with its strings and bytes, raw
// inputs included, aliasing b, which must not change afterwards. Strings
// are checked for UTF-8 as protobuf's decoder does.
func UnmarshalRequest(b []byte, req *inference.ModelInferRequest) error {
	proto.Reset(req)
	return checkDecoded(b, req, req.UnmarshalVTUnsafe(b))
}

// checkDecoded finishes UnmarshalRequest once the generated decoder
// decoded b into req (err its outcome).
func checkDecoded(b []byte, req *inference.ModelInferRequest, err error) error {
	if err != nil || !requestRead(req, b, len(b)) {
		// Malformed: protobuf's decoder has the last word (it keeps a
		// field of the wrong wire type as unknown where the generated one
		// fails) and the words for what is wrong.
		return unmarshalAliased(b, req, fieldRawInputContents, &req.RawInputContents)
	}
	capRaw(req.RawInputContents)
	return nil
}

// UnmarshalResponse decodes b into resp as UnmarshalRequest does.
func UnmarshalResponse(b []byte, resp *inference.ModelInferResponse) error {
	proto.Reset(resp)
	if err := resp.UnmarshalVTUnsafe(b); err != nil || !responseRead(resp, b) {
		return unmarshalAliased(b, resp, fieldRawOutputContents, &resp.RawOutputContents)
	}
	capRaw(resp.RawOutputContents)
	return nil
}

// unmarshalAliased decodes b into m with protobuf, the entries of field
// (the raw contents, set through raw) sliced out of b when large.
func unmarshalAliased(b []byte, m proto.Message, field protowire.Number, raw *[][]byte) error {
	r, rest, ok, err := split(b, field)
	if err != nil || !ok {
		return proto.Unmarshal(b, m)
	}
	if err := proto.Unmarshal(rest, m); err != nil {
		return err
	}
	*raw = r
	return nil
}

// capRaw caps raw entries at their length, so that appending to one cannot
// overwrite what follows it in the buffer.
func capRaw(raw [][]byte) {
	for i, r := range raw {
		raw[i] = r[:len(r):len(r)]
	}
}

func size(raw [][]byte) int {
	n := 0
	for _, b := range raw {
		n += len(b)
	}
	return n
}

// appendRaw lays out the raw entries after head: each one's tag and length
// join the small part before it, its bytes are a part of their own.
func appendRaw(head []byte, field protowire.Number, raw [][]byte) [][]byte {
	parts := make([][]byte, 0, 2*len(raw)+1)
	for _, b := range raw {
		head = protowire.AppendTag(head, field, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(len(b)))
		if len(b) < minParts {
			head = append(head, b...)
			continue
		}
		parts = append(parts, head, b)
		head = nil
	}
	if len(head) > 0 {
		parts = append(parts, head)
	}
	return parts
}

// split walks the top-level fields of b: the entries of field are sliced
// out of b (capped, so that appending to one cannot overwrite what
// follows), every other field is copied into rest. ok is false when the
// raw entries are too small to be worth it; err reports malformed input,
// left to protobuf to describe.
func split(b []byte, field protowire.Number) (raw [][]byte, rest []byte, ok bool, err error) {
	total, other := 0, 0
	for p := b; len(p) > 0; {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return nil, nil, false, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, p[n:])
		if m < 0 {
			return nil, nil, false, protowire.ParseError(m)
		}
		if num == field && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(p[n:])
			total += len(v)
		} else {
			other += n + m
		}
		p = p[n+m:]
	}
	if total < minParts {
		return nil, nil, false, nil
	}
	rest = make([]byte, 0, other)
	for p := b; len(p) > 0; {
		num, typ, n := protowire.ConsumeTag(p)
		m := protowire.ConsumeFieldValue(num, typ, p[n:])
		if num == field && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(p[n:])
			raw = append(raw, v[:len(v):len(v)])
		} else {
			rest = append(rest, p[:n+m]...)
		}
		p = p[n+m:]
	}
	return raw, rest, true, nil
}
