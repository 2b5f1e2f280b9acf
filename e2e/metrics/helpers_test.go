package metrics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// scrape reads a /metrics page into its samples, keyed by the series as
// the page prints it: name{label="value",...} with labels in name order.
func scrape(t *testing.T, url string) (map[string]float64, string) {
	t.Helper()
	out, page, err := constellation.Scrape(url)
	if err != nil {
		t.Fatal(err)
	}
	return out, page
}

// series names one sample: name and label pairs ("model", "simple", ...).
func series(name string, kv ...string) string {
	type pair struct{ k, v string }
	var ps []pair
	for i := 0; i+1 < len(kv); i += 2 {
		ps = append(ps, pair{kv[i], kv[i+1]})
	}
	slices.SortFunc(ps, func(a, b pair) int { return strings.Compare(a.k, b.k) })
	if len(ps) == 0 {
		return name
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s=%q", p.k, p.v)
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// model is the series of a per-model metric of version 1.
func model(name, m string, kv ...string) string {
	return series(name, append([]string{"model", m, "version", "1"}, kv...)...)
}

// quantile is the series of a summary's quantile of version 1 (the
// quantile label follows the others).
func quantile(name, m, q string) string {
	return strings.TrimSuffix(model(name, m), "}") + fmt.Sprintf(",quantile=%q}", q)
}

// waitFor scrapes url until cond holds for the sample key, and fails with
// the page otherwise (the condition is what the test checks; the time
// only bounds a hang).
func waitFor(t *testing.T, url, key string, what string, cond func(v float64, ok bool) bool) map[string]float64 {
	t.Helper()
	var last map[string]float64
	var page string
	if !constellation.WaitFor(60*time.Second, func() bool {
		last, page = scrape(t, url)
		v, ok := last[key]
		return cond(v, ok)
	}) {
		t.Fatalf("%s: %s never held; last page:\n%s", url, what, page)
	}
	return last
}

func equals(want float64) func(float64, bool) bool {
	return func(v float64, ok bool) bool { return ok && v == want }
}

// want checks samples exactly.
func want(t *testing.T, got map[string]float64, exact map[string]float64) {
	t.Helper()
	for k, w := range exact {
		if v, ok := got[k]; !ok || v != w && !(math.IsNaN(w) && math.IsNaN(v)) {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, w)
		}
	}
}

// post sends a JSON inference request and returns the status and the
// error message, if any.
func post(t *testing.T, url string, body any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	c := &http.Client{Timeout: 60 * time.Second}
	r, err := c.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer r.Body.Close()
	raw, _ := io.ReadAll(r.Body)
	var out struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(raw, &out)
	return r.StatusCode, out.Error
}

func simpleBody() map[string]any {
	ones := make([]int32, 16)
	for i := range ones {
		ones[i] = 1
	}
	return map[string]any{"inputs": []any{
		map[string]any{"name": "INPUT0", "datatype": "INT32", "shape": []int{1, 16}, "data": ones},
		map[string]any{"name": "INPUT1", "datatype": "INT32", "shape": []int{1, 16}, "data": ones},
	}}
}

func stringBody(elem string) map[string]any {
	in := make([]string, 16)
	for i := range in {
		in[i] = elem
	}
	return map[string]any{"inputs": []any{
		map[string]any{"name": "INPUT0", "datatype": "BYTES", "shape": []int{1, 16}, "data": in},
		map[string]any{"name": "INPUT1", "datatype": "BYTES", "shape": []int{1, 16}, "data": in},
	}}
}

func slowBody() map[string]any {
	return map[string]any{"inputs": []any{map[string]any{"name": "INPUT0", "datatype": "FP32", "shape": []int{2}, "data": []float32{1, 2}}}}
}

func seqBody(id uint64, start bool, extra map[string]any) map[string]any {
	params := map[string]any{"sequence_id": id}
	if start {
		params["sequence_start"] = true
	}
	for k, v := range extra {
		params[k] = v
	}
	return map[string]any{"parameters": params,
		"inputs": []any{map[string]any{"name": "INPUT", "datatype": "INT32", "shape": []int{1, 1}, "data": []int32{1}}}}
}

func waitReady(t *testing.T, base string, models ...string) {
	t.Helper()
	for _, m := range models {
		if !constellation.WaitFor(30*time.Second, func() bool {
			r, err := http.Get(base + "/v2/models/" + m + "/ready")
			if err != nil {
				return false
			}
			r.Body.Close()
			return r.StatusCode == 200
		}) {
			t.Fatalf("model %s not ready", m)
		}
	}
}

// pageOf is a /metrics page's text.
func pageOf(t *testing.T, url string) string {
	t.Helper()
	_, p := scrape(t, url)
	return p
}
