package gateway

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// TestCPUMetrics: /metrics carries Triton's CPU metrics of the gateway's
// machine, with values a machine can have.
func TestCPUMetrics(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	r := do(t, "GET", "http://"+g.MetricsAddr()+"/metrics", nil, nil)
	if r.status != 200 {
		t.Fatalf("metrics: %d", r.status)
	}
	values := map[string]float64{}
	types := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			types[f[0]] = f[1]
			continue
		}
		if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], "nv_cpu_") {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			values[f[0]] = v
		}
	}
	for _, name := range []string{"nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes"} {
		if _, ok := values[name]; !ok || types[name] != "gauge" {
			t.Fatalf("%s missing or not a gauge:\n%s", name, r.body)
		}
	}
	if u := values["nv_cpu_utilization"]; u < 0 || u > 1 {
		t.Errorf("utilization %v outside [0, 1]", u)
	}
	if tot, used := values["nv_cpu_memory_total_bytes"], values["nv_cpu_memory_used_bytes"]; tot < 1<<20 || used <= 0 || used > tot {
		t.Errorf("memory total %v used %v", tot, used)
	}
}
