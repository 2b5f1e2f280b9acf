package gateway

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/services/executor"
)

// writeRepo writes a model repository of the configurations given, by
// model name, each with a version 1.
func writeRepo(t *testing.T, configs map[string]string) string {
	t.Helper()
	repo := t.TempDir()
	for name, text := range configs {
		if err := os.MkdirAll(filepath.Join(repo, name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return repo
}

const identityConfig = `name: %q
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
`

// TestEnsembleOutputsOutliveTheirSteps: the output of an ensemble whose
// steps ran on executors of this node lies in a hand-off file of its last
// step; the ensemble's response holds it for its writer to release, so
// that collecting the steps' responses (whose cleanups release what they
// hold) cannot unmap it first.
func TestEnsembleOutputsOutliveTheirSteps(t *testing.T) {
	ns := startNATS(t)
	r := handoff.RouteNode
	routeForTest = &r
	defer func() { routeForTest = nil }()
	runExecutorWith(t, ns, executor.Config{ID: "ex-a", RepositoryPath: writeRepo(t, map[string]string{
		"identity_a": fmt.Sprintf(identityConfig, "identity_a"),
		"pair": `name: "pair"
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "identity_a" model_version: -1 input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "t" } },
  { model_name: "identity_b" model_version: -1 input_map { key: "INPUT0" value: "t" } output_map { key: "OUTPUT0" value: "OUTPUT0" } }
] }
`})})
	runExecutorWith(t, ns, executor.Config{ID: "ex-b", RepositoryPath: writeRepo(t, map[string]string{
		"identity_b": fmt.Sprintf(identityConfig, "identity_b")})})
	g := startGateway(t, ns)
	waitModelReady(t, g, "pair")

	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i*13 + i>>10)
	}
	for range 3 {
		vv, err := g.resolveRequest("pair", "")
		if err != nil {
			t.Fatal(err)
		}
		req := &inference.ModelInferRequest{ModelName: "pair",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{int64(len(data) / 4)}}},
			RawInputContents: [][]byte{bytes.Clone(data)}}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		resp, _, err := g.forwardInfer(ctx, vv, req, false, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		// The steps' responses are garbage now: collecting them runs their
		// cleanups, which release what they hold.
		for range 3 {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		if len(resp.GetRawOutputContents()) != 1 || !bytes.Equal(resp.GetRawOutputContents()[0], data) {
			t.Fatal("the ensemble's output differs from its input")
		}
		// Its writer finds and releases what it holds.
		held := handoff.TakeResponse(resp)
		if held == nil {
			t.Fatal("the ensemble's response holds nothing of the hand-off memory its output lies in")
		}
		held.Release()
	}
	waitFor(t, "hand-off files to go", 5*time.Second, func() bool { return len(handoffFiles()) == 0 })
}
