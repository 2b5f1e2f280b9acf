package standalone

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
)

// startEnsembles serves testdata/ensemble (simple, simple_sequence and
// ensembles over them, two of them invalid) in one process.
func startEnsembles(t *testing.T) string {
	t.Helper()
	cfg := testConfig(t)
	cfg.ModelRepository = "testdata/ensemble"
	cfg.Models = nil
	cfg.ExitOnError = false
	cfg.AllowMetrics = false
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, srv)
	base := "http://" + srv.Gateway().HTTPAddr()
	for _, m := range []string{"simple_ensemble", "nested_ensemble", "ensemble_chain", "ensemble_sequence"} {
		waitModel(t, base, m)
	}
	return base
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// TestEnsembleHTTP ports L0_simple_ensemble over HTTP: the ensemble over
// simple adds and subtracts, only the requested outputs come back under
// the ensemble's names, two chained steps and a nested ensemble compute
// through their steps, metadata and config are the ensemble's, the
// repository index lists invalid ensembles with Triton's reasons, and the
// ensemble has statistics of its own while simple counts the executions.
func TestEnsembleHTTP(t *testing.T) {
	base := startEnsembles(t)
	in0 := seq16(func(i int) int { return i })
	in1 := seq16(func(int) int { return 1 })
	sum := seq16(func(i int) int { return i + 1 })
	diff := seq16(func(i int) int { return i - 1 })
	twice0 := seq16(func(i int) int { return 2 * i })
	twice1 := seq16(func(int) int { return 2 })
	before := stats(t, base, "simple")

	for _, tc := range []struct {
		model        string
		want0, want1 []int
	}{
		{"simple_ensemble", sum, diff},
		{"nested_ensemble", sum, diff},
		{"ensemble_chain", twice0, twice1}, // (a+b)+(a-b), (a+b)-(a-b)
	} {
		x := post(t, base+"/v2/models/"+tc.model+"/infer", simpleRequest("r-"+tc.model, in0, in1))
		if x.Status != http.StatusOK {
			t.Fatalf("%s: %d %v", tc.model, x.Status, x.Body)
		}
		body := x.Body.(map[string]any)
		if body["model_name"] != tc.model || body["model_version"] != "1" || body["id"] != "r-"+tc.model {
			t.Errorf("%s: header %v", tc.model, body)
		}
		outs := map[string]any{}
		for _, o := range body["outputs"].([]any) {
			o := o.(map[string]any)
			outs[o["name"].(string)] = o["data"]
			if o["datatype"] != "INT32" || !reflect.DeepEqual(o["shape"], []any{1.0, 16.0}) {
				t.Errorf("%s: output %v", tc.model, o)
			}
		}
		if ints(toInts(outs["OUTPUT0"])) != ints(tc.want0) || ints(toInts(outs["OUTPUT1"])) != ints(tc.want1) {
			t.Errorf("%s: outputs %v, want %v and %v", tc.model, outs, tc.want0, tc.want1)
		}
	}
	// Only the requested output, under the ensemble's name.
	req := strings.Replace(simpleRequest("only", in0, in1), `]}]}`, `]}],"outputs":[{"name":"OUTPUT1"}]}`, 1)
	x := post(t, base+"/v2/models/simple_ensemble/infer", req)
	if outs := x.Body.(map[string]any)["outputs"].([]any); x.Status != http.StatusOK || len(outs) != 1 || outs[0].(map[string]any)["name"] != "OUTPUT1" {
		t.Errorf("requested OUTPUT1: %d %v", x.Status, x.Body)
	}
	// The ensemble's own checks, as Triton normalizes the request.
	x = post(t, base+"/v2/models/simple_ensemble/infer", `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":`+ints(in0)+`}]}`)
	if x.Status != http.StatusBadRequest || !strings.Contains(x.Body.(map[string]any)["error"].(string), "expected 2 inputs but got 1 inputs for model 'simple_ensemble'") {
		t.Errorf("missing input: %d %v", x.Status, x.Body)
	}

	code, meta := getBody(t, base+"/v2/models/simple_ensemble")
	if code != http.StatusOK || !strings.Contains(meta, `"platform":"ensemble"`) || !strings.Contains(meta, `"name":"INPUT0"`) {
		t.Errorf("metadata: %d %s", code, meta)
	}
	code, conf := getBody(t, base+"/v2/models/simple_ensemble/config")
	if code != http.StatusOK || !strings.Contains(conf, `"ensemble_scheduling"`) || !strings.Contains(conf, `"model_name":"simple"`) {
		t.Errorf("config: %d %s", code, conf)
	}

	idx := post(t, base+"/v2/repository/index", `{}`)
	reasons := map[string]string{}
	for _, e := range idx.Body.([]any) {
		e := e.(map[string]any)
		r, _ := e["reason"].(string)
		reasons[e["name"].(string)] = e["state"].(string) + " " + r
	}
	for name, want := range map[string]string{
		"simple_ensemble":    "READY ",
		"nested_ensemble":    "READY ",
		"ensemble_bad_dtype": "UNAVAILABLE in ensemble ensemble_bad_dtype, ensemble tensor INPUT0: inconsistent data type: TYPE_FP32 is inferred from model ensemble_bad_dtype while TYPE_INT32 is inferred from model simple",
		"ensemble_missing":   "UNAVAILABLE ensemble ensemble_missing contains models that are not available or ambiguous: not_in_repository",
	} {
		if reasons[name] != want {
			t.Errorf("index %s: %q, want %q", name, reasons[name], want)
		}
	}

	// simple_ensemble ran 3 times (once nested); simple executed once
	// per step: 1 + 1 + 2 + 1 + 0 (the refused request ran no step).
	if s := stats(t, base, "simple_ensemble"); s.Success != 3 || s.Fail != 1 || s.Execution != 3 || s.Inference != 3 || !s.SuccessNs {
		t.Errorf("simple_ensemble stats %+v", s)
	}
	if after := stats(t, base, "simple"); after.Inference-before.Inference != 5 {
		t.Errorf("simple ran %v requests, want 5", after.Inference-before.Inference)
	}
}

