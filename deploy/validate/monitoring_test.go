package validate

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v4"
)

// The monitoring the deployment ships: deploy/prometheus/prometheus.yml
// (used by the compose file's "monitoring" profile), the Grafana dashboard
// deploy/grafana/nereid-dashboard.json, and deploy/prometheus/metrics.txt,
// the metric families the services export (kept by e2e/metrics from the
// running services).

const (
	scrapeConfig = "deploy/prometheus/prometheus.yml"
	dashboard    = "deploy/grafana/nereid-dashboard.json"
	familiesList = "deploy/prometheus/metrics.txt"
)

// loadMonitoring loads the compose files with the monitoring profile on.
func loadMonitoring(t *testing.T, files ...string) *types.Project {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, filepath.Join(root, f))
	}
	opts, err := cli.NewProjectOptions(paths, cli.WithWorkingDirectory(root), cli.WithInterpolation(true),
		cli.WithResolvedPaths(true), cli.WithProfiles([]string{"monitoring"}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("%v with the monitoring profile does not load: %v", files, err)
	}
	return p
}

// TestComposeMonitoring: the prometheus service exists only under its
// profile, reads the shipped scrape configuration, and the offline
// override changes nothing of it but the image.
func TestComposeMonitoring(t *testing.T) {
	if slices.Contains(loadCompose(t).ServiceNames(), "prometheus") {
		t.Error("prometheus runs without the monitoring profile")
	}
	p := loadMonitoring(t, "docker-compose.yml")
	prom, ok := p.Services["prometheus"]
	if !ok {
		t.Fatalf("no prometheus service under the monitoring profile: %v", p.ServiceNames())
	}
	root, _ := filepath.Abs(repoRoot)
	mounted := false
	for _, v := range prom.Volumes {
		if v.Source == filepath.Join(root, scrapeConfig) && v.Target == "/etc/prometheus/prometheus.yml" {
			mounted = true
		}
	}
	if !mounted || !slices.Contains(prom.Command, "--config.file=/etc/prometheus/prometheus.yml") {
		t.Errorf("prometheus does not run with %s: volumes %+v, command %v", scrapeConfig, prom.Volumes, prom.Command)
	}
	off := loadMonitoring(t, "docker-compose.yml", "deploy/docker/compose.offline.yml").Services["prometheus"]
	if off.Image == prom.Image || !strings.HasPrefix(off.Image, "nereid-offline/") {
		t.Errorf("the offline override gives prometheus the image %q (public %q)", off.Image, prom.Image)
	}
	off.Image = prom.Image
	if !reflect.DeepEqual(off, prom) {
		t.Errorf("the offline override changes more of prometheus than its image")
	}
	images, err := os.ReadFile(filepath.Join(repoRoot, "scripts/images.sh"))
	if err != nil {
		t.Fatal(err)
	}
	offImage := loadMonitoring(t, "docker-compose.yml", "deploy/docker/compose.offline.yml").Services["prometheus"].Image
	if !strings.Contains(string(images), "PROMETHEUS_IMAGE="+offImage+"\n") {
		t.Errorf("scripts/images.sh does not make %s", offImage)
	}
}

type promConfig struct {
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
		DNSSDConfigs []struct {
			Names []string `yaml:"names"`
			Type  string   `yaml:"type"`
			Port  int      `yaml:"port"`
		} `yaml:"dns_sd_configs"`
	} `yaml:"scrape_configs"`
}

