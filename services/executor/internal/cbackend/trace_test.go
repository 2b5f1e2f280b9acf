//go:build cgo

package cbackend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// echoServer serves the BLS calls of the nbls test backend in process:
// model "cid" answers INPUT0 as OUTPUT0. It keeps the trace context each
// call arrived with.
type echoServer struct {
	mu   sync.Mutex
	seen []trace.SpanContext
}

func (s *echoServer) Infer(ctx context.Context, req *inference.ModelInferRequest, emit func(*inference.ModelInferResponse, error, bool) error) error {
	s.mu.Lock()
	s.seen = append(s.seen, trace.SpanContextFromContext(ctx))
	s.mu.Unlock()
	if req.GetModelName() != "cid" || len(req.GetInputs()) != 1 {
		return fmt.Errorf("unexpected request %v", req)
	}
	in := req.GetInputs()[0]
	return emit(&inference.ModelInferResponse{
		ModelName: "cid", ModelVersion: "1", Id: req.GetId(),
		Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "OUTPUT0", Datatype: in.GetDatatype(), Shape: in.GetShape()}},
		RawOutputContents: req.GetRawInputContents(),
	}, nil, true)
}

func (s *echoServer) ModelReady(context.Context, string, int64) (bool, error)     { return true, nil }
func (s *echoServer) ModelDecoupled(context.Context, string, int64) (bool, error) { return false, nil }
func (s *echoServer) LoadModel(context.Context, string, string, map[string][]byte) error {
	return errors.New("not served")
}
func (s *echoServer) UnloadModel(context.Context, string, bool) error {
	return errors.New("not served")
}

// TestRequestTraceFollowsTheSpan runs the BLS test backend on a traced
// and an untraced request: the traced one's trace carries its span's
// context, its activities land on the span (BLS_CALL_START/END as a child
// span, BLS_FORWARDED as an event), and the child trace it hands to
// TRITONSERVER_ServerInferAsync is a span, child of the open activity
// span, under which the BLS request travels; the untraced one has no
// trace (null, as in Triton) and its BLS request no trace context.
func TestRequestTraceFollowsTheSpan(t *testing.T) {
	srv := &echoServer{}
	m := testModel(t, "nbls", identityConfig("bls", "nbls"), srv)
	in, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "bls_0", Kind: inference.ModelInstanceGroup_KIND_CPU, Stats: &statsRecorder{}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Finalize()

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tctx, span := tp.Tracer("test").Start(context.Background(), "bls")

	run := func(ctx context.Context) *backend.Response {
		var got *backend.Response
		r := backend.NewRequest(ctx, func(_ *backend.Request, resp *backend.Response) { got = resp })
		r.ID = "r1"
		r.BatchSize = 1
		r.Inputs = []backend.Input{{Name: "INPUT0", DataType: tensor.FP32, Shape: []int64{1, 1}, Data: []byte{1, 2, 3, 4}}}
		r.RequestedOutputs = []string{"OUTPUT0"}
		if err := in.Execute(context.Background(), []*backend.Request{r}); err != nil {
			t.Fatal(err)
		}
		if got == nil || got.Err != nil || len(got.Outputs) != 1 || string(got.Outputs[0].Data) != "\x01\x02\x03\x04" {
			t.Fatalf("response: %+v", got)
		}
		return got
	}

	traced := run(tctx)
	span.End()
	sc := span.SpanContext()
	want := fmt.Sprintf(`{"traceparent":"00-%s-%s-01"}`, sc.TraceID(), sc.SpanID())
	if got := traced.Parameters["trace_context"]; got != want {
		t.Fatalf("trace context %v, want %s", got, want)
	}
	id, _ := traced.Parameters["trace_id"].(int64)
	if id <= 0 {
		t.Fatalf("trace id %v", traced.Parameters["trace_id"])
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	call, cid := spans["BLS_CALL"], spans["cid"]
	if call == nil || cid == nil {
		t.Fatalf("spans %v: want BLS_CALL and cid", spans)
	}
	if call.Parent().SpanID() != sc.SpanID() || cid.Parent().SpanID() != call.SpanContext().SpanID() {
		t.Fatalf("BLS_CALL's parent %s, cid's parent %s; want %s and %s", call.Parent().SpanID(), cid.Parent().SpanID(), sc.SpanID(), call.SpanContext().SpanID())
	}
	if !hasEvents(call, "BLS_CALL_START", "BLS_CALL_END") || !hasEvents(spans["bls"], "BLS_FORWARDED") {
		t.Fatalf("events: BLS_CALL %v, request %v", call.Events(), spans["bls"].Events())
	}
	attrs := attribute.NewSet(cid.Attributes()...)
	if v, _ := attrs.Value("triton.trace_parent_id"); v.AsInt64() != id {
		t.Fatalf("cid span attributes %v: want triton.trace_parent_id %d", cid.Attributes(), id)
	}
	if len(srv.seen) != 1 || srv.seen[0].SpanID() != cid.SpanContext().SpanID() || srv.seen[0].TraceID() != sc.TraceID() {
		t.Fatalf("the BLS request travelled with %v, want the cid span %v", srv.seen, cid.SpanContext())
	}

	untraced := run(context.Background())
	if _, ok := untraced.Parameters["trace_context"]; ok {
		t.Fatalf("an untraced request has a trace: %v", untraced.Parameters)
	}
	if len(srv.seen) != 2 || srv.seen[1].IsValid() {
		t.Fatalf("the untraced BLS request travelled with %v", srv.seen[1:])
	}
}

func hasEvents(s sdktrace.ReadOnlySpan, names ...string) bool {
	if s == nil {
		return false
	}
	have := map[string]bool{}
	for _, e := range s.Events() {
		have[e.Name] = true
	}
	for _, n := range names {
		if !have[n] {
			return false
		}
	}
	return true
}
