package tensor

import "github.com/nereid-io/nereid/api/inference"

// The model configuration names datatypes with the inference.DataType enum
// (TYPE_BOOL ... TYPE_STRING); the protocol names them with strings. The
// one irregular pair is TYPE_STRING, which is the protocol's BYTES.

var fromConfig = [...]DataType{
	inference.DataType_TYPE_INVALID: Invalid,
	inference.DataType_TYPE_BOOL:    Bool,
	inference.DataType_TYPE_UINT8:   Uint8,
	inference.DataType_TYPE_UINT16:  Uint16,
	inference.DataType_TYPE_UINT32:  Uint32,
	inference.DataType_TYPE_UINT64:  Uint64,
	inference.DataType_TYPE_INT8:    Int8,
	inference.DataType_TYPE_INT16:   Int16,
	inference.DataType_TYPE_INT32:   Int32,
	inference.DataType_TYPE_INT64:   Int64,
	inference.DataType_TYPE_FP16:    FP16,
	inference.DataType_TYPE_FP32:    FP32,
	inference.DataType_TYPE_FP64:    FP64,
	inference.DataType_TYPE_STRING:  Bytes,
	inference.DataType_TYPE_BF16:    BF16,
}

var toConfig = [...]inference.DataType{
	Invalid: inference.DataType_TYPE_INVALID,
	Bool:    inference.DataType_TYPE_BOOL,
	Uint8:   inference.DataType_TYPE_UINT8,
	Uint16:  inference.DataType_TYPE_UINT16,
	Uint32:  inference.DataType_TYPE_UINT32,
	Uint64:  inference.DataType_TYPE_UINT64,
	Int8:    inference.DataType_TYPE_INT8,
	Int16:   inference.DataType_TYPE_INT16,
	Int32:   inference.DataType_TYPE_INT32,
	Int64:   inference.DataType_TYPE_INT64,
	FP16:    inference.DataType_TYPE_FP16,
	BF16:    inference.DataType_TYPE_BF16,
	FP32:    inference.DataType_TYPE_FP32,
	FP64:    inference.DataType_TYPE_FP64,
	Bytes:   inference.DataType_TYPE_STRING,
}

// FromConfig maps a model-config datatype to the protocol datatype
// (TYPE_STRING -> BYTES); unknown values give Invalid.
func FromConfig(d inference.DataType) DataType {
	if d >= 0 && int(d) < len(fromConfig) {
		return fromConfig[d]
	}
	return Invalid
}

// Config maps the datatype to the model-config enum (BYTES -> TYPE_STRING).
func (d DataType) Config() inference.DataType {
	if int(d) < len(toConfig) {
		return toConfig[d]
	}
	return inference.DataType_TYPE_INVALID
}
