package placer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/redisconn/redistest"
)

// slowExecutor speaks the executor's side of placement on the bus
// (heartbeats, its catalog, the place subject) for a repository of models,
// and takes loadTime per load.
type slowExecutor struct {
	id       string
	models   []string
	loadTime time.Duration

	mu    sync.Mutex
	rev   uint64
	held  map[string]bool
	loads map[string]int
}

func (x *slowExecutor) catalog() *busv1.ExecutorCatalog {
	x.mu.Lock()
	defer x.mu.Unlock()
	cat := &busv1.ExecutorCatalog{ExecutorId: x.id, Node: "n-" + x.id, Generation: 1, Revision: x.rev, Placement: true,
		Capacity: &busv1.ExecutorCapacity{Slots: uint32(len(x.models))}}
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

// TestLongRoundKeepsTheLease: a round whose loads together take several
// times the lease's TTL renews the lease between them, so the controller
// leads throughout, its standby never takes over, and no model is loaded
// twice by two controllers deciding side by side.
func TestLongRoundKeepsTheLease(t *testing.T) {
	rdb := redistest.Plain(t)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	connect := func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	x := &slowExecutor{id: "ex", loadTime: 150 * time.Millisecond, held: map[string]bool{}, loads: map[string]int{}}
	for i := range 10 {
		x.models = append(x.models, fmt.Sprintf("m%d", i))
	}
	x.serve(t, connect())

	const ttl = 400 * time.Millisecond // ten loads take 1.5 s
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	run := func(id string) *Controller {
		c, err := New(Config{Conn: connect(), RedisURL: "redis://" + rdb.Options().Addr + "/0", ID: id, LeaseTTL: ttl,
			Interval: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := c.Run(ctx); err != nil {
				t.Errorf("controller %s: %v", id, err)
			}
		})
		return c
	}
	a := run("a")
	deadline := time.Now().Add(10 * time.Second)
	for !a.Leading() {
		if time.Now().After(deadline) {
			t.Fatal("a does not lead")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b := run("b")
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
