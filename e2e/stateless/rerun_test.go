package stateless

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// TestLostRequestsRerun: requests of a stateless model in flight on an
// executor that is killed (SIGKILL), running or queued, run again on the
// executor that survives, and their clients (HTTP and gRPC) get the
// answers of their own inputs, not an error; the gateway counts them in
// nereid_requests_rerun. Those of a model whose parameter
// rerun_on_executor_loss is "false" fail as lost instead, saying that they
// may or may not have run.
func TestLostRequestsRerun(t *testing.T) {
	c := constellation.NewCluster(t)
	slow := c.Executor(constellation.RepoPath(t, "e2e/stateless/testdata/rerun/slow"), "ex-slow")
	g := c.Gateway()
	base := g.HTTP()
	for _, m := range []string{"stuck", "stuck_kept"} {
		if err := constellation.WaitHTTP(base+"/v2/models/"+m+"/ready", 200, 20*time.Second); err != nil {
			t.Fatalf("%s never became ready: %v\n%s", m, err, slow.Output())
		}
	}
	inFlight := c.WatchInFlight()

	// Per model two requests run (two instances) and one waits: stuck's
	// over HTTP and gRPC, stuck_kept's over HTTP.
	type result struct {
		model, via string
		input      []int
		status     int // HTTP status, or 200 / 503 for a gRPC OK / UNAVAILABLE
		msg        string
		output     []int64
		err        error
	}
	results := make(chan result, 6)
	client := &http.Client{Timeout: 2 * time.Minute}
	viaHTTP := func(model string, input []int) {
		r := result{model: model, via: "HTTP", input: input}
		defer func() { results <- r }()
		body, _ := json.Marshal(map[string]any{"inputs": []any{
			map[string]any{"name": "INPUT0", "datatype": "INT32", "shape": []int{16}, "data": input},
		}})
		resp, err := client.Post(base+"/v2/models/"+model+"/infer", "application/json", bytes.NewReader(body))
		if err != nil {
			r.err = err
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out struct {
			Error   string `json:"error"`
			Outputs []struct {
				Data []int64 `json:"data"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			r.err = fmt.Errorf("%d %q: %v", resp.StatusCode, raw, err)
			return
		}
		r.status, r.msg = resp.StatusCode, out.Error
		if len(out.Outputs) == 1 {
			r.output = out.Outputs[0].Data
		}
	}
	grpcc := grpcClient(t, g.GRPC())
	viaGRPC := func(model string, input []int) {
		r := result{model: model, via: "gRPC", input: input}
		defer func() { results <- r }()
		raw := make([]byte, 0, 4*len(input))
		for _, v := range input {
			raw = append(raw, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		}
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		resp, err := grpcc.ModelInfer(rctx, &inference.ModelInferRequest{
			ModelName:        model,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{16}}},
			RawInputContents: [][]byte{raw},
		})
		if err != nil {
			r.status, r.msg = 503, err.Error()
			if !strings.Contains(err.Error(), "code = Unavailable") {
				r.err = err
			}
			return
		}
		r.status = 200
		if out := resp.GetRawOutputContents(); len(out) == 1 {
			for b := out[0]; len(b) >= 4; b = b[4:] {
				r.output = append(r.output, int64(int32(uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3])<<24)))
			}
		}
	}
	go viaHTTP("stuck", seq16(100))
	go viaGRPC("stuck", seq16(200))
	go viaHTTP("stuck", seq16(300))
	go viaHTTP("stuck_kept", seq16(400))
	go viaHTTP("stuck_kept", seq16(500))
	go viaHTTP("stuck_kept", seq16(600))
	if !constellation.WaitFor(time.Minute, func() bool { return inFlight() >= 6 }) {
		t.Fatalf("liveness traffic for %d requests, want 6 in flight", inFlight())
	}

	// The survivor serves both models at once; it is up before the kill.
	probe := constellation.Addr(constellation.FreePort(t))
	fast := c.Executor(constellation.RepoPath(t, "e2e/stateless/testdata/rerun/fast"), "ex-fast", "--probe-addr", probe)
	if err := constellation.WaitHTTP("http://"+probe+"/readyz", 200, 20*time.Second); err != nil {
		t.Fatalf("the second executor never became ready: %v\n%s", err, fast.Output())
	}
	slow.Kill()
	killed := time.Now()
	rerun, kept := 0, 0
	for range 6 {
		r := <-results
		took := time.Since(killed).Round(time.Millisecond)
		switch {
		case r.err != nil:
			t.Errorf("%s %s request: %v (%v after the kill)", r.via, r.model, r.err, took)
		case r.model == "stuck" && (r.status != 200 || !slices.Equal(r.output, ints64(r.input))):
			t.Errorf("%s stuck request after the kill: %d %q, output %v, want its input %v", r.via, r.status, r.msg, r.output, r.input)
		case r.model == "stuck_kept" && (r.status != 503 || !strings.Contains(r.msg, "the executor handling it was lost") ||
			!strings.Contains(r.msg, "may or may not have run")):
			t.Errorf("%s stuck_kept request after the kill: %d %q, want 503 saying it was lost", r.via, r.status, r.msg)
		case took > inflightBound:
			t.Errorf("%s %s request ended %v after the kill, bound %v", r.via, r.model, took, inflightBound)
		case r.model == "stuck":
			rerun++
		default:
			kept++
		}
	}
	t.Logf("executor killed with 6 requests in flight: %d of stuck answered by the survivor, %d of stuck_kept failed as lost", rerun, kept)

	m := get(t, g.Metrics())
	if got := counter(t, string(m.Raw), `nereid_requests_rerun{model="stuck"}`); got != 3 {
		t.Errorf(`nereid_requests_rerun{model="stuck"} = %v, want 3`, got)
	}
	if strings.Contains(string(m.Raw), `nereid_requests_rerun{model="stuck_kept"}`) {
		t.Errorf("stuck_kept's requests counted as rerun:\n%s", m.Raw)
	}
}

func ints64(v []int) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

// counter is the value of the series line on a Prometheus text page; -1
// when absent.
func counter(t *testing.T, page, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(page)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
