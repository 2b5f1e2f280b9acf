package constellation

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// OTLPReceiver is an OTLP trace collector: the real protocol, served on a
// port of its own, keeping every span it is sent. StartOTLPReceiver serves
// OTLP/gRPC (services export to it with --trace-config
// opentelemetry,url=<Addr>), StartOTLPHTTPReceiver OTLP/HTTP as Triton
// exports (url=<Addr>/v1/traces).
type OTLPReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	Addr string
	// Paths are the URL paths OTLP/HTTP exports were posted to.
	Paths []string

	mu    sync.Mutex
	spans []Span
}

// Span is a received span with the service that sent it; ids in hex.
type Span struct {
	Service               string
	TraceID, ID, ParentID string
	Name                  string
	Events                []string
	Attributes            map[string]string // string and integer values, as text
	Failed                bool
	Start, End            uint64
}

// StartOTLPReceiver serves a receiver until the test ends.
func StartOTLPReceiver(t testing.TB) *OTLPReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &OTLPReceiver{Addr: ln.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return r
}

// OTLPTracesPath is where OTLP/HTTP exporters post spans by default.
const OTLPTracesPath = "/v1/traces"

// StartOTLPHTTPReceiver serves a receiver of OTLP/HTTP (binary protobuf,
// gzip or not) on loopback until the test ends: a plain net/http server
// that decodes each POST as an ExportTraceServiceRequest, whatever its
// path (recorded in Paths).
func StartOTLPHTTPReceiver(t testing.TB) *OTLPReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &OTLPReceiver{Addr: ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(r.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

func (r *OTLPReceiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer gz.Close()
		body = gz
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &export); err != nil {
		http.Error(w, "not an ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.Paths = append(r.Paths, req.URL.Path)
	r.mu.Unlock()
	resp, _ := r.Export(req.Context(), &export)
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// PostedPaths returns the paths OTLP/HTTP exports were posted to.
func (r *OTLPReceiver) PostedPaths() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.Paths...)
}

// Export is the collector's trace service.
func (r *OTLPReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
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
				sp := Span{Service: service, TraceID: hex.EncodeToString(s.GetTraceId()), ID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(),
					Failed: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					Start:  s.GetStartTimeUnixNano(), End: s.GetEndTimeUnixNano(), Attributes: map[string]string{}}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, e.GetName())
				}
				for _, a := range s.GetAttributes() {
					switch v := a.GetValue(); {
					case v.GetStringValue() != "":
						sp.Attributes[a.GetKey()] = v.GetStringValue()
					default:
						sp.Attributes[a.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
					}
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Spans returns every span received so far.
func (r *OTLPReceiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Trace returns the spans of one trace.
func (r *OTLPReceiver) Trace(id string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

// WaitTrace waits until trace id holds at least n spans.
func (r *OTLPReceiver) WaitTrace(t testing.TB, id string, n int) []Span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := r.Trace(id)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: %d spans arrived, want %d: %+v", id, len(got), n, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
