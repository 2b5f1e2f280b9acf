package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/kserve"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Triton's generate extension: POST .../generate answers with one JSON
// object, .../generate_stream with server-sent events, one "data:" event
// per response. The request is a flat JSON object: a field named like one
// of the model's inputs becomes that input (a scalar as shape [1], an
// array as its length, with a batch dimension of 1 when the model
// batches; the datatype is the config's), "parameters" holds request
// parameters, and any other field is a parameter too. Each output becomes
// a field of the response named like it (one element as a JSON scalar,
// more as an array), beside model_name and model_version.

// maxGenerateBody bounds a generate request, which is JSON only.
const maxGenerateBody = 64 << 20

// handleGenerate serves generate (stream false) and generate_stream.
func (g *Gateway) handleGenerate(stream bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("model")
		front := g.httpFileFront(name) // nil unless name may be traced into Triton's trace file
		v, _ := pathVersion(r)
		vv, err := g.resolveRequest(name, v)
		if err != nil {
			writeError(w, err)
			return
		}
		if enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc != "" && enc != encIdentity {
			writeError(w, tritonerr.Unsupportedf("Unsupported content-encoding, only 'identity' is supported."))
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, min(g.cfg.HTTPMaxInputSize, maxGenerateBody)+1))
		if err != nil {
			writeError(w, bodyError(err, "failed to read the request body: %v"))
			return
		}
		if int64(len(body)) > min(g.cfg.HTTPMaxInputSize, maxGenerateBody) {
			writeError(w, tritonerr.InvalidArgf("generate request of more than %d bytes is too large", min(g.cfg.HTTPMaxInputSize, maxGenerateBody)))
			return
		}
		req, err := generateRequest(body, name, vv.config)
		if err != nil {
			writeError(w, err)
			return
		}
		req.ModelName = name
		front.readDone()
		if stream {
			g.generateStream(w, r, vv, req, front)
		} else {
			g.generateOne(w, r, vv, req, front)
		}
	}
}

