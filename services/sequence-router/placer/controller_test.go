package placer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/placementbus"
	"github.com/nereid-io/nereid/pkg/redisconn/redistest"
)

// slowExecutor speaks the executor's side of placement on the bus
// (heartbeats, its catalog, the place subject) for a repository of models,
// and takes loadTime per load and catalogTime per catalog it is asked for.
type slowExecutor struct {
	id          string
	models      []string
	loadTime    time.Duration
	catalogTime time.Duration
	explicit    bool // --model-control-mode explicit

	mu    sync.Mutex
	rev   uint64
	held  map[string]bool
	loads map[string]int
}

func (x *slowExecutor) catalog() *busv1.ExecutorCatalog {
	x.mu.Lock()
	defer x.mu.Unlock()
	cat := &busv1.ExecutorCatalog{ExecutorId: x.id, Node: "n-" + x.id, Generation: 1, Revision: x.rev, Placement: true,
		Capacity: &busv1.ExecutorCapacity{Slots: uint32(len(x.models))}, ExplicitControl: x.explicit}
	for _, m := range x.models {
		st := &busv1.ModelVersionState{Name: m}
		if x.held[m] {
			st.Version, st.State = "1", bus.StateReady
		}
		cat.Models = append(cat.Models, st)
	}
	return cat
}

func (x *slowExecutor) serve(t *testing.T, nc *nats.Conn) {
	bc, err := bus.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bc.Handle(bus.ExecutorCatalogSubject(x.id), "", func(context.Context, []byte) (proto.Message, error) {
		x.mu.Lock()
		d := x.catalogTime
		x.mu.Unlock()
		time.Sleep(d)
		return x.catalog(), nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := bc.Handle(bus.ExecutorPlaceSubject(x.id), "", func(_ context.Context, b []byte) (proto.Message, error) {
		var req busv1.ModelControlRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			return nil, err
		}
		time.Sleep(x.loadTime)
		x.mu.Lock()
		x.held[req.GetName()] = req.GetLoad()
		if req.GetLoad() {
			x.loads[req.GetName()]++
		}
		x.rev++
		x.mu.Unlock()
		return &busv1.ModelControlReply{ExecutorId: x.id, Catalog: x.catalog()}, nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			x.mu.Lock()
			hb := &busv1.ExecutorHeartbeat{ExecutorId: x.id, Node: "n-" + x.id, Generation: 1, Revision: x.rev}
			x.mu.Unlock()
			_ = bc.Publish(bus.HeartbeatSubject, hb)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// startNATS runs an embedded NATS server for the test and returns a
// function that connects to it.
func startNATS(t *testing.T) func() *nats.Conn {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	return func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
}

// runController runs a controller until the test ends.
func runController(t *testing.T, nc *nats.Conn, redisURL, id string, ttl time.Duration) *Controller {
	c, err := New(Config{Conn: nc, RedisURL: redisURL, ID: id, LeaseTTL: ttl,
		Interval: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			t.Errorf("controller %s: %v", id, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// waitLeading waits until c leads.
func waitLeading(t *testing.T, c *Controller) {
	deadline := time.Now().Add(10 * time.Second)
	for !c.Leading() {
		if time.Now().After(deadline) {
			t.Fatal("the controller does not lead")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLoadRightAfterTakeover: a repository load that reaches a controller
// which has just taken the lease, before it has read the executors'
// catalogs, waits for them, and is then done in explicit mode, rather
// than refused as in a mode without explicit control. Then the executor's
// catalog stops coming in time: the controller plans with the last one it
// read, and unloads nothing.
func TestLoadRightAfterTakeover(t *testing.T) {
	rdb := redistest.Plain(t)
	connect := startNATS(t)
	x := &slowExecutor{id: "ex", models: []string{"m0"}, catalogTime: 80 * time.Millisecond, explicit: true,
		held: map[string]bool{}, loads: map[string]int{}}
	x.serve(t, connect())
	waitLeading(t, runController(t, connect(), "redis://"+rdb.Options().Addr+"/0", "a", time.Second))
	bc, err := bus.New(connect())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		rep, err := placementbus.NewController(bc).Control(ctx, &busv1.ModelControlRequest{Name: "m0", Load: true})
		if err != nil && strings.Contains(err.Error(), "no placement controller leads") && ctx.Err() == nil {
			time.Sleep(time.Millisecond) // not subscribed yet
			continue
		}
		if err != nil || rep.GetError() != "" {
			t.Fatalf("load right after the takeover: %v %s", err, rep.GetError())
		}
		break
	}
	x.mu.Lock()
	if x.loads["m0"] != 1 {
		x.mu.Unlock()
		t.Fatalf("m0 loaded %d times, want 1", x.loads["m0"])
	}
	x.catalogTime = 300 * time.Millisecond // beyond the controller's 100 ms
	x.mu.Unlock()
	time.Sleep(time.Second) // some rounds
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.held["m0"] {
		t.Fatal("m0 unloaded while the executor's catalog came late")
	}
}

// TestLongRoundKeepsTheLease: a round whose loads together take several
// times the lease's TTL renews the lease between them, so the controller
// leads throughout, its standby never takes over, and no model is loaded
// twice by two controllers deciding side by side.
func TestLongRoundKeepsTheLease(t *testing.T) {
	rdb := redistest.Plain(t)
	connect := startNATS(t)
	x := &slowExecutor{id: "ex", loadTime: 150 * time.Millisecond, held: map[string]bool{}, loads: map[string]int{}}
	for i := range 10 {
		x.models = append(x.models, fmt.Sprintf("m%d", i))
	}
	x.serve(t, connect())

	const ttl = 400 * time.Millisecond // ten loads take 1.5 s
	url := "redis://" + rdb.Options().Addr + "/0"
	a := runController(t, connect(), url, "a", ttl)
	waitLeading(t, a)
	b := runController(t, connect(), url, "b", ttl)
	deadline := time.Now().Add(10 * time.Second)
	var bLed atomic.Bool
	for {
		if b.Leading() {
			bLed.Store(true)
		}
		x.mu.Lock()
		done := len(x.loads) == len(x.models)
		x.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every model loaded in 10 s: %v", x.loads)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(2 * ttl) // a lease lapsed by then would have been taken
	if bLed.Load() || b.Leading() || !a.Leading() {
		t.Fatalf("leadership changed during a long round: a leads %v, b led %v", a.Leading(), bLed.Load() || b.Leading())
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for m, n := range x.loads {
		if n != 1 {
			t.Errorf("%s loaded %d times", m, n)
		}
	}
}
