package kserve

import (
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tensor/jsonlex"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Parameter names with a meaning to the protocol.
const (
	paramBinaryDataSize   = "binary_data_size"
	paramBinaryData       = "binary_data"
	paramBinaryDataOutput = "binary_data_output"
	paramClassification   = "classification"
	paramShmRegion        = "shared_memory_region"
	paramShmOffset        = "shared_memory_offset"
	paramShmByteSize      = "shared_memory_byte_size"
)

// DecodeInferRequest decodes an HTTP infer request body for model/version.
//
// headerLen is the value of Inference-Header-Content-Length (see
// ParseHeaderLength), or -1 when the header is absent and the whole body is
// JSON. A header length of 0 announces a raw binary request, which needs the
// model configuration: use DecodeRawRequest.
//
// The result carries every input's data in RawInputContents, one entry per
// input in request order: binary inputs alias body (keep body alive and
// unchanged while the request is in use), JSON `data` is decoded into the
// binary layout. Inputs in shared memory get a nil entry and keep their
// shared_memory_* parameters. The OutputOptions say how each output should
// come back.
func DecodeInferRequest(body []byte, headerLen int, model, version string, opts DecodeOptions) (*inference.ModelInferRequest, *OutputOptions, error) {
	return decodeInferRequest(body, headerLen, model, version, opts, nil)
}

// decodeInferRequest is DecodeInferRequest; binaryInputs, when not nil,
// receives which inputs came as binary blocks (for tests).
func decodeInferRequest(body []byte, headerLen int, model, version string, opts DecodeOptions, binaryInputs *[]bool) (*inference.ModelInferRequest, *OutputOptions, error) {
	headerGiven := headerLen >= 0
	if !headerGiven {
		headerLen = len(body)
	}
	if headerLen > len(body) {
		return nil, nil, tritonerr.InvalidArgf("inference header size should be in range (0, %d), got: %d", len(body), headerLen)
	}
	if headerGiven && headerLen == 0 {
		return nil, nil, tritonerr.Internalf("a raw binary request (%s: 0) must be decoded with DecodeRawRequest", HeaderLength)
	}
	if max := opts.maxInput(); headerLen > max {
		return nil, nil, tritonerr.InvalidArgf(
			"request JSON size of %d bytes exceeds the maximum allowed input size of %d bytes. Use --http-max-input-size to increase the limit.",
			headerLen, max)
	}

	p := parsers.Get().(*parser)
	defer p.release()
	*p = parser{model: model, header: body[:headerLen], inputs: p.inputs[:0], outputs: p.outputs[:0]}
	p.lx.Reset(p.header, 0, 0)
	p.lx.MaxDepth = jsonlex.DefaultMaxDepth
	if err := p.document(); err != nil {
		return nil, nil, err
	}
	if p.err != nil {
		return nil, nil, p.err
	}

	d := new(decoded)
	req := &d.req
	req.ModelName, req.ModelVersion, req.Id, req.Parameters = model, version, p.id, p.params
	if err := p.buildInputs(d, body[headerLen:], headerGiven); err != nil {
		return nil, nil, err
	}
	if binaryInputs != nil {
		for _, in := range p.inputs {
			*binaryInputs = append(*binaryInputs, in.hasBinary)
		}
	}
	out, err := p.buildOutputs(d)
	if err != nil {
		return nil, nil, err
	}
	return req, out, nil
}

// decoded is a decoded request in one allocation when it has one input and
// at most one output, as most small requests do: the request, its output
// options and their lists would otherwise be eight allocations. More
// tensors get their lists (each one allocation) beside it.
type decoded struct {
	req       inference.ModelInferRequest
	opts      OutputOptions
	in        [1]inference.ModelInferRequest_InferInputTensor
	inPtrs    [1]*inference.ModelInferRequest_InferInputTensor
	raw       [1][]byte
	out       [1]inference.ModelInferRequest_InferRequestedOutputTensor
	outPtrs   [1]*inference.ModelInferRequest_InferRequestedOutputTensor
	requested [1]RequestedOutput
	shape     [4]int64 // the input's shape, of up to four dimensions
}

// parsers are parsers to reuse: one would otherwise be allocated per
// request (its methods' closures take its address), and its lists of
// inputs and outputs with it.
var parsers = sync.Pool{New: func() any { return new(parser) }}

// release puts p back into parsers, holding nothing of the request: the
// entries of its lists point into the body (data) and hold what the
// request now owns (shapes, parameters). Lists grown for a request of
// many tensors are dropped rather than kept.
func (p *parser) release() {
	clear(p.inputs)
	clear(p.outputs)
	ins, outs := p.inputs[:0], p.outputs[:0]
	if cap(ins) > maxPooledTensors {
		ins = nil
	}
	if cap(outs) > maxPooledTensors {
		outs = nil
	}
	*p = parser{inputs: ins, outputs: outs}
	parsers.Put(p)
}

// maxPooledTensors bounds the lists a pooled parser keeps.
const maxPooledTensors = 16

// parser holds what one pass over the JSON header collects. Syntax errors
// stop the pass at once; errors about values (a wrong type, a bad shape) are
// remembered and reported only once the whole document has proved to be
// valid JSON, since Triton parses the document before it looks at it.
type parser struct {
	model  string
	header []byte
	lx     jsonlex.Lexer
	err    error // first semantic error

	id            string
	params        map[string]*inference.InferParameter
	binaryDefault bool
	hasInputs     bool
	inputs        []inputSpec
	outputs       []outputSpec
	// shape0 is where the first input's shape is read; buildInputs
	// copies it into the request (the parser is reused).
	shape0 [4]int64
}

type inputSpec struct {
	name, datatype         string
	hasName, hasDatatype   bool
	shape                  []int64
	hasShape               bool
	shapeOverflow          bool // a dimension above MaxInt64
	params                 map[string]*inference.InferParameter
	hasData                bool
	data                   []byte // raw JSON text of "data"
	dataOffset, dataDepth  int
	hasBinary              bool
	binarySize             uint64
	hasShm                 bool
	shmRegion              string
	shmOffset, shmByteSize uint64
}

type outputSpec struct {
	name           string
	hasName        bool
	binary         *bool
	classification uint64
	hasShm         bool
	shm            SharedMemoryRef
	params         map[string]*inference.InferParameter
}

func (p *parser) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

func (p *parser) next() (jsonlex.Token, error) { return p.lx.Next() }

// skip consumes the rest of a value whose first token is t.
func (p *parser) skip(t jsonlex.Token) error {
	_, err := p.lx.SkipValue(t)
	return err
}

func isScalar(k jsonlex.Kind) bool {
	return k == jsonlex.String || k == jsonlex.Number || k == jsonlex.True || k == jsonlex.False || k == jsonlex.Null
}

// TritonJson's messages (triton_json.h). Triton's HTTP front end reads
// the request with TritonJson, whose errors are INTERNAL (HTTP 500), and
// wraps them as "Unable to parse '<field>': <message>".
const (
	jsonNotString = "attempt to access JSON non-string as string"
	jsonNotBool   = "attempt to access JSON non-boolean as boolean"
	jsonNotUint   = "attempt to access JSON non-unsigned-integer as unsigned-integer"
	jsonNotArray  = "attempt to access JSON non-array as array"
)

// jsonMissing is TritonJson's message for an absent member.
func jsonMissing(name string) string {
	return "attempt to access non-existing object member '" + name + "'"
}

// jsonError is Triton's error for a field TritonJson could not read.
func jsonError(field, msg string) *tritonerr.Error {
	return tritonerr.Internalf("Unable to parse '%s': %s", field, msg)
}

// wrongType records field's TritonJson error and skips the value.
func (p *parser) wrongType(field, msg string, t jsonlex.Token) error {
	p.fail(jsonError(field, msg))
	return p.skip(t)
}

// object walks the members of an object whose '{' is t. Anything else is
// skipped: Triton looks members up with Find, which finds nothing in a
// non-object; callers that need an object say so.
func (p *parser) object(t jsonlex.Token, member func(key, val jsonlex.Token) error) error {
	if t.Kind != jsonlex.BeginObject {
		return p.skip(t)
	}
	for {
		k, err := p.next()
		if err != nil {
			return err
		}
		if k.Kind == jsonlex.EndObject {
			return nil
		}
		v, err := p.next()
		if err != nil {
			return err
		}
		if err := member(k, v); err != nil {
			return err
		}
	}
}

// array walks the elements of an array whose '[' is t.
func (p *parser) array(t jsonlex.Token, field string, elem func(v jsonlex.Token) error) error {
	if t.Kind != jsonlex.BeginArray {
		return p.wrongType(field, jsonNotArray, t)
	}
	for {
		v, err := p.next()
		if err != nil {
			return err
		}
		if v.Kind == jsonlex.EndArray {
			return nil
		}
		if err := elem(v); err != nil {
			return err
		}
	}
}

// knownDataType returns the name of one of Triton's datatypes when t is
// that string, without copying it: every input names one.
func knownDataType(t jsonlex.Token) (string, bool) {
	if t.Kind != jsonlex.String || t.Escaped {
		return "", false
	}
	dt, ok := tensor.ParseDataType(t.Raw)
	return dt.String(), ok
}

func (p *parser) stringVal(t jsonlex.Token, field string) (string, bool, error) {
	if t.Kind != jsonlex.String {
		return "", false, p.wrongType(field, jsonNotString, t)
	}
	return jsonlex.StringValue(t), true, nil
}

func (p *parser) boolVal(t jsonlex.Token, field string) (bool, bool, error) {
	switch t.Kind {
	case jsonlex.True:
		return true, true, nil
	case jsonlex.False:
		return false, true, nil
	}
	return false, false, p.wrongType(field, jsonNotBool, t)
}

func (p *parser) uintVal(t jsonlex.Token, field string) (uint64, bool, error) {
	if v, ok := jsonlex.Uint64(t); ok && t.Kind == jsonlex.Number {
		return v, true, nil
	}
	return 0, false, p.wrongType(field, jsonNotUint, t)
}

// keyIs compares a member name without allocating (names with escapes are
// unescaped first).
func keyIs(k jsonlex.Token, name string) bool {
	if !k.Escaped {
		return string(k.Raw) == name
	}
	return jsonlex.StringValue(k) == name
}

// keyName is a member's name: one of the parameters the protocol names
// (knownKeys) without a copy of the JSON's text (a request's parameters
// are looked up by name and then dropped), any other a copy.
func keyName(k jsonlex.Token) string {
	if !k.Escaped {
		for _, name := range knownKeys {
			if string(k.Raw) == name {
				return name
			}
		}
	}
	return jsonlex.StringValue(k)
}

var knownKeys = [...]string{
	paramBinaryDataSize, paramBinaryData, paramBinaryDataOutput, paramClassification,
	paramShmRegion, paramShmOffset, paramShmByteSize,
}

// document parses the request header.
func (p *parser) document() error {
	t, err := p.next()
	if err != nil {
		return err
	}
	if t.Kind != jsonlex.BeginObject {
		// TritonJson finds no members in a non-object.
		p.fail(jsonError("inputs", jsonMissing("inputs")))
		if err := p.skip(t); err != nil {
			return err
		}
	} else {
		seen := 0 // bit set of top-level members seen; the first wins as in rapidjson's Find
		err = p.object(t, func(k, v jsonlex.Token) error {
			switch {
			case keyIs(k, "id") && seen&1 == 0:
				seen |= 1
				if v.Kind != jsonlex.String {
					return p.wrongType("id", jsonNotString, v)
				}
				p.id = jsonlex.StringValue(v)
				return nil
			case keyIs(k, "parameters") && seen&2 == 0:
				seen |= 2
				return p.requestParams(v)
			case keyIs(k, "inputs") && seen&4 == 0:
				seen |= 4
				p.hasInputs = true
				return p.array(v, "inputs", p.input)
			case keyIs(k, "outputs") && seen&8 == 0:
				seen |= 8
				return p.array(v, "outputs", p.output)
			}
			return p.skip(v)
		})
		if err != nil {
			return err
		}
	}
	t, err = p.next()
	if err != nil {
		return err
	}
	if !p.hasInputs {
		p.fail(jsonError("inputs", jsonMissing("inputs")))
	}
	return nil
}

// requestParams reads the request "parameters" (HTTP ParseJsonTritonParams).
func (p *parser) requestParams(t jsonlex.Token) error {
	if t.Kind != jsonlex.BeginObject {
		p.fail(tritonerr.Internalf("failed to get request params.: attempt to get members for non-object"))
		return p.skip(t)
	}
	return p.object(t, func(k, v jsonlex.Token) error {
		key := keyName(k)
		switch key {
		case "sequence_id":
			if u, ok := jsonlex.Uint64(v); ok && v.Kind == jsonlex.Number {
				// gRPC carries numeric ids as int64_param, read back as uint64.
				p.setParam(key, &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(u)}})
				return nil
			}
			if v.Kind == jsonlex.String {
				p.setParam(key, stringParam(jsonlex.StringValue(v)))
				return nil
			}
			// Triton tries an unsigned integer, then a string.
			p.fail(jsonError("sequence_id", jsonNotString))
			return p.skip(v)
		case "sequence_start", "sequence_end":
			if v.Kind != jsonlex.True && v.Kind != jsonlex.False {
				p.fail(jsonError(key, jsonNotBool))
				return p.skip(v)
			}
			p.setParam(key, boolParam(v.Kind == jsonlex.True))
		case "priority":
			u, ok := jsonlex.Uint64(v)
			if !ok || v.Kind != jsonlex.Number {
				p.fail(jsonError("priority", jsonNotUint))
				return p.skip(v)
			}
			p.setParam(key, &inference.InferParameter{ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: u}})
		case "timeout":
			u, ok := jsonlex.Uint64(v)
			if !ok || v.Kind != jsonlex.Number {
				p.fail(jsonError("timeout", jsonNotUint))
				return p.skip(v)
			}
			p.setParam(key, shmParam(u)) // int64_param as gRPC sends it, uint64_param beyond
		case paramBinaryDataOutput:
			b, ok, err := p.boolVal(v, paramBinaryDataOutput)
			if ok {
				p.binaryDefault = b
			}
			return err
		default:
			if strings.HasPrefix(key, "triton_") {
				p.fail(tritonerr.InvalidArgf("parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."))
				return p.skip(v)
			}
			param, ok := scalarParam(v)
			if !ok {
				p.fail(tritonerr.InvalidArgf("parameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'.", key))
				return p.skip(v)
			}
			p.setParam(key, param)
		}
		return nil
	})
}

