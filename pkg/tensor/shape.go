package tensor

import (
	"math"
	"math/bits"
	"strconv"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// MaxElementCount is the largest element count (and byte size) a tensor may
// have: Triton counts in int64.
const MaxElementCount = math.MaxInt64

// DimsString formats a shape as Triton's DimsListToString does: "[1,16]".
func DimsString(shape []int64) string {
	b := make([]byte, 0, 2+len(shape)*4)
	return string(AppendDims(b, shape))
}

// AppendDims appends the "[1,16]" form of shape to dst.
func AppendDims(dst []byte, shape []int64) []byte {
	dst = append(dst, '[')
	for i, d := range shape {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, d, 10)
	}
	return append(dst, ']')
}

// ElementCount is the number of elements of a tensor of the given shape.
// A negative dimension, or a product above MaxElementCount, is an
// INVALID_ARG error naming the input, in Triton's words. A shape with no
// dimensions is a scalar (1 element); a zero dimension gives 0.
func ElementCount(input string, shape []int64) (int64, error) {
	for _, d := range shape {
		if d < 0 {
			return 0, tritonerr.InvalidArgf(
				"invalid shape for input '%s': shape %s contains one or more invalid dimensions",
				input, DimsString(shape))
		}
	}
	n := uint64(1)
	overflow := false
	for _, d := range shape {
		if d == 0 {
			return 0, nil // a zero dimension wins over an overflowing product
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > MaxElementCount {
			overflow = true
			n = MaxElementCount // keep multiplying to spot a later zero
			continue
		}
		n = lo
	}
	if overflow {
		return 0, elementCountOverflow(input, shape)
	}
	return int64(n), nil
}

func elementCountOverflow(input string, shape []int64) error {
	return tritonerr.InvalidArgf(
		"invalid shape for input '%s': shape %s causes total element count to exceed maximum size of %d",
		input, DimsString(shape), int64(MaxElementCount))
}

// ByteSize is the size in bytes of a fixed-size tensor of the given shape.
// For BYTES it returns -1 (the size depends on the data) after checking the
// shape. Errors use Triton's messages and name the input.
func ByteSize(input string, dt DataType, shape []int64) (int64, error) {
	n, err := ElementCount(input, shape)
	if err != nil {
		return 0, err
	}
	if dt == Bytes {
		return -1, nil
	}
	sz := int64(dt.Size())
	if sz == 0 {
		return 0, tritonerr.InvalidArgf("invalid datatype for input '%s'", input)
	}
	if n > MaxElementCount/sz {
		return 0, tritonerr.InvalidArgf(
			"byte size overflow for input '%s': element count (%d) * data type size (%d) exceeds maximum allowed size (%d)",
			input, n, sz, int64(MaxElementCount))
	}
	return n * sz, nil
}
