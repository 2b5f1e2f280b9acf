package cbackend

import (
	"context"
	"encoding/binary"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

const metricsConfig = `
name: "cmetrics"
backend: "nmetrics"
max_batch_size: 8
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [-1] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [-1] }]
`

// metricsSetup compiles the metrics test backend alone into a backend
// directory and writes a repository holding cmetrics alone.
func metricsSetup(t *testing.T) (backendDir, repo string) {
	root := t.TempDir()
	backendDir, repo = filepath.Join(root, "backends"), filepath.Join(root, "models")
	compileBackend(t, backendDir, "nmetrics", "metrics.c")
	writeModel(t, repo, "cmetrics", metricsConfig)
	return backendDir, repo
}

// The lines of the metrics test backend's families (metrics.c): Triton
// serves a backend's family under the name and help it gave, with its
// type, and its metrics with the labels the backend gave and no other.
const metricLabels = `{model="cmetrics",version="1"}`

var customFamilies = []string{
	"# HELP nereid_test_metric_requests Requests executed by the metrics test backend",
	"# TYPE nereid_test_metric_requests counter",
	"# HELP nereid_test_metric_elements INPUT0 elements seen by the metrics test backend",
	"# TYPE nereid_test_metric_elements gauge",
	"# HELP nereid_test_metric_input_sum Sum of each request's INPUT0",
	"# TYPE nereid_test_metric_input_sum histogram",
}

// customSeries are the series of the backend's metrics, as keys of
// readMetrics.
var customSeries = []string{
	"nereid_test_metric_requests" + metricLabels,
	"nereid_test_metric_elements" + metricLabels,
	"nereid_test_metric_input_sum_count" + metricLabels,
	"nereid_test_metric_input_sum_sum" + metricLabels,
	`nereid_test_metric_input_sum_bucket{model="cmetrics",version="1",le="1"}`,
	`nereid_test_metric_input_sum_bucket{model="cmetrics",version="1",le="10"}`,
	`nereid_test_metric_input_sum_bucket{model="cmetrics",version="1",le="100"}`,
	`nereid_test_metric_input_sum_bucket{model="cmetrics",version="1",le="+Inf"}`,
}

// wantSeries are the values of customSeries after http requests of
// [1,2,3] and grpc requests of [50,60].
func wantSeries(http, grpc int) []float64 {
	h, g := float64(http), float64(grpc)
	return []float64{h + g, 3*h + 2*g, h + g, 6*h + 110*g, 0, h, h, h + g}
}

// readMetrics fetches a metrics page: its lines, and the value of each
// series by name and labels.
func readMetrics(t *testing.T, url string) (string, map[string]float64) {
	t.Helper()
	code, body := get(t, url)
	if code != 200 {
		t.Fatalf("%s: %d %s", url, code, body)
	}
	values := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%s: line %q", url, line)
		}
		values[line[:i]] = v
	}
	return string(body), values
}

// checkCustomMetrics reads the pages and checks that each carries the
// backend's families and that their series add up to want.
func checkCustomMetrics(t *testing.T, want []float64, urls ...string) {
	t.Helper()
	sums := make([]float64, len(customSeries))
	var pages []string
	for _, url := range urls {
		page, values := readMetrics(t, url)
		pages = append(pages, page)
		for _, f := range customFamilies {
			if !strings.Contains(page, f+"\n") {
				t.Fatalf("%s lacks %q:\n%s", url, f, page)
			}
		}
		for i, s := range customSeries {
			v, ok := values[s]
			if !ok {
				t.Fatalf("%s lacks %s:\n%s", url, s, page)
			}
			sums[i] += v
		}
	}
	for i, s := range customSeries {
		if math.Abs(sums[i]-want[i]) > 1e-9 {
			t.Fatalf("%s = %v over %v, want %v:\n%s", s, sums[i], urls, want[i], strings.Join(pages, "\n----\n"))
		}
	}
}