func (p *parser) setParam(key string, v *inference.InferParameter) {
	if p.params == nil {
		p.params = make(map[string]*inference.InferParameter)
	}
	if _, dup := p.params[key]; !dup {
		p.params[key] = v
	}
}

func boolParam(b bool) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: b}}
}

func int64Param(v int64) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: v}}
}

func uint64Param(v uint64) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: v}}
}

func stringParam(s string) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: s}}
}

// scalarParam maps a JSON scalar to an InferParameter as Triton does:
// string, int64 (integers that fit), bool, else double.
func scalarParam(v jsonlex.Token) (*inference.InferParameter, bool) {
	switch v.Kind {
	case jsonlex.String:
		return stringParam(jsonlex.StringValue(v)), true
	case jsonlex.True, jsonlex.False:
		return boolParam(v.Kind == jsonlex.True), true
	case jsonlex.Number:
		if i, ok := jsonlex.Int64(v); ok {
			return int64Param(i), true
		}
		if f, ok := jsonlex.Float64(v); ok {
			return &inference.InferParameter{ParameterChoice: &inference.InferParameter_DoubleParam{DoubleParam: f}}, true
		}
	}
	return nil, false
}

// shmParam stores a shared_memory_offset/byte_size as the gRPC form expects
// (int64_param), or uint64_param for values int64 cannot hold, so that the
// overflow checks of the shared-memory layer see the client's number.
func shmParam(v uint64) *inference.InferParameter {
	if v > math.MaxInt64 {
		return uint64Param(v)
	}
	return int64Param(int64(v))
}

