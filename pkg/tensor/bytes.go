package tensor

import (
	"encoding/binary"
	"math"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// BytesLenSize is the size of the little-endian length that prefixes every
// BYTES element in the binary layout.
const BytesLenSize = 4

// AppendBytesElement appends one BYTES element (u32 LE length, then the
// bytes) to dst. Elements longer than 4 GiB - 1 cannot be represented; the
// caller bounds element sizes far below that.
func AppendBytesElement(dst, elem []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(elem)))
	return append(dst, elem...)
}

// AppendBytesString is AppendBytesElement for a string.
func AppendBytesString(dst []byte, elem string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(elem)))
	return append(dst, elem...)
}

// BytesElementsSize is the binary size of the given BYTES elements.
func BytesElementsSize[S ~string | ~[]byte](elems []S) int {
	n := 0
	for _, e := range elems {
		n += BytesLenSize + len(e)
	}
	return n
}

// BytesIter walks the elements of a BYTES buffer without allocating:
//
//	it := tensor.BytesIter{Buf: buf}
//	for it.Next() { use(it.Elem()) }
//	if err := it.Err("INPUT0", "model", expected); err != nil { ... }
type BytesIter struct {
	Buf   []byte
	pos   int
	count int64
	elem  []byte
	bad   int // 0 ok, 1 short length, 2 short data
	need  uint32
}

// Next advances to the next element; false at the end or on a framing error.
func (it *BytesIter) Next() bool {
	if it.bad != 0 || it.pos >= len(it.Buf) {
		return false
	}
	rest := len(it.Buf) - it.pos
	if rest < BytesLenSize {
		it.bad = 1
		return false
	}
	n := binary.LittleEndian.Uint32(it.Buf[it.pos:])
	rest -= BytesLenSize
	if uint64(n) > uint64(rest) {
		it.bad, it.need = 2, n
		return false
	}
	start := it.pos + BytesLenSize
	it.elem = it.Buf[start : start+int(n) : start+int(n)]
	it.pos = start + int(n)
	it.count++
	return true
}

// Elem is the current element; it aliases Buf.
func (it *BytesIter) Elem() []byte { return it.elem }

// Count is the number of elements read so far.
func (it *BytesIter) Count() int64 { return it.count }

// frameErr reports a framing error found by Next, in Triton's words.
func (it *BytesIter) frameErr(input, model string) error {
	switch it.bad {
	case 1:
		return tritonerr.InvalidArgf(
			"incomplete string length indicator for inference input '%s' for model '%s', expecting %d bytes but only %d bytes available. Please make sure the string length indicator is in one buffer.",
			input, model, BytesLenSize, len(it.Buf)-it.pos)
	case 2:
		return tritonerr.InvalidArgf(
			"incomplete string for inference input '%s' for model '%s', expecting string of length %d but only %d bytes available",
			input, model, it.need, len(it.Buf)-it.pos-BytesLenSize)
	}
	return nil
}

// ValidateBytes checks that buf holds exactly expected well-framed BYTES
// elements, with Triton's messages. It never allocates.
func ValidateBytes(input, model string, buf []byte, expected int64) error {
	it := BytesIter{Buf: buf}
	for {
		if it.count == expected {
			if it.pos < len(buf) {
				// More data than elements: Triton reports the count it has
				// reached when the extra element starts.
				return tritonerr.InvalidArgf(
					"unexpected number of string elements %d for inference input '%s' for model '%s', expecting %d",
					expected+1, input, model, expected)
			}
			return nil
		}
		if !it.Next() {
			break
		}
	}
	if err := it.frameErr(input, model); err != nil {
		return err
	}
	return tritonerr.InvalidArgf(
		"expected %d string elements for inference input '%s' for model '%s', got %d",
		expected, input, model, it.count)
}

// SplitBytes validates buf as expected BYTES elements (see ValidateBytes)
// and returns them as slices aliasing buf. The result is sized from the
// count checked against the buffer, never from the untrusted expectation.
func SplitBytes(input, model string, buf []byte, expected int64) ([][]byte, error) {
	if err := ValidateBytes(input, model, buf, expected); err != nil {
		return nil, err
	}
	out := make([][]byte, 0, expected) // expected <= len(buf)/4 once validated
	it := BytesIter{Buf: buf}
	for it.Next() {
		out = append(out, it.Elem())
	}
	return out, nil
}

// ValidateInput checks a tensor's data against its datatype and shape the
// way Triton's core does before execution: the byte size must match for
// fixed-size types, and BYTES data must frame exactly the element count.
// requestID, when set, prefixes the byte-size message as in Triton.
func ValidateInput(requestID, input, model string, dt DataType, shape []int64, data []byte) error {
	if dt == Bytes {
		n, err := ElementCount(input, shape)
		if err != nil {
			return err
		}
		return ValidateBytes(input, model, data, n)
	}
	want, err := ByteSize(input, dt, shape)
	if err != nil {
		return err
	}
	if want != int64(len(data)) {
		prefix := ""
		if requestID != "" {
			prefix = "[request id: " + requestID + "] "
		}
		return tritonerr.InvalidArgf("%sinput byte size mismatch for input '%s' for model '%s'. Expected %d, got %d",
			prefix, input, model, want, len(data))
	}
	return nil
}

// The little-endian element accessors below exist so that backends and
// tests do not each re-derive the layout.

// Float32s decodes an FP32 buffer (len must be a multiple of 4).
func Float32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[i*4:]))
	}
	return out
}

// AppendFloat32s appends FP32 values in the binary layout.
func AppendFloat32s(dst []byte, v ...float32) []byte {
	for _, f := range v {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(f))
	}
	return dst
}

// Int32s decodes an INT32 buffer.
func Int32s(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[i*4:]))
	}
	return out
}

// AppendInt32s appends INT32 values in the binary layout.
func AppendInt32s(dst []byte, v ...int32) []byte {
	for _, x := range v {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(x))
	}
	return dst
}
