package ensemble

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// gatewaySpans are the gateway's spans of a trace, once n have arrived.
func gatewaySpans(t *testing.T, rcv *constellation.OTLPReceiver, traceID string, n int) []constellation.Span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var out []constellation.Span
		for _, s := range rcv.Trace(traceID) {
			if s.Service == "nereid-gateway" {
				out = append(out, s)
			}
		}
		if len(out) >= n {
			time.Sleep(300 * time.Millisecond) // none more comes
			return rcv.Trace(traceID)
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: %d gateway spans, want %d: %+v", traceID, len(out), n, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// children are the models of the gateway spans whose parent is id, sorted.
func children(spans []constellation.Span, id string) []string {
	var out []string
	for _, s := range spans {
		if s.Service == "nereid-gateway" && s.ParentID == id {
			out = append(out, s.Attributes["triton.model_name"])
		}
	}
	slices.Sort(out)
	return out
}

func spanOf(t *testing.T, spans []constellation.Span, model, parent string) constellation.Span {
	t.Helper()
	for _, s := range spans {
		if s.Service == "nereid-gateway" && s.Attributes["triton.model_name"] == model && s.ParentID == parent {
			return s
		}
	}
	t.Fatalf("no gateway span of %s under %s: %+v", model, parent, spans)
	return constellation.Span{}
}

// otelArgs are the trace settings that export every request's spans to rcv.
func otelArgs(rcv *constellation.OTLPReceiver) []string {
	return []string{"--trace-config", "mode=opentelemetry", "--trace-config", "opentelemetry,url=" + rcv.Addr,
		"--trace-config", "opentelemetry,bsp_schedule_delay=20", "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1"}
}

// simpleBody is simple's inputs in a request over HTTP.
const simpleBody = `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},` +
	`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`

// postTraced sends body to model over HTTP under the client's trace
// context (traceID, span client) and fails the test unless it answers 200.
func postTraced(t *testing.T, g *constellation.Gateway, model, traceID, client, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.HTTP()+"/v2/models/"+model+"/infer", bytes.NewBufferString(body))
	req.Header.Set("traceparent", "00-"+traceID+"-"+client+"-01")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d", model, r.StatusCode)
	}
}

