package infercodec

import (
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nereid-io/nereid/api/inference"
)

// Reply receives a ModelInferResponse from the bus (Codec.Unmarshal) for a
// receiver that passes it on encoded (the gateway's gRPC clients): Bytes,
// aliasing the received message, when they are exactly what protobuf
// would encode again from what it decodes of them (Canonical), so that
// they can be sent on as they are; else the decoded message, embedded,
// and Bytes nil.
type Reply struct {
	*inference.ModelInferResponse
	Bytes []byte
}

// Field numbers of the messages Canonical reads (Triton's
// grpc_service.proto).
const (
	respModelName    = 1
	respModelVersion = 2
	respID           = 3
	respParameters   = 4
	respOutputs      = 5

	outName       = 1
	outDatatype   = 2
	outShape      = 3
	outParameters = 4

	paramBool   = 1
	paramInt64  = 2
	paramString = 3
	paramDouble = 4
	paramUint64 = 5
)

// Canonical reports whether b is a ModelInferResponse in the form
// protobuf's encoder gives it: every field known, of its wire type, in
// field-number order, a singular one at most once and never with its zero
// value, strings UTF-8, varints in their shortest form, map entries as a
// key then a value, no tensor contents (raw outputs only). Decoding such
// bytes and encoding the message again gives the same bytes (up to the
// order of map entries, which protobuf does not fix either), so a receiver
// may pass them on instead. Anything else, malformed input included, is
// left to the decoder.
func Canonical(b []byte) bool {
	last := protowire.Number(0)
	var params []byte // the parameters entries so far, from the first
	for len(b) > 0 {
		field := b
		num, typ, n := consumeTag(b)
		if n < 0 || num < last || (num == last && num < respParameters) {
			return false
		}
		last = num
		b = b[n:]
		if typ != protowire.BytesType {
			return false
		}
		v, n := consumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case respModelName, respModelVersion, respID:
			if len(v) == 0 || !utf8.Valid(v) {
				return false
			}
		case respParameters:
			if params == nil {
				params = field
			}
			if !canonicalParamEntry(v, params[:len(params)-len(field)]) {
				return false
			}
		case respOutputs:
			if !canonicalOutput(v) {
				return false
			}
		case fieldRawOutputContents:
		default:
			return false
		}
	}
	return true
}

func canonicalOutput(b []byte) bool {
	last := protowire.Number(0)
	var params []byte
	for len(b) > 0 {
		field := b
		num, typ, n := consumeTag(b)
		if n < 0 || num < last || (num == last && num != outParameters) {
			return false
		}
		last = num
		b = b[n:]
		if typ != protowire.BytesType {
			return false
		}
		v, n := consumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case outName, outDatatype:
			if len(v) == 0 || !utf8.Valid(v) {
				return false
			}
		case outShape:
			if len(v) == 0 {
				return false
			}
			for len(v) > 0 {
				_, n := consumeVarint(v)
				if n < 0 {
					return false
				}
				v = v[n:]
			}
		case outParameters:
			if params == nil {
				params = field
			}
			if !canonicalParamEntry(v, params[:len(params)-len(field)]) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// canonicalParamEntry checks an entry of a map<string, InferParameter>:
// protobuf writes its key and its value, in that order, even when empty;
// its key is none of the entries before it (before, already checked),
// which the decoder would drop.
func canonicalParamEntry(b, before []byte) bool {
	k, b, ok := entryKey(b)
	if !ok || !utf8.Valid(k) {
		return false
	}
	for len(before) > 0 {
		_, _, n := consumeTag(before)
		e, m := consumeBytes(before[n:])
		before = before[n+m:]
		if prev, _, _ := entryKey(e); string(prev) == string(k) {
			return false
		}
	}
	num, typ, n := consumeTag(b)
	if n < 0 || num != 2 || typ != protowire.BytesType {
		return false
	}
	b = b[n:]
	v, n := consumeBytes(b)
	return n == len(b) && canonicalParam(v)
}

// entryKey reads the key at the start of a map entry, and what follows it.
func entryKey(b []byte) (key, rest []byte, ok bool) {
	num, typ, n := consumeTag(b)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return nil, nil, false
	}
	key, m := consumeBytes(b[n:])
	if m < 0 {
		return nil, nil, false
	}
	return key, b[n+m:], true
}

// canonicalParam checks an InferParameter: its oneof, when set, is its one
// field, written even with its zero value.
func canonicalParam(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	num, typ, n := consumeTag(b)
	if n < 0 {
		return false
	}
	b = b[n:]
	switch {
	case typ == protowire.VarintType && (num == paramBool || num == paramInt64 || num == paramUint64):
		v, n := consumeVarint(b)
		return n == len(b) && (num != paramBool || v <= 1)
	case typ == protowire.BytesType && num == paramString:
		v, n := consumeBytes(b)
		return n == len(b) && utf8.Valid(v)
	case typ == protowire.Fixed64Type && num == paramDouble:
		_, n := protowire.ConsumeFixed64(b)
		return n == len(b)
	}
	return false
}

// consumeVarint is protowire.ConsumeVarint refusing a longer form than
// the shortest.
func consumeVarint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1 // tags and lengths of small messages: one byte, the shortest form
	}
	v, n := protowire.ConsumeVarint(b)
	if n > 0 && n != protowire.SizeVarint(v) {
		return 0, -1
	}
	return v, n
}

