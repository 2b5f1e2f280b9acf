package gateway

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/services/executor"
)

const repository = "../../deploy/model_repository"

// runningExecutor is a real executor from services/executor on its own NATS
// connection.
type runningExecutor struct {
	ex     *executor.Executor
	cancel context.CancelFunc
	done   chan error
}

// startExecutor runs a real executor over the example repository.
func startExecutor(t testing.TB, ns *server.Server, id string, models ...string) *runningExecutor {
	t.Helper()
	return runExecutorWith(t, ns, executor.Config{RepositoryPath: repository, Models: models, ID: id})
}

// runExecutorWith runs a real executor of cfg (its connection, as
// cfg.ID, and a quiet logger added), and waits until it is ready.
func runExecutorWith(t testing.TB, ns *server.Server, cfg executor.Config) *runningExecutor {
	t.Helper()
	id := cfg.ID
	cfg.Conn = connect(t, ns, "executor-"+id)
	cfg.Logger = discardLogger()
	ex, err := executor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningExecutor{ex: ex, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- ex.Run(ctx) }()
	select {
	case <-ex.Ready():
	case err := <-r.done:
		t.Fatalf("executor %s ended: %v", id, err)
	case <-time.After(20 * time.Second):
		t.Fatalf("executor %s not ready", id)
	}
	t.Cleanup(r.stop)
	return r
}

func (r *runningExecutor) stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.cancel = nil
	}
}

// waitModelReady waits until the gateway serves the model.
func waitModelReady(t testing.TB, g *Gateway, model string) {
	t.Helper()
	waitFor(t, model+" ready", 10*time.Second, func() bool {
		_, err := g.resolveRequest(model, "")
		return err == nil
	})
}

func seq(n int, f func(i int) int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func intsJSON(v []int) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func int32sLE(v []int) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(x)))
	}
	return b
}

var (
	in0  = seq(16, func(i int) int { return i })
	in1  = seq(16, func(int) int { return 1 })
	sum  = seq(16, func(i int) int { return i + 1 })
	diff = seq(16, func(i int) int { return i - 1 })
)

