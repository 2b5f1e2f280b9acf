package observability

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

const simpleBody = `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},` +
	`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`

func postInfer(t *testing.T, url, body, traceparent string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// checkExecutorSpan checks the executor's span of a request: its parent,
// Triton's timestamps as events and the compute phases as children.
func checkExecutorSpan(t *testing.T, spans []span, model, parent string) {
	t.Helper()
	ex := mustSpan(t, spans, model)
	if ex.service != "nereid-executor" || ex.parentID != parent {
		t.Fatalf("executor span %+v: want service nereid-executor under %s%s", ex, parent, describe(spans))
	}
	for _, e := range []string{"QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"} {
		if !slices.Contains(ex.events, e) {
			t.Errorf("executor span lacks event %s: %v", e, ex.events)
		}
	}
	for _, phase := range []string{"queue", "compute_input", "compute_infer", "compute_output"} {
		if s := mustSpan(t, spans, phase); s.parentID != ex.id {
			t.Errorf("%s span's parent %s, want the executor span %s", phase, s.parentID, ex.id)
		}
	}
}

func TestOpenTelemetryTraces(t *testing.T) {
	rcv := startReceiver(t)
	traceFlags := []string{"--trace-config", "mode=opentelemetry", "--trace-config", "opentelemetry,url=" + rcv.addr,
		"--trace-config", "opentelemetry,bsp_schedule_delay=20"}
	c := constellation.NewCluster(t)
	repo := constellation.RepoPath(t, "deploy/model_repository")
	constellation.Start(t, "router", c.Bin.Path("nereid-sequence-router"), append([]string{"--nats-url", c.NATSURL, "--id", "router0"}, traceFlags...)...)
	c.Executor(repo, "ex-1", append([]string{"--load-model", "simple", "--load-model", "simple_sequence", "--load-model", "repeat_int32"}, traceFlags...)...)
	gw := c.Gateway(append([]string{"--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1"}, traceFlags...)...)
	waitReady(t, gw.HTTP()+"/v2/models/simple/ready")
	waitReady(t, gw.HTTP()+"/v2/models/simple_sequence/ready")

	t.Run("client traceparent over HTTP is continued", func(t *testing.T) {
		const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		if code := postInfer(t, gw.HTTP()+"/v2/models/simple/infer", simpleBody, "00-"+traceID+"-"+parent+"-01"); code != 200 {
			t.Fatalf("infer: %d", code)
		}
		spans := rcv.waitTrace(t, traceID, 6)
		root := mustSpan(t, spans, "InferRequest")
		if root.service != "nereid-gateway" || root.parentID != parent {
			t.Fatalf("gateway span %+v, want the client's span %s as parent%s", root, parent, describe(spans))
		}
		checkExecutorSpan(t, spans, "simple", root.id)
	})

	t.Run("gRPC request sampled by rate, traceparent in metadata", func(t *testing.T) {
		g := grpcClient(t, gw.GRPC())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req := &inference.ModelInferRequest{ModelName: "simple", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &inference.InferTensorContents{IntContents: make([]int32, 16)}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &inference.InferTensorContents{IntContents: make([]int32, 16)}},
		}}
		const traceID = "0af7651916cd43dd8448eb211c80319c"
		mctx := metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-b7ad6b7169203331-00")
		if _, err := g.ModelInfer(mctx, req); err != nil {
			t.Fatal(err)
		}
		spans := rcv.waitTrace(t, traceID, 6)
		root := mustSpan(t, spans, "InferRequest")
		if root.parentID != "b7ad6b7169203331" {
			t.Fatalf("gateway span parent %s%s", root.parentID, describe(spans))
		}
		checkExecutorSpan(t, spans, "simple", root.id)
	})

	t.Run("decoupled model over a gRPC stream", func(t *testing.T) {
		waitReady(t, gw.HTTP()+"/v2/models/repeat_int32/ready")
		g := grpcClient(t, gw.GRPC())
		const traceID = "cccccccccccccccccccccccccccccccc"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := g.ModelStreamInfer(metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-dddddddddddddddd-01"))
		if err != nil {
			t.Fatal(err)
		}
		req := &inference.ModelInferRequest{ModelName: "repeat_int32", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "IN", Datatype: "INT32", Shape: []int64{3}, Contents: &inference.InferTensorContents{IntContents: []int32{1, 2, 3}}},
			{Name: "DELAY", Datatype: "UINT32", Shape: []int64{3}, Contents: &inference.InferTensorContents{UintContents: []uint32{0, 0, 0}}},
			{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}, Contents: &inference.InferTensorContents{UintContents: []uint32{0}}},
		}}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			r, err := st.Recv()
			if err != nil || r.GetErrorMessage() != "" {
				t.Fatalf("stream: %v %v", r, err)
			}
		}
		_ = st.CloseSend()
		// The executor's span and its four phases, and the gateway's, which
		// ends after the stream's final flag (its batch may come last).
		spans := rcv.waitTrace(t, traceID, 6)
		root := mustSpan(t, spans, "InferRequest")
		ex := mustSpan(t, spans, "repeat_int32")
		if root.parentID != "dddddddddddddddd" || ex.parentID != root.id || ex.service != "nereid-executor" {
			t.Fatalf("decoupled request's spans:%s", describe(spans))
		}
	})

	t.Run("sequence request crosses the router", func(t *testing.T) {
		const traceID = "11111111111111111111111111111111"
		body := `{"parameters":{"sequence_id":42,"sequence_start":true,"sequence_end":true},"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[5]}]}`
		if code := postInfer(t, gw.HTTP()+"/v2/models/simple_sequence/infer", body, "00-"+traceID+"-2222222222222222-01"); code != 200 {
			t.Fatalf("infer: %d", code)
		}
		spans := rcv.waitTrace(t, traceID, 7)
		root := mustSpan(t, spans, "InferRequest")
		// A router that was not serving the model yet refused the request
		// (the gateway sent it again): its span is in the trace too. The
		// executor's span hangs under the router span that dispatched it.
		ex := mustSpan(t, spans, "simple_sequence")
		var router span
		for _, s := range spans {
			if s.name == "sequence_batcher" && s.id == ex.parentID {
				router = s
			}
		}
		if router.service != "nereid-sequence-router" || router.parentID != root.id {
			t.Fatalf("the executor's parent %+v, want a router span under the gateway's %s%s", router, root.id, describe(spans))
		}
		checkExecutorSpan(t, spans, "simple_sequence", router.id)
	})

	t.Run("a request that fails in the executor", func(t *testing.T) {
		const traceID = "33333333333333333333333333333333"
		bad := strings.Replace(simpleBody, `"INPUT1","shape":[1,16]`, `"INPUT1","shape":[1,15]`, 1)
		bad = strings.Replace(bad, `[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]`, `[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]`, 1)
		if code := postInfer(t, gw.HTTP()+"/v2/models/simple/infer", bad, "00-"+traceID+"-4444444444444444-01"); code != 400 {
			t.Fatalf("bad request: %d, want 400", code)
		}
		spans := rcv.waitTrace(t, traceID, 2)
		root := mustSpan(t, spans, "InferRequest")
		ex := mustSpan(t, spans, "simple")
		if !root.failed || !ex.failed || ex.parentID != root.id || ex.service != "nereid-executor" {
			t.Fatalf("failed request's spans:%s", describe(spans))
		}
	})

	t.Run("rate and count", func(t *testing.T) {
		code, got := call(t, http.MethodPost, gw.HTTP()+"/v2/trace/setting", `{"trace_rate":"2","trace_count":"2"}`)
		if code != 200 {
			t.Fatalf("trace setting: %d %v", code, got)
		}
		before := len(rcv.rootTraces())
		for range 7 {
			if code := postInfer(t, gw.HTTP()+"/v2/models/simple/infer", simpleBody, ""); code != 200 {
				t.Fatalf("infer: %d", code)
			}
		}
		// A request the client traces is always traced; its spans leave
		// the gateway after those of the requests before it.
		const marker = "55555555555555555555555555555555"
		postInfer(t, gw.HTTP()+"/v2/models/simple/infer", simpleBody, "00-"+marker+"-6666666666666666-01")
		rcv.waitTrace(t, marker, 6)
		if n := len(rcv.rootTraces()) - before; n != 2 {
			t.Fatalf("%d requests traced out of 7 at rate 2, count 2; want 2", n)
		}
		_, got = call(t, http.MethodGet, gw.HTTP()+"/v2/trace/setting", "")
		if got["trace_count"] != "0" {
			t.Logf("trace_count after the traces: %v", got["trace_count"])
		}
	})

	t.Run("tracing off: nothing is exported", func(t *testing.T) {
		if code, _ := call(t, http.MethodPost, gw.HTTP()+"/v2/trace/setting", `{"trace_level":["OFF"],"trace_count":null,"trace_rate":"1"}`); code != 200 {
			t.Fatal("turning tracing off failed")
		}
		before := len(rcv.rootTraces())
		const ignored = "77777777777777777777777777777777"
		for range 3 {
			postInfer(t, gw.HTTP()+"/v2/models/simple/infer", simpleBody, "00-"+ignored+"-8888888888888888-01")
		}
		// Turn it on again and trace a marker: everything before it has
		// been exported by then.
		call(t, http.MethodPost, gw.HTTP()+"/v2/trace/setting", `{"trace_level":["TIMESTAMPS"]}`)
		const marker = "99999999999999999999999999999999"
		postInfer(t, gw.HTTP()+"/v2/models/simple/infer", simpleBody, "00-"+marker+"-aaaaaaaaaaaaaaaa-01")
		rcv.waitTrace(t, marker, 6)
		if n := len(rcv.trace(ignored)); n != 0 {
			t.Fatalf("%d spans exported while tracing was off", n)
		}
		if n := len(rcv.rootTraces()) - before; n != 0 {
			t.Fatalf("%d traces started while tracing was off", n)
		}
	})
}