func (p *parser) input(t jsonlex.Token) error {
	in := inputSpec{}
	seen := 0
	// An element that is not an object has none of 'data',
	// 'binary_data_size' or 'shared_memory_region' (buildInputs says so).
	err := p.object(t, func(k, v jsonlex.Token) error {
		switch {
		case keyIs(k, "name") && seen&1 == 0:
			seen |= 1
			s, ok, err := p.stringVal(v, "name")
			in.name, in.hasName = s, ok
			return err
		case keyIs(k, "datatype") && seen&2 == 0:
			seen |= 2
			if dt, ok := knownDataType(v); ok {
				in.datatype, in.hasDatatype = dt, true
				return nil
			}
			s, ok, err := p.stringVal(v, "datatype")
			in.datatype, in.hasDatatype = s, ok
			return err
		case keyIs(k, "shape") && seen&4 == 0:
			seen |= 4
			in.hasShape = true
			if len(p.inputs) == 0 {
				in.shape = p.shape0[:0]
			} else {
				in.shape = make([]int64, 0, 4)
			}
			bad := false
			return p.array(v, "shape", func(d jsonlex.Token) error {
				u, ok := jsonlex.Uint64(d)
				if !ok || d.Kind != jsonlex.Number {
					if !bad {
						bad = true
						if d.Kind == jsonlex.Number && jsonlex.IsInteger(d) && d.Raw[0] != '-' {
							// Larger than uint64: the element count overflows.
							in.shapeOverflow = true
							in.shape = append(in.shape, math.MaxInt64)
							return nil
						}
						// Triton reads the dimension with TritonJson's AsUInt,
						// whose failure is an INTERNAL error (HTTP 500).
						p.fail(tritonerr.Internalf("Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"))
					}
					return p.skip(d)
				}
				if u > math.MaxInt64 {
					in.shapeOverflow = true
					u = math.MaxInt64
				}
				in.shape = append(in.shape, int64(u))
				return nil
			})
		case keyIs(k, "data") && seen&8 == 0:
			seen |= 8
			in.hasData = true
			in.dataOffset = v.Offset
			in.dataDepth = p.lx.Depth()
			if v.Kind == jsonlex.BeginArray {
				in.dataDepth-- // Depth already counts the data's own '['
			}
			var raw []byte
			var err error
			if v.Kind == jsonlex.BeginArray {
				// Checked in full when decoded, once the shape is known.
				raw, err = p.lx.SkipArrayFast(v)
			} else {
				raw, err = p.lx.SkipValue(v)
			}
			in.data = raw
			return err
		case keyIs(k, "parameters") && seen&16 == 0:
			seen |= 16
			return p.object(v, func(pk, pv jsonlex.Token) error {
				return p.inputParam(&in, pk, pv)
			})
		}
		return p.skip(v)
	})
	p.inputs = append(p.inputs, in)
	return err
}

