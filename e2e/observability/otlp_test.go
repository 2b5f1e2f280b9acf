package observability

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// receiver is an OTLP/gRPC trace collector: the real protocol, served on a
// port of its own, keeping every span it is sent.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []span
}

// span is a received span with the service that sent it.
type span struct {
	service               string
	traceID, id, parentID string
	name                  string
	events                []string
	failed                bool
	start, end            uint64
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{addr: ln.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return r
}

func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := span{service: service, traceID: hex.EncodeToString(s.GetTraceId()), id: hex.EncodeToString(s.GetSpanId()),
					parentID: hex.EncodeToString(s.GetParentSpanId()), name: s.GetName(),
					failed: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					start:  s.GetStartTimeUnixNano(), end: s.GetEndTimeUnixNano()}
				for _, e := range s.GetEvents() {
					sp.events = append(sp.events, e.GetName())
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// trace returns the spans of one trace.
func (r *receiver) trace(id string) []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []span
	for _, s := range r.spans {
		if s.traceID == id {
			out = append(out, s)
		}
	}
	return out
}

// traces returns the ids of the traces whose root span (no parent) the
// gateway sent.
func (r *receiver) rootTraces() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.spans {
		if s.service == "nereid-gateway" && s.parentID == "" {
			out = append(out, s.traceID)
		}
	}
	return out
}

// waitTrace waits until trace id holds at least n spans.
func (r *receiver) waitTrace(t *testing.T, id string, n int) []span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := r.trace(id)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: %d spans arrived, want %d: %+v", id, len(got), n, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func byName(spans []span, name string) (span, bool) {
	for _, s := range spans {
		if s.name == name {
			return s, true
		}
	}
	return span{}, false
}

func mustSpan(t *testing.T, spans []span, name string) span {
	t.Helper()
	s, ok := byName(spans, name)
	if !ok {
		names := []string{}
		for _, s := range spans {
			names = append(names, s.service+":"+s.name)
		}
		t.Fatalf("no span %q among %v", name, names)
	}
	return s
}

func describe(spans []span) string {
	out := ""
	for _, s := range spans {
		out += fmt.Sprintf("\n  %s %s id=%s parent=%s events=%v failed=%v", s.service, s.name, s.id, s.parentID, s.events, s.failed)
	}
	return out
}
