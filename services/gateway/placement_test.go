package gateway

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
)

// TestPlacementAgainOnNoResponders: under placement, a request for a model
// whose only executor died (its catalog entry not yet expired, so the
// gateway still routes to it) finds nobody serving the model; the gateway
// asks the placement controller to place it again, and the request runs
// on the executor that then holds it. When the controller cannot place
// it, the client gets the no-executor answer.
func TestPlacementAgainOnNoResponders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		places bool
		status int
		body   string
	}{
		{"placed again", true, 200, `"name":"OUTPUT0"`},
		{"not placed", false, 503, "no executor is serving model 'simple' version 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := startNATS(t)
			g := startGateway(t, ns, func(c *Config) { c.Placement = true })
			model := &busv1.ModelVersionState{Name: "simple", Version: "1", State: "READY", Config: simpleConfig("simple")}
			lost := newFakeExecutor(t, ns, "lost", model)
			lost.start()
			waitModelReady(t, g, "simple")

			// The controller: a real responder on the placement subject
			// that starts another executor holding the model, or says
			// why it cannot.
			ctl := newFakeExecutor(t, ns, "controller")
			var demands atomic.Int32
			sub, err := ctl.bc.Handle(bus.PlacementSubject, "", func(_ context.Context, b []byte) (proto.Message, error) {
				var d busv1.PlacementDemand
				if err := proto.Unmarshal(b, &d); err != nil {
					return nil, err
				}
				demands.Add(1)
				if d.GetModel() != "simple" || !tc.places {
					return &busv1.PlacementDemandReply{Reason: "no executor has room for it"}, nil
				}
				again := newFakeExecutor(t, ns, "again", model)
				again.start()
				return &busv1.PlacementDemandReply{Executors: []string{"again"}}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sub.Unsubscribe() })

			lost.kill() // no withdraw: the catalog lists it until its heartbeats expire
			if _, err := g.resolveRequest("simple", ""); err != nil {
				t.Fatalf("the catalog forgot the lost executor at once: %v", err)
			}
			r := do(t, "POST", "http://"+g.HTTPAddr()+"/v2/models/simple/infer", []byte(simpleRequestJSON("")), nil)
			if r.status != tc.status || !strings.Contains(string(r.body), tc.body) {
				t.Fatalf("infer: %d %s, want %d with %s", r.status, r.body, tc.status, tc.body)
			}
			if n := demands.Load(); n != 1 {
				t.Fatalf("%d placement demands, want 1", n)
			}
		})
	}
}