func (p *parser) inputParam(in *inputSpec, k, v jsonlex.Token) error {
	key := keyName(k)
	switch key {
	case paramBinaryDataSize:
		in.hasBinary = true
		u, _, err := p.uintVal(v, paramBinaryDataSize)
		in.binarySize = u
		return err
	case paramShmRegion:
		in.hasShm = true
		s, _, err := p.stringVal(v, paramShmRegion)
		in.shmRegion = s
		return err
	case paramShmOffset:
		u, _, err := p.uintVal(v, paramShmOffset)
		in.shmOffset = u
		return err
	case paramShmByteSize:
		u, _, err := p.uintVal(v, paramShmByteSize)
		in.shmByteSize = u
		return err
	}
	param, ok := scalarParam(v)
	if !ok {
		p.fail(tritonerr.InvalidArgf("parameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'.", key))
		return p.skip(v)
	}
	if in.params == nil {
		in.params = make(map[string]*inference.InferParameter)
	}
	if _, dup := in.params[key]; !dup {
		in.params[key] = param
	}
	return nil
}

func (p *parser) output(t jsonlex.Token) error {
	out := outputSpec{}
	seen := 0
	err := p.object(t, func(k, v jsonlex.Token) error {
		switch {
		case keyIs(k, "name") && seen&1 == 0:
			seen |= 1
			s, ok, err := p.stringVal(v, "name")
			out.name, out.hasName = s, ok
			return err
		case keyIs(k, "parameters") && seen&2 == 0:
			seen |= 2
			return p.object(v, func(pk, pv jsonlex.Token) error {
				switch key := keyName(pk); key {
				case paramBinaryData:
					b, ok, err := p.boolVal(pv, paramBinaryData)
					if ok {
						out.binary = &b
					}
					return err
				case paramClassification:
					if u, ok := jsonlex.Uint64(pv); ok && pv.Kind == jsonlex.Number {
						out.classification = u
						return nil
					}
					// TritonJson's AsUInt failure: INTERNAL, as in Triton.
					p.fail(tritonerr.Internalf("Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer"))
					return p.skip(pv)
				case paramShmRegion:
					out.hasShm = true
					s, _, err := p.stringVal(pv, paramShmRegion)
					out.shm.Region = s
					return err
				case paramShmOffset:
					u, _, err := p.uintVal(pv, paramShmOffset)
					out.shm.Offset = u
					return err
				case paramShmByteSize:
					u, _, err := p.uintVal(pv, paramShmByteSize)
					out.shm.ByteSize = u
					return err
				default:
					// Triton's HTTP front end ignores other output parameters;
					// keep them for the backend, as gRPC would.
					if param, ok := scalarParam(pv); ok {
						if out.params == nil {
							out.params = make(map[string]*inference.InferParameter)
						}
						out.params[key] = param
						return nil
					}
					return p.skip(pv)
				}
			})
		}
		return p.skip(v)
	})
	p.outputs = append(p.outputs, out)
	return err
}

