package metrics

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/pkg/bus"
)

// Triton's per-model metrics on the gateway's /metrics/constellation
// against known traffic: successes, failures of each reason, the pending
// count while requests queue, queue time of a slow model (counter and
// summary), and the sums once a second executor joins; every service's
// own /metrics.
func TestMetricsAgainstTraffic(t *testing.T) {
	c := constellation.NewCluster(t)
	deployRepo := constellation.RepoPath(t, "deploy/model_repository")
	testRepo, err := filepath.Abs("testdata/model_repository")
	if err != nil {
		t.Fatal(err)
	}
	port := func() (string, string) {
		p := constellation.FreePort(t)
		return strconv.Itoa(p), "http://" + constellation.Addr(p) + "/metrics"
	}
	routerPort, routerURL := port()
	constellation.Start(t, "router", c.Bin.Path("nereid-sequence-router"), "--nats-url", c.NATSURL, "--id", "router0", "--metrics-port", routerPort)
	regPort, regURL := port()
	constellation.Start(t, "shm-registry", c.Bin.Path("nereid-shm-registry"), "--nats-url", c.NATSURL, "--metrics-port", regPort)
	models := []string{"simple", "simple_string", "slow", "seq1", "identity_fp32", "square_int32"}
	execArgs := []string{"--model-repository", testRepo, "--metrics-config", "summary_latencies=true", "--metrics-config", "histogram_latencies=true"}
	for _, m := range models {
		execArgs = append(execArgs, "--load-model", m)
	}
	ex1Port, ex1URL := port()
	c.Executor(deployRepo, "ex-1", append(execArgs, "--metrics-port", ex1Port)...)
	gw := c.Gateway("--metrics-config", "summary_latencies=true", "--metrics-config", "histogram_latencies=true", "--allow-client-shm", "true")
	waitReady(t, gw.HTTP(), models...)
	own := gw.Metrics()
	url := own + "/constellation"
	infer := func(m string) string { return gw.HTTP() + "/v2/models/" + m + "/infer" }

	// Nothing yet: every reason is reported, at zero, with no pending.
	got, page := scrape(t, url)
	for _, m := range models {
		for _, r := range []string{"REJECTED", "CANCELED", "BACKEND", "OTHER"} {
			want(t, got, map[string]float64{model("nv_inference_request_failure", m, "reason", r): 0})
		}
		want(t, got, map[string]float64{model("nv_inference_pending_request_count", m): 0, model("nereid_executors", m): 1})
	}
	if strings.Contains(page, "nv_gpu_") {
		t.Errorf("GPU metrics without a GPU:\n%s", page)
	}

	const n = 5
	t.Run("successes", func(t *testing.T) {
		for range n {
			if code, msg := post(t, infer("simple"), simpleBody()); code != 200 {
				t.Fatalf("simple: %d %s", code, msg)
			}
		}
		got, _ := scrape(t, url)
		want(t, got, map[string]float64{
			model("nv_inference_request_success", "simple"):                      n,
			model("nv_inference_count", "simple"):                                n,
			model("nv_inference_request_failure", "simple", "reason", "BACKEND"): 0,
			model("nv_inference_request_failure", "simple", "reason", "OTHER"):   0,
			model("nv_inference_request_summary_us_count", "simple"):             n,
			model("nv_inference_queue_summary_us_count", "simple"):               n,
			model("nv_inference_compute_infer_summary_us_count", "simple"):       n,
		})
		if got[series("nereid_nats_round_trip_seconds_count", "kind", "infer")] < n {
			t.Errorf("gateway's infer round trips %v, want at least %d", got[series("nereid_nats_round_trip_seconds_count", "kind", "infer")], n)
		}
	})

	t.Run("backend failures", func(t *testing.T) {
		for range 2 {
			if code, _ := post(t, infer("simple_string"), stringBody("not a number")); code == 200 {
				t.Fatal("simple_string accepted elements that are not numbers")
			}
		}
		if code, msg := post(t, infer("simple_string"), stringBody("3")); code != 200 {
			t.Fatalf("simple_string: %d %s", code, msg)
		}
		got, _ := scrape(t, url)
		want(t, got, map[string]float64{
			model("nv_inference_request_failure", "simple_string", "reason", "BACKEND"): 2,
			model("nv_inference_request_failure", "simple_string", "reason", "OTHER"):   0,
			model("nv_inference_request_success", "simple_string"):                      1,
		})
	})

	t.Run("pending and queue time", func(t *testing.T) {
		// Three requests at once to one instance taking 3 s each: two wait.
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if code, msg := post(t, infer("slow"), slowBody()); code != 200 {
					t.Errorf("slow: %d %s", code, msg)
				}
			})
		}
		waitFor(t, url, model("nv_inference_pending_request_count", "slow"), "2 requests of slow pending", equals(2))
		wg.Wait()
		got, _ := scrape(t, url)
		want(t, got, map[string]float64{
			model("nv_inference_request_success", "slow"):        3,
			model("nv_inference_pending_request_count", "slow"):  0,
			model("nv_inference_queue_summary_us_count", "slow"): 3,
		})
		// The last one waited for the whole execution of the second (all
		// three had arrived while the first executed): at least 3 s.
		queue := got[model("nv_inference_queue_duration_us", "slow")]
		if queue < 3e6 {
			t.Errorf("queue duration %v µs, want at least 3e6", queue)
		}
		if infer := got[model("nv_inference_compute_infer_duration_us", "slow")]; infer < 3*3e6 {
			t.Errorf("compute infer duration %v µs, want at least 9e6", infer)
		}
		// The summary's sum is the counter's (each rounded to µs).
		if sum := got[model("nv_inference_queue_summary_us_sum", "slow")]; math.Abs(sum-queue) > 10 {
			t.Errorf("queue summary sum %v, counter %v", sum, queue)
		}
		if top := got[quantile("nv_inference_queue_summary_us", "slow", "0.999")]; top < 3e6*0.99 {
			t.Errorf("queue summary quantile 0.999 = %v µs, want the longest wait (>= 3e6)", top)
		}
		if med := got[quantile("nv_inference_request_summary_us", "slow", "0.5")]; med < 3e6*0.99 {
			t.Errorf("request summary median %v µs, want at least one execution (3e6)", med)
		}
	})

	t.Run("cancelled while queued", func(t *testing.T) {
		conn, err := grpc.NewClient(gw.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		gc := inference.NewGRPCInferenceServiceClient(conn)
		req := &inference.ModelInferRequest{ModelName: "slow", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1}, Contents: &inference.InferTensorContents{Fp32Contents: []float32{1}}}}}
		// Two requests hold the instance (one runs, one waits); the third
		// queues behind both and is cancelled while it waits.
		held := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := gc.ModelInfer(context.Background(), req)
				held <- err
			}()
		}
		waitFor(t, url, model("nv_inference_pending_request_count", "slow"), "one request of slow pending", equals(1))
		ctx, cancel := context.WithCancel(context.Background())
		third := make(chan error, 1)
		go func() {
			_, err := gc.ModelInfer(ctx, req)
			third <- err
		}()
		waitFor(t, url, model("nv_inference_pending_request_count", "slow"), "two requests of slow pending", equals(2))
		cancel()
		if err := <-third; err == nil {
			t.Fatal("the cancelled request succeeded")
		}
		for range 2 {
			if err := <-held; err != nil {
				t.Fatalf("holding request: %v", err)
			}
		}
		// Dropped from the queue once the instance is free again.
		got := waitFor(t, url, model("nv_inference_request_failure", "slow", "reason", "CANCELED"), "one cancellation of slow", equals(1))
		want(t, got, map[string]float64{
			model("nv_inference_request_success", "slow"):                       5,
			model("nv_inference_request_failure", "slow", "reason", "REJECTED"): 0,
			model("nv_inference_pending_request_count", "slow"):                 0,
		})
	})

	t.Run("sequence router: rejected and other", func(t *testing.T) {
		// A sequence without START: the router fails it (OTHER).
		if code, _ := post(t, infer("seq1"), seqBody(99, false, nil)); code != 400 {
			t.Fatalf("no START: %d", code)
		}
		// Sequence 1 holds the only slot; sequence 2 waits in the backlog
		// until its request timeout passes (REJECTED).
		if code, msg := post(t, infer("seq1"), seqBody(1, true, nil)); code != 200 {
			t.Fatalf("seq 1: %d %s", code, msg)
		}
		rejected := make(chan string, 1)
		go func() {
			code, msg := post(t, infer("seq1"), seqBody(2, true, map[string]any{"timeout": 4000000}))
			rejected <- strconv.Itoa(code) + " " + msg
		}()
		waitFor(t, routerURL, model("nereid_sequence_router_backlog_sequences", "seq1"), "sequence 2 in the router's backlog", equals(1))
		got := waitFor(t, url, model("nv_inference_pending_request_count", "seq1"), "sequence 2's request pending", equals(1))
		want(t, got, map[string]float64{model("nv_inference_request_failure", "seq1", "reason", "REJECTED"): 0})
		if r := <-rejected; r != "503 timeout of the corresponding sequence has been expired" {
			t.Fatalf("backlogged sequence: %s", r)
		}
		got, _ = scrape(t, url)
		want(t, got, map[string]float64{
			model("nv_inference_request_failure", "seq1", "reason", "REJECTED"): 1,
			model("nv_inference_request_failure", "seq1", "reason", "OTHER"):    1,
			model("nv_inference_request_failure", "seq1", "reason", "CANCELED"): 0,
			model("nv_inference_request_failure", "seq1", "reason", "BACKEND"):  0,
			model("nv_inference_request_success", "seq1"):                       1,
			model("nv_inference_pending_request_count", "seq1"):                 0,
		})
		// The statistics extension counts the router's failures too.
		var st struct {
			ModelStats []struct {
				InferenceStats struct {
					Fail struct {
						Count uint64 `json:"count"`
					} `json:"fail"`
				} `json:"inference_stats"`
			} `json:"model_stats"`
		}
		r, err := http.Get(gw.HTTP() + "/v2/models/seq1/stats")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(r.Body).Decode(&st)
		r.Body.Close()
		if err != nil || len(st.ModelStats) != 1 || st.ModelStats[0].InferenceStats.Fail.Count != 2 {
			t.Errorf("seq1 statistics: %+v %v, want fail count 2", st, err)
		}
		rgot, _ := scrape(t, routerURL)
		want(t, rgot, map[string]float64{
			model("nereid_sequence_router_backlog_sequences", "seq1"): 0,
			model("nereid_sequence_router_active_sequences", "seq1"):  1,
			model("nereid_sequence_router_queued_requests", "seq1"):   0,
			series("nereid_sequence_router_models"):                   1,
			// Its own part of Triton's metrics: what it failed and holds.
			model("nv_inference_request_failure", "seq1", "reason", "REJECTED"): 1,
			model("nv_inference_request_failure", "seq1", "reason", "OTHER"):    1,
			model("nv_inference_request_failure", "seq1", "reason", "BACKEND"):  0,
			model("nv_inference_pending_request_count", "seq1"):                 0,
		})
		if strings.Contains(pageOf(t, routerURL), "nv_inference_request_success") {
			t.Error("the router reports successes, which its executors count")
		}
	})

	t.Run("executor endpoint", func(t *testing.T) {
		got, page := scrape(t, ex1URL)
		// The executor pulls seq1's batches from the router.
		if got[series("nereid_nats_round_trip_seconds_count", "kind", "sequence_pull")] < 1 {
			t.Errorf("executor's sequence_pull round trips missing:\n%s", page)
		}
		if strings.Contains(page, "nv_gpu_") {
			t.Errorf("executor endpoint shows GPU metrics without a GPU:\n%s", page)
		}
		// The only executor so far: its own figures are the
		// constellation's, the router's failures of seq1 aside.
		cons, _ := scrape(t, url)
		for _, k := range []string{
			model("nv_inference_request_success", "simple"), model("nv_inference_count", "simple"),
			model("nv_inference_request_failure", "simple_string", "reason", "BACKEND"),
			model("nv_inference_request_failure", "slow", "reason", "CANCELED"),
			model("nv_inference_request_summary_us_count", "simple"), model("nv_inference_queue_duration_us", "slow"),
		} {
			if v, ok := got[k]; !ok || v != cons[k] {
				t.Errorf("executor's %s = %v (present %v), the constellation's %v", k, v, ok, cons[k])
			}
		}
		// The gateway's own page leaves them to executors and routers.
		if _, page := scrape(t, own); strings.Contains(page, "nv_inference_") || strings.Contains(page, "nv_gpu_") {
			t.Errorf("gateway's /metrics shows per-model or GPU metrics that executors report:\n%s", page)
		}
	})

	t.Run("shm registry endpoint", func(t *testing.T) {
		key := "/nereid_metrics_e2e_" + strconv.Itoa(os.Getpid())
		if err := os.WriteFile("/dev/shm"+key, make([]byte, 64), 0o600); err != nil {
			t.Skipf("no /dev/shm: %v", err)
		}
		defer os.Remove("/dev/shm" + key)
		code, msg := post(t, gw.HTTP()+"/v2/systemsharedmemory/region/r0/register", map[string]any{"key": key, "offset": 0, "byte_size": 64})
		if code != 200 {
			t.Fatalf("register: %d %s", code, msg)
		}
		got, _ := scrape(t, regURL)
		want(t, got, map[string]float64{
			series("nereid_shm_registry_regions", "kind", "system"):                1,
			series("nereid_shm_registry_regions", "kind", "cuda"):                  0,
			series("nereid_shm_registry_requests", "code", "OK", "op", "register"): 1,
		})
		if code, msg := post(t, gw.HTTP()+"/v2/systemsharedmemory/region/r0/unregister", map[string]any{}); code != 200 {
			t.Fatalf("unregister: %d %s", code, msg)
		}
		got, _ = scrape(t, regURL)
		want(t, got, map[string]float64{series("nereid_shm_registry_regions", "kind", "system"): 0})
	})

	t.Run("hand-off", func(t *testing.T) {
		// Gateway and executor share this machine's node name: a large
		// tensor goes through /dev/shm, not NATS.
		data := make([]float32, 1<<18) // 1 MiB: handoff.DefaultThreshold
		body := map[string]any{"inputs": []any{map[string]any{"name": "INPUT0", "datatype": "FP32", "shape": []int{1, len(data)}, "data": data}}}
		if code, msg := post(t, infer("identity_fp32"), body); code != 200 {
			t.Fatalf("identity_fp32: %d %s", code, msg)
		}
		got, _ := scrape(t, url)
		want(t, got, map[string]float64{
			series("nereid_handoff_bytes", "direction", "request", "mode", "file"):  4 << 18,
			series("nereid_handoff_bytes", "direction", "response", "mode", "file"): 4 << 18,
		})
	})

	t.Run("exported families", func(t *testing.T) {
		checkFamilies(t, map[string]string{"gateway": own, "executor": ex1URL, "sequence-router": routerURL, "shm-registry": regURL})
	})

	t.Run("a second executor joins: sums", func(t *testing.T) {
		before, _ := scrape(t, url)
		ex2Port, ex2URL := port()
		c.Executor(deployRepo, "ex-2", append(execArgs, "--metrics-port", ex2Port)...)
		waitFor(t, url, model("nereid_executors", "simple"), "two executors serving simple", equals(2))
		// Requests go to either executor (NATS queue group): 40 of them
		// leave both with some, and the gateway's figures are the sums.
		const m = 40
		for range m {
			if code, msg := post(t, infer("simple"), simpleBody()); code != 200 {
				t.Fatalf("simple: %d %s", code, msg)
			}
		}
		if code, _ := post(t, infer("simple_string"), stringBody("x")); code == 200 {
			t.Fatal("simple_string accepted an element that is not a number")
		}
		got, _ := scrape(t, url)
		want(t, got, map[string]float64{
			model("nv_inference_request_success", "simple"):                             before[model("nv_inference_request_success", "simple")] + m,
			model("nv_inference_count", "simple"):                                       before[model("nv_inference_count", "simple")] + m,
			model("nv_inference_request_summary_us_count", "simple"):                    before[model("nv_inference_request_summary_us_count", "simple")] + m,
			model("nv_inference_request_failure", "simple_string", "reason", "BACKEND"): 3,
			model("nv_inference_request_success", "slow"):                               5,
			model("nv_inference_request_failure", "slow", "reason", "CANCELED"):         1,
			model("nereid_executors", "slow"):                                           2,
		})
		// Each executor's own share, asked over the bus as a gateway asks:
		// both served some, and the gateway shows their sum.
		nc := c.ConnectAs(bus.RoleGateway)
		bc, err := bus.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		defer bc.Close()
		var total float64
		for _, id := range []string{"ex-1", "ex-2"} {
			var r busv1.StatisticsReply
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := bc.Request(ctx, bus.ExecutorStatsSubject(id), &busv1.StatisticsRequest{Name: "simple"}, &r)
			cancel()
			if err != nil || len(r.GetModelStats()) != 1 {
				t.Fatalf("%s statistics: %v %v", id, &r, err)
			}
			share := float64(r.GetModelStats()[0].GetInferenceStats().GetSuccess().GetCount())
			if share == 0 {
				t.Errorf("%s served none of %d requests", id, m)
			}
			total += share
		}
		if total != got[model("nv_inference_request_success", "simple")] {
			t.Errorf("executors' successes add up to %v, the gateway shows %v", total, got[model("nv_inference_request_success", "simple")])
		}
		if _, page := scrape(t, ex2URL); !strings.Contains(page, "nereid_nats_round_trip_seconds") {
			t.Errorf("second executor's metrics:\n%s", page)
		}
	})
}
