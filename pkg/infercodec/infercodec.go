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

// Marshal encodes m, in parts when it carries large raw contents.
func (Codec) Marshal(m proto.Message) ([][]byte, error) {
	switch v := m.(type) {
	case *Encoded:
		v.parts[0] = v.Bytes
		return v.parts[:], nil
	case *inference.ModelInferRequest:
		if size(v.RawInputContents) >= minParts {
			raw := v.RawInputContents
			v.RawInputContents = nil
			head, err := proto.Marshal(v)
			v.RawInputContents = raw
			return appendRaw(head, fieldRawInputContents, raw), err
		}
	case *inference.ModelInferResponse:
		if size(v.RawOutputContents) >= minParts {
			raw := v.RawOutputContents
			v.RawOutputContents = nil
			head, err := proto.Marshal(v)
			v.RawOutputContents = raw
			return appendRaw(head, fieldRawOutputContents, raw), err
		}
	}
	b, err := proto.Marshal(m)
	return [][]byte{b}, err
}

// Unmarshal decodes b into m; the raw contents of an infer message alias b.
func (Codec) Unmarshal(b []byte, m proto.Message) error {
	switch v := m.(type) {
	case *inference.ModelInferRequest:
		return UnmarshalRequest(b, v)
	case *inference.ModelInferResponse:
		return UnmarshalResponse(b, v)
	}
	return proto.Unmarshal(b, m)
}

// UnmarshalRequest decodes b into req with req.RawInputContents slicing b.
func UnmarshalRequest(b []byte, req *inference.ModelInferRequest) error {
	raw, rest, ok, err := split(b, fieldRawInputContents)
	if err != nil || !ok {
		return proto.Unmarshal(b, req)
	}
	if err := proto.Unmarshal(rest, req); err != nil {
		return err
	}
	req.RawInputContents = raw
	return nil
}

// UnmarshalResponse decodes b into resp with resp.RawOutputContents slicing
// b.
func UnmarshalResponse(b []byte, resp *inference.ModelInferResponse) error {
	raw, rest, ok, err := split(b, fieldRawOutputContents)
	if err != nil || !ok {
		return proto.Unmarshal(b, resp)
	}
	if err := proto.Unmarshal(rest, resp); err != nil {
		return err
	}
	resp.RawOutputContents = raw
	return nil
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
