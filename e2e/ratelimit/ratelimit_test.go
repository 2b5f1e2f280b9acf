// Package ratelimit tests Triton's rate limiter in a constellation of real
// processes: an executor started with --rate-limit execution_count and
// --rate-limit-resource runs the executions of two models that share a
// resource one at a time, whatever the protocol their requests came in
// by, and a model needing more of it than the executor has fails to load
// with Triton's message, over HTTP and gRPC.
package ratelimit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// delay is each execution's time (the identity backend's
// execute_delay_ms).
const delay = 200 * time.Millisecond

// limited is an identity model of two instances that each hold count of
// resource R while they execute.
func limited(name string, count, priority int) string {
	return fmt.Sprintf(`name: %q backend: "identity" max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU rate_limiter { resources [ { name: "R" count: %d } ] priority: %d } } ]
parameters { key: "execute_delay_ms" value { string_value: "%d" } }
`, name, count, priority, delay.Milliseconds())
}

// needReason is why "needy" cannot load on an executor with one R.
const needReason = `Resource count for "R" is limited to 1 which will prevent scheduling of one or more model instances, the minimum required count is 2`

func repo(t *testing.T) string {
	t.Helper()
	return constellation.WriteRepo(t, map[string]string{"a": limited("a", 1, 1), "b": limited("b", 1, 2), "needy": limited("needy", 2, 1)})
}

// TestRateLimitedAcrossProtocols: both models' four instances could run
// four executions at once, but each holds the executor's only R, so six
// requests (three to a over HTTP, three to b over gRPC, sent at once) take
// at least six executions' time, one after the other, and all succeed.
// Then needy, whose instances hold two R, fails to load over both
// protocols with Triton's message, and is not ready.
func TestRateLimitedAcrossProtocols(t *testing.T) {
	c := constellation.NewCluster(t)
	probe := constellation.Addr(constellation.FreePort(t))
	p := c.Executor(repo(t), "exA", "--model-control-mode", "explicit", "--load-model", "a", "--load-model", "b",
		"--rate-limit", "execution_count", "--rate-limit-resource", "R:1", "--probe-addr", probe)
	if err := constellation.WaitHTTP("http://"+probe+"/readyz", 200, 30*time.Second); err != nil {
		t.Fatalf("executor: %v\n%s", err, p.Output())
	}
	g := c.Gateway()
	base := g.HTTP()
	if !constellation.WaitFor(30*time.Second, func() bool {
		ca, _ := constellation.Call(t, http.MethodGet, base+"/v2/models/a/ready", "")
		cb, _ := constellation.Call(t, http.MethodGet, base+"/v2/models/b/ready", "")
		return ca == 200 && cb == 200
	}) {
		t.Fatalf("models not ready:\n%s", g.Output())
	}
	cc, err := grpc.NewClient(g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := inference.NewGRPCInferenceServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("executions one at a time", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		start := time.Now()
		for i := range 3 {
			v := float32(i + 1)
			wg.Go(func() {
				body := fmt.Sprintf(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1],"data":[%g]}]}`, v)
				code, resp := constellation.Call(t, http.MethodPost, base+"/v2/models/a/infer", body)
				var out struct {
					Outputs []struct {
						Data []float32 `json:"data"`
					} `json:"outputs"`
				}
				if err := json.Unmarshal(resp, &out); code != 200 || err != nil || len(out.Outputs) != 1 || len(out.Outputs[0].Data) != 1 || out.Outputs[0].Data[0] != v {
					errs <- fmt.Errorf("HTTP a: %d %s", code, resp)
				}
			})
			wg.Go(func() {
				resp, err := client.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "b",
					Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1}}},
					RawInputContents: [][]byte{tensor.AppendFloat32s(nil, v)}})
				if err != nil {
					errs <- fmt.Errorf("gRPC b: %v", err)
					return
				}
				if got := tensor.Float32s(resp.GetRawOutputContents()[0]); len(got) != 1 || got[0] != v {
					errs <- fmt.Errorf("gRPC b: answered %v to %v", got, v)
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if elapsed < 6*delay {
			t.Errorf("6 executions of %s that each hold the only R took %s: some ran at once", delay, elapsed)
		}
	})

	t.Run("HTTP load refused", func(t *testing.T) {
		code, body := constellation.Call(t, http.MethodPost, base+"/v2/repository/models/needy/load", "")
		var e struct {
			Error string `json:"error"`
		}
		want := "failed to load 'needy' version 1: " + needReason
		if err := json.Unmarshal(body, &e); err != nil || code != 500 || e.Error != want {
			t.Errorf("load needy:\n got %d %s\nwant 500 {\"error\":%q}", code, body, want)
		}
		if code, _ := constellation.Call(t, http.MethodGet, base+"/v2/models/needy/ready", ""); code == 200 {
			t.Error("needy is ready though it needs more R than there is")
		}
	})

	t.Run("gRPC load refused", func(t *testing.T) {
		_, err := client.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "needy"})
		want := "failed to load 'needy' version 1: " + needReason
		if s, _ := status.FromError(err); s.Code() != codes.Internal || s.Message() != want {
			t.Errorf("load needy:\n got %v\nwant %s %q", err, codes.Internal, want)
		}
		if r, err := client.ModelReady(ctx, &inference.ModelReadyRequest{Name: "needy"}); err != nil || r.GetReady() {
			t.Errorf("needy ready: %v %v, want false", r, err)
		}
	})
}
