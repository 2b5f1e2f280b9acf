package standalone

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
)

// repeatPipelineRequest is a request to deploy/model_repository's
// repeat_pipeline: one response per element of in; the decoupled step's request ends wait
// milliseconds after its last response.
func repeatPipelineRequest(id string, in []int, wait int) *inference.ModelInferRequest {
	delay := make([]byte, 4*len(in))
	return &inference.ModelInferRequest{ModelName: "repeat_pipeline", Id: id,
		Parameters: map[string]*inference.InferParameter{
			"triton_enable_empty_final_response": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}},
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "IN", Datatype: "INT32", Shape: []int64{int64(len(in))}},
			{Name: "DELAY", Datatype: "UINT32", Shape: []int64{int64(len(in))}},
			{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}}},
		RawInputContents: [][]byte{int32Bytes(in), delay, int32Bytes([]int{wait})}}
}

// streamPipeline sends req on a new ModelStreamInfer stream and reads its
// responses up to the one marked final: each non-final one as "OUT/IDX",
// an error as "error: message"; it reports whether the final response was
// empty (the final flag alone).
func streamPipeline(t *testing.T, client inference.GRPCInferenceServiceClient, req *inference.ModelInferRequest) (got []string, emptyFinal bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("stream ended before the final response: %v (got %v)", err, got)
		}
		if r.GetErrorMessage() != "" {
			return append(got, "error: "+r.GetErrorMessage()), false
		}
		resp := r.GetInferResponse()
		if resp.GetModelName() != "repeat_pipeline" || resp.GetId() != req.GetId() {
			t.Errorf("response header %v", resp)
		}
		final := resp.GetParameters()["triton_final_response"].GetBoolParam()
		if len(resp.GetOutputs()) > 0 {
			outs := map[string]uint32{}
			for i, o := range resp.GetOutputs() {
				outs[o.GetName()] = binary.LittleEndian.Uint32(resp.GetRawOutputContents()[i])
			}
			got = append(got, fmt.Sprintf("%d/%d", int32(outs["OUT"]), outs["IDX"]))
		}
		if final {
			return got, len(resp.GetOutputs()) == 0
		}
	}
}

// pipelineServer starts the standalone server with repeat_pipeline and
// its composing models, and returns it with its HTTP base URL and a gRPC
// client.
func pipelineServer(t *testing.T) (*Server, string, inference.GRPCInferenceServiceClient) {
	t.Helper()
	cfg := testConfig(t)
	cfg.Models = []string{"repeat_pipeline"}
	cfg.AllowMetrics = false
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, srv)
	base := "http://" + srv.Gateway().HTTPAddr()
	waitModel(t, base, "repeat_pipeline")
	conn, err := grpc.NewClient(srv.Gateway().GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return srv, base, inference.NewGRPCInferenceServiceClient(conn)
}

