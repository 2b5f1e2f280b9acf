package observability

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// requestLines returns the JSON log lines of out that carry request_id id.
func requestLines(out, id string) []map[string]any {
	var lines []map[string]any
	for _, l := range strings.Split(out, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) != nil {
			continue
		}
		if rec["request_id"] == id {
			lines = append(lines, rec)
		}
	}
	return lines
}

// waitLines waits until out() holds a line with request_id id and message
// msg, and returns the lines with that request id.
func waitLines(t *testing.T, what string, out func() string, id, msg string) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		lines := requestLines(out(), id)
		for _, l := range lines {
			if l["msg"] == msg {
				return lines
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s logged no %q line for request %s; its lines: %v\n%s", what, msg, id, lines, out())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRequestLogLines: with log_verbose_level 1, every service a request
// crosses logs it, each line carrying the request's trace id (the client's
// traceparent, continued) and its request id.
func TestRequestLogLines(t *testing.T) {
	rcv := startReceiver(t)
	traceFlags := []string{"--trace-config", "mode=opentelemetry", "--trace-config", "opentelemetry,url=" + rcv.addr,
		"--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1"}
	c := constellation.NewCluster(t)
	repo := constellation.RepoPath(t, "deploy/model_repository")
	router := constellation.Start(t, "router", c.Bin.Path("nereid-sequence-router"), append([]string{"--nats-url", c.NATSURL, "--id", "router0"}, traceFlags...)...)
	ex := c.Executor(repo, "ex-1", append([]string{"--load-model", "simple", "--load-model", "simple_sequence"}, traceFlags...)...)
	gw := c.Gateway(traceFlags...)
	waitReady(t, gw.HTTP()+"/v2/models/simple/ready")
	waitReady(t, gw.HTTP()+"/v2/models/simple_sequence/ready")
	if code, got := call(t, http.MethodPost, gw.HTTP()+"/v2/logging", `{"log_verbose_level":1,"log_format":"json"}`); code != 200 {
		t.Fatalf("logging settings: %d %v", code, got)
	}

	// The router applies the settings when it hears them (it does not
	// acknowledge): sequence requests until one is logged.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprintf("warm-%d", i)
		body := `{"id":"` + id + `","parameters":{"sequence_id":76,"sequence_start":true,"sequence_end":true},"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[1]}]}`
		if code := postInfer(t, gw.HTTP()+"/v2/models/simple_sequence/infer", body, ""); code != 200 {
			t.Fatalf("sequence request: %d", code)
		}
		if len(requestLines(router.Output(), id)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router does not log verbose JSON lines:\n%s", router.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Each case: a request with an id and the client's trace context, and
	// the lines each service must log about it.
	cases := []struct {
		name, id, traceID, url, body string
		code                         int
		want                         map[string]string // service -> a message it must log
	}{
		{"stateless", "log-stateless-1", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1", gw.HTTP() + "/v2/models/simple/infer",
			strings.Replace(simpleBody, `{"inputs"`, `{"id":"log-stateless-1","inputs"`, 1), 200,
			map[string]string{"gateway": "infer request done", "executor": "request executed"}},
		{"sequence", "log-sequence-1", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa2", gw.HTTP() + "/v2/models/simple_sequence/infer",
			`{"id":"log-sequence-1","parameters":{"sequence_id":77,"sequence_start":true,"sequence_end":true},"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[5]}]}`, 200,
			map[string]string{"gateway": "infer request done", "router": "sequence request", "executor": "request executed"}},
		{"failed in the executor", "log-failed-1", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa3", gw.HTTP() + "/v2/models/simple/infer",
			`{"id":"log-failed-1","inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},` +
				`{"name":"INPUT1","shape":[1,15],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`, 400,
			map[string]string{"gateway": "infer request failed"}},
	}
	outputs := map[string]func() string{"gateway": gw.Output, "executor": ex.Output, "router": router.Output}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if code := postInfer(t, tc.url, tc.body, "00-"+tc.traceID+"-1234567890abcdef-01"); code != tc.code {
				t.Fatalf("infer: %d, want %d", code, tc.code)
			}
			for service, msg := range tc.want {
				for _, l := range waitLines(t, service, outputs[service], tc.id, msg) {
					if l["trace_id"] != tc.traceID || l["span_id"] == nil || l["span_id"] == "" {
						t.Errorf("%s's line %v: want trace_id %s and a span_id", service, l, tc.traceID)
					}
				}
			}
		})
	}
	// The failed request's line says why, with Triton's status.
	for _, l := range requestLines(gw.Output(), "log-failed-1") {
		if l["msg"] == "infer request failed" && (l["status"] != "INVALID_ARG" || !strings.Contains(l["err"].(string), "INPUT1")) {
			t.Errorf("failure line %v: want status INVALID_ARG and the error naming INPUT1", l)
		}
	}
	// Verbose lines about requests never lack the request's ids.
	for service, out := range outputs {
		for _, l := range strings.Split(out(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(l), &rec) != nil {
				continue
			}
			switch rec["msg"] {
			case "infer request", "infer request done", "infer request failed", "request executed", "sequence request":
				if strings.HasPrefix(fmt.Sprint(rec["request_id"]), "warm-") {
					continue // sent without a traceparent before the router followed
				}
				if rec["request_id"] == nil || rec["trace_id"] == nil {
					t.Errorf("%s's line about a request lacks its ids: %s", service, l)
				}
			}
		}
	}
}
