package observability

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// The standalone server (make run's bin/nereid) with Triton's tracing
// flags exports its spans over OTLP/HTTP to the url given, with or without
// a scheme: within the batch span processor's export interval (5 s by
// default), and at SIGTERM those not exported yet.
func TestStandaloneOpenTelemetryOverHTTP(t *testing.T) {
	repo := constellation.RepoPath(t, "deploy/model_repository")
	// The default export interval of the batch span processor; spans must
	// arrive within it (plus the time a loaded machine takes).
	const interval = 5 * time.Second
	for _, form := range []struct {
		name string
		url  func(addr string) string
	}{
		{"url without scheme", func(addr string) string { return addr + constellation.OTLPTracesPath }},
		{"url with http scheme", func(addr string) string { return "http://" + addr + constellation.OTLPTracesPath }},
	} {
		t.Run(form.name, func(t *testing.T) {
			t.Run("within the export interval", func(t *testing.T) {
				rcv := constellation.StartOTLPHTTPReceiver(t)
				url := form.url(rcv.Addr)
				srv := constellation.Standalone(t, repo, append(tritonTraceFlags(url), "--model-control-mode", "explicit", "--load-model", "simple")...)
				checkTraceSetting(t, srv.HTTP(), url)
				if code := postInfer(t, srv.HTTP()+"/v2/models/simple/infer", simpleBody, ""); code != 200 {
					t.Fatalf("infer: %d", code)
				}
				sent := time.Now()
				id := waitRootTrace(t, rcv, interval+5*time.Second)
				t.Logf("the request's spans arrived %v after it was answered", time.Since(sent).Round(time.Millisecond))
				spans := spansOf(rcv.WaitTrace(t, id, 6))
				root := mustSpan(t, spans, "InferRequest")
				checkExecutorSpan(t, spans, "simple", root.id)
				if paths := rcv.PostedPaths(); len(paths) == 0 || paths[0] != constellation.OTLPTracesPath {
					t.Fatalf("spans posted to %v, want %s", paths, constellation.OTLPTracesPath)
				}
			})
			t.Run("at SIGTERM", func(t *testing.T) {
				rcv := constellation.StartOTLPHTTPReceiver(t)
				// An export interval of an hour: only the flush at
				// shutdown can deliver the spans.
				srv := constellation.Standalone(t, repo, append(tritonTraceFlags(form.url(rcv.Addr)),
					"--trace-config", "opentelemetry,bsp_schedule_delay=3600000",
					"--model-control-mode", "explicit", "--load-model", "simple")...)
				if code := postInfer(t, srv.HTTP()+"/v2/models/simple/infer", simpleBody, ""); code != 200 {
					t.Fatalf("infer: %d", code)
				}
				if n := len(rcv.Spans()); n != 0 {
					t.Fatalf("%d spans arrived before the shutdown with an export interval of an hour", n)
				}
				srv.Stop() // SIGTERM, then SIGKILL after 5 s
				if out := srv.Output(); !srv.Exited() {
					t.Fatalf("the server did not exit:\n%s", out)
				}
				id := waitRootTrace(t, rcv, 5*time.Second)
				spans := spansOf(rcv.Trace(id))
				root := mustSpan(t, spans, "InferRequest")
				checkExecutorSpan(t, spans, "simple", root.id)
			})
		})
	}
}

// tritonTraceFlags are tritonserver's flags for tracing every request at
// TIMESTAMPS level to an OpenTelemetry collector at url.
func tritonTraceFlags(url string) []string {
	return []string{"--trace-config", "mode=opentelemetry", "--trace-config", "opentelemetry,url=" + url,
		"--trace-config", "rate=1", "--trace-config", "level=TIMESTAMPS"}
}

// checkTraceSetting checks that the trace setting endpoint reports the
// mode and url given at start.
func checkTraceSetting(t *testing.T, base, url string) {
	t.Helper()
	code, got := call(t, http.MethodGet, base+"/v2/trace/setting", "")
	settings := jsonSettings(t, got)
	if code != http.StatusOK || !slices.Equal(settings["trace_mode"], []string{"opentelemetry"}) || !slices.Equal(settings["url"], []string{url}) {
		t.Fatalf("trace setting: %d %v, want mode opentelemetry and url %s", code, got, url)
	}
}

// waitRootTrace waits at most within for the gateway's root span of a
// request sampled by rate (no client trace context) and returns its trace.
func waitRootTrace(t *testing.T, rcv *constellation.OTLPReceiver, within time.Duration) string {
	t.Helper()
	var id string
	if !constellation.WaitFor(within, func() bool {
		for _, s := range rcv.Spans() {
			if s.Service == "nereid-gateway" && s.Name == "InferRequest" && s.ParentID == "" {
				id = s.TraceID
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no root span of the request arrived within %v; received %v", within, spansOf(rcv.Spans()))
	}
	return id
}
