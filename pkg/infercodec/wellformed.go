package infercodec

import (
	"errors"
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

var errUTF8 = errors.New("string field contains invalid UTF-8")

func checkRequestUTF8(r *inference.ModelInferRequest) error {
	ok := utf8.ValidString(r.ModelName) && utf8.ValidString(r.ModelVersion) && utf8.ValidString(r.Id) && paramsUTF8(r.Parameters) && known(r)
	for _, in := range r.Inputs {
		ok = ok && utf8.ValidString(in.Name) && utf8.ValidString(in.Datatype) && paramsUTF8(in.Parameters) && known(in) && knownContents(in.Contents)
	}
	for _, out := range r.Outputs {
		ok = ok && utf8.ValidString(out.Name) && paramsUTF8(out.Parameters) && known(out)
	}
	if !ok {
		return errUTF8
	}
	return nil
}

func checkResponseUTF8(r *inference.ModelInferResponse) error {
	ok := utf8.ValidString(r.ModelName) && utf8.ValidString(r.ModelVersion) && utf8.ValidString(r.Id) && paramsUTF8(r.Parameters) && known(r)
	for _, out := range r.Outputs {
		ok = ok && utf8.ValidString(out.Name) && utf8.ValidString(out.Datatype) && paramsUTF8(out.Parameters) && known(out) && knownContents(out.Contents)
	}
	if !ok {
		return errUTF8
	}
	return nil
}

// known reports whether m holds no unknown fields.
func known(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) == 0 }

// knownContents is known for a tensor's optional contents.
func knownContents(c *inference.InferTensorContents) bool { return c == nil || known(c) }

func paramsUTF8(ps map[string]*inference.InferParameter) bool {
	for k, p := range ps {
		if !utf8.ValidString(k) || !utf8.ValidString(p.GetStringParam()) || (p != nil && !known(p)) {
			return false
		}
	}
	return true
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
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || (num != 1 && num != 2) || typ != protowire.BytesType {
			return false
		}
		if n = protowire.ConsumeFieldValue(num, typ, b[n:]); n < 0 {
			return false
		}
		b = b[protowire.SizeTag(num)+n:]
	}
	return true
}

// requestHasParams reports whether r has a parameter anywhere.
func requestHasParams(r *inference.ModelInferRequest) bool {
	if len(r.Parameters) > 0 {
		return true
	}
	for _, in := range r.Inputs {
		if len(in.Parameters) > 0 {
			return true
		}
	}
	for _, out := range r.Outputs {
		if len(out.Parameters) > 0 {
			return true
		}
	}
	return false
}

// responseHasParams reports whether r has a parameter anywhere.
func responseHasParams(r *inference.ModelInferResponse) bool {
	if len(r.Parameters) > 0 {
		return true
	}
	for _, out := range r.Outputs {
		if len(out.Parameters) > 0 {
			return true
		}
	}
	return false
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

func noHighBitU64(vs []uint64) bool {
	for _, v := range vs {
		if v >= 1<<63 {
			return false
		}
	}
	return true
}

func contentsVarintsPlain(c *inference.InferTensorContents) bool {
	return c == nil || nonNegative(c.IntContents) && nonNegative(c.Int64Contents) && noHighBitU64(c.Uint64Contents)
}

func paramsVarintsPlain(ps map[string]*inference.InferParameter) bool {
	for _, p := range ps {
		switch v := p.GetParameterChoice().(type) {
		case *inference.InferParameter_Int64Param:
			if v.Int64Param < 0 {
				return false
			}
		case *inference.InferParameter_Uint64Param:
			if v.Uint64Param >= 1<<63 {
				return false
			}
		}
	}
	return true
}

// requestVarintsPlain reports whether no varint of r has its 64th bit set.
func requestVarintsPlain(r *inference.ModelInferRequest) bool {
	ok := paramsVarintsPlain(r.Parameters)
	for _, in := range r.Inputs {
		ok = ok && nonNegative(in.Shape) && paramsVarintsPlain(in.Parameters) && contentsVarintsPlain(in.Contents)
	}
	for _, out := range r.Outputs {
		ok = ok && paramsVarintsPlain(out.Parameters)
	}
	return ok
}

// responseVarintsPlain reports whether no varint of r has its 64th bit set.
func responseVarintsPlain(r *inference.ModelInferResponse) bool {
	ok := paramsVarintsPlain(r.Parameters)
	for _, out := range r.Outputs {
		ok = ok && nonNegative(out.Shape) && paramsVarintsPlain(out.Parameters) && contentsVarintsPlain(out.Contents)
	}
	return ok
}
