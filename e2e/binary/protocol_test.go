package binary

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
)

// classStrings splits a BYTES tensor into its elements.
func classStrings(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	for len(b) > 0 {
		if len(b) < 4 || int(binary.LittleEndian.Uint32(b))+4 > len(b) {
			t.Fatalf("malformed BYTES tensor %q", b)
		}
		n := binary.LittleEndian.Uint32(b)
		out = append(out, string(b[4:4+n]))
		b = b[4+n:]
	}
	return out
}

func jsonStrings(t *testing.T, v any) []string {
	t.Helper()
	a, ok := v.([]any)
	if !ok {
		t.Fatalf("data %v is not an array", v)
	}
	out := make([]string, len(a))
	for i, x := range a {
		out[i], ok = x.(string)
		if !ok {
			t.Fatalf("data %v holds a non-string", v)
		}
	}
	return out
}

func int64Param(v int64) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: v}}
}

// TestClassification: the classification extension over HTTP (JSON and
// binary outputs) and gRPC, batched and not, with and without labels, and
// Triton's errors.
func TestClassification(t *testing.T) {
	c := startCluster(t)
	url := func(model string) string { return c.gw.HTTP() + "/v2/models/" + model + "/infer" }
	client := grpcClient(t, c.gw.GRPC())

	scores := `[[0.5,2,0.25,8],[3,1,9,4]]` // a batch of two; labels cover classes 0-2
	wantBatch := [][]string{{"8.000000:3", "2.000000:1:one"}, {"9.000000:2:two", "4.000000:3"}}

	t.Run("HTTP JSON, batched, labels", func(t *testing.T) {
		r := post(t, url("classify_fp32"), []byte(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2,4],"data":`+scores+`}],
			"outputs":[{"name":"OUTPUT0","parameters":{"classification":2}}]}`))
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		m, _ := split(t, r)
		o := output(t, m, 0)
		if o["datatype"] != "BYTES" || !reflect.DeepEqual(o["shape"], []any{2.0, 2.0}) ||
			!reflect.DeepEqual(jsonStrings(t, o["data"]), append(wantBatch[0], wantBatch[1]...)) {
			t.Fatalf("%s", r.body)
		}
	})
	t.Run("HTTP binary, batched, labels", func(t *testing.T) {
		r := post(t, url("classify_fp32"), []byte(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2,4],"data":`+scores+`}],
			"outputs":[{"name":"OUTPUT0","parameters":{"classification":2,"binary_data":true}}]}`))
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		m, rest := split(t, r)
		o := output(t, m, 0)
		if o["datatype"] != "BYTES" || binarySize(o) != len(rest) || !reflect.DeepEqual(classStrings(t, rest), append(wantBatch[0], wantBatch[1]...)) {
			t.Fatalf("%q", r.body)
		}
	})
	t.Run("HTTP JSON, not batched, no labels, more classes asked than there are", func(t *testing.T) {
		r := post(t, url("classify_int32"), []byte(`{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[3],"data":[-5,7,0]}],
			"outputs":[{"name":"OUTPUT0","parameters":{"classification":10}}]}`))
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		m, _ := split(t, r)
		o := output(t, m, 0)
		if !reflect.DeepEqual(o["shape"], []any{3.0}) || !reflect.DeepEqual(jsonStrings(t, o["data"]), []string{"7:1", "0:2", "-5:0"}) {
			t.Fatalf("%s", r.body)
		}
	})
	t.Run("gRPC, batched and not", func(t *testing.T) {
		req := fp32Request("classify_fp32", "", 4, 0)
		req.Inputs[0].Shape = []int64{2, 4}
		req.RawInputContents = [][]byte{f32s(0.5, 2, 0.25, 8, 3, 1, 9, 4)}
		req.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0",
			Parameters: map[string]*inference.InferParameter{"classification": int64Param(2)}}}
		resp, err := client.ModelInfer(timeout(t, time.Minute), req)
		if err != nil {
			t.Fatal(err)
		}
		o := resp.GetOutputs()[0]
		if o.GetDatatype() != "BYTES" || !reflect.DeepEqual(o.GetShape(), []int64{2, 2}) ||
			!reflect.DeepEqual(classStrings(t, resp.GetRawOutputContents()[0]), append(wantBatch[0], wantBatch[1]...)) {
			t.Fatalf("%v", resp)
		}
		resp, err = client.ModelInfer(timeout(t, time.Minute), &inference.ModelInferRequest{ModelName: "classify_int32",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{3}}},
			RawInputContents: [][]byte{i32s(4, 6, 5)},
			Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0",
				Parameters: map[string]*inference.InferParameter{"classification": int64Param(1)}}}})
		if err != nil {
			t.Fatal(err)
		}
		if o := resp.GetOutputs()[0]; !reflect.DeepEqual(o.GetShape(), []int64{1}) || !reflect.DeepEqual(classStrings(t, resp.GetRawOutputContents()[0]), []string{"6:1"}) {
			t.Fatalf("%v", resp)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name, model, body string
			status            int
			want              string
		}{
			{"BOOL output", "identity_bool", `{"inputs":[{"name":"INPUT0","datatype":"BOOL","shape":[1,2],"data":[true,false]}],"outputs":[{"name":"OUTPUT0","parameters":{"classification":1}}]}`,
				400, "class result not available for output due to unsupported type 'BOOL'"},
			{"BYTES output", "identity_bytes_var", `{"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[1,2],"data":["a","b"]}],"outputs":[{"name":"OUTPUT0","parameters":{"classification":1}}]}`,
				400, "class result not available for output due to unsupported type 'BYTES'"},
			{"not an unsigned integer", "classify_int32", `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1],"data":[1]}],"outputs":[{"name":"OUTPUT0","parameters":{"classification":-1}}]}`,
				500, "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer"},
			{"with shared memory", "classify_int32", `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1],"data":[1]}],"outputs":[{"name":"OUTPUT0","parameters":{"classification":1,"shared_memory_region":"r","shared_memory_byte_size":4}}]}`,
				400, "Output can't set both 'shared_memory_region' and 'classification'"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := post(t, url(tc.model), []byte(tc.body))
				if got := errorOf(t, r); r.status != tc.status || got != tc.want {
					t.Fatalf("%d %q, want %d %q", r.status, got, tc.status, tc.want)
				}
			})
		}
		// gRPC: the same datatype error, and the parameter's type.
		req := &inference.ModelInferRequest{ModelName: "identity_bool",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "BOOL", Shape: []int64{1, 2}}},
			RawInputContents: [][]byte{{1, 0}},
			Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0",
				Parameters: map[string]*inference.InferParameter{"classification": int64Param(1)}}}}
		_, err := client.ModelInfer(timeout(t, time.Minute), req)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "class result not available for output due to unsupported type 'BOOL'" {
			t.Fatalf("%v", err)
		}
		// Triton's bound: more than a million values in a batch entry.
		n := 1_000_001
		big := `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,` + strconv.Itoa(n) + `],"data":[` +
			strings.TrimSuffix(strings.Repeat("0,", n), ",") + `]}],"outputs":[{"name":"OUTPUT0","parameters":{"classification":1}}]}`
		r := post(t, url("identity_fp32"), []byte(big))
		if got := errorOf(t, r); r.status != 400 || got != "classification output tensor too large" {
			t.Fatalf("HTTP, %d values: %d %q", n, r.status, got)
		}
		_, err = client.ModelInfer(timeout(t, time.Minute), &inference.ModelInferRequest{ModelName: "identity_fp32",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1, int64(n)}}},
			RawInputContents: [][]byte{make([]byte, 4*n)},
			Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0",
				Parameters: map[string]*inference.InferParameter{"classification": int64Param(1)}}}})
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "classification output tensor too large" {
			t.Fatalf("gRPC, %d values: %v", n, err)
		}
		for _, tc := range []struct {
			p    *inference.InferParameter
			want string
		}{
			{&inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: "1"}}, "invalid value type for 'classification' parameter, expected int64_param"},
			{int64Param(0), "invalid value for 'classification' parameter, expected >= 1"},
		} {
			req.Outputs[0].Parameters["classification"] = tc.p
			_, err = client.ModelInfer(timeout(t, time.Minute), req)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != tc.want {
				t.Fatalf("%v, want %q", err, tc.want)
			}
		}
	})
}

