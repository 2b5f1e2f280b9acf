package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// delayConfig is an identity model whose executions take delayMs.
func delayConfig(delayMs int) string {
	return fmt.Sprintf(`backend: "identity" version_policy: { all { } }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters { key: "execute_delay_ms" value { string_value: "%d" } }
`, delayMs)
}

// stateOf is the state of version of model "m" in cat, nil if not listed.
func stateOf(cat *busv1.ExecutorCatalog, version string) *busv1.ModelVersionState {
	for _, m := range cat.GetModels() {
		if m.GetName() == "m" && m.GetVersion() == version {
			return m
		}
	}
	return nil
}

// TestLoadStamps: every load of a version gives it another load stamp in
// the catalog (loaded_unix_ns), which gateways compare to see reloads; a
// poll that changes nothing keeps it; a reload gives it another once the
// replaced instance has answered its last request.
func TestLoadStamps(t *testing.T) {
	url := startNATS(t)
	repo := t.TempDir()
	writeModel(t, repo, "m", delayConfig(1000))
	if err := os.MkdirAll(filepath.Join(repo, "m", "2"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Polled by the test alone (pollOnce), not by the executor's loop.
	ex, _ := runExecutor(t, url, Config{RepositoryPath: repo, ControlMode: ControlPoll, PollInterval: time.Hour, ID: "ex-1", Node: "node-a"})
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, url: url, client: client, ex: ex}

	cat := h.catalog()
	s1, s2 := stateOf(cat, "1").GetLoadedUnixNs(), stateOf(cat, "2").GetLoadedUnixNs()
	if s1 == 0 || s2 == 0 || s1 == s2 {
		t.Fatalf("load stamps of versions 1 and 2: %d and %d, want two different ones", s1, s2)
	}
	ex.pollOnce()
	if got := stateOf(h.catalog(), "1").GetLoadedUnixNs(); got != s1 {
		t.Fatalf("a poll that changed nothing moved the load stamp: %d -> %d", s1, got)
	}

	// A request in flight on version 1 while it is reloaded.
	answered := make(chan error, 1)
	go func() {
		_, err := h.infer("m", request("slow", []tin{{"IN", "INT32", []int64{1}, tensor.AppendInt32s(nil, 7)}}))
		answered <- err
	}()
	waitUntil(t, "the request in flight", func() bool { return ex.snapshot()[0].inflight.Load() == 1 })
	writeModel(t, repo, "m", delayConfig(0))
	polled := make(chan struct{})
	go func() { ex.pollOnce(); close(polled) }()
	var during int64
	waitUntil(t, "the new instance listed", func() bool {
		st := stateOf(h.catalog(), "1")
		during = st.GetLoadedUnixNs()
		return st.GetConfig().GetParameters()["execute_delay_ms"].GetStringValue() == "0"
	})
	select {
	case <-answered:
		t.Fatal("the request in flight was answered before the new instance was listed: the test shows nothing")
	default:
	}
	if during == s1 {
		t.Fatal("the reloaded version kept its load stamp")
	}
	if err := <-answered; err != nil {
		t.Fatalf("the request in flight during the reload: %v", err)
	}
	<-polled
	after := stateOf(h.catalog(), "1").GetLoadedUnixNs()
	if after == during || after == s1 {
		t.Fatalf("load stamps %d, %d while the replaced instance answered, %d after: want another once it has", s1, during, after)
	}
	if got := stateOf(h.catalog(), "2").GetLoadedUnixNs(); got == s2 {
		t.Fatal("version 2 reloaded with the same load stamp") // the configuration concerns every version
	}

	// Removed from the repository: unloaded, no stamp; put back: another.
	if err := os.RemoveAll(filepath.Join(repo, "m")); err != nil {
		t.Fatal(err)
	}
	ex.pollOnce()
	if st := stateOf(h.catalog(), "1"); st.GetState() == StateReady || st.GetLoadedUnixNs() != 0 {
		t.Fatalf("after the model was removed: %v", st)
	}
	writeModel(t, repo, "m", delayConfig(0))
	ex.pollOnce()
	if st := stateOf(h.catalog(), "1"); st.GetState() != StateReady || st.GetLoadedUnixNs() == 0 || st.GetLoadedUnixNs() == after {
		t.Fatalf("loaded again: %v, want READY with a load stamp other than %d", st, after)
	}
}
