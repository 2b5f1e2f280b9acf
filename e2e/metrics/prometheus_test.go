package metrics

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// A real Prometheus (Debian's prometheus package, where installed) scrapes
// every service of a running constellation under the shipped scrape
// configuration's job names: each target is up, and Triton's per-model
// series are stored once, from the executor that served the request.
func TestPrometheusScrapesConstellation(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed")
	}
	shipped, err := os.ReadFile(constellation.RepoPath(t, "deploy/prometheus/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var jobs []string
	for _, m := range regexp.MustCompile(`(?m)^\s*- job_name: (\S+)$`).FindAllStringSubmatch(string(shipped), -1) {
		jobs = append(jobs, m[1])
	}
	c := constellation.NewCluster(t)
	port := func() string { return strconv.Itoa(constellation.FreePort(t)) }
	targets := map[string]string{}
	targets["nereid-sequence-router"] = port()
	constellation.Start(t, "router", c.Bin.Path("nereid-sequence-router"), "--nats-url", c.NATSURL, "--metrics-port", targets["nereid-sequence-router"])
	targets["nereid-shm-registry"] = port()
	constellation.Start(t, "shm-registry", c.Bin.Path("nereid-shm-registry"), "--nats-url", c.NATSURL, "--metrics-port", targets["nereid-shm-registry"])
	targets["nereid-executor"] = port()
	c.Executor(constellation.RepoPath(t, "deploy/model_repository"), "ex-1", "--load-model", "simple", "--metrics-port", targets["nereid-executor"],
		"--metrics-config", "summary_latencies=true")
	gw := c.Gateway("--metrics-config", "summary_latencies=true")
	targets["nereid-gateway"] = strconv.Itoa(gw.MetricsPort)
	waitReady(t, gw.HTTP(), "simple")
	if code, msg := post(t, gw.HTTP()+"/v2/models/simple/infer", simpleBody()); code != 200 {
		t.Fatalf("simple: %d %s", code, msg)
	}

	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\nscrape_configs:\n")
	for _, job := range jobs {
		p, ok := targets[job]
		if !ok {
			t.Fatalf("the shipped configuration scrapes %s, which this test does not start", job)
		}
		fmt.Fprintf(&cfg, "  - job_name: %s\n    static_configs:\n      - targets: [\"127.0.0.1:%s\"]\n", job, p)
	}
	if len(jobs) != len(targets) {
		t.Fatalf("the shipped configuration has jobs %v, want one per service %v", jobs, targets)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	promPort := port()
	constellation.Start(t, "prometheus", promBin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:"+promPort)
	query := func(q string) map[string]float64 {
		r, err := http.Get("http://127.0.0.1:" + promPort + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return nil
		}
		defer r.Body.Close()
		var out struct {
			Data struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
					Value  [2]any            `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if json.NewDecoder(r.Body).Decode(&out) != nil {
			return nil
		}
		got := map[string]float64{}
		for _, s := range out.Data.Result {
			v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
			got[s.Metric["job"]] = v
		}
		return got
	}
	var up map[string]float64
	if !constellation.WaitFor(60*time.Second, func() bool {
		up = query("up")
		if len(up) != len(jobs) {
			return false
		}
		for _, v := range up {
			if v != 1 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("targets up: %v, want every job of %v at 1", up, jobs)
	}
	// The scrapes parsed: Triton's counter and summary are stored, from
	// the executor alone, and the dashboard's sum is the one request.
	var got map[string]float64
	if !constellation.WaitFor(30*time.Second, func() bool {
		got = query(`nv_inference_request_success{model="simple"}`)
		return got["nereid-executor"] == 1
	}) {
		t.Errorf("nv_inference_request_success of simple in Prometheus: %v, want 1 from nereid-executor", got)
	}
	if len(got) != 1 {
		t.Errorf("nv_inference_request_success of simple stored from %v, want the executor alone", got)
	}
	if got = query(`nv_inference_request_summary_us_count{model="simple"}`); got["nereid-executor"] != 1 || len(got) != 1 {
		t.Errorf("request summary count in Prometheus: %v", got)
	}
	if got = query(`sum by (model) (nv_inference_request_success{model="simple"})`); got[""] != 1 {
		t.Errorf("sum by (model) of nv_inference_request_success: %v, want 1", got)
	}
}
