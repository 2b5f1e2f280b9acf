package tracing

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/tracesetting"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want Endpoint
		bad  bool
	}{
		// Triton's form: OTLP/HTTP, posted to the path given.
		{raw: "localhost:4318/v1/traces", want: Endpoint{ProtocolHTTP, "http://localhost:4318/v1/traces"}},
		{raw: "http://collector:4318/v1/traces", want: Endpoint{ProtocolHTTP, "http://collector:4318/v1/traces"}},
		{raw: "https://collector/custom/path", want: Endpoint{ProtocolHTTP, "https://collector/custom/path"}},
		// A bare host:port: OTLP/gRPC.
		{raw: "collector:4317", want: Endpoint{ProtocolGRPC, "http://collector:4317"}},
		{raw: "http://collector:4317", want: Endpoint{ProtocolGRPC, "http://collector:4317"}},
		{raw: "https://collector:4317/", want: Endpoint{ProtocolGRPC, "https://collector:4317"}},
		{raw: "ftp://collector:21/x", bad: true},
		{raw: "http:///v1/traces", bad: true},
	} {
		got, err := ParseURL(tc.raw)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: %+v, want an error", tc.raw, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v %v, want %+v", tc.raw, got, err, tc.want)
		}
	}
}

// otlpHTTPServer counts the OTLP/HTTP exports posted to it, by path.
type otlpHTTPServer struct {
	addr string
	mu   sync.Mutex
	hits map[string]int
}

func startOTLPHTTP(t *testing.T) *otlpHTTPServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &otlpHTTPServer{addr: ln.Addr().String(), hits: map[string]int{}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPost && r.Header.Get("Content-Type") == "application/x-protobuf" && len(body) > 0 {
			s.mu.Lock()
			s.hits[r.URL.Path]++
			s.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

func (s *otlpHTTPServer) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}

// TestExportsOverHTTP: with Triton's url forms, spans are posted over
// OTLP/HTTP to the url's path, by the batch processor within its export
// interval and by Shutdown for those still queued.
func TestExportsOverHTTP(t *testing.T) {
	for _, form := range []string{"%s/v1/traces", "http://%s/v1/traces"} {
		t.Run(form, func(t *testing.T) {
			srv := startOTLPHTTP(t)
			cfg := tracesetting.DefaultConfig()
			cfg.Defaults.Level, cfg.Defaults.Rate = tracesetting.LevelTimestamps, 1
			cfg.Options = map[string]string{"url": fmt.Sprintf(form, srv.addr), "bsp_schedule_delay": "50"}
			tr, err := New(context.Background(), cfg, "test", tracesetting.New(cfg, "test"))
			if err != nil {
				t.Fatal(err)
			}
			_, s := tr.StartRequest(context.Background(), "simple", nil, "InferRequest")
			if s == nil {
				t.Fatal("not traced")
			}
			s.End()
			deadline := time.Now().Add(5 * time.Second)
			for srv.count("/v1/traces") == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no export within the batch interval")
				}
				time.Sleep(10 * time.Millisecond)
			}

			// A span still queued when the tracer shuts down.
			cfg.Options["bsp_schedule_delay"] = "3600000"
			tr2, err := New(context.Background(), cfg, "test", tracesetting.New(cfg, "test"))
			if err != nil {
				t.Fatal(err)
			}
			_, s = tr2.StartRequest(context.Background(), "simple", nil, "InferRequest")
			s.End()
			before := srv.count("/v1/traces")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tr2.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			if srv.count("/v1/traces") != before+1 {
				t.Fatal("the queued span was not exported at Shutdown")
			}
			if err := tr.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
		})
	}
}
