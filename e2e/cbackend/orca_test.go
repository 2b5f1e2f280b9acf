package cbackend

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

const kvcacheConfig = `
name: "%s"
backend: "nkvcache"
max_batch_size: 8
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [-1] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [-1] }]
`

// inferWithFormat posts an inference request to model with the header
// endpoint-load-metrics-format set to format ("": none) and returns the
// endpoint-load-metrics header of the answer.
func inferWithFormat(t *testing.T, gw *constellation.Gateway, model, format string) string {
	t.Helper()
	req, err := http.NewRequest("POST", gw.HTTP()+"/v2/models/"+model+"/infer",
		strings.NewReader(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,2],"data":[1,2]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if format != "" {
		req.Header.Set("endpoint-load-metrics-format", format)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", model, resp.StatusCode, body)
	}
	return resp.Header.Get("endpoint-load-metrics")
}

// TestORCAHeader: Triton's ORCA load report. With the TensorRT-LLM
// backend's KV-cache family (nv_trt_llm_kv_cache_block_metrics, here from
// a test backend: 100 blocks of 64 tokens, one more used per request), an
// HTTP inference request with endpoint-load-metrics-format "text" or
// "json" is answered with endpoint-load-metrics in Triton's forms, of the
// requested model's blocks; without the header, with another format, or
// for a model without the family, there is none.
func TestORCAHeader(t *testing.T) {
	root := t.TempDir()
	backendDir, repo := filepath.Join(root, "backends"), filepath.Join(root, "models")
	compileBackend(t, backendDir, "nkvcache", "kvcache.c")
	compileBackend(t, backendDir, "nidentity", "identity.c")
	writeModel(t, repo, "llm", fmt.Sprintf(kvcacheConfig, "llm"))
	writeModel(t, repo, "other", fmt.Sprintf(kvcacheConfig, "other"))
	writeModel(t, repo, "plain", `
name: "plain"
backend: "nidentity"
max_batch_size: 8
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [-1] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [-1] }]
`)
	gw := constellation.Standalone(t, repo, "--backend-directory", backendDir)
	for _, m := range []string{"llm", "other", "plain"} {
		if err := constellation.WaitHTTP(gw.HTTP()+"/v2/models/"+m+"/ready", 200, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// "other" uses one block of its own: llm's report must not count it.
	inferWithFormat(t, gw, "other", "")
	// The executors' families are read at most once a second: a second
	// apart, each report is read after its own request ran.
	want := func(format, value string) {
		t.Helper()
		if got := inferWithFormat(t, gw, "llm", format); got != value {
			t.Fatalf("format %q: endpoint-load-metrics %q, want %q", format, got, value)
		}
	}
	inferWithFormat(t, gw, "llm", "")
	inferWithFormat(t, gw, "llm", "")
	// Two requests before, and this one.
	want("text", "TEXT named_metrics.kv_cache_utilization=0.030000, named_metrics.max_token_capacity=6400")
	time.Sleep(1100 * time.Millisecond)
	want("json", `JSON {"named_metrics":{"kv_cache_utilization":0.04,"max_token_capacity":6400}}`)
	for _, format := range []string{"", "TEXT", "xml"} {
		if got := inferWithFormat(t, gw, "llm", format); got != "" {
			t.Errorf("format %q: endpoint-load-metrics %q, want none", format, got)
		}
	}
	if got := inferWithFormat(t, gw, "plain", "text"); got != "" {
		t.Errorf("a model without KV-cache metrics: endpoint-load-metrics %q, want none", got)
	}
}