func toInts(v any) []int {
	var out []int
	for _, x := range v.([]any) {
		out = append(out, int(x.(float64)))
	}
	return out
}

func int32Bytes(v []int) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(x)))
	}
	return b
}

// TestEnsembleGRPC runs the ensembles over gRPC, and an ensemble over a
// sequence model with the request's correlation id and flags: the step
// joins the sequence, and a sequence that does not start fails with the
// sequence batcher's message naming the step's model.
func TestEnsembleGRPC(t *testing.T) {
	startEnsemblesGRPC := func() inference.GRPCInferenceServiceClient {
		cfg := testConfig(t)
		cfg.ModelRepository = "testdata/ensemble"
		cfg.Models = nil
		cfg.ExitOnError = false
		cfg.AllowMetrics = false
		srv, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		runReady(t, srv)
		for _, m := range []string{"simple_ensemble", "ensemble_sequence"} {
			waitModel(t, "http://"+srv.Gateway().HTTPAddr(), m)
		}
		conn, err := grpc.NewClient(srv.Gateway().GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return inference.NewGRPCInferenceServiceClient(conn)
	}
	client := startEnsemblesGRPC()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	in0 := seq16(func(i int) int { return i })
	in1 := seq16(func(int) int { return 3 })
	resp, err := client.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "simple_ensemble", Id: "g1",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}}},
		RawInputContents: [][]byte{int32Bytes(in0), int32Bytes(in1)}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetModelName() != "simple_ensemble" || resp.GetId() != "g1" || len(resp.GetOutputs()) != 2 ||
		string(resp.GetRawOutputContents()[0]) != string(int32Bytes(seq16(func(i int) int { return i + 3 }))) ||
		string(resp.GetRawOutputContents()[1]) != string(int32Bytes(seq16(func(i int) int { return i - 3 }))) {
		t.Errorf("simple_ensemble over gRPC: %v", resp)
	}

	seq := func(id int64, v int, start, end bool) (*inference.ModelInferResponse, error) {
		return client.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "ensemble_sequence",
			Parameters: map[string]*inference.InferParameter{
				"sequence_id":    {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: id}},
				"sequence_start": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: start}},
				"sequence_end":   {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: end}}},
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1, 1}}},
			RawInputContents: [][]byte{int32Bytes([]int{v})}})
	}
	var got []int
	for i, v := range []int{5, 6, 7} {
		resp, err := seq(77, v, i == 0, i == 2)
		if err != nil {
			t.Fatalf("sequence request %d: %v", i, err)
		}
		got = append(got, int(int32(binary.LittleEndian.Uint32(resp.GetRawOutputContents()[0]))))
	}
	// simple_sequence answers INPUT + START: the ensemble request's
	// START flag reached the step, and the sequence went on.
	if !reflect.DeepEqual(got, []int{6, 6, 7}) {
		t.Errorf("sequence outputs %v, want [6 6 7]", got)
	}
	_, err = seq(78, 1, false, false)
	if st := status.Convert(err); err == nil || !strings.Contains(st.Message(), "simple_sequence") {
		t.Errorf("sequence without start: %v", err)
	}
}
