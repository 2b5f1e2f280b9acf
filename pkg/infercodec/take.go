package infercodec

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

// reqParameters is ModelInferRequest.parameters' field number.
const reqParameters = 4

// UnmarshalRequestTaking is UnmarshalRequestIn for a request that may
// carry a string parameter its sender added for its receiver alone (a
// hand-off descriptor, pkg/handoff): when b holds key once, written as
// protobuf writes a string parameter, where protobuf writes the
// parameters (before the inputs), its value is returned (aliasing b)
// instead of decoded into req's parameters, so that a request without
// parameters of its own needs no map (four allocations: the map, its
// slots, the parameter and its oneof). Otherwise value is "" and req is
// what UnmarshalRequestIn decodes, the parameter included.
func UnmarshalRequestTaking(b []byte, req *inference.ModelInferRequest, room *RequestRoom, key string) (value string, err error) {
	start, end, value, ok := findStringParam(b, key)
	if !ok {
		return "", UnmarshalRequestIn(b, req, room)
	}
	// The fields before the entry and those after it, decoded in turn,
	// read as b does without the entry: the generated decoder merges
	// what it decodes into req as protobuf merges concatenated encodings.
	proto.Reset(req)
	req.Inputs, req.Outputs, req.RawInputContents = room.inputs[:0], room.outputs[:0], room.raw[:0]
	err = req.UnmarshalVTUnsafe(b[:start])
	if err == nil {
		err = req.UnmarshalVTUnsafe(b[end:])
	}
	if len(req.Inputs) == 0 {
		req.Inputs = nil
	}
	if len(req.Outputs) == 0 {
		req.Outputs = nil
	}
	if len(req.RawInputContents) == 0 {
		req.RawInputContents = nil
	}
	if _, again := req.Parameters[key]; again || err != nil || !requestRead(req, b, len(b)-(end-start)) {
		// The key given again after the entry taken (the last one counts),
		// or malformed somewhere else: decoded whole, as it would have been.
		// (The entry taken is a plain one: findStringParam read it as
		// protobuf writes it; requestRead walks b's map entries only when
		// req has parameters of its own.)
		return "", UnmarshalRequestIn(b, req, room)
	}
	capRaw(req.RawInputContents)
	return value, nil
}

// findStringParam finds the first top-level parameters entry of b, an
// encoded ModelInferRequest, named key, and reads its value when it is a
// non-empty UTF-8 string written as protobuf writes it: start and end
// are where the entry's field begins and ends in b. ok is false when
// there is no such entry among the fields that precede the first field
// after the parameters (protobuf writes fields in their order: the
// inputs, their contents, need not be walked), or anything before it is
// not well formed (for the full decoding to judge). An entry of the same
// key after it is the decoding's to find.
func findStringParam(b []byte, key string) (start, end int, value string, ok bool) {
	for off := 0; off < len(b); {
		num, typ, n := consumeTag(b[off:])
		if n < 0 || num > reqParameters {
			return 0, 0, "", false
		}
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b[off+n:])
			if m < 0 {
				return 0, 0, "", false
			}
			off += n + m
			continue
		}
		v, m := consumeBytes(b[off+n:])
		if m < 0 {
			return 0, 0, "", false
		}
		if num == reqParameters {
			if k, rest, kok := entryKey(v); kok && string(k) == key {
				s, sok := stringParamEntry(rest)
				return off, off + n + m, s, sok
			}
		}
		off += n + m
	}
	return 0, 0, "", false
}

// stringParamEntry reads the value of a parameters entry after its key:
// an InferParameter holding a string and nothing else, non-empty, UTF-8.
func stringParamEntry(b []byte) (string, bool) {
	num, typ, n := consumeTag(b)
	if n < 0 || num != 2 || typ != protowire.BytesType {
		return "", false
	}
	p, m := consumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return "", false
	}
	num, typ, n = consumeTag(p)
	if n < 0 || num != paramString || typ != protowire.BytesType {
		return "", false
	}
	s, m := consumeBytes(p[n:])
	if m < 0 || n+m != len(p) || len(s) == 0 || !utf8.Valid(s) {
		return "", false
	}
	return aliasString(s), true
}
