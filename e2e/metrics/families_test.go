package metrics

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// familiesFile lists the metric families each service exports, for the
// dashboard's check (deploy/validate) and the operators' reference:
// "<service> <family> <type>", with a fourth field "gpu" for families
// only a machine with a GPU shows.
const familiesFile = "deploy/prometheus/metrics.txt"

const familiesHeader = `# The metric families each Nereid service exports on /metrics, as its
# running processes print them (# TYPE lines): <service> <family> <type>,
# "gpu" for those only a machine with an NVIDIA GPU shows.
# Kept by e2e/metrics (NEREID_UPDATE_DEPLOY=1 go test ./e2e/metrics) and
# read by deploy/validate, which checks the Grafana dashboard against it.
`

// checkFamilies compares the families the services print with
// familiesFile (rewriting it under NEREID_UPDATE_DEPLOY=1).
func checkFamilies(t *testing.T, urls map[string]string) {
	t.Helper()
	path := constellation.RepoPath(t, familiesFile)
	old, err := os.ReadFile(path)
	if err != nil && os.Getenv("NEREID_UPDATE_DEPLOY") == "" {
		t.Fatal(err)
	}
	listed := map[string]string{} // "service family type" -> "gpu" or ""
	for _, line := range strings.Split(string(old), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || strings.HasPrefix(line, "#") {
			continue
		}
		listed[strings.Join(f[:3], " ")] = strings.Join(f[3:], " ")
	}
	seen := map[string]bool{}
	for svc, url := range urls {
		_, page := scrape(t, url)
		for _, line := range strings.Split(page, "\n") {
			if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
				seen[svc+" "+rest] = true
			}
		}
	}
	if os.Getenv("NEREID_UPDATE_DEPLOY") != "" {
		var lines []string
		for k := range seen {
			lines = append(lines, k)
		}
		for k, tag := range listed {
			if tag == "gpu" && !seen[k] {
				lines = append(lines, k+" gpu")
			}
		}
		slices.Sort(lines)
		if err := os.WriteFile(path, []byte(familiesHeader+strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for k := range seen {
		if _, ok := listed[k]; !ok {
			t.Errorf("%s: exported but not in %s (NEREID_UPDATE_DEPLOY=1 go test ./e2e/metrics)", k, familiesFile)
		}
	}
	gpu := seenAny(seen, "nv_gpu_utilization") // this machine has a GPU
	for k, tag := range listed {
		if !seen[k] && !(tag == "gpu" && !gpu) {
			t.Errorf("%s: in %s but not exported", k, familiesFile)
		}
	}
}

func seenAny(seen map[string]bool, family string) bool {
	for k := range seen {
		if strings.Fields(k)[1] == family {
			return true
		}
	}
	return false
}