func simpleRequestJSON(extra string) string {
	return `{"id":"r1","inputs":[` +
		`{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":` + intsJSON(in0) + `},` +
		`{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":` + intsJSON(in1) + `}]` + extra + `}`
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

func zl(b []byte) []byte {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

func TestInferHTTP(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	startExecutor(t, ns, "ex1")
	waitModelReady(t, g, "simple")
	url := "http://" + g.HTTPAddr() + "/v2/models/simple/infer"

	simpleResponse := `{"id":"r1","model_name":"simple","model_version":"1","outputs":[` +
		`{"name":"OUTPUT0","datatype":"INT32","shape":[1,16],"data":` + intsJSON(sum) + `},` +
		`{"name":"OUTPUT1","datatype":"INT32","shape":[1,16],"data":` + intsJSON(diff) + `}]}`

	t.Run("json", func(t *testing.T) {
		r := do(t, "POST", url, []byte(simpleRequestJSON("")), nil)
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		jsonEqual(t, r.body, simpleResponse)
	})
	t.Run("versioned", func(t *testing.T) {
		r := do(t, "POST", "http://"+g.HTTPAddr()+"/v2/models/simple/versions/1/infer", []byte(simpleRequestJSON("")), nil)
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		jsonEqual(t, r.body, simpleResponse)
	})
	t.Run("binary in and out", func(t *testing.T) {
		header := `{"inputs":[` +
			`{"name":"INPUT0","datatype":"INT32","shape":[1,16],"parameters":{"binary_data_size":64}},` +
			`{"name":"INPUT1","datatype":"INT32","shape":[1,16],"parameters":{"binary_data_size":64}}],` +
			`"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}},{"name":"OUTPUT1","parameters":{"binary_data":false}}]}`
		body := append(append([]byte(header), int32sLE(in0)...), int32sLE(in1)...)
		r := do(t, "POST", url, body, map[string]string{"Inference-Header-Content-Length": strconv.Itoa(len(header))})
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		n, err := strconv.Atoi(r.header.Get("Inference-Header-Content-Length"))
		if err != nil || n <= 0 || n > len(r.body) {
			t.Fatalf("response header length %q (body %d)", r.header.Get("Inference-Header-Content-Length"), len(r.body))
		}
		if ct := r.header.Get("Content-Type"); ct != "application/octet-stream" {
			t.Errorf("Content-Type %q", ct)
		}
		jsonEqual(t, r.body[:n], `{"model_name":"simple","model_version":"1","outputs":[`+
			`{"name":"OUTPUT0","datatype":"INT32","shape":[1,16],"parameters":{"binary_data_size":64}},`+
			`{"name":"OUTPUT1","datatype":"INT32","shape":[1,16],"data":`+intsJSON(diff)+`}]}`)
		if !bytes.Equal(r.body[n:], int32sLE(sum)) {
			t.Fatalf("binary OUTPUT0 = %x", r.body[n:])
		}
	})
	t.Run("raw binary request", func(t *testing.T) {
		// Inference-Header-Content-Length: 0: the body is the only input's
		// data, batch 1, and every output comes back in binary.
		in := []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40} // FP32 1, 2
		r := do(t, "POST", "http://"+g.HTTPAddr()+"/v2/models/identity_fp32/infer", in,
			map[string]string{"Inference-Header-Content-Length": "0"})
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		n, err := strconv.Atoi(r.header.Get("Inference-Header-Content-Length"))
		if err != nil || n+len(in) != len(r.body) {
			t.Fatalf("header length %q, body %d", r.header.Get("Inference-Header-Content-Length"), len(r.body))
		}
		jsonEqual(t, r.body[:n], `{"model_name":"identity_fp32","model_version":"1","outputs":[`+
			`{"name":"OUTPUT0","datatype":"FP32","shape":[1,2],"parameters":{"binary_data_size":8}}]}`)
		if !bytes.Equal(r.body[n:], in) {
			t.Fatalf("raw output %x", r.body[n:])
		}
		r = do(t, "POST", url, in, map[string]string{"Inference-Header-Content-Length": "0"})
		if r.status != 400 || !strings.Contains(string(r.body), "Raw request must only have 1 input") {
			t.Fatalf("raw request to a two-input model: %d %s", r.status, r.body)
		}
		r = do(t, "POST", url, in, map[string]string{"Inference-Header-Content-Length": "100"})
		jsonEqual(t, r.body, `{"error":"inference header size should be in range (0, 8), got: 100"}`)
	})
	t.Run("large tensor", func(t *testing.T) {
		// 8 MiB each way: more than NATS's 1 MiB max payload, so the bus
		// carries it in chunks.
		const n = 2 << 20
		data := make([]byte, 4*n)
		for i := range data {
			data[i] = byte(i * 7)
		}
		header := fmt.Sprintf(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,%d],"parameters":{"binary_data_size":%d}}],`+
			`"parameters":{"binary_data_output":true}}`, n, len(data))
		r := do(t, "POST", "http://"+g.HTTPAddr()+"/v2/models/identity_fp32/infer", append([]byte(header), data...),
			map[string]string{"Inference-Header-Content-Length": strconv.Itoa(len(header))})
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body[:min(len(r.body), 300)])
		}
		hl, _ := strconv.Atoi(r.header.Get("Inference-Header-Content-Length"))
		if hl <= 0 || !bytes.Equal(r.body[hl:], data) {
			t.Fatalf("large output differs (header %d, body %d)", hl, len(r.body))
		}
	})
	t.Run("config", func(t *testing.T) {
		r := do(t, "GET", "http://"+g.HTTPAddr()+"/v2/models/simple/config", nil, nil)
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		var cfg struct {
			Name         string `json:"name"`
			Backend      string `json:"backend"`
			MaxBatchSize int    `json:"max_batch_size"`
			Input        []struct {
				Name     string  `json:"name"`
				DataType string  `json:"data_type"`
				Dims     []int64 `json:"dims"`
			} `json:"input"`
		}
		if err := json.Unmarshal(r.body, &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.Name != "simple" || cfg.Backend != "addsub" || cfg.MaxBatchSize != 8 || len(cfg.Input) != 2 ||
			cfg.Input[0].DataType != "TYPE_INT32" || len(cfg.Input[0].Dims) != 1 || cfg.Input[0].Dims[0] != 16 {
			t.Fatalf("config %s", r.body)
		}
		r = do(t, "GET", "http://"+g.HTTPAddr()+"/v2/models/simple/versions/3/config", nil, nil)
		jsonEqual(t, r.body, `{"error":"Request for unknown model: 'simple' version 3 is not found"}`)
	})
	t.Run("compression", func(t *testing.T) {
		plain := []byte(simpleRequestJSON(""))
		for _, tc := range []struct {
			name, contentEncoding, acceptEncoding string
			body                                  []byte
			wantEncoding                          string
		}{
			{"gzip request", "gzip", "", gz(plain), ""},
			{"deflate request", "deflate", "", zl(plain), ""},
			{"gzip response", "", "gzip", plain, "gzip"},
			{"deflate response", "", "deflate", plain, "deflate"},
			{"q-values", "", "gzip;q=0.5, deflate;q=0.9", plain, "deflate"},
			{"both ways", "gzip", "gzip", gz(plain), "gzip"},
			{"identity preferred", "", "identity, gzip;q=0.5", plain, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h := map[string]string{}
				if tc.contentEncoding != "" {
					h["Content-Encoding"] = tc.contentEncoding
				}
				if tc.acceptEncoding != "" {
					h["Accept-Encoding"] = tc.acceptEncoding
				}
				r := do(t, "POST", url, tc.body, h)
				if r.status != 200 {
					t.Fatalf("%d %s", r.status, r.body)
				}
				if got := r.header.Get("Content-Encoding"); got != tc.wantEncoding {
					t.Fatalf("Content-Encoding %q, want %q", got, tc.wantEncoding)
				}
				body := r.body
				var zr io.Reader
				var err error
				switch tc.wantEncoding {
				case "gzip":
					zr, err = gzip.NewReader(bytes.NewReader(body))
				case "deflate":
					zr, err = zlib.NewReader(bytes.NewReader(body))
				}
				if err != nil {
					t.Fatal(err)
				}
				if zr != nil {
					if body, err = io.ReadAll(zr); err != nil {
						t.Fatal(err)
					}
				}
				jsonEqual(t, body, simpleResponse)
			})
		}
		r := do(t, "POST", url, plain, map[string]string{"Content-Encoding": "br"})
		if r.status != 501 || r.header.Get("Accept-Encoding") != "gzip, deflate" {
			t.Fatalf("unsupported encoding: %d %q %s", r.status, r.header.Get("Accept-Encoding"), r.body)
		}
		jsonEqual(t, r.body, `{"error":"Unsupported compression type"}`)
		r = do(t, "POST", url, []byte("not gzip at all"), map[string]string{"Content-Encoding": "gzip"})
		if r.status != 400 {
			t.Fatalf("corrupt gzip: %d %s", r.status, r.body)
		}
	})

	input := func(name, dtype, shape, data string) string {
		return `{"name":"` + name + `","datatype":"` + dtype + `","shape":` + shape + `,"data":` + data + `}`
	}
	good0 := input("INPUT0", "INT32", "[1,16]", intsJSON(in0))
	good1 := input("INPUT1", "INT32", "[1,16]", intsJSON(in1))
	for _, tc := range []struct {
		name, path, body string
		status           int
		msg              string // substring of the error
	}{
		{"malformed JSON", "simple", `{"inputs":[`, 400, ""},
		{"not an object", "simple", `[1,2]`, 500, "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"},
		{"unknown model", "nope", simpleRequestJSON(""), 404, "Request for unknown model: 'nope' is not found"},
		{"unknown version", "simple/versions/9", simpleRequestJSON(""), 404, "Request for unknown model: 'simple' version 9 is not found"},
		{"bad version string", "simple/versions/99999999999999999999", simpleRequestJSON(""), 400,
			"failed to get model version from specified version string '99999999999999999999'"},
		{"wrong datatype", "simple", `{"inputs":[` + input("INPUT0", "FP32", "[1,16]", intsJSON(in0)) + `,` + good1 + `]}`, 400,
			"inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'"},
		{"wrong shape", "simple", `{"inputs":[` + input("INPUT0", "INT32", "[1,8]", intsJSON(in0[:8])) + `,` + good1 + `]}`, 400,
			"unexpected shape for input 'INPUT0' for model 'simple'"},
		{"data length vs shape", "simple", `{"inputs":[` + input("INPUT0", "INT32", "[1,16]", "[1,2,3]") + `,` + good1 + `]}`, 500,
			"Unable to parse 'data': Shape does not match true shape of 'data' field"},
		{"missing input", "simple", `{"inputs":[` + good0 + `]}`, 400,
			"expected 2 inputs but got 1 inputs for model 'simple'"},
		{"unknown input", "simple", `{"inputs":[` + good0 + `,` + good1 + `,` + input("INPUT9", "INT32", "[1,16]", intsJSON(in0)) + `]}`, 400, ""},
		{"unknown output", "simple", simpleRequestJSON(`,"outputs":[{"name":"OUTPUT9"}]`), 400,
			"unexpected inference output 'OUTPUT9' for model 'simple'"},
		{"reserved parameter", "simple", simpleRequestJSON(`,"parameters":{"triton_x":1}`), 400,
			"parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, "POST", "http://"+g.HTTPAddr()+"/v2/models/"+tc.path+"/infer", []byte(tc.body), nil)
			var e struct{ Error string }
			if r.status != tc.status || json.Unmarshal(r.body, &e) != nil || e.Error == "" || !strings.Contains(e.Error, tc.msg) {
				t.Fatalf("got %d %s, want %d %q", r.status, r.body, tc.status, tc.msg)
			}
		})
	}

	// The server is still serving after all that.
	if r := do(t, "POST", url, []byte(simpleRequestJSON("")), nil); r.status != 200 {
		t.Fatalf("after bad requests: %d %s", r.status, r.body)
	}
}

func TestInferGRPC(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	startExecutor(t, ns, "ex1")
	waitModelReady(t, g, "simple")
	waitModelReady(t, g, "simple_string")
	c, _ := grpcClient(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	i32 := func(v []int) []int32 {
		out := make([]int32, len(v))
		for i, x := range v {
			out[i] = int32(x)
		}
		return out
	}
	typed := func() *inference.ModelInferRequest {
		return &inference.ModelInferRequest{ModelName: "simple", Id: "g1", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &inference.InferTensorContents{IntContents: i32(in0)}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &inference.InferTensorContents{IntContents: i32(in1)}},
		}}
	}
	raw := func() *inference.ModelInferRequest {
		return &inference.ModelInferRequest{ModelName: "simple", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}},
		}, RawInputContents: [][]byte{int32sLE(in0), int32sLE(in1)}}
	}
	check := func(t *testing.T, resp *inference.ModelInferResponse) {
		t.Helper()
		if resp.ModelName != "simple" || resp.ModelVersion != "1" || len(resp.Outputs) != 2 || len(resp.RawOutputContents) != 2 {
			t.Fatalf("response %v", resp)
		}
		for i, want := range [][]int{sum, diff} {
			if !bytes.Equal(resp.RawOutputContents[i], int32sLE(want)) || resp.Outputs[i].Datatype != "INT32" {
				t.Fatalf("output %d: %v %x", i, resp.Outputs[i], resp.RawOutputContents[i])
			}
		}
	}
	for _, tc := range []struct {
		name string
		req  func() *inference.ModelInferRequest
		opts []grpc.CallOption
	}{
		{"typed contents", typed, nil},
		{"raw contents", raw, nil},
		{"gzip", raw, []grpc.CallOption{grpc.UseCompressor(grpcgzip.Name)}},
		{"deflate", typed, []grpc.CallOption{grpc.UseCompressor("deflate")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.ModelInfer(ctx, tc.req(), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			check(t, resp)
		})
	}
	t.Run("string", func(t *testing.T) {
		var a, b [][]byte
		for i := 0; i < 16; i++ {
			a = append(a, []byte(strconv.Itoa(i)))
			b = append(b, []byte("1"))
		}
		resp, err := c.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "simple_string", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "BYTES", Shape: []int64{1, 16}, Contents: &inference.InferTensorContents{BytesContents: a}},
			{Name: "INPUT1", Datatype: "BYTES", Shape: []int64{1, 16}, Contents: &inference.InferTensorContents{BytesContents: b}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		// OUTPUT0 is the BYTES elements "1".."16", each a u32 length then the digits.
		var want []byte
		for i := 0; i < 16; i++ {
			s := strconv.Itoa(i + 1)
			want = binary.LittleEndian.AppendUint32(want, uint32(len(s)))
			want = append(want, s...)
		}
		if len(resp.RawOutputContents) != 2 || !bytes.Equal(resp.RawOutputContents[0], want) {
			t.Fatalf("simple_string: %v", resp)
		}
	})

	for _, tc := range []struct {
		name string
		req  func() *inference.ModelInferRequest
		code codes.Code
		msg  string
	}{
		{"mixed raw and contents", func() *inference.ModelInferRequest {
			r := raw()
			r.Inputs[0].Contents = &inference.InferTensorContents{IntContents: i32(in0)}
			return r
		}, codes.InvalidArgument, "contents field must not be specified when using raw_input_contents"},
		{"wrong datatype", func() *inference.ModelInferRequest {
			r := raw()
			r.Inputs[1].Datatype = "FP32"
			return r
		}, codes.InvalidArgument, "inference input 'INPUT1' data-type is 'FP32', but model 'simple' expects 'INT32'"},
		{"missing input", func() *inference.ModelInferRequest {
			r := raw()
			r.Inputs, r.RawInputContents = r.Inputs[:1], r.RawInputContents[:1]
			return r
		}, codes.InvalidArgument, "expected 2 inputs but got 1 inputs for model 'simple'"},
		{"unknown output", func() *inference.ModelInferRequest {
			r := raw()
			r.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "NOPE"}}
			return r
		}, codes.InvalidArgument, "unexpected inference output 'NOPE' for model 'simple'"},
		{"reserved parameter", func() *inference.ModelInferRequest {
			r := raw()
			r.Parameters = map[string]*inference.InferParameter{"triton_x": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}
			return r
		}, codes.InvalidArgument, "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response"},
		{"negative priority", func() *inference.ModelInferRequest {
			r := raw()
			r.Parameters = map[string]*inference.InferParameter{"priority": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: -1}}}
			return r
		}, codes.InvalidArgument, "invalid value for 'priority', expected value >= 0."},
		{"priority as a string", func() *inference.ModelInferRequest {
			r := raw()
			r.Parameters = map[string]*inference.InferParameter{"priority": {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "1"}}}
			return r
		}, codes.InvalidArgument, "invalid value type for 'priority' parameter, expected int64_param or uint64_param."},
		{"timeout as a bool", func() *inference.ModelInferRequest {
			r := raw()
			r.Parameters = map[string]*inference.InferParameter{"timeout": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}
			return r
		}, codes.InvalidArgument, "invalid value type for 'timeout' parameter, expected int64_param."},
		{"custom parameter as a double", func() *inference.ModelInferRequest {
			r := raw()
			r.Parameters = map[string]*inference.InferParameter{"scale": {ParameterChoice: &inference.InferParameter_DoubleParam{DoubleParam: 0.5}}}
			return r
		}, codes.InvalidArgument, "invalid value type for 'scale' parameter, expected int64_param, bool_param, or string_param."},
		{"allowed triton_ parameter of the wrong type", func() *inference.ModelInferRequest {
			r := raw()
			r.Parameters = map[string]*inference.InferParameter{"triton_enable_empty_final_response": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 1}}}
			return r
		}, codes.InvalidArgument, "invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param."},
		{"duplicate output", func() *inference.ModelInferRequest {
			r := raw()
			r.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT1"}, {Name: "OUTPUT1"}}
			return r
		}, codes.InvalidArgument, "output 'OUTPUT1' already exists in request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.ModelInfer(ctx, tc.req())
			s := status.Convert(err)
			if s.Code() != tc.code || !strings.Contains(s.Message(), tc.msg) {
				t.Fatalf("got %s %q, want %s %q", s.Code(), s.Message(), tc.code, tc.msg)
			}
		})
	}

	t.Run("stream", func(t *testing.T) {
		st, err := c.ModelStreamInfer(ctx, grpc.UseCompressor(grpcgzip.Name))
		if err != nil {
			t.Fatal(err)
		}
		reqs := []*inference.ModelInferRequest{raw(), {ModelName: "nope", Id: "bad"}, typed(), raw()}
		for i, r := range reqs {
			r.Id = fmt.Sprint("s", i)
			if err := st.Send(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		for i := range reqs {
			resp, err := st.Recv()
			if err != nil {
				t.Fatalf("recv %d: %v", i, err)
			}
			if resp.InferResponse.GetId() != fmt.Sprint("s", i) {
				t.Fatalf("response %d out of order: %v", i, resp)
			}
			if i == 1 {
				if resp.ErrorMessage != "Request for unknown model: 'nope' is not found" {
					t.Fatalf("stream error %q", resp.ErrorMessage)
				}
				continue
			}
			if resp.ErrorMessage != "" {
				t.Fatalf("stream %d: %s", i, resp.ErrorMessage)
			}
			check(t, resp.InferResponse)
		}
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("stream end: %v", err)
		}
	})
	t.Run("stream with grpc errors", func(t *testing.T) {
		sctx := metadata.AppendToOutgoingContext(ctx, "triton_grpc_error", "true")
		st, err := c.ModelStreamInfer(sctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&inference.ModelInferRequest{ModelName: "nope"}); err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		if s := status.Convert(err); s.Code() != codes.NotFound {
			t.Fatalf("got %v", err)
		}
	})
}

// TestStatisticsAndMetrics runs two executors of the same model: the
// gateway reports the sum of their statistics, over HTTP, gRPC and /metrics.
func TestStatisticsAndMetrics(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	startExecutor(t, ns, "ex1", "simple")
	startExecutor(t, ns, "ex2", "simple")
	waitFor(t, "two executors", 10*time.Second, func() bool {
		vv, err := g.resolveRequest("simple", "")
		return err == nil && len(vv.executors) == 2
	})
	url := "http://" + g.HTTPAddr() + "/v2/models/simple/infer"
	const n = 12
	for i := 0; i < n; i++ {
		if r := do(t, "POST", url, []byte(simpleRequestJSON("")), nil); r.status != 200 {
			t.Fatalf("infer: %d %s", r.status, r.body)
		}
	}
	for _, path := range []string{"/v2/models/stats", "/v2/models/simple/stats", "/v2/models/simple/versions/1/stats"} {
		r := do(t, "GET", "http://"+g.HTTPAddr()+path, nil, nil)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		var st struct {
			ModelStats []struct {
				Name           string
				Version        string
				InferenceCount uint64                                `json:"inference_count"`
				ExecutionCount uint64                                `json:"execution_count"`
				LastInference  uint64                                `json:"last_inference"`
				InferenceStats map[string]struct{ Count, Ns uint64 } `json:"inference_stats"`
				BatchStats     []struct {
					BatchSize    uint64                     `json:"batch_size"`
					ComputeInfer struct{ Count, Ns uint64 } `json:"compute_infer"`
				} `json:"batch_stats"`
			} `json:"model_stats"`
		}
		if err := json.Unmarshal(r.body, &st); err != nil {
			t.Fatal(err)
		}
		if len(st.ModelStats) != 1 {
			t.Fatalf("%s: %s", path, r.body)
		}
		s := st.ModelStats[0]
		if s.Name != "simple" || s.Version != "1" || s.InferenceCount != n || s.InferenceStats["success"].Count != n || s.LastInference == 0 {
			t.Fatalf("%s: %s", path, r.body)
		}
		for _, k := range []string{"success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss"} {
			if _, ok := s.InferenceStats[k]; !ok {
				t.Errorf("%s: inference_stats lacks %s", path, k)
			}
		}
		var batched uint64
		for _, b := range s.BatchStats {
			batched += b.BatchSize * b.ComputeInfer.Count
		}
		if batched != n {
			t.Errorf("%s: batch_stats cover %d inferences, want %d: %s", path, batched, n, r.body)
		}
	}

	c, _ := grpcClient(t, g)
	st, err := c.ModelStatistics(context.Background(), &inference.ModelStatisticsRequest{Name: "simple"})
	if err != nil || len(st.ModelStats) != 1 || st.ModelStats[0].InferenceCount != n {
		t.Fatalf("gRPC ModelStatistics: %v %v", st, err)
	}

	// The gateway's own page leaves Triton's per-model metrics to the
	// executors; /metrics/constellation sums them.
	r := do(t, "GET", "http://"+g.MetricsAddr()+"/metrics", nil, nil)
	if r.status != 200 {
		t.Fatalf("metrics: %d", r.status)
	}
	if strings.Contains(string(r.body), "nv_inference_") || !strings.Contains(string(r.body), "nereid_executors{") {
		t.Errorf("gateway's /metrics:\n%s", r.body)
	}
	r = do(t, "GET", "http://"+g.MetricsAddr()+"/metrics/constellation", nil, nil)
	if r.status != 200 {
		t.Fatalf("metrics/constellation: %d", r.status)
	}
	text := string(r.body)
	for _, want := range []string{
		"nereid_executors{",
		fmt.Sprintf(`nv_inference_request_success{model="simple",version="1"} %d`, n),
		`nv_inference_request_failure{model="simple",reason="REJECTED",version="1"} 0`,
		`nv_inference_request_failure{model="simple",reason="CANCELED",version="1"} 0`,
		`nv_inference_request_failure{model="simple",reason="BACKEND",version="1"} 0`,
		`nv_inference_request_failure{model="simple",reason="OTHER",version="1"} 0`,
		`nv_inference_pending_request_count{model="simple",version="1"} 0`,
		"# TYPE nv_inference_pending_request_count gauge",
		fmt.Sprintf(`nv_inference_count{model="simple",version="1"} %d`, n),
		`nv_inference_exec_count{model="simple",version="1"}`,
		`nv_inference_request_duration_us{model="simple",version="1"}`,
		`nv_inference_queue_duration_us{model="simple",version="1"}`,
		`nv_inference_compute_input_duration_us{model="simple",version="1"}`,
		`nv_inference_compute_infer_duration_us{model="simple",version="1"}`,
		`nv_inference_compute_output_duration_us{model="simple",version="1"}`,
		"# TYPE nv_inference_count counter",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
	// No name ends in _total (Triton's nv_cpu_memory_total_bytes has it
	// inside).
	if regexp.MustCompile(`(?m)^[a-z_]+_total[{ ]`).MatchString(text) {
		t.Errorf("metrics have _total suffixes:\n%s", text)
	}
}

// TestExecutorLoss kills the only executor without a withdraw (as a crash
// would): its models turn not ready within a few seconds and infer fails
// with UNAVAILABLE; a new executor brings them back.
func TestExecutorLoss(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	nc := connect(t, ns, "executor-crashing")
	ex, err := executor.New(executor.Config{Conn: nc, RepositoryPath: repository, Models: []string{"simple"}, ID: "ex1", Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ex.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitModelReady(t, g, "simple")
	base := "http://" + g.HTTPAddr()
	if r := do(t, "GET", base+"/v2/models/simple/ready", nil, nil); r.status != 200 {
		t.Fatalf("ready: %d", r.status)
	}

	// The crash: the connection drops, heartbeats stop, nothing withdraws.
	killed := time.Now()
	nc.Close()
	waitFor(t, "simple not ready", 6*time.Second, func() bool {
		return do(t, "GET", base+"/v2/models/simple/ready", nil, nil).status == 400
	})
	if d := time.Since(killed); d > 5*time.Second {
		t.Errorf("took %v to notice", d)
	}
	r := do(t, "POST", base+"/v2/models/simple/infer", []byte(simpleRequestJSON("")), nil)
	if r.status != 503 {
		t.Fatalf("infer after loss: %d %s", r.status, r.body)
	}
	jsonEqual(t, r.body, `{"error":"model 'simple' has no ready executor: the executors that served it are gone; it is served again as soon as one is back"}`)
	c, _ := grpcClient(t, g)
	_, err = c.ModelInfer(context.Background(), &inference.ModelInferRequest{ModelName: "simple"})
	if s := status.Convert(err); s.Code() != codes.Unavailable {
		t.Fatalf("gRPC infer after loss: %v", err)
	}
	if r := do(t, "GET", base+"/v2/health/ready", nil, nil); r.status != 400 {
		t.Fatalf("server ready without executors: %d", r.status)
	}
	r = do(t, "POST", base+"/v2/repository/index", nil, nil)
	jsonEqual(t, r.body, `[{"name":"simple","version":"1","state":"UNAVAILABLE","reason":"`+reasonGone+`"}]`)

	// A new executor process: back without restarting the gateway.
	startExecutor(t, ns, "ex1-restarted", "simple")
	waitModelReady(t, g, "simple")
	if r := do(t, "POST", base+"/v2/models/simple/infer", []byte(simpleRequestJSON("")), nil); r.status != 200 {
		t.Fatalf("infer after restart: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", base+"/v2/health/ready", nil, nil); r.status != 200 {
		t.Fatalf("server ready after restart: %d", r.status)
	}
}

// TestNoExecutorYet: a gateway that holds no executor's catalog cannot
// know whether a model exists, and says so with 503 (retry), not 404; once
// an executor has reported, an unknown model is 404 again.
func TestNoExecutorYet(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	url := "http://" + g.HTTPAddr() + "/v2/models/simple/infer"
	r := do(t, "POST", url, []byte(simpleRequestJSON("")), nil)
	if r.status != 503 || !strings.Contains(string(r.body), "no executor is connected to this gateway yet") {
		t.Fatalf("infer with no executor: %d %s, want 503 naming the missing executor", r.status, r.body)
	}
	f := newFakeExecutor(t, ns, "exec-1", &busv1.ModelVersionState{Name: "simple", Version: "1", State: "READY", Config: simpleConfig("simple")})
	f.start()
	waitFor(t, "the executor's catalog", 10*time.Second, func() bool {
		return do(t, "POST", url, []byte(simpleRequestJSON("")), nil).status == 200
	})
	r = do(t, "POST", "http://"+g.HTTPAddr()+"/v2/models/nope/infer", []byte(simpleRequestJSON("")), nil)
	if r.status != 404 {
		t.Fatalf("unknown model with an executor: %d %s, want 404", r.status, r.body)
	}
}
