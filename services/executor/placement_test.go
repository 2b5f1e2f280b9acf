package executor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/placement"
	"github.com/nereid-io/nereid/pkg/placementbus"
)

func placedState(cat *busv1.ExecutorCatalog, name string) *busv1.ModelVersionState {
	for _, m := range cat.GetModels() {
		if m.GetName() == name {
			return m
		}
	}
	return nil
}

// TestPlacementLoadUnload: an executor under placement loads nothing at
// start, advertises its capacity, and loads and unloads what it is told on
// its place subject, with the load's footprint, last use and requests in
// flight in its catalog.
func TestPlacementLoadUnload(t *testing.T) {
	url := startNATS(t)
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, url: url, client: client}
	h.ex, h.stop = runExecutor(t, url, Config{RepositoryPath: exampleRepo, ID: "ex-p", Node: "node-a",
		Placement: true, Capacity: placement.Capacity{Slots: 3, Bytes: 1 << 30}})
	cat := h.catalog()
	if !cat.GetPlacement() || cat.GetCapacity().GetSlots() != 3 || cat.GetCapacity().GetBytes() != 1<<30 || cat.GetCapacity().GetHostMemoryBytes() == 0 {
		t.Fatalf("catalog placement %v capacity %v", cat.GetPlacement(), cat.GetCapacity())
	}
	if len(cat.GetCapacity().GetGpuMemoryBytes()) != 0 {
		t.Errorf("GPU memory %v on a machine without GPU", cat.GetCapacity().GetGpuMemoryBytes())
	}
	for _, m := range cat.GetModels() {
		if m.GetState() != "" {
			t.Errorf("model %s is %s at start under placement, want listed by name only", m.GetName(), m.GetState())
		}
	}
	if placedState(cat, "simple") == nil {
		t.Fatal("simple is not listed")
	}
	if _, err := h.infer("simple", simpleRequest()); err == nil {
		t.Fatal("simple answered before it was placed")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x := placementbus.NewExecutors(client)
	before := time.Now()
	cat, err = x.Load(ctx, "ex-p", "simple")
	if err != nil {
		t.Fatal(err)
	}
	st := placedState(cat, "simple")
	if st.GetState() != StateReady || st.GetLastUsedUnixMs() < before.UnixMilli() || st.GetInflight() != 0 {
		t.Fatalf("after the load: %v", st)
	}
	if _, err := h.infer("simple", simpleRequest()); err != nil {
		t.Fatal(err)
	}
	if got := placedState(h.catalog(), "simple").GetLastUsedUnixMs(); got < st.GetLastUsedUnixMs() {
		t.Errorf("last use %d went back from %d after a request", got, st.GetLastUsedUnixMs())
	}

	if _, err := x.Load(ctx, "ex-p", "no_such_model"); err == nil {
		t.Error("loading a model not in the repository succeeded")
	}
	cat, err = x.Unload(ctx, "ex-p", "simple")
	if err != nil {
		t.Fatal(err)
	}
	if st := placedState(cat, "simple"); st.GetState() != StateUnavailable || st.GetLastUsedUnixMs() != 0 {
		t.Fatalf("after the unload: %v", st)
	}
}

