package kserve

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// ContentsToRaw brings a gRPC ModelInferRequest to the form the bus carries:
// every input's data in RawInputContents, exactly one entry per input, in
// input order, and no typed contents. It applies Triton's rules
// (InferGRPCToInput) and messages:
//
//   - an input either uses raw_input_contents or typed contents: contents
//     while raw_input_contents is non-empty is an error;
//   - one typed field per input, matching the input's datatype (int_contents
//     serves INT8, INT16 and INT32; uint_contents UINT8, UINT16 and UINT32);
//   - an input in shared memory has no contents; it gets a nil raw entry and
//     keeps its shared_memory_* parameters for the shared-memory layer;
//   - raw_input_contents entries are matched to the inputs that are not in
//     shared memory, in order; too few is "unable to find data", too many
//     is an error too (Triton silently ignores extras).
//
// Typed contents are range-checked (an INT8 of 300 is an error, where Triton
// would truncate it) and their element count must match the shape.
func ContentsToRaw(req *inference.ModelInferRequest) error {
	inputs := req.GetInputs()
	raw := req.GetRawInputContents()
	model := req.GetModelName()

	needWork := len(raw) != len(inputs)
	for _, in := range inputs {
		if in.GetContents() != nil || hasShm(in.GetParameters()) {
			needWork = true
			break
		}
	}
	if !needWork {
		return nil
	}

	out := make([][]byte, len(inputs))
	idx := 0
	for i, in := range inputs {
		name := in.GetName()
		c := in.GetContents()
		switch {
		case hasShm(in.GetParameters()):
			if c != nil {
				return tritonerr.InvalidArgf("unexpected 'content' provided when using shared memory for input tensor '%s' for model '%s'", name, model)
			}
			out[i] = nil
		case c != nil && len(raw) > 0:
			return tritonerr.InvalidArgf("contents field must not be specified when using raw_input_contents for '%s' for model '%s'", name, model)
		case c != nil:
			b, err := typedContents(name, model, in.GetDatatype(), c)
			if err != nil {
				return err
			}
			dt, ok := tensor.ParseDataType(in.GetDatatype())
			if ok {
				if err := tensor.ValidateInput(req.GetId(), name, model, dt, in.GetShape(), b); err != nil {
					return err
				}
			}
			out[i] = b
			in.Contents = nil
		case idx < len(raw):
			out[i] = raw[idx]
			idx++
		default:
			return tritonerr.InvalidArgf("unable to find data for input tensor '%s' for model '%s' in request.", name, model)
		}
	}
	if idx < len(raw) {
		return tritonerr.InvalidArgf("unexpected additional raw input contents for model '%s': %d entries for %d inputs",
			model, len(raw), idx)
	}
	req.RawInputContents = out
	return nil
}

func hasShm(params map[string]*inference.InferParameter) bool {
	_, ok := params[paramShmRegion]
	return ok
}

// typedContents converts one input's typed contents, checking that only one
// field is used and that it fits the datatype (InferGRPCToInputHelper).
func typedContents(name, model, datatype string, c *inference.InferTensorContents) ([]byte, error) {
	dt, _ := tensor.ParseDataType(datatype)
	fields := 0
	var field tensor.DataType // the type the populated field stands for
	check := func(n int, tensorType tensor.DataType, ok bool) error {
		if n == 0 {
			return nil
		}
		fields++
		if fields > 1 {
			return tritonerr.InvalidArgf("unexpected explicit tensor data for input tensor '%s' for model '%s', binary data was already supplied.", name, model)
		}
		if !ok {
			return tritonerr.InvalidArgf("unexpected explicit tensor data for input tensor '%s' for model '%s' of type '%s', expected datatype '%s'",
				name, model, tensorType, datatype)
		}
		field = tensorType
		return nil
	}
	intType := tensor.Int32
	if dt == tensor.Int8 || dt == tensor.Int16 {
		intType = dt
	}
	uintType := tensor.Uint32
	if dt == tensor.Uint8 || dt == tensor.Uint16 {
		uintType = dt
	}
	for _, f := range []struct {
		n  int
		t  tensor.DataType
		ok bool
	}{
		{len(c.GetBoolContents()), tensor.Bool, dt == tensor.Bool},
		{len(c.GetIntContents()), intType, dt == intType},
		{len(c.GetInt64Contents()), tensor.Int64, dt == tensor.Int64},
		{len(c.GetUintContents()), uintType, dt == uintType},
		{len(c.GetUint64Contents()), tensor.Uint64, dt == tensor.Uint64},
		{len(c.GetFp32Contents()), tensor.FP32, dt == tensor.FP32},
		{len(c.GetFp64Contents()), tensor.FP64, dt == tensor.FP64},
		{len(c.GetBytesContents()), tensor.Bytes, dt == tensor.Bytes},
	} {
		if err := check(f.n, f.t, f.ok); err != nil {
			return nil, err
		}
	}
	if fields == 0 {
		return []byte{}, nil // empty contents: an empty tensor
	}
	b, err := contentsToBytes(nil, field, c)
	if err != nil {
		return nil, tritonerr.InvalidArgf("unexpected explicit tensor data for input tensor '%s' for model '%s': %v", name, model, err)
	}
	return b, nil
}

