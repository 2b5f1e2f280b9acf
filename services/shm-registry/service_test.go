package shmregistry

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/internal/testutil/leakcheck"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

type harness struct {
	t   *testing.T
	nc  *nats.Conn
	bc  *bus.Conn
	url string
}

func newHarness(t *testing.T) *harness {
	leakcheck.Check(t)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	bc, err := bus.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, nc: nc, bc: bc, url: ns.ClientURL()}
}

// registry starts a registry on its own connection; stop ends it.
func (h *harness) registry(cfg Config) (stop func()) {
	h.t.Helper()
	nc, err := nats.Connect(h.url)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg.Conn = nc
	s, err := New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case err := <-done:
		h.t.Fatalf("registry: %v", err)
	case <-time.After(5 * time.Second):
		h.t.Fatal("registry not ready")
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("registry Run: %v", err)
		}
		nc.Close()
	}
	h.t.Cleanup(stop)
	return stop
}

func (h *harness) call(subject string, req, resp proto.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return h.bc.Request(ctx, subject, req, resp)
}

func (h *harness) mustCall(subject string, req, resp proto.Message) {
	h.t.Helper()
	if err := h.call(subject, req, resp); err != nil {
		h.t.Fatalf("%s: %v", subject, err)
	}
}

func (h *harness) status(kind busv1.ShmKind, name string) ([]string, error) {
	var resp busv1.ShmStatusResponse
	if err := h.call(bus.ShmStatusSubject, &busv1.ShmStatusRequest{Kind: kind, Name: name}, &resp); err != nil {
		return nil, err
	}
	var names []string
	for _, r := range resp.GetRegions() {
		names = append(names, r.GetName())
	}
	return names, nil
}

func wantErr(t *testing.T, err error, kind tritonerr.Kind, msg string) {
	t.Helper()
	te := tritonerr.From(err)
	if err == nil || te.Kind != kind || !strings.Contains(te.Msg, msg) {
		t.Fatalf("got %v, want %s %q", err, kind, msg)
	}
}

const (
	sys  = busv1.ShmKind_SHM_KIND_SYSTEM
	cuda = busv1.ShmKind_SHM_KIND_CUDA
)