// TestPlacementNotWithoutIt: an executor without --placement does not
// serve the place subject, advertises no capacity and loads its repository.
func TestPlacementNotWithoutIt(t *testing.T) {
	h := start(t, exampleRepo, "simple")
	cat := h.catalog()
	if cat.GetPlacement() || cat.GetCapacity() != nil || placedState(cat, "simple").GetState() != StateReady {
		t.Fatalf("catalog: placement %v capacity %v simple %v", cat.GetPlacement(), cat.GetCapacity(), placedState(cat, "simple"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := placementbus.NewExecutors(h.client).Unload(ctx, "ex-1", "simple"); err == nil {
		t.Fatal("an executor without placement answered a placement request")
	}
}

// TestPlacementExplicit: under placement in explicit model control mode an
// executor loads nothing at start, not even its --load-model models,
// which it lists in its catalog for the controller to load in the cluster;
// it refuses loads sent to every executor (the repository API's go to the
// controller under placement), and loads what the controller tells it.
func TestPlacementExplicit(t *testing.T) {
	url := startNATS(t)
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, url: url, client: client}
	h.ex, h.stop = runExecutor(t, url, Config{RepositoryPath: exampleRepo, ID: "ex-x", Node: "node-a",
		Placement: true, ControlMode: ControlExplicit, Models: []string{"simple"}})
	cat := h.catalog()
	if !cat.GetPlacement() || !cat.GetExplicitControl() || strings.Join(cat.GetStartupModels(), ",") != "simple" {
		t.Fatalf("catalog: placement %v explicit %v startup models %v", cat.GetPlacement(), cat.GetExplicitControl(), cat.GetStartupModels())
	}
	if st := placedState(cat, "simple"); st == nil || st.GetState() != "" {
		t.Fatalf("simple at start: %v, want listed by name only", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var reply busv1.ModelControlReply
	err = client.Gather(ctx, bus.ModelControlSubject, &busv1.ModelControlRequest{Name: "simple", Load: true}, func(data []byte) bool {
		if proto.Unmarshal(data, &reply) != nil {
			t.Fatal("malformed control reply")
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "failed to load 'simple': under placement"; reply.GetErrorKind() != "UNSUPPORTED" || !strings.HasPrefix(reply.GetError(), want) {
		t.Fatalf("a load sent to every executor: %s %q, want UNSUPPORTED %q...", reply.GetErrorKind(), reply.GetError(), want)
	}
	if st := placedState(reply.GetCatalog(), "simple"); st.GetState() != "" {
		t.Fatalf("simple after a refused load: %v", st)
	}
	cat, err = placementbus.NewExecutors(client).Load(ctx, "ex-x", "simple")
	if err != nil || placedState(cat, "simple").GetState() != StateReady {
		t.Fatalf("the controller's load: %v %v", placedState(cat, "simple"), err)
	}
}

func simpleRequest() *inference.ModelInferRequest {
	return request("", []tin{
		{"INPUT0", "INT32", []int64{1, 16}, int32s(func(i int) int32 { return int32(i) })},
		{"INPUT1", "INT32", []int64{1, 16}, int32s(func(int) int32 { return 1 })},
	})
}

// TestPlacementHint: under placement, a model of the repository that is
// not loaded is listed with what placement reads of its configuration (the
// nereid_* parameters, the instance groups' kinds, a sequence batcher) and
// nothing else, so that the controller knows its footprint hint and
// replica bounds before any load; a change of the configuration shows
// once the hint is read again.
func TestPlacementHint(t *testing.T) {
	repo := t.TempDir()
	named := func(name string) string {
		return strings.Replace(addsubConfig, `name: "simple"`, `name: "`+name+`"`, 1)
	}
	writeModel(t, repo, "hinted", named("hinted")+`parameters { key: "nereid_model_footprint" value { string_value: "512MiB" } }
parameters { key: "nereid_max_replicas" value { string_value: "2" } }
parameters { key: "other" value { string_value: "x" } }
instance_group [ { kind: KIND_CPU count: 2 } ]
`)
	writeModel(t, repo, "stateful", named("stateful")+"sequence_batching { }\n")
	url := startNATS(t)
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, url: url, client: client}
	h.ex, h.stop = runExecutor(t, url, Config{RepositoryPath: repo, ID: "ex-h", Node: "node-a", Placement: true})
	cat := h.catalog()
	hint := placedState(cat, "hinted").GetConfig()
	m, err := placement.ModelFrom(hint)
	if err != nil || m.FootprintHint != 512<<20 || m.MaxReplicas != 2 || m.GPU || m.Sequence {
		t.Fatalf("placement of the hint %v: %+v, %v", hint, m, err)
	}
	if _, ok := hint.GetParameters()["other"]; ok || len(hint.GetInput()) != 0 || len(hint.GetInstanceGroup()) != 1 || hint.GetInstanceGroup()[0].GetCount() != 0 {
		t.Errorf("the hint carries more than placement reads: %v", hint)
	}
	if m, _ := placement.ModelFrom(placedState(cat, "stateful").GetConfig()); !m.Sequence {
		t.Errorf("stateful's hint does not say it has a sequence batcher: %v", placedState(cat, "stateful").GetConfig())
	}
	// Read once per hintTTL: the catalog a moment later carries the same.
	writeModel(t, repo, "hinted", named("hinted"))
	if got := placedState(h.catalog(), "hinted").GetConfig(); !proto.Equal(got, hint) {
		t.Errorf("hint read again within hintTTL: %v", got)
	}
	if got := h.ex.placementHint("hinted", time.Now().Add(hintTTL)); len(got.GetParameters()) != 0 {
		t.Errorf("hint after hintTTL, the parameters gone from the configuration: %v", got)
	}
}

// TestPlacementPoll: under placement in poll mode, an executor loads none
// of the models it scans by itself (the controller places them); a model
// the controller placed on it is reloaded when its files change, and
// unloaded when its directory goes.
func TestPlacementPoll(t *testing.T) {
	repo := t.TempDir()
	named := func(name, extra string) string {
		return strings.Replace(addsubConfig, `name: "simple"`, `name: "`+name+`"`, 1) + extra
	}
	writeModel(t, repo, "a", named("a", ""))
	writeModel(t, repo, "b", named("b", ""))
	url := startNATS(t)
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, url: url, client: client}
	h.ex, h.stop = runExecutor(t, url, Config{RepositoryPath: repo, ID: "ex-poll", Node: "node-a", Placement: true,
		ControlMode: ControlPoll, PollInterval: 20 * time.Millisecond})
	time.Sleep(100 * time.Millisecond) // several polls
	for _, m := range h.catalog().GetModels() {
		if m.GetState() != "" {
			t.Fatalf("%s is %s after polls under placement, want listed only", m.GetName(), m.GetState())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := placementbus.NewExecutors(client).Load(ctx, "ex-poll", "a"); err != nil {
		t.Fatal(err)
	}
	writeModel(t, repo, "a", named("a", `parameters { key: "changed" value { string_value: "yes" } }`+"\n"))
	waitUntil(t, "a reloaded after its configuration changed", func() bool {
		_, ok := placedState(h.catalog(), "a").GetConfig().GetParameters()["changed"]
		return ok && placedState(h.catalog(), "a").GetState() == StateReady
	})
	if st := placedState(h.catalog(), "b").GetState(); st != "" {
		t.Errorf("b is %s: polls loaded a model not placed here", st)
	}
	if err := os.RemoveAll(filepath.Join(repo, "a")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a unloaded after its directory went", func() bool { return placedState(h.catalog(), "a").GetState() != StateReady })
}