// generateOne runs a generate request: the model must produce exactly one
// response (a decoupled model's final flag alone does not count).
// front, when not nil, stamps the response's send in Triton's trace file.
func (g *Gateway) generateOne(w http.ResponseWriter, r *http.Request, vv *versionView, req *inference.ModelInferRequest, front *fileFront) {
	ctx := g.inferContext(withFileFront(g.withClientHeaders(r.Context(), req.GetModelName(), r.Header), front))
	defer ctx.Cancel()
	var (
		got   []response
		count int
	)
	err := func() error {
		if !isDecoupled(vv) {
			resp, _, err := g.forwardInfer(ctx, vv, req, false, nil)
			got, count = []response{{resp: resp, final: true}}, 1
			return err
		}
		return g.streamInfer(ctx, vv, req, false, func(rs response) error {
			if rs.resp != nil || rs.err != nil {
				count++
				got = append(got, rs)
			}
			return nil
		})
	}()
	if front.traced() {
		defer g.sent(front, time.Now()) // HTTP_SEND_START now, HTTP_SEND_END once the response is written
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if count != 1 {
		writeError(w, tritonerr.InvalidArgf("generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses"))
		return
	}
	if got[0].err != nil {
		writeError(w, got[0].err)
		return
	}
	out, err := generateResponse(got[0].resp)
	if err != nil {
		writeError(w, err)
		return
	}
	writeRawJSON(w, out)
}

// generateStream runs a generate_stream request: one server-sent event per
// response, written as it arrives. An error before the first event is the
// HTTP status (a refused request answers in JSON, a model's error as an
// event); after it, an error is one more event.
//
// front, when not nil, stamps the sends in Triton's trace file: one per
// event of a decoupled model (HTTP_SEND_START/END each), else the one.
func (g *Gateway) generateStream(w http.ResponseWriter, r *http.Request, vv *versionView, req *inference.ModelInferRequest, front *fileFront) {
	rc := http.NewResponseController(w)
	started := false
	event := func(status int, data []byte) error {
		if !started {
			started = true
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			w.WriteHeader(status)
		}
		var b bytes.Buffer
		b.Grow(len(data) + 8)
		b.WriteString("data: ")
		b.Write(data)
		b.WriteString("\n\n")
		if _, err := w.Write(b.Bytes()); err != nil {
			return tritonerr.New(tritonerr.Cancelled, "the client went away: %v", err)
		}
		if err := rc.Flush(); err != nil {
			return tritonerr.New(tritonerr.Cancelled, "the client went away: %v", err)
		}
		return nil
	}
	var clientErr error
	emit := func(rs response) error {
		switch {
		case rs.err != nil:
			status := http.StatusOK
			if !started {
				status = tritonerr.From(rs.err).Kind.HTTPStatus()
			}
			clientErr = event(status, kserve.JSONError(tritonerr.From(rs.err).Msg))
		case rs.resp != nil:
			out, err := generateResponse(rs.resp)
			if err != nil {
				out = kserve.JSONError(tritonerr.From(err).Msg)
			}
			clientErr = event(http.StatusOK, out)
		}
		return clientErr
	}
	var err error
	if isDecoupled(vv) {
		if front != nil {
			front.perResponse = true
		}
		err = g.streamInfer(withFileFront(g.withClientHeaders(r.Context(), req.GetModelName(), r.Header), front), vv, req, false, emit)
	} else {
		ctx := g.inferContext(withFileFront(g.withClientHeaders(r.Context(), req.GetModelName(), r.Header), front))
		var resp *inference.ModelInferResponse
		resp, _, err = g.forwardInfer(ctx, vv, req, false, nil)
		if front.traced() {
			defer g.sent(front, time.Now())
		}
		if err == nil {
			err = emit(response{resp: resp, final: true})
		}
		ctx.Cancel()
	}
	switch {
	case err == nil, err == clientErr:
	case !started:
		writeError(w, err) // refused, or nothing came: a plain JSON error
	default:
		_ = event(http.StatusOK, kserve.JSONError(tritonerr.From(err).Msg))
	}
	if !started && err == nil {
		// No response at all (the final flag alone): an empty stream.
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.WriteHeader(http.StatusOK)
	}
}

// generateRequest maps a generate request's JSON object onto an inference
// request for the model cfg, in the order of its fields (the first error
// wins, as in Triton).
func generateRequest(body []byte, model string, cfg *inference.ModelConfig) (*inference.ModelInferRequest, error) {
	inputs := map[string]*inference.ModelInput{}
	for _, in := range cfg.GetInput() {
		inputs[in.GetName()] = in
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	bad := func(err error) error {
		return tritonerr.InvalidArgf("failed to parse the request JSON buffer: %v", err)
	}
	if t, err := dec.Token(); err != nil {
		return nil, bad(err)
	} else if t != json.Delim('{') {
		return nil, tritonerr.InvalidArgf("failed to parse the request JSON buffer: expected a JSON object")
	}
	req := &inference.ModelInferRequest{Parameters: map[string]*inference.InferParameter{}}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, bad(err)
		}
		key, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, bad(err)
		}
		in, isInput := inputs[key]
		switch {
		case isInput:
			if seen[key] {
				return nil, tritonerr.InvalidArgf("input '%s' already exists in request", key)
			}
			seen[key] = true
			if err := addGenerateInput(req, in, cfg.GetMaxBatchSize() > 0, raw); err != nil {
				return nil, err
			}
		case key == "parameters":
			var params map[string]json.RawMessage
			if err := json.Unmarshal(raw, &params); err != nil {
				return nil, tritonerr.InvalidArgf("parameter 'parameters' has invalid type: expected an object of parameters")
			}
			for k, v := range params {
				if err := addGenerateParam(req, k, v); err != nil {
					return nil, err
				}
			}
		default:
			if err := addGenerateParam(req, key, raw); err != nil {
				return nil, err
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad(err)
	}
	if dec.More() || dec.InputOffset() < int64(len(bytes.TrimRight(body, " \t\r\n"))) {
		return nil, tritonerr.InvalidArgf("failed to parse the request JSON buffer: data after the JSON object")
	}
	if len(req.Parameters) == 0 {
		req.Parameters = nil
	}
	return req, nil
}

// addGenerateParam adds one request parameter: a string, number or
// boolean (an integer as int64, other numbers as double).
func addGenerateParam(req *inference.ModelInferRequest, key string, raw json.RawMessage) error {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return tritonerr.InvalidArgf("parameter '%s' has invalid type: %v", key, err)
	}
	p := &inference.InferParameter{}
	switch x := v.(type) {
	case string:
		p.ParameterChoice = &inference.InferParameter_StringParam{StringParam: x}
	case bool:
		p.ParameterChoice = &inference.InferParameter_BoolParam{BoolParam: x}
	case json.Number:
		if i, err := strconv.ParseInt(x.String(), 10, 64); err == nil {
			p.ParameterChoice = &inference.InferParameter_Int64Param{Int64Param: i}
		} else if f, err := x.Float64(); err == nil {
			p.ParameterChoice = &inference.InferParameter_DoubleParam{DoubleParam: f}
		} else {
			return tritonerr.InvalidArgf("parameter '%s' has invalid type: %v", key, err)
		}
	default:
		return tritonerr.InvalidArgf("parameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'.", key)
	}
	if strings.HasPrefix(key, "triton_") {
		return tritonerr.InvalidArgf("parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.")
	}
	req.Parameters[key] = p
	return nil
}