// buildInputs validates the inputs in request order, as Triton's
// ParseJsonTritonIO does, and fills req.Inputs and req.RawInputContents.
func (p *parser) buildInputs(d *decoded, bin []byte, headerGiven bool) error {
	req, n := &d.req, len(p.inputs)
	// Capacities end at n: an append to the lists cannot clobber the
	// arena's next field.
	tins := d.in[:]
	if n <= len(d.in) {
		req.Inputs, req.RawInputContents = d.inPtrs[:0:n], d.raw[:0:n]
	} else {
		req.Inputs = make([]*inference.ModelInferRequest_InferInputTensor, 0, n)
		req.RawInputContents = make([][]byte, 0, n)
		tins = make([]inference.ModelInferRequest_InferInputTensor, n)
	}
	pos := 0
	for i := range p.inputs {
		in := &p.inputs[i]
		if n := btoi(in.hasData) + btoi(in.hasBinary) + btoi(in.hasShm); n != 1 {
			var sb strings.Builder
			sb.WriteString("Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But")
			if n == 0 {
				sb.WriteString(" no field is set")
			} else {
				sb.WriteString(" set")
				if in.hasData {
					sb.WriteString(" 'data'")
				}
				if in.hasBinary {
					sb.WriteString(" 'binary_data_size'")
				}
				if in.hasShm {
					sb.WriteString(" 'shared_memory_region'")
				}
			}
			return tritonerr.InvalidArgf("%s", sb.String())
		}
		if !in.hasName {
			return jsonError("name", jsonMissing("name"))
		}
		if !in.hasDatatype {
			return jsonError("datatype", jsonMissing("datatype"))
		}
		if !in.hasShape {
			return jsonError("shape", jsonMissing("shape"))
		}
		if in.shapeOverflow {
			return tritonerr.InvalidArgf(
				"invalid shape for input '%s': shape %s causes total element count to exceed maximum size of %d",
				in.name, tensor.DimsString(in.shape), int64(math.MaxInt64))
		}
		count, err := tensor.ElementCount(in.name, in.shape)
		if err != nil {
			return err
		}
		if dt, ok := tensor.ParseDataType(in.datatype); ok && dt != tensor.Bytes {
			if _, err := tensor.ByteSize(in.name, dt, in.shape); err != nil {
				return err
			}
		}
		shape := in.shape
		if cap(shape) > 0 && &shape[:1][0] == &p.shape0[0] {
			// Out of the parser, into the request's arena when it has one.
			if n <= len(d.in) {
				shape = d.shape[:copy(d.shape[:], shape):len(shape)]
			} else {
				shape = slices.Clone(shape)
			}
		}
		tin := &tins[i]
		tin.Name, tin.Datatype, tin.Shape, tin.Parameters = in.name, in.datatype, shape, in.params
		var data []byte
		switch {
		case in.hasBinary:
			size := in.binarySize
			if size > 0 && !headerGiven {
				return tritonerr.InvalidArgf("must specify valid 'Infer-Header-Content-Length' in request header and 'binary_data_size' when passing inputs in binary data format")
			}
			if rest := uint64(len(bin) - pos); size > rest {
				return tritonerr.InvalidArgf("unexpected size for input '%s', expecting %d additional bytes for model '%s'",
					in.name, size-rest, p.model)
			}
			end := pos + int(size)
			data = bin[pos:end:end] // aliases the body; capped so appends cannot clobber the next input
			pos = end
		case in.hasShm:
			setParam(&tin.Parameters, paramShmRegion, stringParam(in.shmRegion))
			setParam(&tin.Parameters, paramShmOffset, shmParam(in.shmOffset))
			setParam(&tin.Parameters, paramShmByteSize, shmParam(in.shmByteSize))
		default:
			dt, ok := tensor.ParseDataType(in.datatype)
			if !ok {
				return tritonerr.InvalidArgf("invalid datatype for input %s", in.name)
			}
			data, err = tensor.AppendJSONData(nil, in.data, in.dataOffset, in.dataDepth, in.name, dt, count)
			if err != nil {
				return err
			}
			if data == nil {
				data = []byte{}
			}
		}
		req.Inputs = append(req.Inputs, tin)
		req.RawInputContents = append(req.RawInputContents, data)
	}
	if pos != len(bin) {
		return tritonerr.InvalidArgf("unexpected additional input data for model '%s'", p.model)
	}
	return nil
}

