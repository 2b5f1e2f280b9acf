package metrics

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// Two gateways, two executors and a sequence router, each scraped on its
// /metrics as Prometheus scrapes every service: Triton's per-model series
// summed over all the pages count every request once, whichever gateway
// took it and whichever executor ran it. The gateways' own pages carry
// none of them; each gateway's /metrics/constellation shows the totals.
func TestMetricsCountedOnce(t *testing.T) {
	c := constellation.NewCluster(t)
	deployRepo := constellation.RepoPath(t, "deploy/model_repository")
	testRepo, err := filepath.Abs("testdata/model_repository")
	if err != nil {
		t.Fatal(err)
	}
	port := func() (string, string) {
		p := constellation.FreePort(t)
		return strconv.Itoa(p), "http://" + constellation.Addr(p) + "/metrics"
	}
	routerPort, routerURL := port()
	constellation.Start(t, "router", c.Bin.Path("nereid-sequence-router"), "--nats-url", c.NATSURL, "--id", "router0", "--metrics-port", routerPort)
	models := []string{"simple", "simple_string", "seq1"}
	execArgs := []string{"--model-repository", testRepo}
	for _, m := range models {
		execArgs = append(execArgs, "--load-model", m)
	}
	ex1Port, ex1URL := port()
	c.Executor(deployRepo, "ex-1", append(execArgs, "--metrics-port", ex1Port)...)
	ex2Port, ex2URL := port()
	c.Executor(deployRepo, "ex-2", append(execArgs, "--metrics-port", ex2Port)...)
	gws := []*constellation.Gateway{c.Gateway(), c.Gateway()}
	for _, gw := range gws {
		waitReady(t, gw.HTTP(), models...)
		for _, m := range models {
			waitFor(t, gw.Metrics(), model("nereid_executors", m), "two executors serving "+m, equals(2))
		}
	}
	infer := func(gw *constellation.Gateway, m string) string { return gw.HTTP() + "/v2/models/" + m + "/infer" }

	// Through the first gateway: 7 of simple, 3 of simple_string that the
	// backend fails; through the second: 5 of simple, 1 of simple_string,
	// and a sequence request without START that the router fails (OTHER).
	for range 7 {
		if code, msg := post(t, infer(gws[0], "simple"), simpleBody()); code != 200 {
			t.Fatalf("simple: %d %s", code, msg)
		}
	}
	for range 3 {
		if code, _ := post(t, infer(gws[0], "simple_string"), stringBody("not a number")); code == 200 {
			t.Fatal("simple_string accepted elements that are not numbers")
		}
	}
	for range 5 {
		if code, msg := post(t, infer(gws[1], "simple"), simpleBody()); code != 200 {
			t.Fatalf("simple: %d %s", code, msg)
		}
	}
	if code, msg := post(t, infer(gws[1], "simple_string"), stringBody("3")); code != 200 {
		t.Fatalf("simple_string: %d %s", code, msg)
	}
	if code, _ := post(t, infer(gws[1], "seq1"), seqBody(99, false, nil)); code != 400 {
		t.Fatalf("seq1 without START: %d", code)
	}

	type sel struct {
		name   string
		labels map[string]string
	}
	want := []struct {
		sel
		n float64
	}{
		{sel{"nv_inference_request_success", map[string]string{"model": "simple"}}, 12},
		{sel{"nv_inference_count", map[string]string{"model": "simple"}}, 12},
		{sel{"nv_inference_request_success", map[string]string{"model": "simple_string"}}, 1},
		{sel{"nv_inference_request_failure", map[string]string{"model": "simple_string", "reason": "BACKEND"}}, 3},
		{sel{"nv_inference_request_failure", map[string]string{"model": "simple_string", "reason": "OTHER"}}, 0},
		{sel{"nv_inference_request_failure", map[string]string{"model": "seq1", "reason": "OTHER"}}, 1},
		{sel{"nv_inference_request_success", map[string]string{"model": "seq1"}}, 0},
		{sel{"nv_inference_pending_request_count", map[string]string{"model": "simple"}}, 0},
	}
	// sum by (model) over every scraped page, as the dashboard's queries.
	sums := func(urls []string) (map[string]float64, string) {
		out := map[string]float64{}
		var pages strings.Builder
		for _, u := range urls {
			_, page := scrape(t, u)
			fmt.Fprintf(&pages, "--- %s\n%s", u, page)
			for _, s := range parseSamples(t, u, page) {
				for _, w := range want {
					if s.matches(w.name, w.labels) {
						out[fmt.Sprint(w.sel)] += s.value
					}
				}
			}
		}
		return out, pages.String()
	}
	check := func(what string, urls []string) {
		t.Helper()
		var got map[string]float64
		var pages string
		ok := constellation.WaitFor(10*time.Second, func() bool {
			got, pages = sums(urls)
			for _, w := range want {
				if got[fmt.Sprint(w.sel)] != w.n {
					return false
				}
			}
			return true
		})
		if ok {
			return
		}
		for _, w := range want {
			if g := got[fmt.Sprint(w.sel)]; g != w.n {
				t.Errorf("%s: sum of %s %v = %v, want %v", what, w.name, w.labels, g, w.n)
			}
		}
		t.Logf("pages:\n%s", pages)
	}

	// Every service's /metrics, as the shipped scrape configuration and
	// the chart's ServiceMonitor and PodMonitor scrape them.
	check("every service's /metrics", []string{gws[0].Metrics(), gws[1].Metrics(), ex1URL, ex2URL, routerURL})
	for i, gw := range gws {
		if _, page := scrape(t, gw.Metrics()); strings.Contains(page, "nv_inference_") {
			t.Errorf("gateway %d's /metrics carries per-model series that executors and routers report:\n%s", i, page)
		}
		// One gateway's constellation page alone is the whole count.
		check(fmt.Sprintf("gateway %d's /metrics/constellation", i), []string{gw.Metrics() + "/constellation"})
	}
}

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