// TestPrometheusScrapesEveryService: every Nereid service of the compose
// file is a target, on the port its --metrics-port opens (the gateway's
// default, 8002, when it passes none), and every target is a service.
func TestPrometheusScrapesEveryService(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, scrapeConfig))
	if err != nil {
		t.Fatal(err)
	}
	var cfg promConfig
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("%s: %v", scrapeConfig, err)
	}
	p := loadMonitoring(t, "docker-compose.yml")
	targets := map[string]string{} // service -> port
	for _, sc := range cfg.ScrapeConfigs {
		for _, s := range sc.StaticConfigs {
			for _, tg := range s.Targets {
				host, port, _ := strings.Cut(tg, ":")
				targets[host] = port
			}
		}
		for _, d := range sc.DNSSDConfigs {
			if d.Type != "A" {
				t.Errorf("%s: dns_sd type %q; Docker's DNS answers A records", sc.JobName, d.Type)
			}
			for _, n := range d.Names {
				targets[n] = strconv.Itoa(d.Port)
			}
		}
	}
	for host := range targets {
		if _, ok := p.Services[host]; !ok {
			t.Errorf("%s scrapes %s, which is no compose service", scrapeConfig, host)
		}
	}
	for name := range nereidServices(t, p) {
		port, ok := argValue(p.Services[name].Command, "metrics-port")
		if !ok && name == "gateway" {
			port = "8002"
		}
		if !ok && name != "gateway" {
			t.Errorf("%s: no --metrics-port: nothing to scrape", name)
			continue
		}
		if targets[name] != port {
			t.Errorf("%s: scraped on port %q, its --metrics-port is %s", name, targets[name], port)
		}
	}
}

// families reads familiesList: family -> type, and which services export
// each.
func families(t *testing.T) (map[string]string, map[string][]string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, familiesList))
	if err != nil {
		t.Fatal(err)
	}
	types, by := map[string]string{}, map[string][]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || strings.HasPrefix(line, "#") {
			continue
		}
		types[f[1]] = f[2]
		by[f[0]] = append(by[f[0]], f[1])
	}
	if len(types) == 0 {
		t.Fatalf("%s lists no family", familiesList)
	}
	return types, by
}

// exprs collects every "expr" string of the dashboard, at any depth.
func exprs(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "expr" {
				*out = append(*out, s)
			} else {
				exprs(e, out)
			}
		}
	case []any:
		for _, e := range x {
			exprs(e, out)
		}
	}
}

var metricName = regexp.MustCompile(`\b(?:nv|nereid)_[a-z0-9_]+\b`)

// TestDashboardMetricsExist: every metric the dashboard's queries name is
// a family a service exports (a histogram's or summary's _bucket, _sum or
// _count of it), and the dashboard shows something of every service.
func TestDashboardMetricsExist(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, dashboard))
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboard, err)
	}
	var qs []string
	exprs(d, &qs)
	if len(qs) == 0 {
		t.Fatalf("%s has no query", dashboard)
	}
	types, by := families(t)
	used := map[string]bool{}
	for _, q := range qs {
		for _, name := range metricName.FindAllString(q, -1) {
			fam := name
			if _, ok := types[name]; !ok {
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					base, cut := strings.CutSuffix(name, suf)
					typ := types[base]
					if cut && (typ == "histogram" || typ == "summary" && suf != "_bucket") {
						fam = base
					}
				}
			}
			if _, ok := types[fam]; !ok {
				t.Errorf("%s: query %q names %s, which no service exports (%s)", dashboard, q, name, familiesList)
			}
			used[fam] = true
		}
	}
	for svc, fams := range by {
		if !slices.ContainsFunc(fams, func(f string) bool { return used[f] }) {
			t.Errorf("%s shows none of %s's metrics %v", dashboard, svc, fams)
		}
	}
	// What an operator looks at first: Triton's failures by reason and the
	// pending count.
	for _, f := range []string{"nv_inference_request_failure", "nv_inference_pending_request_count", "nv_gpu_utilization"} {
		if !used[f] {
			t.Errorf("%s does not show %s", dashboard, f)
		}
	}
}

// TestMonitoringWithPromtool checks the scrape configuration and parses
// every dashboard query with Prometheus' own promtool (as recording rules,
// Grafana's variables replaced), where promtool is installed (Debian's
// prometheus package has it); without it, it skips.
func TestMonitoringWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed")
	}
	if out, err := exec.Command(promtool, "check", "config", filepath.Join(repoRoot, scrapeConfig)).CombinedOutput(); err != nil {
		t.Errorf("promtool check config %s: %v\n%s", scrapeConfig, err, out)
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, dashboard))
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	var qs []string
	exprs(d, &qs)
	vars := strings.NewReplacer("$__rate_interval", "1m", "$model", ".*")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range qs {
		b, _ := json.Marshal(vars.Replace(q))
		fmt.Fprintf(&rules, "      - record: dashboard_query_%d\n        expr: %s\n", i, b)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("a dashboard query does not parse: %v\n%s", err, out)
	}
}
