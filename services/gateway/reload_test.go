package gateway

import (
	"fmt"
	"slices"
	"testing"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
)

func TestReloadedModels(t *testing.T) {
	ready := func(name, version string, stamp int64) *busv1.ModelVersionState {
		return &busv1.ModelVersionState{Name: name, Version: version, State: stateReady, LoadedUnixNs: stamp}
	}
	known := map[loadKey]int64{{"a", "1"}: 10, {"a", "2"}: 20, {"b", "1"}: 30}
	for _, tc := range []struct {
		name  string
		known map[loadKey]int64
		prev  []*busv1.ModelVersionState
		next  []*busv1.ModelVersionState
		want  []string
	}{
		{"first seen: an executor joins", nil, nil,
			[]*busv1.ModelVersionState{ready("a", "1", 10), ready("b", "1", 30)}, nil},
		{"same stamps", known, nil,
			[]*busv1.ModelVersionState{ready("a", "1", 10), ready("a", "2", 20), ready("b", "1", 30)}, nil},
		{"a version loaded anew", known, nil,
			[]*busv1.ModelVersionState{ready("a", "1", 10), ready("a", "2", 21), ready("b", "1", 30)}, []string{"a"}},
		{"two versions of one model, and another model", known, nil,
			[]*busv1.ModelVersionState{ready("b", "1", 31), ready("a", "1", 11), ready("a", "2", 21)}, []string{"a", "b"}},
		{"a version the executor loads for the first time", known, nil,
			[]*busv1.ModelVersionState{ready("a", "1", 10), ready("a", "3", 40), ready("c", "1", 50)}, nil},
		{"no stamp: an executor that does not say", known, nil,
			[]*busv1.ModelVersionState{ready("a", "1", 0)}, nil},
		{"not READY: nothing served", known, nil,
			[]*busv1.ModelVersionState{{Name: "a", Version: "1", State: stateUnloading, Reason: bus.ReasonUnloaded}}, nil},
		{"the executor leaves the version out", known, nil,
			[]*busv1.ModelVersionState{ready("b", "1", 30)}, nil},
		{"READY again after an unload, stamp unknown", nil,
			[]*busv1.ModelVersionState{{Name: "a", Version: "1", State: stateUnavailable, Reason: bus.ReasonUnloaded}},
			[]*busv1.ModelVersionState{ready("a", "1", 60)}, []string{"a"}},
		{"READY after loading for the first time", nil,
			[]*busv1.ModelVersionState{{Name: "a", Version: "1", State: stateLoading}},
			[]*busv1.ModelVersionState{ready("a", "1", 60)}, nil},
		{"READY after failing to load", nil,
			[]*busv1.ModelVersionState{{Name: "a", Version: "1", State: stateUnavailable, Reason: "boom"}},
			[]*busv1.ModelVersionState{ready("a", "1", 60)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := reloadedModels(tc.known, tc.prev, tc.next); !slices.Equal(got, tc.want) {
				t.Errorf("reloadedModels = %v, want %v", got, tc.want)
			}
		})
	}
}

// The load stamps of an executor that left are kept, for the latest
// maxDeparted to leave, until it comes back.
func TestDepartedLoads(t *testing.T) {
	c := newCatalog(nil, discardLogger())
	c.mu.Lock()
	defer c.mu.Unlock()
	id := func(i int) string { return fmt.Sprint("ex", i) }
	for i := range maxDeparted + 1 {
		c.rememberLoadsLocked(id(i), []*busv1.ModelVersionState{{Name: "m", Version: "1", State: stateReady, LoadedUnixNs: int64(i + 1)}})
	}
	c.rememberLoadsLocked("never-stamped", []*busv1.ModelVersionState{{Name: "m", Version: "1", State: stateReady}})
	if _, ok := c.loads["never-stamped"]; ok {
		t.Error("a version without a load stamp was remembered")
	}
	c.departLocked(id(0))
	c.departLocked(id(1))
	c.returnLocked(id(1)) // back: its stamps are those of a live executor
	for i := 2; i <= maxDeparted; i++ {
		c.departLocked(id(i))
	}
	if len(c.departed) != maxDeparted || c.loads[id(0)] == nil {
		t.Fatalf("%d departed kept, ex0's stamps %v", len(c.departed), c.loads[id(0)])
	}
	c.departLocked(id(1)) // leaves again: ex0, the oldest to go, is forgotten
	if len(c.departed) != maxDeparted || c.loads[id(0)] != nil || c.loads[id(1)][loadKey{"m", "1"}] != 2 || c.departed[maxDeparted-1] != id(1) {
		t.Fatalf("after one more left: %d departed, ex0 %v, ex1 %v", len(c.departed), c.loads[id(0)], c.loads[id(1)])
	}
}
