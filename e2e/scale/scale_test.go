// Package scale measures the envelope of placement at scale (make scale):
// many executor processes of small capacity, two gateways, two sequence
// routers running the placement controller, and thousands of models of
// the built-in backends, all real processes on this machine. It is not
// part of make test: it runs only with NEREID_SCALE set.
package scale

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

func TestMain(m *testing.M) { os.Exit(constellation.Main(m)) }

// shape is one run of the envelope: executors and models.
type shape struct{ executors, models int }

func (s shape) String() string { return fmt.Sprintf("%d executors x %d models", s.executors, s.models) }

// result is what one run measured.
type result struct {
	shape
	placed        time.Duration // start of the executors to every model placed
	decisions     int           // the controllers' decisions until then
	decisionRate  float64       // decisions per second, first to last
	idleMsgs      float64       // NATS messages per second, idle
	idleBytes     float64       // NATS bytes per second, idle
	gatewayRSS    int64         // the larger gateway's resident set, bytes
	controllerRSS int64         // the leading router's, bytes
	killed        int           // executors killed at once (0: not done)
	converged     time.Duration // kill to both gateways' catalogs without them
	replaced      time.Duration // kill to every model placed again
	probes        int64         // requests to models with a live replica during it
	probeFailures int64
}

// TestScaleEnvelope runs the shapes of NEREID_SCALE_SHAPES
// ("8x200,48x200,8x2000,48x2000" by default), measures each, prints the
// table docs/placement.md reports, and checks that idle NATS traffic grows
// no faster than linearly in executors and in models.
func TestScaleEnvelope(t *testing.T) {
	if os.Getenv("NEREID_SCALE") == "" {
		t.Skip("the scale envelope runs with make scale (NEREID_SCALE=1)")
	}
	shapes := []shape{{8, 200}, {48, 200}, {8, 2000}, {48, 2000}}
	if v := os.Getenv("NEREID_SCALE_SHAPES"); v != "" {
		shapes = nil
		for _, f := range strings.Split(v, ",") {
			e, m, _ := strings.Cut(f, "x")
			ne, err1 := strconv.Atoi(e)
			nm, err2 := strconv.Atoi(m)
			if err1 != nil || err2 != nil || ne < 1 || nm < 1 {
				t.Fatalf("NEREID_SCALE_SHAPES: %q is not EXECUTORSxMODELS", f)
			}
			shapes = append(shapes, shape{ne, nm})
		}
	}
	var results []result
	for _, s := range shapes {
		t.Run(s.String(), func(t *testing.T) {
			r := measure(t, s)
			results = append(results, r)
			t.Logf("%s: all placed in %v (%d decisions), idle NATS %.0f msgs/s %.0f B/s, RSS gateway %d MiB controller %d MiB; %d killed: catalogs converged in %v, placed again in %v, %d of %d probes failed",
				r.shape, r.placed, r.decisions, r.idleMsgs, r.idleBytes, r.gatewayRSS>>20, r.controllerRSS>>20, r.killed, r.converged, r.replaced, r.probeFailures, r.probes)
		})
	}
	fmt.Println("\n== nereid scale envelope")
	fmt.Println("| executors | models | all placed | decisions/s | idle NATS msgs/s | idle NATS KiB/s | gateway RSS | controller RSS | killed | catalogs converged | placed again | requests failed |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range results {
		kill := "-"
		conv, again, failed := "-", "-", "-"
		if r.killed > 0 {
			kill = strconv.Itoa(r.killed)
			conv, again = r.converged.Round(10*time.Millisecond).String(), r.replaced.Round(10*time.Millisecond).String()
			failed = fmt.Sprintf("%d of %d", r.probeFailures, r.probes)
		}
		fmt.Printf("| %d | %d | %s | %.0f | %.0f | %.1f | %d MiB | %d MiB | %s | %s | %s | %s |\n", r.executors, r.models,
			r.placed.Round(10*time.Millisecond), r.decisionRate, r.idleMsgs, r.idleBytes/1024,
			r.gatewayRSS>>20, r.controllerRSS>>20, kill, conv, again, failed)
	}
	// Growth: idle traffic against executors at each model count, and
	// against models at each executor count, no faster than linear (with
	// a quarter of slack for the noise of one run).
	for _, a := range results {
		for _, b := range results {
			switch {
			case a.models == b.models && b.executors > a.executors:
				growth(t, "executors", a, b, float64(b.executors)/float64(a.executors))
			case a.executors == b.executors && b.models > a.models:
				growth(t, "models", a, b, float64(b.models)/float64(a.models))
			}
		}
	}
	for _, r := range results {
		if r.probeFailures > 0 {
			t.Errorf("%s: %d of %d requests to models with a live replica failed while executors died", r.shape, r.probeFailures, r.probes)
		}
	}
}

