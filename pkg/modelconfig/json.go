package modelconfig

import (
	"encoding/base64"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nereid-io/nereid/api/inference"
)

// JSON renders cfg as Triton's model-configuration JSON (ModelConfigToJson,
// config version 1), the body of GET /v2/models/NAME/config:
//
//   - field names as in the .proto (snake_case), in declaration order;
//   - fields without presence (scalars, enums, repeated fields, maps) always
//     printed, at their defaults too, as protobuf's
//     always_print_primitive_fields does; unset messages and unset oneof
//     members left out;
//   - enums by name; bytes as base64; NaN and infinities as strings;
//   - 64-bit integers as JSON numbers. Triton converts a hard-coded list of
//     such fields and misses a few (instance_group.secondary_devices.device_id,
//     state.initial_state.dims); here every one is a number.
//   - map keys sorted, so the output is deterministic.
func JSON(cfg *inference.ModelConfig) ([]byte, error) {
	return AppendJSON(nil, cfg.ProtoReflect()), nil
}

// AppendJSON appends the Triton-style JSON form of any message to b. The
// gateway can use it for other Triton messages whose JSON follows the same
// rules.
func AppendJSON(b []byte, m protoreflect.Message) []byte {
	b = append(b, '{')
	fields := m.Descriptor().Fields()
	first := true
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if !fd.IsList() && !fd.IsMap() && fd.HasPresence() && !m.Has(fd) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, string(fd.Name()))
		b = append(b, ':')
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			b = append(b, '[')
			for j := 0; j < l.Len(); j++ {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendValue(b, fd, l.Get(j))
			}
			b = append(b, ']')
		case fd.IsMap():
			b = appendMap(b, fd, v.Map())
		default:
			b = appendValue(b, fd, v)
		}
	}
	return append(b, '}')
}

func appendMap(b []byte, fd protoreflect.FieldDescriptor, mp protoreflect.Map) []byte {
	type entry struct {
		k protoreflect.MapKey
		s string
	}
	entries := make([]entry, 0, mp.Len())
	mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		entries = append(entries, entry{k, k.String()})
		return true
	})
	sort.Slice(entries, func(i, j int) bool {
		ki, kj := entries[i].k.Value().Interface(), entries[j].k.Value().Interface()
		switch a := ki.(type) {
		case int32:
			return a < kj.(int32)
		case int64:
			return a < kj.(int64)
		case uint32:
			return a < kj.(uint32)
		case uint64:
			return a < kj.(uint64)
		}
		return entries[i].s < entries[j].s
	})
	b = append(b, '{')
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, e.s)
		b = append(b, ':')
		b = appendValue(b, fd.MapValue(), mp.Get(e.k))
	}
	return append(b, '}')
}

func appendValue(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.AppendInt(b, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(b, v.Uint(), 10)
	case protoreflect.FloatKind:
		return appendFloat(b, v.Float(), 32)
	case protoreflect.DoubleKind:
		return appendFloat(b, v.Float(), 64)
	case protoreflect.StringKind:
		return appendString(b, v.String())
	case protoreflect.BytesKind:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v.Bytes())
		return append(b, '"')
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendString(b, string(ev.Name()))
		}
		return strconv.AppendInt(b, int64(v.Enum()), 10)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return AppendJSON(b, v.Message())
	}
	return append(b, "null"...)
}

func appendFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, bits)
}

const hex = "0123456789abcdef"

// appendString writes a JSON string without HTML escaping (protobuf's JSON
// printer leaves <, > and & alone); invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, "\ufffd"...)
		} else if r == '\u2028' || r == '\u2029' {
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
