package cbackend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// TestCBackendTraces: the BLS test backend (cbls, on an executor of its
// own) asks for its request's Triton trace, answers with the trace's
// context, and hands its call to cid (on another executor) a child trace.
// A request the client traces (traceparent, over HTTP and gRPC) gets the
// trace of the executor's span; the child trace is a span under the
// backend's BLS_CALL activity span, and cid's executor span hangs from
// it, all in the client's trace, collected over OTLP. A request nobody
// traces gets no trace (no parameter).
func TestCBackendTraces(t *testing.T) {
	backendDir, repo := setup(t)
	rcv := constellation.StartOTLPReceiver(t)
	traceFlags := []string{"--trace-config", "mode=opentelemetry", "--trace-config", "opentelemetry,url=" + rcv.Addr,
		"--trace-config", "opentelemetry,bsp_schedule_delay=20"}
	c := constellation.NewCluster(t)
	c.Executor(repo, "exec-cid", append([]string{"--backend-directory", backendDir, "--load-model", "cid"}, traceFlags...)...)
	c.Executor(repo, "exec-bls", append([]string{"--backend-directory", backendDir, "--load-model", "cbls"}, traceFlags...)...)
	// Only requests with a traceparent are traced: 1 in a million otherwise.
	gw := c.Gateway(append([]string{"--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1000000"}, traceFlags...)...)
	for _, m := range []string{"cid", "cbls"} {
		if err := constellation.WaitHTTP(gw.HTTP()+"/v2/models/"+m+"/ready", 200, 30*time.Second); err != nil {
			t.Fatalf("model %s: %v", m, err)
		}
	}
	const body = `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,2],"data":[1,2]}]}`
	httpInfer := func(t *testing.T, traceparent string) map[string]any {
		req, err := http.NewRequest(http.MethodPost, gw.HTTP()+"/v2/models/cbls/infer", bytes.NewBufferString(body))
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
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var r struct {
			Parameters map[string]any `json:"parameters"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		return r.Parameters
	}

	// check finds the spans of the traced BLS request in trace id and
	// returns the span id its backend's trace context names.
	check := func(t *testing.T, traceID, traceContext string) {
		t.Helper()
		var ctx struct {
			Traceparent string `json:"traceparent"`
		}
		if err := json.Unmarshal([]byte(traceContext), &ctx); err != nil || len(ctx.Traceparent) != 55 || ctx.Traceparent[3:35] != traceID {
			t.Fatalf("trace context %q: want a traceparent in trace %s", traceContext, traceID)
		}
		execSpan := ctx.Traceparent[36:52]
		var spans []constellation.Span
		var bls, call, child, cid constellation.Span
		found := constellation.WaitFor(30*time.Second, func() bool {
			spans = rcv.Trace(traceID)
			bls, call, child, cid = constellation.Span{}, constellation.Span{}, constellation.Span{}, constellation.Span{}
			for _, s := range spans {
				switch {
				case s.ID == execSpan:
					bls = s
				case s.Name == "BLS_CALL":
					call = s
				case s.Name == "cid" && s.Attributes["triton.trace_parent_id"] != "":
					child = s
				case s.Name == "cid":
					cid = s
				}
			}
			return bls.ID != "" && call.ID != "" && child.ID != "" && cid.ID != ""
		})
		if !found {
			t.Fatalf("trace %s: want the cbls executor span %s, BLS_CALL, the child trace's span and cid's executor span; have %+v", traceID, execSpan, spans)
		}
		if bls.Name != "cbls" || bls.Service != "nereid-executor" || call.ParentID != bls.ID || child.ParentID != call.ID || cid.ParentID != child.ID {
			t.Fatalf("spans: cbls %+v, BLS_CALL %+v, child trace %+v, cid %+v", bls, call, child, cid)
		}
		if fmt.Sprint(call.Events) != "[BLS_CALL_START BLS_CALL_END]" {
			t.Fatalf("BLS_CALL events %v", call.Events)
		}
		hasForwarded := false
		for _, e := range bls.Events {
			hasForwarded = hasForwarded || e == "BLS_FORWARDED"
		}
		if !hasForwarded {
			t.Fatalf("cbls span events %v: want BLS_FORWARDED", bls.Events)
		}
	}

	t.Run("HTTP", func(t *testing.T) {
		const traceID = "5bf92f3577b34da6a3ce929d0e0e4736"
		params := httpInfer(t, "00-"+traceID+"-00f067aa0ba902b7-01")
		if id, _ := params["trace_id"].(float64); id <= 0 {
			t.Fatalf("parameters %v: want the trace's id", params)
		}
		tc, _ := params["trace_context"].(string)
		check(t, traceID, tc)
	})

	t.Run("gRPC", func(t *testing.T) {
		cc, err := grpc.NewClient(gw.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		const traceID = "1af7651916cd43dd8448eb211c80319c"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-b7ad6b7169203331-01")
		resp, err := inference.NewGRPCInferenceServiceClient(cc).ModelInfer(ctx, &inference.ModelInferRequest{
			ModelName:        "cbls",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1, 2}}},
			RawInputContents: [][]byte{make([]byte, 8)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetParameters()["trace_id"].GetInt64Param() <= 0 {
			t.Fatalf("parameters %v: want the trace's id", resp.GetParameters())
		}
		check(t, traceID, resp.GetParameters()["trace_context"].GetStringParam())
	})

	t.Run("untraced", func(t *testing.T) {
		if params := httpInfer(t, ""); params["trace_context"] != nil || params["trace_id"] != nil {
			t.Fatalf("an untraced request has a trace: %v", params)
		}
	})
}
