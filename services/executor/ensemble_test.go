package executor

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
)

const addsubConfig = `name: "simple"
backend: "addsub"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
`

// ensembleConfig is Triton's one-step ensemble over model step, with
// datatype dt for its tensors.
func ensembleConfig(name, step, dt string) string {
	return `name: "` + name + `"
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT0" data_type: ` + dt + ` dims: [ 16 ] }, { name: "INPUT1" data_type: ` + dt + ` dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: ` + dt + ` dims: [ 16 ] }, { name: "OUTPUT1" data_type: ` + dt + ` dims: [ 16 ] } ]
ensemble_scheduling { step [ { model_name: "` + step + `" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" } } ] }
`
}

// TestEnsembleLoadsSchedulerOnly: an ensemble loads without a backend
// (today's 'unable to find backend' is gone), is announced READY with its
// configuration, takes no inference request itself, and one that does not
// match its composing model fails with Triton's message.
func TestEnsembleLoadsSchedulerOnly(t *testing.T) {
	repo := t.TempDir()
	writeModel(t, repo, "simple", addsubConfig)
	writeModel(t, repo, "ens", ensembleConfig("ens", "simple", "TYPE_INT32"))
	writeModel(t, repo, "ens_fp32", ensembleConfig("ens_fp32", "simple", "TYPE_FP32"))
	writeModel(t, repo, "ens_elsewhere", ensembleConfig("ens_elsewhere", "not_here", "TYPE_INT32"))
	h := start(t, repo)
	states := map[string]*busv1.ModelVersionState{}
	for _, m := range h.catalog().GetModels() {
		states[m.GetName()] = m
	}
	if s := states["ens"]; s.GetState() != StateReady || s.GetConfig().GetEnsembleScheduling() == nil || len(s.GetConfig().GetInstanceGroup()) != 0 {
		t.Errorf("ens: %v", s)
	}
	// A composing model this executor does not hold: the gateways decide.
	if s := states["ens_elsewhere"]; s.GetState() != StateReady {
		t.Errorf("ens_elsewhere: %v", s)
	}
	want := "in ensemble ens_fp32, ensemble tensor INPUT0: inconsistent data type: TYPE_FP32 is inferred from model ens_fp32 while TYPE_INT32 is inferred from model simple"
	if s := states["ens_fp32"]; s.GetState() != StateUnavailable || s.GetReason() != want {
		t.Errorf("ens_fp32: %v\nwant reason %q", s, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := h.client.Request(ctx, bus.InferSubject("ens", "1"), request("", nil), &busv1.ModelControlReply{}); err == nil {
		t.Error("the executor answered an ensemble's inference request")
	}
}

// TestEnsembleExplicitLoadLoadsComposing: in explicit mode, loading an
// ensemble loads its composing models (Triton's dependency rule), and an
// ensemble that fails validation fails its load with Triton's message.
func TestEnsembleExplicitLoadLoadsComposing(t *testing.T) {
	repo := t.TempDir()
	writeModel(t, repo, "simple", addsubConfig)
	writeModel(t, repo, "ens", ensembleConfig("ens", "simple", "TYPE_INT32"))
	writeModel(t, repo, "ens_fp32", ensembleConfig("ens_fp32", "simple", "TYPE_FP32"))
	url := startNATS(t)
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	ex, _ := runExecutor(t, url, Config{RepositoryPath: repo, ControlMode: ControlExplicit, ID: "ex-1", Node: "node-a"})
	load := func(name string) *busv1.ModelControlReply {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		reply := &busv1.ModelControlReply{}
		if err := client.Request(ctx, bus.ModelControlSubject, &busv1.ModelControlRequest{Name: name, Load: true}, reply); err != nil {
			t.Fatal(err)
		}
		return reply
	}
	if r := load("ens"); r.GetError() != "" {
		t.Fatalf("load ens: %v", r)
	}
	ready := map[string]bool{}
	for _, m := range ex.catalog().GetModels() {
		ready[m.GetName()] = m.GetState() == StateReady
	}
	if !ready["ens"] || !ready["simple"] {
		t.Errorf("after loading ens: %v", ready)
	}
	r := load("ens_fp32")
	if !strings.Contains(r.GetError(), "failed to load 'ens_fp32', in ensemble ens_fp32, ensemble tensor INPUT0: inconsistent data type") || r.GetErrorKind() != "INVALID_ARG" {
		t.Errorf("load ens_fp32: %v", r)
	}
}

// TestEnsembleUnloadDependents: Triton's unload_dependents. Unloading an
// ensemble with it unloads the composing models that were loaded only for
// an ensemble and that no ensemble still loaded composes; without it, or
// for a model a load request named itself, they stay.
func TestEnsembleUnloadDependents(t *testing.T) {
	repo := t.TempDir()
	writeModel(t, repo, "simple", addsubConfig)
	writeModel(t, repo, "ens", ensembleConfig("ens", "simple", "TYPE_INT32"))
	writeModel(t, repo, "ens2", ensembleConfig("ens2", "simple", "TYPE_INT32"))
	writeModel(t, repo, "outer", ensembleConfig("outer", "ens", "TYPE_INT32"))
	url := startNATS(t)
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	ex, _ := runExecutor(t, url, Config{RepositoryPath: repo, ControlMode: ControlExplicit, ID: "ex-1", Node: "node-a"})
	control := func(name string, load, dependents bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		reply := &busv1.ModelControlReply{}
		req := &busv1.ModelControlRequest{Name: name, Load: load, UnloadDependents: dependents}
		if err := client.Request(ctx, bus.ModelControlSubject, req, reply); err != nil {
			t.Fatal(err)
		}
		if reply.GetError() != "" {
			t.Fatalf("%v: %s", req, reply.GetError())
		}
	}
	ready := func() map[string]bool {
		out := map[string]bool{}
		for _, m := range ex.catalog().GetModels() {
			if m.GetState() == StateReady {
				out[m.GetName()] = true
			}
		}
		return out
	}
	want := func(step string, names ...string) {
		t.Helper()
		got := ready()
		for _, n := range []string{"simple", "ens", "ens2", "outer"} {
			if got[n] != slices.Contains(names, n) {
				t.Errorf("%s: READY %v, want exactly %v", step, got, names)
				return
			}
		}
	}

	control("ens", true, false)
	want("ens loaded", "ens", "simple")
	control("ens", false, false)
	want("ens unloaded without its dependents", "simple")

	control("simple", false, false)
	control("ens", true, false)
	control("ens", false, true)
	want("ens unloaded with its dependents")

	control("simple", true, false) // named by a load request of its own
	control("ens", true, false)
	control("ens", false, true)
	want("ens unloaded with its dependents, simple loaded explicitly", "simple")

	control("simple", false, false)
	control("ens", true, false)
	control("ens2", true, false)
	control("ens", false, true)
	want("ens unloaded with its dependents while ens2 composes simple", "ens2", "simple")
	control("ens2", false, true)
	want("ens2 unloaded with its dependents")

	// Down a nested ensemble: outer loads ens, which loads simple.
	control("outer", true, false)
	want("outer loaded", "outer", "ens", "simple")
	control("outer", false, true)
	want("outer unloaded with its dependents")
}