// TestSizeLimitWording: what exceeds --http-max-input-size is refused with
// today's Triton wording.
func TestSizeLimitWording(t *testing.T) {
	c := startCluster(t, "--http-max-input-size", "4096")
	base := c.gw.HTTP()
	t.Run("JSON header above --http-max-input-size", func(t *testing.T) {
		big := `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,1],"data":[1]}],"id":"` + strings.Repeat("x", 5000) + `"}`
		r := post(t, base+"/v2/models/identity_fp32/infer", []byte(big))
		want := fmt.Sprintf("request JSON size of %d bytes exceeds the maximum allowed input size of 4096 bytes. Use --http-max-input-size to increase the limit.", len(big))
		if got := errorOf(t, r); r.status != 400 || got != want {
			t.Fatalf("%d %q", r.status, got)
		}
	})

	t.Run("compressed JSON body inflating past --http-max-input-size", func(t *testing.T) {
		// All JSON (no binary tensors): Triton words it as a JSON request
		// too large, of at least the byte past the limit.
		big := `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,1],"data":[1]}],"id":"` + strings.Repeat("x", 5000) + `"}`
		r := post(t, base+"/v2/models/identity_fp32/infer", gzipped(t, []byte(big)), "Content-Encoding", "gzip")
		want := "request JSON size of 4097 bytes exceeds the maximum allowed input size of 4096 bytes. Use --http-max-input-size to increase the limit."
		if got := errorOf(t, r); r.status != 400 || got != want {
			t.Fatalf("%d %q", r.status, got)
		}
	})

	t.Run("compressed body inflating past --http-max-input-size", func(t *testing.T) {
		data := make([]byte, 8192)
		body, hl := binaryBody(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,2048],"parameters":{"binary_data_size":8192}}]}`, data)
		r := post(t, base+"/v2/models/identity_fp32/infer", gzipped(t, body), "Content-Encoding", "gzip", "Inference-Header-Content-Length", hl)
		if got := errorOf(t, r); r.status != 400 ||
			got != "Decompressed data size exceeds the maximum allowed value of 4096 bytes. Use --http-max-input-size to increase the limit." {
			t.Fatalf("%d %q", r.status, got)
		}
	})

}

// TestProtocolErrors: answers that follow today's Triton, over HTTP and
// gRPC, with their status and message.
func TestProtocolErrors(t *testing.T) {
	c := startCluster(t, "--allow-client-shm", "true")
	base := c.gw.HTTP()
	client := grpcClient(t, c.gw.GRPC())

	t.Run("duplicate requested output", func(t *testing.T) {
		r := post(t, base+"/v2/models/simple/infer", []byte(`{"inputs":[
			{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":`+jsonInts(seq(0, 16))+`},
			{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":`+jsonInts(seq(0, 16))+`}],
			"outputs":[{"name":"OUTPUT0"},{"name":"OUTPUT1"},{"name":"OUTPUT0"}]}`))
		if got := errorOf(t, r); r.status != 400 || got != "output 'OUTPUT0' already exists in request" {
			t.Fatalf("%d %q", r.status, got)
		}
		req := &inference.ModelInferRequest{ModelName: "simple",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}}, {Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}}},
			RawInputContents: [][]byte{i32s(seq(0, 16)...), i32s(seq(0, 16)...)},
			Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0"}, {Name: "OUTPUT0"}}}
		_, err := client.ModelInfer(timeout(t, time.Minute), req)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "output 'OUTPUT0' already exists in request" {
			t.Fatalf("%v", err)
		}
	})

	t.Run("JSON fields TritonJson cannot read", func(t *testing.T) {
		for _, tc := range []struct{ body, want string }{
			{`{"inputs":[{"datatype":"FP32","shape":[1,1],"data":[1]}]}`, "Unable to parse 'name': attempt to access non-existing object member 'name'"},
			{`{"id":7,"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,1],"data":[1]}]}`, "Unable to parse 'id': attempt to access JSON non-string as string"},
			{`{"inputs":{}}`, "Unable to parse 'inputs': attempt to access JSON non-array as array"},
			{`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,1],"data":["1"]}]}`, "Unable to parse 'data': attempt to access JSON non-number as double"},
			{`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,1],"data":[1]}],"parameters":{"sequence_start":1}}`,
				"Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean"},
			{`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,1],"parameters":{"binary_data_size":-1}}]}`,
				"Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		} {
			r := post(t, base+"/v2/models/identity_fp32/infer", []byte(tc.body))
			if got := errorOf(t, r); r.status != 500 || got != tc.want {
				t.Errorf("%s: %d %q, want 500 %q", tc.body, r.status, got, tc.want)
			}
		}
	})

	t.Run("gRPC request parameters", func(t *testing.T) {
		for _, tc := range []struct {
			key  string
			p    *inference.InferParameter
			want string
		}{
			{"priority", int64Param(-1), "invalid value for 'priority', expected value >= 0."},
			{"timeout", &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}, "invalid value type for 'timeout' parameter, expected int64_param."},
			{"scale", &inference.InferParameter{ParameterChoice: &inference.InferParameter_DoubleParam{DoubleParam: 0.5}},
				"invalid value type for 'scale' parameter, expected int64_param, bool_param, or string_param."},
			{"triton_x", &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}},
				"parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response"},
		} {
			req := fp32Request("identity_fp32", "", 1, 0)
			req.Parameters = map[string]*inference.InferParameter{tc.key: tc.p}
			_, err := client.ModelInfer(timeout(t, time.Minute), req)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != tc.want {
				t.Errorf("%s: %v, want %q", tc.key, err, tc.want)
			}
		}
	})

	t.Run("negative dimension in a JSON shape", func(t *testing.T) {
		r := post(t, base+"/v2/models/identity_fp32/infer", []byte(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,-2],"data":[1,2]}]}`))
		if got := errorOf(t, r); r.status != 500 || got != "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer" {
			t.Fatalf("%d %q", r.status, got)
		}
	})

	t.Run("repository index: deeply nested ready", func(t *testing.T) {
		r := post(t, base+"/v2/repository/index", []byte(`{"ready":`+strings.Repeat("[", 200000)+strings.Repeat("]", 200000)+`}`))
		if got := errorOf(t, r); r.status != 400 || got != "Invalid value for 'ready': expected a boolean" {
			t.Fatalf("%d %q", r.status, got)
		}
		// Nesting elsewhere still meets the parser's depth limit.
		r = post(t, base+"/v2/repository/index", []byte(`{"other":`+strings.Repeat("[", 101)+strings.Repeat("]", 101)+`}`))
		if got := errorOf(t, r); r.status != 400 || got != "JSON nesting depth exceeds maximum allowed limit (100)" {
			t.Fatalf("%d %q", r.status, got)
		}
	})

	t.Run("chunked bodies", func(t *testing.T) {
		const want = "Chunked request body exceeds maximum of 65536 non-empty chunks. Send fewer or larger HTTP chunks."
		infer := "POST /v2/models/identity_fp32/infer HTTP/1.1\r\n"
		body := []byte(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,1],"data":[1.5]}]}`)
		// A body in one-byte chunks, padded with JSON blanks to n chunks.
		chunked := func(n int) []byte {
			pad := append([]byte(strings.Repeat(" ", n-len(body))), body...)
			var b []byte
			for _, c := range pad {
				b = append(b, '1', '\r', '\n', c, '\r', '\n')
			}
			return append(b, "0\r\n\r\n"...)
		}
		status, got := rawHTTP(t, c.gw.HTTP(), infer, chunked(65536))
		if status != 200 || !strings.Contains(got, `"data":[1.5]`) {
			t.Fatalf("65536 chunks: %d %s", status, got)
		}
		status, got = rawHTTP(t, c.gw.HTTP(), infer, chunked(65537))
		if status != 400 || got != `{"error":"`+want+`"}` {
			t.Fatalf("65537 chunks: %d %s", status, got)
		}
		// Every endpoint with a body reads it the same way.
		status, got = rawHTTP(t, c.gw.HTTP(), "POST /v2/repository/index HTTP/1.1\r\n", nil)
		if status != 200 {
			t.Fatalf("empty chunked body: %d %s", status, got)
		}
		many := []byte(strings.Repeat("1\r\n \r\n", 70000) + "0\r\n\r\n")
		for _, line := range []string{"POST /v2/repository/index HTTP/1.1\r\n", "POST /v2/systemsharedmemory/region/r/register HTTP/1.1\r\n",
			"POST /v2/models/identity_fp32/generate HTTP/1.1\r\n"} {
			status, got = rawHTTP(t, c.gw.HTTP(), line, many)
			if status != 400 || got != `{"error":"`+want+`"}` {
				t.Fatalf("%s: %d %s", line, status, got)
			}
		}
		// The server keeps serving.
		if r := post(t, base+"/v2/models/identity_fp32/infer", body); r.status != 200 {
			t.Fatalf("after: %d %s", r.status, r.body)
		}
	})
}

// rawHTTP sends a request line, then a chunked body as given (nil: the
// last chunk only), and returns the status and body of the answer.
func rawHTTP(t *testing.T, base, requestLine string, chunkedBody []byte) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	if len(chunkedBody) == 0 {
		chunkedBody = []byte("0\r\n\r\n")
	}
	go func() {
		// The answer may come before the whole body is sent.
		_, _ = io.WriteString(conn, requestLine+"Host: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
		_, _ = conn.Write(chunkedBody)
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 && resp.Header.Get("Content-Length") != strconv.Itoa(len(b)) {
		t.Fatalf("Content-Length %q for %d bytes", resp.Header.Get("Content-Length"), len(b))
	}
	return resp.StatusCode, string(b)
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
