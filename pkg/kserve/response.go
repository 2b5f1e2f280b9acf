package kserve

import (
	"math"
	"strconv"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// EncodeInferResponse writes the HTTP body of an infer response in Triton's
// form:
//
//	{"id":..., "model_name":..., "model_version":..., "parameters":{...},
//	 "outputs":[{"name":..., "datatype":..., "shape":[...], "data":[...]}]}
//
// id appears only when set, parameters only when there are any. Outputs
// the request wants in binary (opts; per-output binary_data overrides the
// request's binary_data_output) carry parameters.binary_data_size instead of
// data, and their bytes follow the JSON in output order. jsonLen is then the
// length of the JSON part, for the Inference-Header-Content-Length header
// (and Content-Type application/octet-stream); it is -1 when the body is
// JSON only. Outputs bound for shared memory carry neither data nor
// parameters; outputs carry no parameters but binary_data_size.
//
// Output data comes from resp.RawOutputContents (one entry per output), or
// from an output's typed contents when the raw entry is missing.
func EncodeInferResponse(resp *inference.ModelInferResponse, opts *OutputOptions) (body []byte, jsonLen int, err error) {
	b, blobs, err := encodeInferResponse(resp, opts, true)
	if err != nil || blobs == nil {
		return b, -1, err
	}
	jsonLen = len(b)
	for _, d := range blobs {
		b = append(b, d...)
	}
	return b, jsonLen, nil
}

// EncodeInferResponseParts is EncodeInferResponse without the copy of the
// binary outputs: it returns the JSON header and the binary outputs to
// write after it, in order (blobs is nil when the response is JSON only;
// the Inference-Header-Content-Length is then len(header)). The blobs alias
// resp's raw outputs, which may be hundreds of MiB.
func EncodeInferResponseParts(resp *inference.ModelInferResponse, opts *OutputOptions) (header []byte, blobs [][]byte, err error) {
	return encodeInferResponse(resp, opts, false)
}

// encodeInferResponse writes the JSON part and lists the binary outputs;
// reserve leaves room for them after the JSON.
func encodeInferResponse(resp *inference.ModelInferResponse, opts *OutputOptions, reserve bool) (b []byte, blobs [][]byte, err error) {
	outputs := resp.GetOutputs()
	raw := resp.GetRawOutputContents()
	// On the stack for the usual handful of outputs.
	var datasBuf [4][]byte
	var binaryBuf [4]bool
	datas, binary := datasBuf[:0], binaryBuf[:0]
	if len(outputs) > len(datasBuf) {
		datas, binary = make([][]byte, 0, len(outputs)), make([]bool, 0, len(outputs))
	}
	datas, binary = datas[:len(outputs)], binary[:len(outputs)]
	size := 128 + len(resp.GetModelName()) + len(resp.GetId())
	binSize := 0
	anyBinary := false
	for i, o := range outputs {
		var d []byte
		if i < len(raw) && raw[i] != nil {
			d = raw[i]
		} else if o.GetContents() != nil {
			dt, ok := tensor.ParseDataType(o.GetDatatype())
			if !ok {
				return nil, nil, tritonerr.Internalf("output '%s' has invalid datatype '%s'", o.GetName(), o.GetDatatype())
			}
			d, err = contentsToBytes(nil, dt, o.GetContents())
			if err != nil {
				return nil, nil, tritonerr.Internalf("output '%s': %v", o.GetName(), err)
			}
		}
		datas[i] = d
		ro := opts.output(o.GetName())
		if ro != nil && ro.SharedMemory != nil {
			size += 128
			continue
		}
		binary[i] = opts.Binary(o.GetName())
		size += 96 + len(o.GetName()) + 24*len(o.GetShape())
		if binary[i] {
			anyBinary = true
			binSize += len(d)
		} else {
			// A rough guess at JSON's size: numbers take ~2-3x their bytes.
			size += 3*len(d) + 16
		}
	}

	if !reserve {
		binSize = 0
	}
	b = make([]byte, 0, size+binSize)
	b = appendResponseHead(b, resp.GetId(), resp.GetModelName(), resp.GetModelVersion())
	if len(resp.GetParameters()) > 0 {
		b = append(b, `,"parameters":`...)
		b = appendParams(b, resp.GetParameters(), -1)
	}
	b = append(b, `,"outputs":[`...)
	for i, o := range outputs {
		if i > 0 {
			b = append(b, ',')
		}
		ro := opts.output(o.GetName())
		if b, err = appendOutput(b, o.GetName(), o.GetDatatype(), o.GetShape(), ro != nil && ro.SharedMemory != nil, binary[i], datas[i]); err != nil {
			return nil, nil, err
		}
	}
	b = append(b, "]}"...)
	if !anyBinary {
		return b, nil, nil
	}
	for i, d := range datas {
		if binary[i] {
			blobs = append(blobs, d)
		}
	}
	return b, blobs, nil
}

// appendResponseHead writes the response's members up to its parameters.
func appendResponseHead(b []byte, id, model, version string) []byte {
	b = append(b, '{')
	if id != "" {
		b = append(b, `"id":`...)
		b = tensor.AppendJSONString(b, id)
		b = append(b, ',')
	}
	b = append(b, `"model_name":`...)
	b = tensor.AppendJSONString(b, model)
	b = append(b, `,"model_version":`...)
	return tensor.AppendJSONString(b, version)
}

// appendOutput writes one entry of the response's outputs: the data in
// JSON, or its size when it follows in binary, or neither when it went to
// shared memory.
func appendOutput(b []byte, name, datatype string, shape []int64, shm, binary bool, data []byte) ([]byte, error) {
	b = append(b, `{"name":`...)
	b = tensor.AppendJSONString(b, name)
	b = append(b, `,"datatype":`...)
	b = tensor.AppendJSONString(b, datatype)
	b = append(b, `,"shape":[`...)
	for j, d := range shape {
		if j > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, d, 10)
	}
	b = append(b, ']')
	if shm {
		// The data went to the client's region (written by the layer
		// that owns shared memory): name, datatype and shape only, as
		// Triton answers. Clients (Triton's C++ one among them) take
		// "parameters" on an output to mean binary data follows.
		return append(b, '}'), nil
	}
	if binary {
		// Only binary_data_size, as Triton writes it.
		b = append(b, `,"parameters":{"binary_data_size":`...)
		b = strconv.AppendInt(b, int64(len(data)), 10)
		return append(b, "}}"...), nil
	}
	dt, ok := tensor.ParseDataType(datatype)
	if !ok {
		return nil, tritonerr.Internalf("output '%s' has invalid datatype '%s'", name, datatype)
	}
	n, err := tensor.ElementCount(name, shape)
	if err != nil {
		return nil, tritonerr.Internalf("%s", err.Error())
	}
	b = append(b, `,"data":`...)
	if b, err = tensor.AppendJSON(b, name, dt, n, data); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendParams writes parameters as a JSON object of scalars, keys sorted so
// that the output is stable. binarySize >= 0 adds binary_data_size.
func appendParams(b []byte, params map[string]*inference.InferParameter, binarySize int) []byte {
	keys := make([]string, 0, len(params))
	for k := range params {
		if binarySize >= 0 && k == paramBinaryDataSize {
			continue
		}
		keys = append(keys, k)
	}
	sortStrings(keys)
	b = append(b, '{')
	first := true
	if binarySize >= 0 {
		b = append(b, `"binary_data_size":`...)
		b = strconv.AppendInt(b, int64(binarySize), 10)
		first = false
	}
	for _, k := range keys {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = tensor.AppendJSONString(b, k)
		b = append(b, ':')
		b = appendParamValue(b, params[k])
	}
	return append(b, '}')
}

func appendParamValue(b []byte, p *inference.InferParameter) []byte {
	switch v := p.GetParameterChoice().(type) {
	case *inference.InferParameter_BoolParam:
		return strconv.AppendBool(b, v.BoolParam)
	case *inference.InferParameter_Int64Param:
		return strconv.AppendInt(b, v.Int64Param, 10)
	case *inference.InferParameter_Uint64Param:
		return strconv.AppendUint(b, v.Uint64Param, 10)
	case *inference.InferParameter_DoubleParam:
		f := v.DoubleParam
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return append(b, "null"...)
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64)
	case *inference.InferParameter_StringParam:
		return tensor.AppendJSONString(b, v.StringParam)
	}
	return append(b, "null"...)
}

// sortStrings is an insertion sort: parameter maps hold a handful of keys.
func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
