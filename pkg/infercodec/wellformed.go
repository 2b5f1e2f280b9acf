package infercodec

import (
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

// The generated decoders do not check that strings are UTF-8, and keep as
// unknown fields some malformed data protobuf's decoder refuses (a group
// that does not end as it began). A message that fails these checks is
// decoded again by protobuf, so that both accept the same messages with
// the same results: our encoders never produce unknown fields or invalid
// strings, so the fast path is the only one in practice. Nor do they say
// what they skipped (an unknown field inside a map entry, a scalar given
// twice): a message whose re-encoded size is not the size received goes
// to protobuf too.

// requestRead reports whether the generated decoder read r, decoded from
// b (size bytes of it: all but an entry taken out), as protobuf would: its
// strings UTF-8, no unknown fields, the size it re-encodes to size, no
// varint with its 64th bit set, and its map entries plain. One walk of
// the decoded message answers all but the size and the map entries, and
// says whether there are maps to look at in b.
func requestRead(r *inference.ModelInferRequest, b []byte, size int) bool {
	ok := utf8.ValidString(r.ModelName) && utf8.ValidString(r.ModelVersion) && utf8.ValidString(r.Id) && paramsRead(r.Parameters) && known(r)
	params := len(r.Parameters) > 0
	for _, in := range r.Inputs {
		ok = ok && utf8.ValidString(in.Name) && utf8.ValidString(in.Datatype) && paramsRead(in.Parameters) && known(in) &&
			nonNegative(in.Shape) && contentsRead(in.Contents)
		params = params || len(in.Parameters) > 0
	}
	for _, out := range r.Outputs {
		ok = ok && utf8.ValidString(out.Name) && paramsRead(out.Parameters) && known(out)
		params = params || len(out.Parameters) > 0
	}
	return ok && r.SizeVT() == size && (!params || mapsPlain(b, requestMaps))
}

// responseRead is requestRead for a response decoded from all of b.
func responseRead(r *inference.ModelInferResponse, b []byte) bool {
	ok := utf8.ValidString(r.ModelName) && utf8.ValidString(r.ModelVersion) && utf8.ValidString(r.Id) && paramsRead(r.Parameters) && known(r)
	params := len(r.Parameters) > 0
	for _, out := range r.Outputs {
		ok = ok && utf8.ValidString(out.Name) && utf8.ValidString(out.Datatype) && paramsRead(out.Parameters) && known(out) &&
			nonNegative(out.Shape) && contentsRead(out.Contents)
		params = params || len(out.Parameters) > 0
	}
	return ok && r.SizeVT() == len(b) && (!params || mapsPlain(b, responseMaps))
}

// known reports whether m holds no unknown fields.
func known(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) == 0 }

// paramsRead is requestRead's walk of a parameters map: keys and string
// values UTF-8, no unknown fields, no integer with its 64th bit set.
func paramsRead(ps map[string]*inference.InferParameter) bool {
	for k, p := range ps {
		if !utf8.ValidString(k) {
			return false
		}
		if p == nil {
			continue
		}
		switch v := p.GetParameterChoice().(type) {
		case *inference.InferParameter_StringParam:
			if !utf8.ValidString(v.StringParam) {
				return false
			}
		case *inference.InferParameter_Int64Param:
			if v.Int64Param < 0 {
				return false
			}
		case *inference.InferParameter_Uint64Param:
			if v.Uint64Param >= 1<<63 {
				return false
			}
		}
		if !known(p) {
			return false
		}
	}
	return true
}

// contentsRead is requestRead's walk of a tensor's optional contents.
func contentsRead(c *inference.InferTensorContents) bool {
	return c == nil || known(c) && nonNegative(c.IntContents) && nonNegative(c.Int64Contents) && noHighBitU64(c.Uint64Contents)
}

// The generated decoders read a map entry's key and value whatever wire
// type their tags give, where protobuf skips a key or value of the wrong
// wire type as unknown and refuses a wire type that does not exist; the
// size check does not always tell (a skipped field can be as long as what
// was read in its place). So a message with parameters is decoded by the
// generated decoder only when each of its map entries holds nothing but a
// key and a value, each length-delimited: the walk below, over the fields
// that can hold maps.

// msgMaps says where a message's maps are: the numbers of its map fields
// and of its message fields whose messages hold maps.
type msgMaps struct {
	maps []protowire.Number
	subs map[protowire.Number]*msgMaps
}

var (
	// ModelInferRequest: parameters 4; inputs 5 (parameters 4); outputs
	// 6 (parameters 2).
	requestMaps = &msgMaps{maps: []protowire.Number{4}, subs: map[protowire.Number]*msgMaps{
		5: {maps: []protowire.Number{4}},
		6: {maps: []protowire.Number{2}},
	}}
	// ModelInferResponse: parameters 4; outputs 5 (parameters 4).
	responseMaps = &msgMaps{maps: []protowire.Number{4}, subs: map[protowire.Number]*msgMaps{
		5: {maps: []protowire.Number{4}},
	}}
)

// mapsPlain reports whether every map entry of b, a message laid out as m
// says, is a length-delimited key and value and nothing else. Malformed
// data elsewhere is left to the decoders' own checks.
func mapsPlain(b []byte, m *msgMaps) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return true
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return true
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return true
		}
		b = b[n:]
		switch {
		case slices.Contains(m.maps, num):
			if !entryPlain(v) {
				return false
			}
		case m.subs[num] != nil:
			if !mapsPlain(v, m.subs[num]) {
				return false
			}
		}
	}
	return true
}

// entryPlain reports whether a map entry holds only fields 1 and 2, each
// length-delimited.
func entryPlain(b []byte) bool {
	for len(b) > 0 {
		num, typ, t := protowire.ConsumeTag(b)
		if t < 0 || (num != 1 && num != 2) || typ != protowire.BytesType {
			return false
		}
		n := protowire.ConsumeFieldValue(num, typ, b[t:])
		if n < 0 {
			return false
		}
		b = b[t+n:]
	}
	return true
}

// The generated decoders also take a ten-byte varint whose last byte
// carries more than the 64th bit, which protobuf refuses as an overflow.
// Such a varint decodes to a value whose re-encoding has another size
// (caught by the size check) unless its 64th bit is set; a value with the
// 64th bit set (a negative int64 or int32, a uint64 from 2^63) is rare in
// requests and responses, and sends the message to protobuf. Fields of
// other varint types (bool, uint32) always re-encode shorter.

// nonNegative reports whether no value of vs is negative (a negative
// int32 is encoded, sign-extended, in ten bytes too).
func nonNegative[T int32 | int64](vs []T) bool {
	for _, v := range vs {
		if v < 0 {
			return false
		}
	}
	return true
}

// noHighBitU64 reports whether no value of vs has its 64th bit set.
func noHighBitU64(vs []uint64) bool {
	for _, v := range vs {
		if v >= 1<<63 {
			return false
		}
	}
	return true
}