func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	v, n := consumeVarint(b)
	if n < 0 {
		return 0, 0, n
	}
	num, typ := protowire.DecodeTag(v)
	if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}

// consumeBytes reads a length-delimited value: its bytes and the length of
// the length and them together.
func consumeBytes(b []byte) ([]byte, int) {
	l, n := consumeVarint(b)
	if n < 0 || l > uint64(len(b)-n) {
		return nil, -1
	}
	return b[n : n+int(l)], n + int(l)
}

// HasParameter reports whether the top-level parameters of b, a
// ModelInferResponse Canonical accepted, hold key.
func HasParameter(b []byte, key string) bool {
	for len(b) > 0 {
		num, _, n := consumeTag(b)
		v, m := consumeBytes(b[n:])
		b = b[n+m:]
		if num > respParameters {
			return false
		}
		if num == respParameters {
			if k, _, _ := entryKey(v); string(k) == key {
				return true
			}
		}
	}
	return false
}

// ResponseView is the top level of a ModelInferResponse that Canonical
// accepted, read in place: its strings and each output's encoding alias
// the bytes, which must not change while the view is used.
type ResponseView struct {
	ModelName, ModelVersion, ID string
	Parameters                  bool     // it has response parameters
	Outputs                     [][]byte // each InferOutputTensor's encoding
	RawOutputContents           [][]byte
}

// ViewResponse reads b, a ModelInferResponse that Canonical accepted, into
// a view whose Outputs and RawOutputContents are appended to outs and raw
// (whose arrays a caller may keep on its stack). ok is false for bytes
// that are not in that form.
func ViewResponse(b []byte, outs, raw [][]byte) (v ResponseView, ok bool) {
	v.Outputs, v.RawOutputContents = outs, raw
	for len(b) > 0 {
		num, f, rest, good := bytesField(b)
		if !good {
			return ResponseView{}, false
		}
		b = rest
		switch num {
		case respModelName:
			v.ModelName = aliasString(f)
		case respModelVersion:
			v.ModelVersion = aliasString(f)
		case respID:
			v.ID = aliasString(f)
		case respParameters:
			v.Parameters = true
		case respOutputs:
			v.Outputs = append(v.Outputs, f)
		case fieldRawOutputContents:
			v.RawOutputContents = append(v.RawOutputContents, f)
		default:
			return ResponseView{}, false
		}
	}
	return v, true
}

// ViewOutput reads an InferOutputTensor's encoding from a ResponseView:
// its name and datatype, aliasing o, and its shape appended to dims (dims
// nil: the shape is checked, not kept). Its parameters are skipped. ok is
// false for anything else, or more than maxDims dimensions.
func ViewOutput(o []byte, dims []int64, maxDims int) (name, datatype string, shape []int64, ok bool) {
	shape = dims
	n := 0
	for len(o) > 0 {
		num, f, rest, good := bytesField(o)
		if !good {
			return "", "", nil, false
		}
		o = rest
		switch num {
		case outName:
			name = aliasString(f)
		case outDatatype:
			datatype = aliasString(f)
		case outShape:
			for len(f) > 0 {
				d, m := protowire.ConsumeVarint(f)
				if m < 0 || n == maxDims {
					return "", "", nil, false
				}
				n++
				if dims != nil {
					shape = append(shape, int64(d))
				}
				f = f[m:]
			}
		case outParameters:
		default:
			return "", "", nil, false
		}
	}
	return name, datatype, shape, true
}

// bytesField reads one length-delimited field, the only wire type of the
// fields a view reads.
func bytesField(b []byte) (num protowire.Number, v, rest []byte, ok bool) {
	num, typ, n := consumeTag(b)
	if n < 0 || typ != protowire.BytesType {
		return 0, nil, nil, false
	}
	v, m := consumeBytes(b[n:])
	if m < 0 {
		return 0, nil, nil, false
	}
	return num, v, b[n+m:], true
}

// aliasString is b as a string without a copy.
func aliasString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