// logRequest is Triton's LogRequest(): "[request id: X] " or nothing.
func logRequest(id string) string {
	if id == "" {
		return ""
	}
	return "[request id: " + id + "] "
}

func setParam(m *map[string]*inference.InferParameter, key string, v *inference.InferParameter) {
	if *m == nil {
		*m = make(map[string]*inference.InferParameter, 2)
	}
	(*m)[key] = v
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// buildOutputs validates the requested outputs and fills req.Outputs.
func (p *parser) buildOutputs(d *decoded) (*OutputOptions, error) {
	req, opts, n := &d.req, &d.opts, len(p.outputs)
	opts.BinaryDefault = p.binaryDefault
	if n == 0 {
		return opts, nil
	}
	touts := d.out[:]
	if n <= len(d.out) {
		req.Outputs, opts.Requested = d.outPtrs[:0:n], d.requested[:0:n]
	} else {
		req.Outputs = make([]*inference.ModelInferRequest_InferRequestedOutputTensor, 0, n)
		opts.Requested = make([]RequestedOutput, 0, n)
		touts = make([]inference.ModelInferRequest_InferRequestedOutputTensor, n)
	}
	for i := range p.outputs {
		o := &p.outputs[i]
		if o.hasShm {
			if o.classification > 0 {
				return nil, tritonerr.InvalidArgf("Output can't set both 'shared_memory_region' and 'classification'")
			}
			if o.binary != nil && *o.binary {
				return nil, tritonerr.InvalidArgf("Output can't set both 'shared_memory_region' and 'binary_data'")
			}
		}
		if !o.hasName {
			return nil, jsonError("name", jsonMissing("name"))
		}
		for _, prev := range opts.Requested {
			if prev.Name == o.name {
				// Triton's core (InferenceRequest::AddOriginalRequestedOutput).
				return nil, tritonerr.InvalidArgf("%soutput '%s' already exists in request", logRequest(p.id), o.name)
			}
		}
		ro := RequestedOutput{Name: o.name, Binary: p.binaryDefault, Classification: o.classification}
		if o.binary != nil {
			ro.Binary = *o.binary
		}
		params := o.params
		if o.classification > 0 {
			setParam(&params, paramClassification, int64Param(int64(min(o.classification, math.MaxInt64))))
		}
		if o.hasShm {
			shm := o.shm
			ro.SharedMemory = &shm
			ro.Binary = false
			setParam(&params, paramShmRegion, stringParam(shm.Region))
			setParam(&params, paramShmOffset, shmParam(shm.Offset))
			setParam(&params, paramShmByteSize, shmParam(shm.ByteSize))
		}
		tout := &touts[i]
		tout.Name, tout.Parameters = o.name, params
		req.Outputs = append(req.Outputs, tout)
		opts.Requested = append(opts.Requested, ro)
	}
	return opts, nil
}
