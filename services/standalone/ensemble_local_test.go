package standalone

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/services/executor"
)

// writeRepo writes a model repository of the configurations given, by
// model name, each with a version 1 directory.
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

// simpleStep is an ensemble step over simple: INPUT0, INPUT1 from in0,
// in1; OUTPUT0, OUTPUT1 to out0, out1.
func simpleStep(in0, in1, out0, out1 string) string {
	return fmt.Sprintf(`{ model_name: "simple" model_version: -1 input_map { key: "INPUT0" value: %q } input_map { key: "INPUT1" value: %q } output_map { key: "OUTPUT0" value: %q } output_map { key: "OUTPUT1" value: %q } }`,
		in0, in1, out0, out1)
}

const ensembleIO = `max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
`

// TestEnsembleRunsInExecutor (issue 27 item 4): a three-step chain whose
// every step's model one executor serves goes to that executor as one
// request, which runs the steps there: the gateway's bus carries one
// request for it (the three steps' requests, and their tensors, never
// leave the executor), simple counts three executions and the ensemble
// one success with a compute time. An ensemble whose steps span two
// executors (simple here, identity_int32 on a second executor only) runs
// from the gateway as before and answers right.
func TestEnsembleRunsInExecutor(t *testing.T) {
	simple, err := os.ReadFile("testdata/ensemble/simple/config.pbtxt")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.ModelRepository = writeRepo(t, map[string]string{
		"simple": string(simple),
		"chain3": `name: "chain3"
platform: "ensemble"
` + ensembleIO + `output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [ ` + strings.Join([]string{
			simpleStep("INPUT0", "INPUT1", "S1", "D1"),
			simpleStep("S1", "D1", "S2", "D2"),
			simpleStep("S2", "D2", "OUTPUT0", "OUTPUT1")}, ", ") + ` ] }
`,
		// nested's first step is chain3, an ensemble itself.
		"nested": `name: "nested"
platform: "ensemble"
` + ensembleIO + `output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [ { model_name: "chain3" model_version: -1 input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" } output_map { key: "OUTPUT0" value: "C0" } output_map { key: "OUTPUT1" value: "C1" } }, ` +
			simpleStep("C0", "C1", "OUTPUT0", "OUTPUT1") + ` ] }
`,
		"span": `name: "span"
platform: "ensemble"
` + ensembleIO + `output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [ ` + simpleStep("INPUT0", "INPUT1", "SUM", "OUTPUT1") + `,
  { model_name: "identity_int32" model_version: -1 input_map { key: "INPUT0" value: "SUM" } output_map { key: "OUTPUT0" value: "OUTPUT0" } } ] }
`,
	})
	cfg.Models = nil
	cfg.ExitOnError = false
	cfg.AllowMetrics = false
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, srv)
	base := "http://" + srv.Gateway().HTTPAddr()

	// A second executor, over the same NATS, alone serving identity_int32.
	nc, err := srv.Connect(bus.RoleExecutor)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ex, err := executor.New(executor.Config{Conn: nc, ID: "second", Logger: slog.New(slog.DiscardHandler),
		RepositoryPath: writeRepo(t, map[string]string{"identity_int32": `name: "identity_int32"
backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
`})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ex.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the second executor did not stop")
		}
	}()
	for _, m := range []string{"simple", "chain3", "identity_int32", "span", "nested"} {
		waitModel(t, base, m)
	}

	in0 := seq16(func(i int) int { return i })
	in1 := seq16(func(int) int { return 1 })
	outputs := func(ex exchange) map[string]any {
		t.Helper()
		body, _ := ex.Body.(map[string]any)
		if ex.Status != 200 {
			t.Fatalf("status %d: %v", ex.Status, ex.Body)
		}
		got := map[string]any{}
		outs, _ := body["outputs"].([]any)
		for _, o := range outs {
			m := o.(map[string]any)
			got[m["name"].(string)] = m["data"]
		}
		return got
	}
	asAny := func(v []int) any {
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}

	simpleBefore, chainBefore := stats(t, base, "simple"), stats(t, base, "chain3")
	sent := srv.InProcess()
	got := outputs(post(t, base+"/v2/models/chain3/infer", simpleRequest("c3", in0, in1)))
	if carried := srv.InProcess() - sent; carried != 1 {
		t.Errorf("the gateway's bus carried %d requests for a three-step chain on one executor, want 1 (the ensemble's)", carried)
	}
	// (a+b, a-b) -> (2a, 2b) -> (2a+2b, 2a-2b)
	want := map[string]any{
		"OUTPUT0": asAny(seq16(func(i int) int { return 2*i + 2 })),
		"OUTPUT1": asAny(seq16(func(i int) int { return 2*i - 2 })),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("chain3 = %v, want %v", got, want)
	}
	if s := stats(t, base, "simple"); s.Execution-simpleBefore.Execution != 3 || s.Success-simpleBefore.Success != 3 {
		t.Errorf("simple: %v executions, %v successes for a three-step chain, want 3 and 3", s.Execution-simpleBefore.Execution, s.Success-simpleBefore.Success)
	}
	if s := stats(t, base, "chain3"); s.Success-chainBefore.Success != 1 || s.Execution-chainBefore.Execution != 1 || !s.SuccessNs {
		t.Errorf("chain3's statistics: %+v (before %+v), want one more success and execution, with its time", s, chainBefore)
	}

	// An ensemble whose step is an ensemble runs whole too: chain3 counts
	// its run (on the executor), nested its own (on the gateway).
	simpleBefore, chainBefore = stats(t, base, "simple"), stats(t, base, "chain3")
	nestedBefore := stats(t, base, "nested")
	sent = srv.InProcess()
	got = outputs(post(t, base+"/v2/models/nested/infer", simpleRequest("n", in0, in1)))
	if carried := srv.InProcess() - sent; carried != 1 {
		t.Errorf("the gateway's bus carried %d requests for a nested ensemble on one executor, want 1", carried)
	}
	// chain3, then simple: (2a+2b, 2a-2b) -> (4a, 4b)
	if want := map[string]any{"OUTPUT0": asAny(seq16(func(i int) int { return 4 * i })), "OUTPUT1": asAny(seq16(func(int) int { return 4 }))}; !reflect.DeepEqual(got, want) {
		t.Errorf("nested = %v, want %v", got, want)
	}
	if s := stats(t, base, "simple"); s.Execution-simpleBefore.Execution != 4 {
		t.Errorf("simple: %v executions for nested, want 4", s.Execution-simpleBefore.Execution)
	}
	for _, m := range []struct {
		name   string
		before counts
	}{{"chain3", chainBefore}, {"nested", nestedBefore}} {
		if s := stats(t, base, m.name); s.Success-m.before.Success != 1 || s.Execution-m.before.Execution != 1 || !s.SuccessNs {
			t.Errorf("%s's statistics after a request to nested: %+v (before %+v), want one more success and execution, with its time", m.name, s, m.before)
		}
	}

	idBefore := stats(t, base, "identity_int32")
	got = outputs(post(t, base+"/v2/models/span/infer", simpleRequest("sp", in0, in1)))
	if want := map[string]any{"OUTPUT0": asAny(seq16(func(i int) int { return i + 1 })), "OUTPUT1": asAny(seq16(func(i int) int { return i - 1 }))}; !reflect.DeepEqual(got, want) {
		t.Errorf("span = %v, want %v", got, want)
	}
	if s := stats(t, base, "identity_int32"); s.Execution-idBefore.Execution != 1 {
		t.Errorf("identity_int32 on the second executor: %v executions, want 1", s.Execution-idBefore.Execution)
	}
}
