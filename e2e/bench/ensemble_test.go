package bench

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/services/standalone"
)

// Ensembles (issue 27): one standalone server (in-process bus off: the
// constellation's path, the gateway running the steps as it does across
// executors) serves the composing models and the ensembles over them, so
// both sides of each ratio run on the same server:
//
//   - a one-step ensemble over simple (Triton's simple_ensemble) against
//     simple directly, 64 B per input, gRPC unary, c=1 (target p50 <=
//     1.15x);
//   - a three-step chain of the identity model against one identity
//     request, 64 B, gRPC unary, c=1 (target p50 <= 1.5x): every step's
//     tensors go through the gateway, each step a request of its own;
//   - 16 MiB through a two-step identity chain against one 16 MiB
//     identity request, gRPC unary, c=1 (target req/s >= 0.8x): each
//     step's tensors take the same-node hand-off as any request's do;
//   - the three-step chain with its steps spread over two executors (a,
//     b, a) in a constellation of processes (nats-server, two executors,
//     a gateway), against one identity request there, at 64 B and 16 MiB
//     (reported): the gateway runs the steps, and a 16 MiB tensor goes
//     between the executors through files of /dev/shm that the steps
//     share (docs/ensembles.md).

func init() {
	comparisons = append(comparisons,
		comparison{"ensemble-simple-64B-grpc-unary/c1", "ensemble-base-simple-64B-grpc-unary/c1", latency, 1.15, 0},
		comparison{"ensemble-identity-chain3-64B-grpc-unary/c1", "ensemble-base-identity-64B-grpc-unary/c1", latency, 1.5, 0},
		comparison{"ensemble-identity-chain2-16MiB-grpc-unary/c1", "ensemble-base-identity-16MiB-grpc-unary/c1", throughput, 0.8, 0},
		comparison{"ensemble-identity-chain3-spread-64B-grpc-unary-constellation/c1", "ensemble-base-identity-64B-grpc-unary-constellation/c1", latency, 0, 0},
		comparison{"ensemble-identity-chain3-spread-16MiB-grpc-unary-constellation/c1", "ensemble-base-identity-16MiB-grpc-unary-constellation/c1", throughput, 0, 0},
	)
}

// identityChain is an ensemble of n steps of the identity model, each
// step's OUTPUT0 the next one's INPUT0.
func identityChain(name string, n int) string {
	var steps []string
	for i := range n {
		in, out := fmt.Sprintf("t%d", i), fmt.Sprintf("t%d", i+1)
		if i == 0 {
			in = "INPUT0"
		}
		if i == n-1 {
			out = "OUTPUT0"
		}
		steps = append(steps, fmt.Sprintf(`{ model_name: %q model_version: -1 input_map { key: "INPUT0" value: %q } output_map { key: "OUTPUT0" value: %q } }`, Model, in, out))
	}
	return fmt.Sprintf(`name: %q
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [ %s ] }
`, name, strings.Join(steps, ", "))
}

var ensOnce struct {
	sync.Once
	addr string
	err  error
}

// ensembleServer starts, once per run, the standalone server with the
// identity model, simple, and the ensembles over them.
func ensembleServer(b *testing.B) string {
	b.Helper()
	ensOnce.Do(func() {
		ensOnce.addr, ensOnce.err = startEnsembleServer()
	})
	if ensOnce.err != nil {
		b.Fatalf("starting the ensemble server: %v", ensOnce.err)
	}
	return ensOnce.addr
}

func startEnsembleServer() (string, error) {
	src, err := RepoDir()
	if err != nil {
		return "", err
	}
	deploy, err := filepath.Abs(filepath.Join("..", "..", "deploy", "model_repository"))
	if err != nil {
		return "", err
	}
	repo, err := os.MkdirTemp("", "nereid-bench-ensemble-")
	if err != nil {
		return "", err
	}
	configs := map[string]string{
		"identity_chain3": identityChain("identity_chain3", 3),
		"identity_chain2": identityChain("identity_chain2", 2),
	}
	for name, dir := range map[string]string{Model: src, "simple": deploy, "simple_ensemble": deploy} {
		text, err := os.ReadFile(filepath.Join(dir, name, "config.pbtxt"))
		if err != nil {
			return "", err
		}
		configs[name] = string(text)
	}
	for name, text := range configs {
		if err := os.MkdirAll(filepath.Join(repo, name, "1"), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(text), 0o644); err != nil {
			return "", err
		}
	}
	cfg := standalone.DefaultConfig()
	cfg.ModelRepository = repo
	cfg.Models = nil
	cfg.Host = "127.0.0.1"
	cfg.HTTPPort, cfg.GRPCPort = 0, 0
	cfg.AllowMetrics = false
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.InProcessBus = false
	s, _, err := runStandalone(cfg, "simple_ensemble", "identity_chain3", "identity_chain2")
	if err != nil {
		return "", err
	}
	// The server runs until the process ends, as the other fixtures do.
	return s.Gateway().GRPCAddr(), nil
}

