package bench

import (
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
		for _, size := range []struct {
			label string
			bytes int
			warm  int
		}{{"64B", small, warmSmall}, {"16MiB", large, warmLarge}} {
			b.Run(size.label+"/c=1", func(b *testing.B) {
				payload := FP32Payload(size.bytes)
				measurePair(b, "placement-local-"+size.label+"-grpc-unary-constellation/c1",
					"placement-remote-"+size.label+"-grpc-unary-constellation/c1", 1, size.warm,
					InferUnary(c, modelRequest("identity_local", payload)), InferUnary(c, modelRequest("identity_remote", payload)))
			})
		}
	})
}
