package placement

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// busyConfig is an identity model of one instance that takes 40 ms per
// request: concurrent requests queue behind each other.
const busyConfig = `name: "busy"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "execute_delay_ms" value { string_value: "40" } }
`

// TestPlacementScaleByLoad: under sustained load a model's requests wait
// in its queue beyond --placement-scale-up-queue-time, and the controller
// adds a replica on the other executor; once the load is over, the idle
// replica beyond min_replicas is unloaded. No request fails meanwhile.
func TestPlacementScaleByLoad(t *testing.T) {
	e := &env{c: constellation.NewCluster(t), repo: constellation.WriteRepo(t, map[string]string{"busy": busyConfig}),
		execs: map[string]*constellation.Proc{}}
	e.redis, _ = constellation.Redis(t)
	lead := e.router(t, "router0", "--placement-scale-up-queue-time", "100ms", "--placement-scale-up-after", "1s",
		"--placement-scale-down-after", "3s")
	e.executor("exec0", "node0")
	e.executor("exec1", "node1")
	adminHTTP := constellation.FreePort(t)
	e.g = e.c.Gateway("--placement", "true", "--admin-http-port", strconv.Itoa(adminHTTP))
	adminURL := "http://" + constellation.Addr(adminHTTP) + "/v1/admin/placement"
	replicas := func() int {
		for _, m := range placementView(t, adminURL).Models {
			if m.Name == "busy" {
				return len(m.Executors)
			}
		}
		return 0
	}
	if !constellation.WaitFor(30*time.Second, func() bool { return ready(e.g, "busy") && replicas() == 1 }) {
		t.Fatalf("busy is not placed once:\n%s", lead.Output())
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	data := strings.Repeat("1,", 15) + "1"
	body := `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[16],"data":[` + data + `]}]}`
	for range 8 {
		wg.Go(func() {
			for !stop.Load() {
				code, resp := post(t, e.g, "/v2/models/busy/infer", body)
				sent.Add(1)
				if code != 200 {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %s", code, resp))
				}
			}
		})
	}
	scaled := constellation.WaitFor(40*time.Second, func() bool { return replicas() == 2 })
	stop.Store(true)
	wg.Wait()
	if !scaled {
		t.Fatalf("no second replica under load (%d requests sent):\n%s", sent.Load(), lead.Output())
	}
	if !logged(lead, `reason="queue time above the scale-up threshold"`) {
		t.Errorf("the replica was not added for the queue time:\n%s", lead.Output())
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed while the model scaled, the first: %v", n, sent.Load(), firstErr.Load())
	}
	if !constellation.WaitFor(40*time.Second, func() bool { return replicas() == 1 }) {
		t.Fatalf("the idle replica was not unloaded:\n%s", lead.Output())
	}
	if !logged(lead, `reason="idle replica beyond min_replicas"`) {
		t.Errorf("no scale-down decision in the controller's log:\n%s", lead.Output())
	}
	if !ready(e.g, "busy") {
		t.Fatal("busy is not ready after the scale-down")
	}
}
