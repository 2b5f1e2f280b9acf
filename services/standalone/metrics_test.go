package standalone

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The standalone server is one server: its /metrics is Triton's whole
// page, per-model metrics included, the same families as the gateway's
// /metrics/constellation.
func TestMetricsAreTritons(t *testing.T) {
	cfg := testConfig(t)
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, srv)
	base := "http://" + srv.Gateway().HTTPAddr()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := http.Get(base + "/v2/models/simple/ready")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("simple not ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	body := simpleRequest("m1", seq16(func(i int) int { return i }), seq16(func(int) int { return 1 }))
	for range 3 {
		if r := post(t, base+"/v2/models/simple/infer", body); r.Status != 200 {
			t.Fatalf("infer: %+v", r)
		}
	}
	get := func(path string) string {
		t.Helper()
		r, err := http.Get("http://" + srv.Gateway().MetricsAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		if r.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, r.StatusCode, b)
		}
		return string(b)
	}
	page := get("/metrics")
	for _, want := range []string{
		`nv_inference_request_success{model="simple",version="1"} 3`,
		`nv_inference_count{model="simple",version="1"} 3`,
		`nv_inference_request_failure{model="simple",reason="BACKEND",version="1"} 0`,
		`nv_inference_pending_request_count{model="simple",version="1"} 0`,
		"# TYPE nv_inference_request_duration_us counter",
		"# TYPE nv_cpu_utilization gauge",
		`nereid_executors{model="simple",version="1"} 1`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, page)
		}
	}
	types := regexp.MustCompile(`(?m)^# TYPE .*$`)
	if got, whole := types.FindAllString(page, -1), types.FindAllString(get("/metrics/constellation"), -1); strings.Join(got, "\n") != strings.Join(whole, "\n") {
		t.Errorf("/metrics families %v, /metrics/constellation's %v", got, whole)
	}
}