// customMetricRequests sends n requests of [1,2,3] over HTTP or of
// [50,60] over gRPC.
func customMetricRequests(t *testing.T, gw *constellation.Gateway, grpcToo bool, n int) {
	t.Helper()
	for range n {
		if !grpcToo {
			code, body := post(t, gw.HTTP()+"/v2/models/cmetrics/infer",
				`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,3],"data":[1,2,3]}]}`)
			if code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			continue
		}
		cc, err := grpc.NewClient(gw.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		raw := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, math.Float32bits(50)), math.Float32bits(60))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err = inference.NewGRPCInferenceServiceClient(cc).ModelInfer(ctx, &inference.ModelInferRequest{
			ModelName:        "cmetrics",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1, 2}}},
			RawInputContents: [][]byte{raw},
		})
		cancel()
		cc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestCustomMetricsStandalone: the metric families a backend registers
// (a counter, a gauge and a histogram with buckets) show on the
// standalone server's :8002/metrics beside Triton's nv_* families, with
// their values after requests over HTTP and then gRPC.
func TestCustomMetricsStandalone(t *testing.T) {
	backendDir, repo := metricsSetup(t)
	gw := constellation.Standalone(t, repo, "--backend-directory", backendDir)
	if err := constellation.WaitHTTP(gw.HTTP()+"/v2/models/cmetrics/ready", 200, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	customMetricRequests(t, gw, false, 3)
	checkCustomMetrics(t, wantSeries(3, 0), gw.Metrics())
	customMetricRequests(t, gw, true, 2)
	checkCustomMetrics(t, wantSeries(3, 2), gw.Metrics())
	if page, _ := readMetrics(t, gw.Metrics()); !strings.Contains(page, `nv_inference_request_success{model="cmetrics",version="1"} 5`) {
		t.Fatalf("Triton's own metrics are not beside the backend's:\n%s", page)
	}
}

// TestCustomMetricsConstellation: two executor processes serve the model
// of the metrics test backend; each executor's own /metrics (its
// --probe-addr) shows the families with the values of the requests it
// ran, which add up to all of them, and the gateway's
// /metrics/constellation shows the sums, after requests over HTTP and
// then gRPC.
func TestCustomMetricsConstellation(t *testing.T) {
	backendDir, repo := metricsSetup(t)
	c := constellation.NewCluster(t)
	probeA, probeB := constellation.Addr(constellation.FreePort(t)), constellation.Addr(constellation.FreePort(t))
	a := c.Executor(repo, "exec-a", "--backend-directory", backendDir, "--probe-addr", probeA, "--load-model", "cmetrics")
	b := c.Executor(repo, "exec-b", "--backend-directory", backendDir, "--probe-addr", probeB, "--load-model", "cmetrics")
	gw := c.Gateway()
	if !constellation.WaitFor(30*time.Second, func() bool {
		if code, _ := get(t, gw.HTTP()+"/v2/models/cmetrics/ready"); code != 200 {
			return false
		}
		// Both executors serve it before requests are counted.
		_, v := readMetrics(t, gw.Metrics()+"/constellation")
		return v[`nereid_executors{model="cmetrics",version="1"}`] == 2
	}) {
		t.Fatalf("cmetrics is not served by both executors\n%s\n%s", a.Output(), b.Output())
	}
	executors := []string{"http://" + probeA + "/metrics", "http://" + probeB + "/metrics"}
	constellationPage := gw.Metrics() + "/constellation"

	customMetricRequests(t, gw, false, 6)
	checkCustomMetrics(t, wantSeries(6, 0), executors...)
	checkCustomMetrics(t, wantSeries(6, 0), constellationPage)
	customMetricRequests(t, gw, true, 4)
	checkCustomMetrics(t, wantSeries(6, 4), executors...)
	checkCustomMetrics(t, wantSeries(6, 4), constellationPage)
}
