package standalone

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nereid-io/nereid/services/executor"
)

// TestRateLimit: the standalone server's --rate-limit and
// --rate-limit-resource reach its executor: two models whose instances
// each hold the only copy of R run their executions one at a time, and a
// model needing two copies is not loaded, with Triton's reason in the
// repository index.
func TestRateLimit(t *testing.T) {
	const delay = 100 * time.Millisecond
	repo := t.TempDir()
	for name, count := range map[string]int{"a": 1, "b": 1, "needy": 2} {
		cfg := fmt.Sprintf(`name: %q backend: "identity" max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU rate_limiter { resources [ { name: "R" count: %d } ] } } ]
parameters { key: "execute_delay_ms" value { string_value: "%d" } }
`, name, count, delay.Milliseconds())
		if err := os.MkdirAll(filepath.Join(repo, name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t)
	cfg.ModelRepository, cfg.Models, cfg.ExitOnError = repo, nil, false
	cfg.RateLimit = executor.RateLimitExecutionCount
	r, err := executor.ParseRateLimitResource("R:1")
	if err != nil {
		t.Fatal(err)
	}
	cfg.RateLimitResources = []executor.RateLimitResource{r}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, srv)
	base := "http://" + srv.Gateway().HTTPAddr()
	waitModel(t, base, "a")
	waitModel(t, base, "b")

	var wg sync.WaitGroup
	start := time.Now()
	for _, model := range []string{"a", "b", "a", "b"} {
		wg.Go(func() {
			if got := post(t, base+"/v2/models/"+model+"/infer", `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1],"data":[1]}]}`); got.Status != http.StatusOK {
				t.Errorf("%s: %d %v", model, got.Status, got.Body)
			}
		})
	}
	wg.Wait()
	if elapsed := time.Since(start); elapsed < 4*delay {
		t.Errorf("4 executions of %s that each hold the only R took %s: some ran at once", delay, elapsed)
	}

	index := post(t, base+"/v2/repository/index", "")
	want := `Resource count for "R" is limited to 1 which will prevent scheduling of one or more model instances, the minimum required count is 2`
	found := false
	for _, m := range index.Body.([]any) {
		m := m.(map[string]any)
		if m["name"] == "needy" {
			found = true
			if m["state"] != "UNAVAILABLE" || m["reason"] != want {
				t.Errorf("needy: %v, want UNAVAILABLE with reason %q", m, want)
			}
		}
	}
	if !found {
		t.Errorf("index lists no needy: %v", index.Body)
	}
}