// TestEnsembleDecoupledStep serves deploy/model_repository's
// repeat_pipeline (identity_int32 -> repeat_int32, decoupled ->
// identity_int32), loaded explicitly with its composing models: its
// config says decoupled, as Triton's does; over ModelStreamInfer each
// response of the decoupled step runs the post-processing step on its own
// and comes back as one ensemble response pairing OUT with its own IDX,
// then the final flag alone once repeat_int32's request ends (WAIT
// milliseconds after its last response); no response
// at all is the final flag alone; a step's error ends the stream with it;
// generate_stream answers one event per response; unary inference is
// refused with Triton's messages for decoupled models. The one executor
// serving every step runs the pipeline whole.
func TestEnsembleDecoupledStep(t *testing.T) {
	srv, base, client := pipelineServer(t)
	code, conf := getBody(t, base+"/v2/models/repeat_pipeline/config")
	if code != http.StatusOK || !strings.Contains(conf, `"model_transaction_policy":{"decoupled":true}`) {
		t.Errorf("config: %d %s", code, conf)
	}

	sent := srv.InProcess()
	got, emptyFinal := streamPipeline(t, client, repeatPipelineRequest("p1", []int{40, 50, 60, -7}, 300))
	slices.Sort(got) // the post-processing requests may finish in any order
	if want := []string{"-7/3", "40/0", "50/1", "60/2"}; !slices.Equal(got, want) || !emptyFinal {
		t.Errorf("responses %v (empty final %v), want %v then the final flag alone", got, emptyFinal, want)
	}
	// The one executor serves every step: the request goes to it whole,
	// and the decoupled step's responses flow to the next step inside it.
	if carried := srv.InProcess() - sent; carried != 1 {
		t.Errorf("the gateway's bus carried %d requests for the pipeline on one executor, want 1 (the ensemble's stream)", carried)
	}
	if got, emptyFinal := streamPipeline(t, client, repeatPipelineRequest("p0", nil, 0)); len(got) != 0 || !emptyFinal {
		t.Errorf("no element: %v (empty final %v), want the final flag alone", got, emptyFinal)
	}
	bad := repeatPipelineRequest("bad", []int{1, 2}, 0)
	bad.Inputs[1].Shape, bad.RawInputContents[1] = []int64{1}, make([]byte, 4)
	if got, _ := streamPipeline(t, client, bad); len(got) != 1 || got[0] != "error: repeat backend: expected DELAY to have as many elements as IN (2), got 1" {
		t.Errorf("a step's error: %v", got)
	}

	// generate_stream: one server-sent event per response.
	r, err := http.Post(base+"/v2/models/repeat_pipeline/generate_stream", "application/json",
		strings.NewReader(`{"IN":[8,9],"DELAY":[0,0],"WAIT":0}`))
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, ev)
		}
	}
	r.Body.Close()
	slices.Sort(events)
	want := []string{
		`{"model_name":"repeat_pipeline","model_version":"1","OUT":8,"IDX":0}`,
		`{"model_name":"repeat_pipeline","model_version":"1","OUT":9,"IDX":1}`}
	if r.StatusCode != http.StatusOK || !slices.Equal(events, want) {
		t.Errorf("generate_stream: %d %q, want %q", r.StatusCode, events, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = client.ModelInfer(ctx, repeatPipelineRequest("u", []int{1}, 0))
	if st := status.Convert(err); st.Message() != "ModelInfer RPC doesn't support models with decoupled transaction policy" {
		t.Errorf("unary gRPC: %v", err)
	}
	x := post(t, base+"/v2/models/repeat_pipeline/infer", `{"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[1]},`+
		`{"name":"DELAY","shape":[1],"datatype":"UINT32","data":[0]},{"name":"WAIT","shape":[1],"datatype":"UINT32","data":[0]}]}`)
	if x.Status != http.StatusNotImplemented || !strings.Contains(fmt.Sprint(x.Body), "HTTP end point doesn't support models with decoupled transaction policy") {
		t.Errorf("HTTP infer: %d %v", x.Status, x.Body)
	}
}

// TestEnsembleDecoupledStepCancel: cancelling the stream of a pipeline
// that its one executor runs whole reaches the decoupled step inside the
// executor: repeat_int32 stops, having sent far fewer of the responses
// asked for, and the next request is served.
func TestEnsembleDecoupledStepCancel(t *testing.T) {
	_, base, client := pipelineServer(t)

	const n = 200
	in := make([]int, n)
	req := repeatPipelineRequest("long", in, 0)
	delay := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(delay[4*i:], 20) // ms before each response
	}
	req.RawInputContents[1] = delay
	ctx, cancel := context.WithCancel(context.Background())
	st, err := client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r, err := st.Recv(); err != nil || r.GetErrorMessage() != "" {
			t.Fatalf("before the cancel: %v %v", err, r.GetErrorMessage())
		}
	}
	cancel()

	// repeat_int32's request ends long before its 200 responses (4 s):
	// its statistics count it, with few responses made.
	var produced float64
	deadline := time.Now().Add(3 * time.Second)
	for {
		code, body := getBody(t, base+"/v2/models/repeat_int32/stats")
		var st struct {
			ModelStats []struct {
				InferenceStats struct {
					Success struct{ Count float64 } `json:"success"`
					Fail    struct{ Count float64 } `json:"fail"`
				} `json:"inference_stats"`
				ResponseStats map[string]struct {
					Success struct{ Count float64 } `json:"success"`
					Cancel  struct{ Count float64 } `json:"cancel"`
				} `json:"response_stats"`
			} `json:"model_stats"`
		}
		if code == http.StatusOK && json.Unmarshal([]byte(body), &st) == nil && len(st.ModelStats) == 1 {
			ms := st.ModelStats[0]
			if ms.InferenceStats.Success.Count+ms.InferenceStats.Fail.Count >= 1 {
				produced = 0
				for _, rs := range ms.ResponseStats {
					produced += rs.Success.Count + rs.Cancel.Count
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("repeat_int32's request did not end after the cancel: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if produced >= n/2 {
		t.Errorf("repeat_int32 made %v of %d responses after the client cancelled", produced, n)
	}
	if got, _ := streamPipeline(t, client, repeatPipelineRequest("after", []int{5}, 0)); !slices.Equal(got, []string{"5/0"}) {
		t.Errorf("the next request: %v", got)
	}
}