// addGenerateInput converts a JSON value to the input in, checking every
// element's JSON type against the config's datatype first (with Triton's
// messages for a mismatch).
func addGenerateInput(req *inference.ModelInferRequest, in *inference.ModelInput, batched bool, raw json.RawMessage) error {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return tritonerr.InvalidArgf("failed to parse input '%s': %v", in.GetName(), err)
	}
	dt := tensor.FromConfig(in.GetDataType())
	shape := []int64{1}
	elems := []any{v}
	if arr, ok := v.([]any); ok {
		shape, elems = []int64{int64(len(arr))}, arr
	} else {
		raw = append(append([]byte{'['}, raw...), ']')
	}
	for _, e := range elems {
		if err := checkJSONKind(e, dt); err != nil {
			return err
		}
	}
	data, err := tensor.DecodeJSONData(in.GetName(), dt, shape, raw)
	if err != nil {
		return err
	}
	if batched {
		shape = append([]int64{1}, shape...)
	}
	req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{
		Name: in.GetName(), Datatype: dt.String(), Shape: shape})
	req.RawInputContents = append(req.RawInputContents, data)
	return nil
}

// checkJSONKind reports a JSON element that cannot be of datatype dt, in
// the words of Triton's JSON accessors.
func checkJSONKind(e any, dt tensor.DataType) error {
	switch dt {
	case tensor.Bytes:
		if _, ok := e.(string); !ok {
			return tritonerr.InvalidArgf("attempt to access JSON non-string as string")
		}
	case tensor.Bool:
		if _, ok := e.(bool); !ok {
			return tritonerr.InvalidArgf("attempt to access JSON non-boolean as boolean")
		}
	case tensor.FP16, tensor.BF16, tensor.FP32, tensor.FP64:
		if _, ok := e.(json.Number); !ok {
			return tritonerr.InvalidArgf("attempt to access JSON non-number as double")
		}
	case tensor.Uint8, tensor.Uint16, tensor.Uint32, tensor.Uint64:
		if n, ok := e.(json.Number); !ok || strings.ContainsAny(n.String(), ".eE-") {
			return tritonerr.InvalidArgf("attempt to access JSON non-unsigned-integer as unsigned-integer")
		}
	default:
		if n, ok := e.(json.Number); !ok || strings.ContainsAny(n.String(), ".eE") {
			return tritonerr.InvalidArgf("attempt to access JSON non-signed-integer as signed-integer")
		}
	}
	return nil
}

// generateResponse maps a response onto the generate response object.
func generateResponse(resp *inference.ModelInferResponse) ([]byte, error) {
	b := []byte(`{"model_name":`)
	b = tensor.AppendJSONString(b, resp.GetModelName())
	b = append(b, `,"model_version":`...)
	b = tensor.AppendJSONString(b, resp.GetModelVersion())
	raw := resp.GetRawOutputContents()
	for i, o := range resp.GetOutputs() {
		if i >= len(raw) {
			return nil, tritonerr.Internalf("response for model '%s' lacks the data of output '%s'", resp.GetModelName(), o.GetName())
		}
		dt, ok := tensor.ParseDataType(o.GetDatatype())
		if !ok {
			return nil, tritonerr.Internalf("output '%s' has unknown datatype %s", o.GetName(), o.GetDatatype())
		}
		n, err := tensor.ElementCount(o.GetName(), o.GetShape())
		if err != nil {
			return nil, err
		}
		b = append(b, ',')
		b = tensor.AppendJSONString(b, o.GetName())
		b = append(b, ':')
		start := len(b)
		if b, err = tensor.AppendJSON(b, o.GetName(), dt, n, raw[i]); err != nil {
			return nil, err
		}
		if n == 1 { // one element: the scalar, not an array of one
			elem := bytes.TrimSuffix(bytes.TrimPrefix(b[start:], []byte{'['}), []byte{']'})
			b = append(b[:start], elem...)
		}
	}
	return append(b, '}'), nil
}
