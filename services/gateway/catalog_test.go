package gateway

import (
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/busv1"
)

// TestCatalogChangeDuringFetch: an executor announces a change while the
// gateway's fetch of its catalog is under way, and the fetch answers with
// the catalog from before that change. The gateway fetches again at once,
// rather than at the executor's next periodic heartbeat (a model placed on
// demand would otherwise wait up to a heartbeat interval to be served).
func TestCatalogChangeDuringFetch(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	ready := func(name string) *busv1.ModelVersionState {
		return &busv1.ModelVersionState{Name: name, Version: "1", State: "READY", Config: simpleConfig(name)}
	}
	ex := newFakeExecutor(t, ns, "ex1", ready("simple"))
	ex.start()
	waitModelReady(t, g, "simple")
	ex.quiet() // from now on, heartbeats only from the test

	asked, gate := make(chan struct{}, 1), make(chan struct{})
	ex.mu.Lock()
	ex.models, ex.rev = append(ex.models, ready("two")), 1
	ex.catalogAsked, ex.catalogGate = asked, gate
	ex.mu.Unlock()
	ex.heartbeat(false)
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway did not fetch the catalog announced")
	}
	// The fetch under way holds revision 1; revision 2 is announced now.
	ex.mu.Lock()
	ex.models, ex.rev = append(ex.models, ready("three")), 2
	ex.catalogAsked, ex.catalogGate = nil, nil
	ex.mu.Unlock()
	ex.heartbeat(false)
	time.Sleep(100 * time.Millisecond) // the heartbeat reaches the gateway while it fetches
	close(gate)

	waitModelReady(t, g, "two")
	waitFor(t, "the revision announced during the fetch", 2*time.Second, func() bool {
		_, err := g.resolveRequest("three", "")
		return err == nil
	})
}
