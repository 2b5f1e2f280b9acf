// Package warmup tests model warmup (model_warmup) in a constellation of
// real processes: two executors in explicit model control each warm their
// own copy of a model before it turns READY, and a sample its backend fails
// fails the load with Triton's message, over HTTP and gRPC.
package warmup

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// warm is an identity model whose one sample of 4 requests runs twice on
// its instance.
const warm = `name: "warm" backend: "identity" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
model_warmup [ { name: "zeros" batch_size: 4 count: 2 inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 8 ] zero_data: true } } } ]
`

// warmFail is Triton's simple_string (addsub on BYTES elements holding
// decimal integers) warmed with zero data: strings of length 0, which the
// backend refuses, as Triton's QA model failing_infer refuses its sample.
const warmFail = `name: "warm_fail" backend: "addsub" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]
model_warmup [ { name: "zero sample" batch_size: 1
  inputs { key: "INPUT0" value { data_type: TYPE_STRING dims: [ 16 ] zero_data: true } }
  inputs { key: "INPUT1" value { data_type: TYPE_STRING dims: [ 16 ] zero_data: true } } } ]
`

// failReason is what the failed version's state says, Triton's message.
const failReason = "failed to run warmup sample 'zero sample': addsub backend: element '' of input 'INPUT0' is not a decimal int32; "

// failLoad is the load request's error: the first executor's, named.
const failLoad = "failed to load 'warm_fail' version 1: " + failReason + " (executor 'exA')"

func repo(t *testing.T) string {
	t.Helper()
	return constellation.WriteRepo(t, map[string]string{"warm": warm, "warm_fail": warmFail})
}

// counts reads a model's execution and inference counts from the HTTP
// statistics, summed over the executors.
func counts(t *testing.T, base, model string) (executions, inferences int) {
	t.Helper()
	code, body := constellation.Call(t, http.MethodGet, base+"/v2/models/"+model+"/stats", "")
	if code != 200 {
		t.Fatalf("stats %s: %d %s", model, code, body)
	}
	var s struct {
		ModelStats []struct {
			ExecutionCount int `json:"execution_count"`
			InferenceCount int `json:"inference_count"`
		} `json:"model_stats"`
	}
	if err := json.Unmarshal(body, &s); err != nil || len(s.ModelStats) != 1 {
		t.Fatalf("stats %s: %v %s", model, err, body)
	}
	return s.ModelStats[0].ExecutionCount, s.ModelStats[0].InferenceCount
}

// TestWarmupAcrossExecutors: a load warms the model on both executors
// before it is READY (the statistics, summed over them, count both
// warmups: 2 executors x 2 executions of 4 requests, as Triton counts its
// warmup), and a warmup the backend fails fails the load, with Triton's
// message in the load's error, the model unready, and the repository
// index's reason, over HTTP and over gRPC.
func TestWarmupAcrossExecutors(t *testing.T) {
	c := constellation.NewCluster(t)
	models := repo(t)
	for _, id := range []string{"exA", "exB"} {
		probe := constellation.Addr(constellation.FreePort(t))
		p := c.Executor(models, id, "--model-control-mode", "explicit", "--probe-addr", probe)
		if err := constellation.WaitHTTP("http://"+probe+"/readyz", 200, 30*time.Second); err != nil {
			t.Fatalf("executor %s: %v\n%s", id, err, p.Output())
		}
	}
	g := c.Gateway()
	base := g.HTTP()
	if !constellation.WaitFor(30*time.Second, func() bool {
		code, _ := constellation.Call(t, http.MethodGet, base+"/v2/health/ready", "")
		return code == 200
	}) {
		t.Fatalf("constellation not ready:\n%s", g.Output())
	}

	t.Run("HTTP", func(t *testing.T) {
		if code, body := constellation.Call(t, http.MethodPost, base+"/v2/repository/models/warm/load", ""); code != 200 {
			t.Fatalf("load warm: %d %s", code, body)
		}
		if code, _ := constellation.Call(t, http.MethodGet, base+"/v2/models/warm/ready", ""); code != 200 {
			t.Fatalf("warm is not ready after its load: %d", code)
		}
		if e, i := counts(t, base, "warm"); e != 4 || i != 16 {
			t.Errorf("warm after the load: %d executions of %d inferences, want 4 of 16 (2 executors x 2 x 4)", e, i)
		}

		code, body := constellation.Call(t, http.MethodPost, base+"/v2/repository/models/warm_fail/load", "")
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || code != 500 || e.Error != failLoad {
			t.Errorf("load warm_fail:\n got %d %s\nwant 500 {\"error\":%q}", code, body, failLoad)
		}
		if code, _ := constellation.Call(t, http.MethodGet, base+"/v2/models/warm_fail/ready", ""); code == 200 {
			t.Error("warm_fail is ready though its warmup failed")
		}
		code, body = constellation.Call(t, http.MethodPost, base+"/v2/repository/index", "")
		var index []struct {
			Name, Version, State, Reason string
		}
		if err := json.Unmarshal(body, &index); err != nil || code != 200 {
			t.Fatalf("index: %d %s", code, body)
		}
		found := false
		for _, m := range index {
			if m.Name == "warm_fail" {
				found = true
				if m.State != "UNAVAILABLE" || m.Reason != failReason {
					t.Errorf("index: warm_fail is %s (%q), want UNAVAILABLE (%q)", m.State, m.Reason, failReason)
				}
			}
		}
		if !found {
			t.Errorf("index lists no warm_fail: %s", body)
		}
	})

	t.Run("gRPC", func(t *testing.T) {
		cc, err := grpc.NewClient(g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		client := inference.NewGRPCInferenceServiceClient(cc)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		// Unloaded and loaded again: a new version object, warmed again
		// on both executors.
		if _, err := client.RepositoryModelUnload(ctx, &inference.RepositoryModelUnloadRequest{ModelName: "warm"}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "warm"}); err != nil {
			t.Fatal(err)
		}
		if r, err := client.ModelReady(ctx, &inference.ModelReadyRequest{Name: "warm"}); err != nil || !r.GetReady() {
			t.Fatalf("warm not ready after its load: %v %v", r, err)
		}
		st, err := client.ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: "warm"})
		if err != nil {
			t.Fatal(err)
		}
		if ms := st.GetModelStats(); len(ms) != 1 || ms[0].GetExecutionCount() != 4 || ms[0].GetInferenceCount() != 16 {
			t.Errorf("warm after the load: %v, want 4 executions of 16 inferences", ms)
		}

		_, err = client.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "warm_fail"})
		if s, _ := status.FromError(err); s.Code() != codes.Internal || s.Message() != failLoad {
			t.Errorf("load warm_fail:\n got %v\nwant %s %q", err, codes.Internal, failLoad)
		}
		if r, err := client.ModelReady(ctx, &inference.ModelReadyRequest{Name: "warm_fail"}); err != nil || r.GetReady() {
			t.Errorf("warm_fail ready: %v %v, want false", r, err)
		}
		idx, err := client.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, m := range idx.GetModels() {
			if m.GetName() == "warm_fail" {
				found = true
				if m.GetState() != "UNAVAILABLE" || m.GetReason() != failReason {
					t.Errorf("index: warm_fail is %s (%q), want UNAVAILABLE (%q)", m.GetState(), m.GetReason(), failReason)
				}
			}
		}
		if !found {
			t.Errorf("index lists no warm_fail: %v", idx)
		}
	})
}