func (s sample) matches(name string, labels map[string]string) bool {
	if s.name != name {
		return false
	}
	for k, v := range labels {
		if s.labels[k] != v {
			return false
		}
	}
	return true
}

// parseSamples reads the samples of a page in the Prometheus text format:
// name{label="value",...} value [timestamp], label values quoted with
// backslash escapes.
func parseSamples(t *testing.T, url, page string) []sample {
	t.Helper()
	var out []sample
	for _, line := range strings.Split(page, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := sample{labels: map[string]string{}}
		i := strings.IndexAny(line, "{ ")
		if i < 0 {
			t.Fatalf("%s: bad sample %q", url, line)
		}
		s.name, line = line[:i], line[i:]
		if line[0] == '{' {
			line = line[1:]
			for {
				line = strings.TrimLeft(line, ", ")
				if strings.HasPrefix(line, "}") {
					line = line[1:]
					break
				}
				eq := strings.Index(line, `="`)
				if eq < 0 {
					t.Fatalf("%s: bad labels in %q", url, line)
				}
				key := line[:eq]
				line = line[eq+2:]
				var val strings.Builder
				for {
					if line == "" {
						t.Fatalf("%s: unterminated label value of %s", url, key)
					}
					c := line[0]
					line = line[1:]
					if c == '"' {
						break
					}
					if c == '\\' && line != "" {
						switch line[0] {
						case 'n':
							val.WriteByte('\n')
						default:
							val.WriteByte(line[0])
						}
						line = line[1:]
						continue
					}
					val.WriteByte(c)
				}
				s.labels[key] = val.String()
			}
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			t.Fatalf("%s: sample %s without a value", url, s.name)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			t.Fatalf("%s: bad value of %s: %q", url, s.name, f[0])
		}
		s.value = v
		out = append(out, s)
	}
	return out
}
