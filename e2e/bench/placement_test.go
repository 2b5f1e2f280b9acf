package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// Placement (issue 30): a request to a model placed on an executor of
// another node than the gateway's, against one placed on the gateway's
// own node, in a constellation of processes (nats-server, two executors
// that say they run on nodes a and b, a gateway on node a), 64 B and
// 16 MiB, gRPC unary, c=1 (reported). The bus carries the remote
// request's tensors (in chunks past its payload limit); the local one's
// large tensors take the same-node hand-off.

func init() {
	comparisons = append(comparisons,
		comparison{"placement-remote-64B-grpc-unary-constellation/c1", "placement-local-64B-grpc-unary-constellation/c1", latency, 0, 0},
		comparison{"placement-remote-16MiB-grpc-unary-constellation/c1", "placement-local-16MiB-grpc-unary-constellation/c1", throughput, 0, 0},
		comparison{"placement-evicted-simple-grpc-unary-constellation/c1", "placement-placed-simple-grpc-unary-constellation/c1", latency, 0, 0},
	)
}

func BenchmarkPlacement(b *testing.B) {
	b.Run("remote-vs-local/constellation", func(b *testing.B) {
		cl := constellation.NewCluster(b)
		cl.Executor(constellation.WriteRepo(b, map[string]string{"identity_local": identityConfig(b, "identity_local")}), "ex-local", "--node", "node-a")
		cl.Executor(constellation.WriteRepo(b, map[string]string{"identity_remote": identityConfig(b, "identity_remote")}), "ex-remote", "--node", "node-b")
		gw := cl.Gateway("--node", "node-a")
		for _, m := range []string{"identity_local", "identity_remote"} {
			if err := waitReady(gw.HTTP()+"/v2/models/"+m+"/ready", 60*time.Second); err != nil {
				b.Fatal(err)
			}
		}
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, gw.GRPC()))
		constellationPairs(b, c, "placement-local", "identity_local", "placement-remote", "identity_remote")
	})
}

// evictedPair is the first request to an evicted model against a request
// to a placed one, with the placement controller (a sequence router with
// --placement, over redis-server) and two executors with --placement: one
// of a single slot holding evict_a or evict_b, the other holding
// placed_w. The measured side alternates between evict_a and evict_b, so
// that each of its requests finds its model evicted by the one before: the
// gateway waits for an on-demand placement, which evicts the other model
// and loads this one (Triton's simple, whose load takes little).
func evictedPair(b *testing.B) (addr, metrics string) {
	b.Helper()
	simple := func(name string) string {
		return strings.Replace(simpleConfig(b), `name: "simple"`, `name: "`+name+`"`, 1)
	}
	redisURL, _ := constellation.Redis(b)
	cl := constellation.NewCluster(b)
	port := constellation.FreePort(b)
	constellation.Start(b, "router", cl.Bin.Path("nereid-sequence-router"), "--nats-url", cl.NATSURL,
		"--redis-url", redisURL, "--id", "router0", "--placement", "true", "--metrics-port", strconv.Itoa(port))
	cl.Executor(constellation.WriteRepo(b, map[string]string{"evict_a": simple("evict_a"), "evict_b": simple("evict_b")}), "ex-cold",
		"--placement", "true", "--model-capacity", "slots=1")
	cl.Executor(constellation.WriteRepo(b, map[string]string{"placed_w": simple("placed_w")}), "ex-warm",
		"--placement", "true", "--model-capacity", "slots=1")
	gw := cl.Gateway("--placement", "true")
	for _, m := range []string{"placed_w"} {
		if err := waitReady(gw.HTTP()+"/v2/models/"+m+"/ready", 60*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	return gw.GRPC(), "http://" + constellation.Addr(port) + "/metrics"
}

// simpleConfig is deploy/model_repository's simple configuration.
func simpleConfig(b *testing.B) string {
	b.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", "deploy", "model_repository", "simple", "config.pbtxt"))
	if err != nil {
		b.Fatal(err)
	}
	return string(text)
}

// alternating is a worker whose requests go to the models in turn.
func alternating(c inference.GRPCInferenceServiceClient, models ...string) Worker {
	return func(int) (Op, func(), error) {
		next := 0
		return func(full bool) error {
			m := models[next%len(models)]
			next++
			resp, err := c.ModelInfer(context.Background(), simpleRequest(m))
			if err != nil {
				return fmt.Errorf("%s: %w", m, err)
			}
			return checkInferResponse(resp, simpleRequest(m).GetRawInputContents()[0], full)
		}, nil, nil
	}
}

func BenchmarkPlacementEvicted(b *testing.B) {
	b.Run("first-request-vs-placed/simple/c=1", func(b *testing.B) {
		addr, metrics := evictedPair(b)
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, addr))
		measurePair(b, "placement-placed-simple-grpc-unary-constellation/c1", "placement-evicted-simple-grpc-unary-constellation/c1", 1, 1,
			InferUnary(c, simpleRequest("placed_w")), alternating(c, "evict_a", "evict_b"))
		// The controller's own part, timed apart from the load
		// (nereid_placement_on_demand_seconds): place is the first demand
		// to the load command, the eviction included; load is the
		// executor's load.
		for _, phase := range []string{"place", "load"} {
			for _, q := range []string{"0.5", "0.99"} {
				v, err := onDemandQuantile(metrics, phase, q)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(v*1000, fmt.Sprintf("%s-p%s-ms", phase, map[string]string{"0.5": "50", "0.99": "99"}[q]))
			}
		}
	})
}

// onDemandQuantile reads quantile q of the controller's
// nereid_placement_on_demand_seconds for phase from its metrics page.
func onDemandQuantile(url, phase, q string) (float64, error) {
	samples, _, err := constellation.Scrape(url)
	if err != nil {
		return 0, err
	}
	series := `nereid_placement_on_demand_seconds{phase="` + phase + `",quantile="` + q + `"}`
	v, ok := samples[series]
	if !ok {
		return 0, fmt.Errorf("no %s in the controller's metrics", series)
	}
	return v, nil
}