func TestServiceProtocol(t *testing.T) {
	for _, backing := range []string{"memory", "redis"} {
		t.Run(backing, func(t *testing.T) {
			h := newHarness(t)
			cfg := Config{SweepInterval: 50 * time.Millisecond}
			if backing == "redis" {
				cfg.RedisURL, _ = startRedis(t)
			}
			h.registry(cfg)
			removedCh := make(chan string, 16)
			sub, err := h.nc.Subscribe(bus.ShmRemovedSubject("n1"), func(m *nats.Msg) {
				var ev busv1.ShmRegionRemoved
				_ = proto.Unmarshal(m.Data, &ev)
				removedCh <- ev.GetRegion().GetName()
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()

			for _, r := range []*busv1.ShmRegion{sysRegion("a"), sysRegion("b"), cudaRegion("c")} {
				h.mustCall(bus.ShmRegisterSubject, &busv1.ShmRegisterRequest{Region: r}, &busv1.ShmRegisterResponse{})
			}
			wantErr(t, h.call(bus.ShmRegisterSubject, &busv1.ShmRegisterRequest{Region: sysRegion("c")}, &busv1.ShmRegisterResponse{}),
				tritonerr.AlreadyExists, "shared memory region 'c' already in manager")

			if names, err := h.status(sys, ""); err != nil || fmt.Sprint(names) != "[a b]" {
				t.Fatalf("system status: %v %v", names, err)
			}
			if names, err := h.status(cuda, ""); err != nil || fmt.Sprint(names) != "[c]" {
				t.Fatalf("cuda status: %v %v", names, err)
			}
			_, err = h.status(sys, "zz")
			wantErr(t, err, tritonerr.NotFound, "Unable to find system shared memory region: 'zz'")
			_, err = h.status(cuda, "zz")
			wantErr(t, err, tritonerr.NotFound, "Unable to find cuda shared memory region: 'zz'")
			_, err = h.status(sys, "c")
			wantErr(t, err, tritonerr.NotFound, "The region named 'c' is registered as CUDA shared memory, not system shared memory")
			_, err = h.status(cuda, "a")
			wantErr(t, err, tritonerr.NotFound, "The region named 'a' is registered as system shared memory, not CUDA shared memory")
			if names, err := h.status(busv1.ShmKind_SHM_KIND_UNSPECIFIED, "zz"); err != nil || names != nil {
				t.Fatalf("lookup of an unknown name: %v %v", names, err)
			}

			// Hold a, unregister it: deferred; release: removed and announced.
			var acq busv1.ShmAcquireResponse
			h.mustCall(bus.ShmAcquireSubject, &busv1.ShmAcquireRequest{Holder: "req1", Names: []string{"a", "a", "x"},
				ExpiresUnixMs: time.Now().Add(time.Minute).UnixMilli()}, &acq)
			if len(acq.GetRegions()) != 1 || acq.GetRegions()[0].GetKey() != "/k-a" || fmt.Sprint(acq.GetMissing()) != "[x]" {
				t.Fatalf("acquire: %v", &acq)
			}
			var un busv1.ShmUnregisterResponse
			h.mustCall(bus.ShmUnregisterSubject, &busv1.ShmUnregisterRequest{Kind: sys, Name: "a"}, &un)
			if fmt.Sprint(un.GetDeferred()) != "[a]" || len(un.GetRemoved()) != 0 {
				t.Fatalf("unregister held: %v", &un)
			}
			if names, _ := h.status(sys, ""); fmt.Sprint(names) != "[a b]" {
				t.Fatalf("awaiting region left status: %v", names)
			}
			h.mustCall(bus.ShmReleaseSubject, &busv1.ShmReleaseRequest{Holder: "req1", Names: []string{"a"}}, &busv1.ShmReleaseResponse{})
			if got := waitName(t, removedCh); got != "a" {
				t.Fatalf("removed %q", got)
			}
			if names, _ := h.status(sys, ""); fmt.Sprint(names) != "[b]" {
				t.Fatalf("after release: %v", names)
			}

			// A hold that lapses (a gateway crashed): the sweeper removes it.
			h.mustCall(bus.ShmAcquireSubject, &busv1.ShmAcquireRequest{Holder: "crashed", Names: []string{"c"},
				ExpiresUnixMs: time.Now().Add(200 * time.Millisecond).UnixMilli()}, &acq)
			h.mustCall(bus.ShmUnregisterSubject, &busv1.ShmUnregisterRequest{Kind: cuda}, &un)
			if fmt.Sprint(un.GetDeferred()) != "[c]" {
				t.Fatalf("unregister all cuda: %v", &un)
			}
			if got := waitName(t, removedCh); got != "c" {
				t.Fatalf("removed %q", got)
			}

			// Unregister all of a kind; unknown names are a success.
			h.mustCall(bus.ShmUnregisterSubject, &busv1.ShmUnregisterRequest{Kind: sys, Name: "never"}, &un)
			h.mustCall(bus.ShmUnregisterSubject, &busv1.ShmUnregisterRequest{Kind: cuda, Name: "b"}, &un)
			if names, _ := h.status(sys, ""); fmt.Sprint(names) != "[b]" {
				t.Fatalf("unregister of the other kind removed b: %v", names)
			}
			h.mustCall(bus.ShmUnregisterSubject, &busv1.ShmUnregisterRequest{Kind: sys}, &un)
			if fmt.Sprint(un.GetRemoved()) != "[b]" {
				t.Fatalf("unregister all: %v", &un)
			}
			if got := waitName(t, removedCh); got != "b" {
				t.Fatalf("removed %q", got)
			}
		})
	}
}

// TestRedisRegistryRestartKeepsRegions: a registry on Redis stops and a new
// one starts; every region is still there.
func TestRedisRegistryRestartKeepsRegions(t *testing.T) {
	h := newHarness(t)
	url, _ := startRedis(t)
	stop := h.registry(Config{RedisURL: url})
	h.mustCall(bus.ShmRegisterSubject, &busv1.ShmRegisterRequest{Region: sysRegion("kept")}, &busv1.ShmRegisterResponse{})
	h.mustCall(bus.ShmRegisterSubject, &busv1.ShmRegisterRequest{Region: cudaRegion("kept-cuda")}, &busv1.ShmRegisterResponse{})
	stop()
	if _, err := h.status(sys, ""); err == nil {
		t.Fatal("status answered with no registry running")
	}
	h.registry(Config{RedisURL: url})
	if names, err := h.status(busv1.ShmKind_SHM_KIND_UNSPECIFIED, ""); err != nil || fmt.Sprint(names) != "[kept kept-cuda]" {
		t.Fatalf("after restart: %v %v", names, err)
	}
}

func waitName(t *testing.T, ch chan string) string {
	t.Helper()
	select {
	case n := <-ch:
		return n
	case <-time.After(5 * time.Second):
		t.Fatal("no removal announced")
	}
	return ""
}