// contentsToBytes writes the typed contents of datatype dt in the binary
// layout.
func contentsToBytes(dst []byte, dt tensor.DataType, c *inference.InferTensorContents) ([]byte, error) {
	le := binary.LittleEndian
	switch dt {
	case tensor.Bool:
		for _, v := range c.GetBoolContents() {
			dst = append(dst, btob(v))
		}
	case tensor.Int8, tensor.Int16, tensor.Int32:
		lo, hi := int64(math.MinInt32), int64(math.MaxInt32)
		if dt == tensor.Int8 {
			lo, hi = math.MinInt8, math.MaxInt8
		} else if dt == tensor.Int16 {
			lo, hi = math.MinInt16, math.MaxInt16
		}
		dst = grow(dst, len(c.GetIntContents())*dt.Size())
		for i, v := range c.GetIntContents() {
			if int64(v) < lo || int64(v) > hi {
				return nil, fmt.Errorf("value %d of element %d is out of range for %s", v, i, dt)
			}
			switch dt {
			case tensor.Int8:
				dst = append(dst, byte(v))
			case tensor.Int16:
				dst = le.AppendUint16(dst, uint16(v))
			default:
				dst = le.AppendUint32(dst, uint32(v))
			}
		}
	case tensor.Int64:
		dst = grow(dst, 8*len(c.GetInt64Contents()))
		for _, v := range c.GetInt64Contents() {
			dst = le.AppendUint64(dst, uint64(v))
		}
	case tensor.Uint8, tensor.Uint16, tensor.Uint32:
		hi := uint32(math.MaxUint32)
		if dt == tensor.Uint8 {
			hi = math.MaxUint8
		} else if dt == tensor.Uint16 {
			hi = math.MaxUint16
		}
		dst = grow(dst, len(c.GetUintContents())*dt.Size())
		for i, v := range c.GetUintContents() {
			if v > hi {
				return nil, fmt.Errorf("value %d of element %d is out of range for %s", v, i, dt)
			}
			switch dt {
			case tensor.Uint8:
				dst = append(dst, byte(v))
			case tensor.Uint16:
				dst = le.AppendUint16(dst, uint16(v))
			default:
				dst = le.AppendUint32(dst, v)
			}
		}
	case tensor.Uint64:
		dst = grow(dst, 8*len(c.GetUint64Contents()))
		for _, v := range c.GetUint64Contents() {
			dst = le.AppendUint64(dst, v)
		}
	case tensor.FP32:
		dst = grow(dst, 4*len(c.GetFp32Contents()))
		for _, v := range c.GetFp32Contents() {
			dst = le.AppendUint32(dst, math.Float32bits(v))
		}
	case tensor.FP64:
		dst = grow(dst, 8*len(c.GetFp64Contents()))
		for _, v := range c.GetFp64Contents() {
			dst = le.AppendUint64(dst, math.Float64bits(v))
		}
	case tensor.Bytes:
		dst = grow(dst, tensor.BytesElementsSize(c.GetBytesContents()))
		for _, v := range c.GetBytesContents() {
			dst = tensor.AppendBytesElement(dst, v)
		}
	default:
		return nil, fmt.Errorf("no typed contents for datatype %s", dt)
	}
	if dst == nil {
		dst = []byte{}
	}
	return dst, nil
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	g := make([]byte, len(b), len(b)+n)
	copy(g, b)
	return g
}

func btob(v bool) byte {
	if v {
		return 1
	}
	return 0
}
