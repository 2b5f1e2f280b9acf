package cbackend

import (
	"slices"
	"time"

	"github.com/nereid-io/nereid/pkg/tensor"
)

// cDataTypes lists TRITONSERVER_DataType's names by value.
var cDataTypes = [...]string{"", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16"}

func dataTypeToC(d tensor.DataType) int { return int(toC[d]) }

// toC maps tensor's data types to TRITONSERVER_DataType's values (0 for
// none), by name.
var toC = func() (m [256]uint8) {
	for i, n := range cDataTypes {
		if d, ok := tensor.ParseDataType(n); i > 0 && ok {
			m[d] = uint8(i)
		}
	}
	return m
}()

// fromC maps TRITONSERVER_DataType's values to tensor's.
var fromC = func() (m [len(cDataTypes)]tensor.DataType) {
	for i, n := range cDataTypes {
		if i > 0 {
			m[i], _ = tensor.ParseDataType(n)
		}
	}
	return m
}()

func dataTypeFromC(v int) tensor.DataType {
	if v <= 0 || v >= len(fromC) {
		return tensor.Invalid
	}
	return fromC[v]
}

func timeUntilMicros(t time.Time) int64 { return time.Until(t).Microseconds() }

// sortedCopy: Triton keeps requested output names in a sorted set. Names
// already in strictly increasing order (one name, usually) are that set.
func sortedCopy(ss []string) []string {
	increasing := true
	for i := 1; i < len(ss) && increasing; i++ {
		increasing = ss[i-1] < ss[i]
	}
	if increasing {
		return ss
	}
	c := slices.Clone(ss)
	slices.Sort(c)
	return slices.Compact(c)
}

func sortedKeys[V any](m map[string]V) []string {
	if len(m) == 0 {
		return nil
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func parseDataType(s string) (int, bool) {
	for i, n := range cDataTypes {
		if i > 0 && n == s {
			return i, true
		}
	}
	return 0, false
}