// simpleRequest asks model (simple or an ensemble over it) for OUTPUT0 =
// INPUT0 + INPUT1, INPUT1 zero: the answer is INPUT0 (InferUnary's check).
func simpleRequest(model string) *inference.ModelInferRequest {
	in0 := make([]byte, small)
	for i := range small / 4 {
		in0[4*i] = byte(i)
	}
	return &inference.ModelInferRequest{ModelName: model,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}}},
		Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0"}},
		RawInputContents: [][]byte{in0, make([]byte, small)}}
}

func BenchmarkEnsemble(b *testing.B) {
	b.Run("simple-ensemble-vs-simple/64B/c=1", func(b *testing.B) {
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, ensembleServer(b)))
		measurePair(b, "ensemble-base-simple-64B-grpc-unary/c1", "ensemble-simple-64B-grpc-unary/c1", 1, warmSmall,
			InferUnary(c, simpleRequest("simple")), InferUnary(c, simpleRequest("simple_ensemble")))
	})
	b.Run("identity-chain3-vs-identity/64B/c=1", func(b *testing.B) {
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, ensembleServer(b)))
		payload := FP32Payload(small)
		measurePair(b, "ensemble-base-identity-64B-grpc-unary/c1", "ensemble-identity-chain3-64B-grpc-unary/c1", 1, warmSmall,
			InferUnary(c, modelRequest(Model, payload)), InferUnary(c, modelRequest("identity_chain3", payload)))
	})
	b.Run("identity-chain2-vs-identity/16MiB/c=1", func(b *testing.B) {
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, ensembleServer(b)))
		payload := FP32Payload(large)
		measurePair(b, "ensemble-base-identity-16MiB-grpc-unary/c1", "ensemble-identity-chain2-16MiB-grpc-unary/c1", 1, warmLarge,
			InferUnary(c, modelRequest(Model, payload)), InferUnary(c, modelRequest("identity_chain2", payload)))
	})
	b.Run("identity-chain3-spread-vs-identity/constellation", func(b *testing.B) {
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, spreadConstellation(b)))
		constellationPairs(b, c, "ensemble-base-identity", "identity_a", "ensemble-identity-chain3-spread", "identity_spread3")
	})
}

// constellationPairs measures, at 64 B and 16 MiB, gRPC unary c=1, a
// request to model against one to baseModel through c, under the keys
// "<key>-<size>-grpc-unary-constellation/c1" and the same of baseKey.
func constellationPairs(b *testing.B, c inference.GRPCInferenceServiceClient, baseKey, baseModel, key, model string) {
	for _, size := range []struct {
		label string
		bytes int
		warm  int
	}{{"64B", small, warmSmall}, {"16MiB", large, warmLarge}} {
		b.Run(size.label+"/c=1", func(b *testing.B) {
			payload := FP32Payload(size.bytes)
			suffix := "-" + size.label + "-grpc-unary-constellation/c1"
			measurePair(b, baseKey+suffix, key+suffix, 1, size.warm,
				InferUnary(c, modelRequest(baseModel, payload)), InferUnary(c, modelRequest(model, payload)))
		})
	}
}

// spreadConstellation starts nats-server, executor a (identity_a and
// identity_spread3, whose steps are a, b, a), executor b (identity_b) and a
// gateway, each its own process, and returns the gateway's gRPC address.
func spreadConstellation(b *testing.B) string {
	b.Helper()
	identity := func(name string) string { return identityConfig(b, name) }
	chain := identityChain("identity_spread3", 3)
	for _, m := range []string{"identity_a", "identity_b", "identity_a"} {
		chain = strings.Replace(chain, fmt.Sprintf("model_name: %q", Model), fmt.Sprintf("model_name: %q", m), 1)
	}
	cl := constellation.NewCluster(b)
	cl.Executor(constellation.WriteRepo(b, map[string]string{"identity_a": identity("identity_a"), "identity_spread3": chain}), "ex-a")
	cl.Executor(constellation.WriteRepo(b, map[string]string{"identity_b": identity("identity_b")}), "ex-b")
	gw := cl.Gateway()
	for _, m := range []string{"identity_a", "identity_b", "identity_spread3"} {
		if err := waitReady(gw.HTTP()+"/v2/models/"+m+"/ready", 60*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	return gw.GRPC()
}

// identityConfig is the configuration of the benchmarks' identity model
// under another name.
func identityConfig(b *testing.B, name string) string {
	b.Helper()
	src, err := RepoDir()
	if err != nil {
		b.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(src, Model, "config.pbtxt"))
	if err != nil {
		b.Fatal(err)
	}
	return strings.Replace(string(text), fmt.Sprintf("name: %q", Model), fmt.Sprintf("name: %q", name), 1)
}
