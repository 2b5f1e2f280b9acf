package stateless

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// inflightBound is how long after its executor is killed a request in
// flight on it may take to fail: the bus's liveness probes (three to four
// intervals of silence, bus.DefaultLiveness) with room for a loaded
// machine, and far below the gateway's 60 s deadline, which such a request
// used to wait for.
const inflightBound = 20 * time.Second

// TestExecutorKilledInFlight: requests running and queued on an executor
// that is killed (SIGKILL), with no other executor serving their model to
// run them again (TestLostRequestsRerun), all fail soon after, with
// UNAVAILABLE saying
// that the executor handling them was lost and they may or may not have
// run, instead of waiting for the gateway's deadline. The requests are
// known to be on the executor when it dies: each has been probed by the
// gateway or heard of unasked from the executor, as requests held through
// a whole sweep are.
func TestExecutorKilledInFlight(t *testing.T) {
	c := constellation.NewCluster(t)
	repo := constellation.RepoPath(t, "e2e/stateless/testdata/model_repository")
	ex := c.Executor(repo, "ex-stuck")
	g := c.Gateway()
	base := g.HTTP()
	if err := constellation.WaitHTTP(base+"/v2/models/stuck/ready", 200, 20*time.Second); err != nil {
		t.Fatalf("stuck never became ready: %v\n%s", err, ex.Output())
	}

	inFlight := c.WatchInFlight()

	// Two requests run (two instances), four wait in the queue.
	const n = 6
	body, _ := json.Marshal(map[string]any{"inputs": []any{
		map[string]any{"name": "INPUT0", "datatype": "INT32", "shape": []int{16}, "data": make([]int, 16)},
	}})
	type result struct {
		status int
		msg    string
		err    error
		end    time.Time
	}
	results := make(chan result, n)
	client := &http.Client{Timeout: 2 * time.Minute}
	for range n {
		go func() {
			resp, err := client.Post(base+"/v2/models/stuck/infer", "application/json", bytes.NewReader(body))
			if err != nil {
				results <- result{err: err, end: time.Now()}
				return
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var e struct {
				Error string `json:"error"`
			}
			_ = json.Unmarshal(raw, &e)
			results <- result{status: resp.StatusCode, msg: e.Error, end: time.Now()}
		}()
	}
	if !constellation.WaitFor(time.Minute, func() bool { return inFlight() >= n }) {
		t.Fatalf("liveness traffic for %d requests, want %d in flight", inFlight(), n)
	}

	ex.Kill()
	killed := time.Now()
	lost, slowest := 0, time.Duration(0)
	for range n {
		r := <-results
		took := r.end.Sub(killed)
		slowest = max(slowest, took)
		switch {
		case r.err != nil:
			t.Errorf("request: %v (%v after the kill)", r.err, took)
		case r.status != http.StatusServiceUnavailable || !strings.Contains(r.msg, "the executor handling it was lost") ||
			!strings.Contains(r.msg, "may or may not have run"):
			t.Errorf("request after the kill: %d %q", r.status, r.msg)
		case took > inflightBound:
			t.Errorf("request failed %v after the kill, bound %v: %q", took, inflightBound, r.msg)
		default:
			lost++
		}
	}
	t.Logf("executor killed with %d requests in flight (2 running, 4 queued): %d failed as lost, the last %v after the kill",
		n, lost, slowest.Round(time.Millisecond))
}
