package tensor

// DataType is a Triton tensor datatype as named on the wire ("INT32", "BYTES").
type DataType uint8

// The datatypes of the KServe v2 / Triton protocol. Invalid is the zero value.
const (
	Invalid DataType = iota
	Bool
	Uint8
	Uint16
	Uint32
	Uint64
	Int8
	Int16
	Int32
	Int64
	FP16
	BF16
	FP32
	FP64
	Bytes
)

var dataTypeNames = [...]string{
	Invalid: "INVALID",
	Bool:    "BOOL",
	Uint8:   "UINT8",
	Uint16:  "UINT16",
	Uint32:  "UINT32",
	Uint64:  "UINT64",
	Int8:    "INT8",
	Int16:   "INT16",
	Int32:   "INT32",
	Int64:   "INT64",
	FP16:    "FP16",
	BF16:    "BF16",
	FP32:    "FP32",
	FP64:    "FP64",
	Bytes:   "BYTES",
}

var dataTypeSizes = [...]int{
	Bool: 1, Uint8: 1, Uint16: 2, Uint32: 4, Uint64: 8,
	Int8: 1, Int16: 2, Int32: 4, Int64: 8,
	FP16: 2, BF16: 2, FP32: 4, FP64: 8,
}

// String returns the protocol name of the datatype.
func (d DataType) String() string {
	if int(d) < len(dataTypeNames) {
		return dataTypeNames[d]
	}
	return dataTypeNames[Invalid]
}

// ParseDataType reads a protocol datatype name; ok is false for anything
// else. A name in bytes (a JSON token's text) is read without a copy.
func ParseDataType[S ~string | ~[]byte](s S) (d DataType, ok bool) {
	for i := Bool; i <= Bytes; i++ {
		if dataTypeNames[i] == string(s) {
			return i, true
		}
	}
	return Invalid, false
}

// Size is the size of one element in bytes; 0 for BYTES (variable) and Invalid.
func (d DataType) Size() int {
	if int(d) < len(dataTypeSizes) {
		return dataTypeSizes[d]
	}
	return 0
}
