package kserve

import (
	"strings"
	"unicode/utf8"

	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// DefaultMaxInputSize is Triton's default --http-max-input-size (64 MiB).
const DefaultMaxInputSize = 1 << 26

// HeaderLength is the name of the HTTP header that separates the JSON
// request (or response) header from the binary blocks that follow it.
const HeaderLength = "Inference-Header-Content-Length"

// DecodeOptions tunes DecodeInferRequest and DecodeRawRequest.
type DecodeOptions struct {
	// MaxInputSize caps the JSON header of a request, and the input of a
	// raw binary request (--http-max-input-size). 0 means
	// DefaultMaxInputSize.
	MaxInputSize int
}

func (o DecodeOptions) maxInput() int {
	if o.MaxInputSize <= 0 {
		return DefaultMaxInputSize
	}
	return o.MaxInputSize
}

// OutputOptions says how the HTTP response should carry each output. It is
// what the request asked for and travels beside the ModelInferRequest (the
// protobuf has no place for it).
type OutputOptions struct {
	// BinaryDefault is the request's binary_data_output parameter: outputs
	// without their own binary_data setting are sent in binary when it is
	// true. Raw binary requests get all outputs in binary.
	BinaryDefault bool
	// Requested are the outputs the request named, in order.
	Requested []RequestedOutput
}

// RequestedOutput is one entry of the request's "outputs".
type RequestedOutput struct {
	Name string
	// Binary is the effective transport: the output's binary_data parameter
	// when given, else OutputOptions.BinaryDefault.
	Binary bool
	// Classification is the requested top-k classification count (0: none).
	Classification uint64
	// SharedMemory is set when the output is to be written to a registered
	// shared-memory region; the response then carries its parameters and no
	// data.
	SharedMemory *SharedMemoryRef
}

// SharedMemoryRef is a tensor's place in a registered shared-memory region,
// from its shared_memory_* parameters.
type SharedMemoryRef struct {
	Region   string
	Offset   uint64
	ByteSize uint64
}

// output finds a requested output by name.
func (o *OutputOptions) output(name string) *RequestedOutput {
	if o == nil {
		return nil
	}
	for i := range o.Requested {
		if o.Requested[i].Name == name {
			return &o.Requested[i]
		}
	}
	return nil
}

// Binary reports whether the named output goes in binary: its own
// binary_data setting, else the request default.
func (o *OutputOptions) Binary(name string) bool {
	if r := o.output(name); r != nil {
		return r.Binary
	}
	return o != nil && o.BinaryDefault
}

// ParseHeaderLength reads the Inference-Header-Content-Length header as
// Triton does (C++ stoi: leading blanks, a sign, then digits; anything after
// the digits is ignored) and checks it against the body size. A result of 0
// means a raw binary request. value must be present; callers treat an
// absent header as "the whole body is JSON".
func ParseHeaderLength(value string, bodyLen int) (int, error) {
	s := strings.TrimLeft(value, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	digits := 0
	for digits < len(s) && s[digits] >= '0' && s[digits] <= '9' {
		digits++
	}
	if digits == 0 {
		return 0, tritonerr.InvalidArgf("Unable to parse %s, got: %s", HeaderLength, value)
	}
	var v int64
	for _, c := range s[:digits] {
		v = v*10 + int64(c-'0')
		if v > 1<<31 {
			return 0, tritonerr.InvalidArgf(
				"Unable to parse %s, value is out of range [ -2147483648, 2147483647 ], got: %s", HeaderLength, value)
		}
	}
	if neg {
		v = -v
	}
	if v > 1<<31-1 {
		return 0, tritonerr.InvalidArgf(
			"Unable to parse %s, value is out of range [ -2147483648, 2147483647 ], got: %s", HeaderLength, value)
	}
	if v < 0 || v > int64(bodyLen) {
		return 0, tritonerr.InvalidArgf("inference header size should be in range (0, %d), got: %s", bodyLen, value)
	}
	return int(v), nil
}

// JSONError is the body of a failed HTTP call: {"error":"<msg>"}. Invalid
// UTF-8 in the message (which may quote user input) is replaced so that the
// body is always valid JSON.
func JSONError(msg string) []byte {
	if !utf8.ValidString(msg) {
		msg = strings.ToValidUTF8(msg, "\uFFFD")
	}
	b := make([]byte, 0, len(msg)+16)
	b = append(b, `{"error":`...)
	b = tensor.AppendJSONString(b, msg)
	return append(b, '}')
}