// streamTraced sends in as IN to a pipeline over repeat_int32 (model) on
// a gRPC stream under the client's trace context, and returns its
// responses, one per element of IN (no empty final one unless asked).
func streamTraced(t *testing.T, g *constellation.Gateway, model, traceID, client string, in []int32) []*inference.ModelInferResponse {
	t.Helper()
	conn, err := grpc.NewClient(g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := inference.NewGRPCInferenceServiceClient(conn).ModelStreamInfer(
		metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-"+client+"-01"))
	if err != nil {
		t.Fatal(err)
	}
	err = st.Send(&inference.ModelInferRequest{ModelName: model, Inputs: []*inference.ModelInferRequest_InferInputTensor{
		{Name: "IN", Datatype: "INT32", Shape: []int64{int64(len(in))}, Contents: &inference.InferTensorContents{IntContents: in}},
		{Name: "DELAY", Datatype: "UINT32", Shape: []int64{int64(len(in))}, Contents: &inference.InferTensorContents{UintContents: make([]uint32, len(in))}},
		{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}, Contents: &inference.InferTensorContents{UintContents: []uint32{0}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var out []*inference.ModelInferResponse
	for range in {
		r, err := st.Recv()
		if err != nil || r.GetErrorMessage() != "" {
			t.Fatalf("%s's stream: %v %v", model, r, err)
		}
		out = append(out, r.GetInferResponse())
	}
	return out
}

// wholeRepo is one repository holding exa's and exb's models, and the
// extra configurations given by name: one executor serves every step.
func wholeRepo(t *testing.T, extra map[string]string) string {
	t.Helper()
	repo := t.TempDir()
	for _, dir := range []string{"e2e/ensemble/testdata/exa", "e2e/ensemble/testdata/exb"} {
		if err := os.CopyFS(repo, os.DirFS(constellation.RepoPath(t, dir))); err != nil {
			t.Fatal(err)
		}
	}
	for name, cfg := range extra {
		if err := os.MkdirAll(filepath.Join(repo, name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return repo
}

// TestEnsembleTraceSpans: a traced ensemble request has one span per step
// request under the request's span, as Triton spawns a child trace per
// step: nested_ensemble over HTTP with the client's traceparent (its step
// simple_ensemble under it, and simple under that), and repeat_pipeline
// over a gRPC stream (identity_int32, repeat_int32, and identity_int32
// once per response of repeat_int32).
func TestEnsembleTraceSpans(t *testing.T) {
	rcv := constellation.StartOTLPReceiver(t)
	c := constellation.NewCluster(t)
	c.Executor(constellation.RepoPath(t, "e2e/ensemble/testdata/exa"), "ex-a")
	c.Executor(constellation.RepoPath(t, "e2e/ensemble/testdata/exb"), "ex-b")
	g := c.Gateway(otelArgs(rcv)...)
	waitReady(t, g, "simple", "nested_ensemble", "repeat_int32", "repeat_pipeline")

	const traceID, client = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	postTraced(t, g, "nested_ensemble", traceID, client, simpleBody)
	spans := gatewaySpans(t, rcv, traceID, 3)
	root := spanOf(t, spans, "nested_ensemble", client)
	inner := spanOf(t, spans, "simple_ensemble", root.ID)
	spanOf(t, spans, "simple", inner.ID)
	if got := children(spans, root.ID); !slices.Equal(got, []string{"simple_ensemble"}) {
		t.Errorf("steps under nested_ensemble's span: %v", got)
	}
	if got := children(spans, client); !slices.Equal(got, []string{"nested_ensemble"}) {
		t.Errorf("spans under the client's: %v, want the request's alone", got)
	}

	const streamTrace, streamClient = "cccccccccccccccccccccccccccccccc", "dddddddddddddddd"
	streamTraced(t, g, "repeat_pipeline", streamTrace, streamClient, []int32{5, 6})
	spans = gatewaySpans(t, rcv, streamTrace, 5)
	root = spanOf(t, spans, "repeat_pipeline", streamClient)
	if got, want := children(spans, root.ID), []string{"identity_int32", "identity_int32", "identity_int32", "repeat_int32"}; !slices.Equal(got, want) {
		t.Errorf("steps under repeat_pipeline's span: %v, want %v", got, want)
	}
}

// spansOf are the spans of a trace once n of them come from service.
func spansOf(t *testing.T, rcv *constellation.OTLPReceiver, traceID, service string, n int) []constellation.Span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := 0
		for _, s := range rcv.Trace(traceID) {
			if s.Service == service {
				got++
			}
		}
		if got >= n {
			time.Sleep(300 * time.Millisecond) // none more comes
			return rcv.Trace(traceID)
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: %d spans of %s, want %d: %+v", traceID, got, service, n, rcv.Trace(traceID))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stepSpans are the models of the step spans ("InferRequest") of service
// under parent, sorted.
func stepSpans(spans []constellation.Span, service, parent string) []string {
	var out []string
	for _, s := range spans {
		if s.Service == service && s.ParentID == parent && s.Name == "InferRequest" {
			out = append(out, s.Attributes["triton.model_name"])
		}
	}
	slices.Sort(out)
	return out
}

// TestEnsembleTraceSpansWhole: a traced request to an ensemble whose steps
// one executor all serves goes to that executor whole, and the trace still
// has one span per step under the request's span, made by the executor:
// nested_ensemble over HTTP (simple_ensemble under the request's span, simple
// under that, each with the model's own span under it), and
// repeat_pipeline over a gRPC stream. The gateway makes no step span: the
// steps did not run there.
func TestEnsembleTraceSpansWhole(t *testing.T) {
	rcv := constellation.StartOTLPReceiver(t)
	c := constellation.NewCluster(t)
	c.Executor(wholeRepo(t, nil), "ex-all", otelArgs(rcv)...)
	g := c.Gateway(otelArgs(rcv)...)
	waitReady(t, g, "simple", "nested_ensemble", "repeat_int32", "repeat_pipeline")

	const traceID, client = "5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"
	postTraced(t, g, "nested_ensemble", traceID, client, simpleBody)
	// The executor's: the two steps' spans and simple's own.
	spans := spansOf(t, rcv, traceID, "nereid-executor", 3)
	root := spanOf(t, spans, "nested_ensemble", client)
	if got := stepSpans(spans, "nereid-executor", root.ID); !slices.Equal(got, []string{"simple_ensemble"}) {
		t.Fatalf("executor step spans under nested_ensemble's: %v, want [simple_ensemble]\n%+v", got, spans)
	}
	var inner constellation.Span
	for _, s := range spans {
		if s.Service == "nereid-executor" && s.ParentID == root.ID {
			inner = s
		}
	}
	if got := stepSpans(spans, "nereid-executor", inner.ID); !slices.Equal(got, []string{"simple"}) {
		t.Errorf("executor step spans under simple_ensemble's: %v, want [simple]\n%+v", got, spans)
	}
	if got := children(spans, root.ID); len(got) != 0 {
		t.Errorf("gateway spans under the request's: %v, want none (the executor ran the steps)", got)
	}

	const streamTrace, streamClient = "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", "ffffffffffffffff"
	streamTraced(t, g, "repeat_pipeline", streamTrace, streamClient, []int32{5, 6})
	spans = spansOf(t, rcv, streamTrace, "nereid-executor", 8)
	root = spanOf(t, spans, "repeat_pipeline", streamClient)
	if got, want := stepSpans(spans, "nereid-executor", root.ID), []string{"identity_int32", "identity_int32", "identity_int32", "repeat_int32"}; !slices.Equal(got, want) {
		t.Errorf("executor step spans under repeat_pipeline's: %v, want %v\n%+v", got, want, spans)
	}
}

// outerPipeline is an ensemble over repeat_pipeline (decoupled) whose
// responses each go through identity_int32 once more.
const outerPipeline = `name: "outer_pipeline"
platform: "ensemble"
max_batch_size: 0
input [
  { name: "IN", data_type: TYPE_INT32, dims: [ -1 ] },
  { name: "DELAY", data_type: TYPE_UINT32, dims: [ -1 ] },
  { name: "WAIT", data_type: TYPE_UINT32, dims: [ 1 ] }
]
output [
  { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] },
  { name: "IDX", data_type: TYPE_UINT32, dims: [ 1 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "repeat_pipeline"
      model_version: -1
      input_map { key: "IN" value: "IN" }
      input_map { key: "DELAY" value: "DELAY" }
      input_map { key: "WAIT" value: "WAIT" }
      output_map { key: "OUT" value: "inner_out" }
      output_map { key: "IDX" value: "IDX" }
    },
    {
      model_name: "identity_int32"
      model_version: -1
      input_map { key: "INPUT0" value: "inner_out" }
      output_map { key: "OUTPUT0" value: "OUT" }
    }
  ]
}
`

// TestNestedDecoupledEnsembleWhole: an ensemble whose step is a decoupled
// ensemble, every model on one executor, runs there whole: its responses
// stream as the inner ensemble's do (one per element of IN, then the final
// flag), and the trace shows the executor running the steps (the inner
// ensemble's under its step's span), none of them on the gateway.
func TestNestedDecoupledEnsembleWhole(t *testing.T) {
	rcv := constellation.StartOTLPReceiver(t)
	c := constellation.NewCluster(t)
	c.Executor(wholeRepo(t, map[string]string{"outer_pipeline": outerPipeline}), "ex-all", otelArgs(rcv)...)
	g := c.Gateway(otelArgs(rcv)...)
	waitReady(t, g, "repeat_pipeline", "outer_pipeline")

	const traceID, client = "abababababababababababababababab", "cdcdcdcdcdcdcdcd"
	var outs []int32
	for _, resp := range streamTraced(t, g, "outer_pipeline", traceID, client, []int32{5, 6, 7}) {
		for i, o := range resp.GetOutputs() {
			if o.GetName() == "OUT" {
				outs = append(outs, int32(binary.LittleEndian.Uint32(resp.GetRawOutputContents()[i])))
			}
		}
	}
	// The responses of the three elements run their last step
	// concurrently: they come in any order.
	slices.Sort(outs)
	if !slices.Equal(outs, []int32{5, 6, 7}) {
		t.Fatalf("outer_pipeline streamed OUT %v, want 5, 6 and 7", outs)
	}
	// The executor's step spans: repeat_pipeline's and identity_int32's
	// (one per response) under the request's, the inner ensemble's three
	// models' under repeat_pipeline's, and the models' own.
	spans := spansOf(t, rcv, traceID, "nereid-executor", 10)
	root := spanOf(t, spans, "outer_pipeline", client)
	if got, want := stepSpans(spans, "nereid-executor", root.ID), []string{"identity_int32", "identity_int32", "identity_int32", "repeat_pipeline"}; !slices.Equal(got, want) {
		t.Fatalf("executor step spans under outer_pipeline's: %v, want %v\n%+v", got, want, spans)
	}
	if got := children(spans, root.ID); len(got) != 0 {
		t.Errorf("gateway spans under the request's: %v, want none (the executor ran the steps)", got)
	}
}