func growth(t *testing.T, what string, a, b result, linear float64) {
	t.Helper()
	g := b.idleBytes / a.idleBytes
	fmt.Printf("idle NATS bytes/s from %s to %s: x%.2f (linear in %s: x%.2f)\n", a.shape, b.shape, g, what, linear)
	if g > linear*1.25 {
		t.Errorf("idle NATS traffic grows faster than linearly in %s: x%.2f from %s to %s, linear x%.2f", what, g, a.shape, b.shape, linear)
	}
}

// identity is a built-in identity model; its footprint hint varies with
// i, so that models differ in what the controller counts them to take.
func identity(name string, i int) string {
	return fmt.Sprintf(`name: %q
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "nereid_model_footprint" value { string_value: "%dMiB" } }
`, name, 1+i%16)
}

func modelName(i int) string { return fmt.Sprintf("m%04d", i) }

func measure(t *testing.T, s shape) result {
	r := result{shape: s}
	configs := map[string]string{}
	for i := range s.models {
		configs[modelName(i)] = identity(modelName(i), i)
	}
	repo := constellation.WriteRepo(t, configs)
	monitor := constellation.FreePort(t)
	c := constellation.NewClusterWith(t, "-m", strconv.Itoa(monitor))
	redisURL, _ := constellation.Redis(t)
	var routers []*constellation.Proc
	for i := range 2 {
		id := fmt.Sprintf("router%d", i)
		routers = append(routers, constellation.Start(t, id, c.Bin.Path("nereid-sequence-router"), "--nats-url", c.NATSURL,
			"--redis-url", redisURL, "--id", id, "--placement", "true", "--lease-ttl", "2s"))
	}
	// Room for every model with a half to spare, or, where eight
	// executors are killed, with a quarter to spare on those left; six
	// executors per node.
	slots := (s.models*3/2 + s.executors - 1) / s.executors
	if s.executors >= 16 {
		slots = (s.models*5/4 + s.executors - 9) / (s.executors - 8)
	}
	start := time.Now()
	execs := make([]*constellation.Proc, s.executors)
	for i := range s.executors {
		execs[i] = c.Executor(repo, fmt.Sprintf("ex%02d", i), "--node", fmt.Sprintf("node%d", i/6), "--placement", "true",
			"--model-capacity", fmt.Sprintf("slots=%d", slots))
	}
	var gws []*constellation.Gateway
	var admins []string
	for range 2 {
		port := constellation.FreePort(t)
		gws = append(gws, c.Gateway("--placement", "true", "--admin-http-port", strconv.Itoa(port)))
		admins = append(admins, "http://"+constellation.Addr(port)+"/v1/admin")
	}

	// Every model placed.
	if !constellation.WaitFor(20*time.Minute, func() bool {
		st, err := placement(admins[0])
		return err == nil && st.placed() == s.models
	}) {
		st, _ := placement(admins[0])
		t.Fatalf("%d of %d models placed after 20 minutes", st.placed(), s.models)
	}
	r.placed = time.Since(start)
	// One controller led throughout: a round of thousands of loads keeps
	// renewing its lease rather than letting the standby take over and
	// decide beside it.
	leads := 0
	for _, p := range routers {
		leads += strings.Count(p.Output(), `msg="placement: leading"`)
	}
	if leads != 1 {
		t.Errorf("%d leaderships while the models were placed, want 1", leads)
	}
	var stamps []time.Time
	for _, p := range routers {
		stamps = append(stamps, decisionTimes(p.Output())...)
	}
	r.decisions = len(stamps)
	if len(stamps) > 1 {
		first, last := stamps[0], stamps[0]
		for _, at := range stamps {
			if at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}
		if d := last.Sub(first); d > 0 {
			r.decisionRate = float64(len(stamps)-1) / d.Seconds()
		}
	}

	// Idle: no request, every model placed; what heartbeats, catalog
	// reads and announcements cost.
	time.Sleep(5 * time.Second)
	v0, err := varz(monitor)
	if err != nil {
		t.Fatal(err)
	}
	const window = 10 * time.Second
	time.Sleep(window)
	v1, err := varz(monitor)
	if err != nil {
		t.Fatal(err)
	}
	r.idleMsgs = float64(v1.InMsgs-v0.InMsgs) / window.Seconds()
	r.idleBytes = float64(v1.InBytes-v0.InBytes) / window.Seconds()
	for _, g := range gws {
		r.gatewayRSS = max(r.gatewayRSS, rss(g.Pid()))
	}
	for _, p := range routers {
		r.controllerRSS = max(r.controllerRSS, rss(p.Pid()))
	}

	if s.executors < 16 {
		return r
	}
	// Eight executors killed at once (SIGKILL): how soon both gateways'
	// catalogs are without them, and every model placed again; meanwhile
	// requests to models with a replica on a live executor never fail.
	st, err := placement(admins[0])
	if err != nil {
		t.Fatal(err)
	}
	killed := map[string]bool{}
	for i := range 8 {
		killed[fmt.Sprintf("ex%02d", i*s.executors/8)] = true
	}
	var alive []string
	for _, m := range st.Models {
		for _, id := range m.Executors {
			if !killed[id] {
				alive = append(alive, m.Name)
				break
			}
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var probes, failures atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for !stop.Load() {
				m := alive[rng.IntN(len(alive))]
				probes.Add(1)
				if infer(gws[w%2], m) != http.StatusOK {
					failures.Add(1)
				}
			}
		})
	}
	time.Sleep(time.Second)
	kill := time.Now()
	var kw sync.WaitGroup
	for i, p := range execs {
		if killed[fmt.Sprintf("ex%02d", i)] {
			kw.Go(p.Kill)
		}
	}
	kw.Wait()
	r.killed = len(killed)
	if !constellation.WaitFor(time.Minute, func() bool {
		for _, a := range admins {
			if n, err := executors(a); err != nil || n != s.executors-len(killed) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the gateways' catalogs still list killed executors after a minute")
	}
	r.converged = time.Since(kill)
	if !constellation.WaitFor(10*time.Minute, func() bool {
		st, err := placement(admins[0])
		return err == nil && st.placedWithout(killed) == s.models
	}) {
		t.Fatalf("models not placed again 10 minutes after the kill")
	}
	r.replaced = time.Since(kill)
	stop.Store(true)
	wg.Wait()
	r.probes, r.probeFailures = probes.Load(), failures.Load()
	return r
}

// placementView is the admin API's GetPlacement, the parts read here.
type placementView struct {
	Models []struct {
		Name      string   `json:"name"`
		Executors []string `json:"executors"`
	} `json:"models"`
}

func (v placementView) placed() int { return v.placedWithout(nil) }

func (v placementView) placedWithout(gone map[string]bool) int {
	n := 0
	for _, m := range v.Models {
		for _, id := range m.Executors {
			if !gone[id] {
				n++
				break
			}
		}
	}
	return n
}

var client = &http.Client{Timeout: 30 * time.Second}

func placement(admin string) (placementView, error) {
	var v placementView
	resp, err := client.Get(admin + "/placement")
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET placement: %d", resp.StatusCode)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// executors counts the executors a gateway's admin API lists as answering,
// and fails while it lists any that did not answer (killed, not yet
// expired from its catalog).
func executors(admin string) (int, error) {
	var v struct {
		Executors   []json.RawMessage `json:"executors"`
		Unreachable []json.RawMessage `json:"unreachable"`
	}
	resp, err := client.Get(admin + "/executors")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, err
	}
	if len(v.Unreachable) > 0 {
		return 0, fmt.Errorf("%d unreachable", len(v.Unreachable))
	}
	return len(v.Executors), nil
}

func infer(g *constellation.Gateway, model string) int {
	body := `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[4],"data":[1,2,3,4]}]}`
	resp, err := client.Post(g.HTTP()+"/v2/models/"+model+"/infer", "application/json", strings.NewReader(body))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// varzCounts are nats-server's message counters (its /varz).
type varzCounts struct {
	InMsgs  int64 `json:"in_msgs"`
	InBytes int64 `json:"in_bytes"`
}

func varz(port int) (varzCounts, error) {
	var v varzCounts
	resp, err := client.Get("http://" + constellation.Addr(port) + "/varz")
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// decisionTimes are the times of the decisions a controller logged (its
// log lines start "I1129 12:28:55.733452"; the day is the same for all).
func decisionTimes(out string) []time.Time {
	var at []time.Time
	for line := range strings.SplitSeq(out, "\n") {
		if !strings.Contains(line, `msg="placement: decision"`) || len(line) < 21 {
			continue
		}
		if t, err := time.Parse("15:04:05.000000", line[6:21]); err == nil {
			at = append(at, t)
		}
	}
	return at
}

// rss is a process's resident set size (VmRSS), 0 when unknown.
func rss(pid int) int64 {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
