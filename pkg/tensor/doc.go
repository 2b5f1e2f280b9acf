// Package tensor is Triton's tensor model: the datatypes of the protocol
// (BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32, FP64, BYTES) and their
// model-config names (TYPE_STRING is BYTES), element counts and byte sizes
// with Triton's overflow and shape messages, and the binary layout every
// transport shares: little-endian, row-major, BOOL one byte per element,
// BYTES as a u32 little-endian length followed by the bytes, per element.
//
// It also converts between that layout and the JSON `data` of the KServe v2
// HTTP protocol: DecodeJSONData / AppendJSONData read JSON straight into the
// binary buffer with a streaming lexer (package jsonlex), never through
// []any, and AppendJSON writes a flat JSON array back. FP16 and BF16 are
// refused in JSON with Triton's messages.
//
// Everything that reads untrusted input checks sizes before it allocates:
// a shape may claim any element count, but buffers are sized from what the
// input actually holds.
package tensor
