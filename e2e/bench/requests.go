package bench

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/nereid-io/nereid/api/inference"
)

// Model is the identity model the benchmarks call: INPUT0 -> OUTPUT0, FP32,
// dims [-1], max_batch_size 8 (so requests carry shape [1, n]).
const Model = "identity_fp32"

// InferPath is the model's KServe v2 HTTP infer endpoint.
const InferPath = "/v2/models/" + Model + "/infer"

func shape(payload []byte) string { return fmt.Sprintf("[1,%d]", len(payload)/4) }

// InferRequest is what Triton's gRPC clients send: the tensor in
// raw_input_contents, no outputs named (so all outputs come back, raw).
func InferRequest(payload []byte) *inference.ModelInferRequest {
	return &inference.ModelInferRequest{
		ModelName: Model,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{{
			Name: "INPUT0", Datatype: "FP32", Shape: []int64{1, int64(len(payload) / 4)},
		}},
		RawInputContents: [][]byte{payload},
	}
}

// HTTPBinaryRequest is what tritonclient's HTTP client sends by default:
// a JSON header naming binary_data_size, the tensor's bytes after it, and
// OUTPUT0 asked for as binary data.
func HTTPBinaryRequest(payload []byte) ([]byte, http.Header) {
	head := fmt.Sprintf(`{"inputs":[{"name":"INPUT0","shape":%s,"datatype":"FP32","parameters":{"binary_data_size":%d}}],`+
		`"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`, shape(payload), len(payload))
	body := make([]byte, 0, len(head)+len(payload))
	body = append(append(body, head...), payload...)
	return body, http.Header{
		"Content-Type":                    {"application/octet-stream"},
		"Inference-Header-Content-Length": {strconv.Itoa(len(head))},
	}
}

// HTTPJSONRequest carries the tensor as a JSON array; the answer comes back
// as JSON too.
func HTTPJSONRequest(payload []byte) ([]byte, http.Header) {
	data := FP32JSON(payload)
	body := fmt.Appendf(nil, `{"inputs":[{"name":"INPUT0","shape":%s,"datatype":"FP32","data":`, shape(payload))
	body = append(append(body, data...), "}]}"...)
	return body, http.Header{"Content-Type": {"application/json"}}
}
