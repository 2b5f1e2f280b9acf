package ensemble

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// TestEnsembleStatisticsAcrossGateways: an ensemble's statistics, kept by
// the gateways that ran its requests, are the constellation's: asked of
// either of two gateways (the NATS permissions the shipped configuration
// grants), over HTTP and gRPC, each request counts once, and the answer
// does not wait out a gateway that did not answer.
func TestEnsembleStatisticsAcrossGateways(t *testing.T) {
	c := constellation.NewCluster(t)
	c.Executor(constellation.RepoPath(t, "e2e/ensemble/testdata/exa"), "ex-a")
	c.Executor(constellation.RepoPath(t, "e2e/ensemble/testdata/exb"), "ex-b")
	gws := []*constellation.Gateway{c.Gateway(), c.Gateway()}
	for _, g := range gws {
		waitReady(t, g, "simple", "simple_ensemble")
	}
	body := `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},` +
		`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`
	// Three requests through the first gateway, one through the second.
	for i, g := range []*constellation.Gateway{gws[0], gws[0], gws[0], gws[1]} {
		r, err := http.Post(g.HTTP()+"/v2/models/simple_ensemble/infer", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, r.StatusCode)
		}
	}

	// A gateway learns the others from their presence, announced every
	// second: wait until both report the whole count, then check it stays
	// exactly that (no gateway counted twice).
	successes := func(g *constellation.Gateway) (uint64, time.Duration) {
		t.Helper()
		start := time.Now()
		r, err := http.Get(g.HTTP() + "/v2/models/simple_ensemble/stats")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var s struct {
			ModelStats []struct {
				InferenceStats struct {
					Success struct {
						Count uint64 `json:"count"`
					} `json:"success"`
				} `json:"inference_stats"`
			} `json:"model_stats"`
		}
		if err := json.NewDecoder(r.Body).Decode(&s); err != nil || r.StatusCode != http.StatusOK || len(s.ModelStats) != 1 {
			t.Fatalf("stats: %d %v %+v", r.StatusCode, err, s)
		}
		return s.ModelStats[0].InferenceStats.Success.Count, time.Since(start)
	}
	for i, g := range gws {
		if !constellation.WaitFor(10*time.Second, func() bool { n, _ := successes(g); return n == 4 }) {
			n, _ := successes(g)
			t.Fatalf("gateway %d reports %d successes, want 4", i, n)
		}
		n, took := successes(g)
		if n != 4 {
			t.Errorf("gateway %d reports %d successes, want 4", i, n)
		}
		if took > 2*time.Second {
			t.Errorf("gateway %d answered in %v: a gateway's part was waited for", i, took)
		}
		conn, err := grpc.NewClient(g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		resp, err := inference.NewGRPCInferenceServiceClient(conn).ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: "simple_ensemble"})
		cancel()
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetModelStats()[0].GetInferenceStats().GetSuccess().GetCount(); got != 4 {
			t.Errorf("gateway %d over gRPC: %d successes, want 4", i, got)
		}
	}
}
