package shmregistry

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// startRedis runs a private redis-server for the test and returns its URL
// and a client factory (each call a new connection pool, like a separate
// registry).
func startRedis(t *testing.T) (string, func() *redis.Client) {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (make deps installs it)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	newClient := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c := newClient()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "redis://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/0", newClient
}

func sysRegion(name string) *busv1.ShmRegion {
	return &busv1.ShmRegion{Name: name, Kind: busv1.ShmKind_SHM_KIND_SYSTEM, Node: "n1", Id: "id-" + name, Key: "/k-" + name, ByteSize: 64}
}

func cudaRegion(name string) *busv1.ShmRegion {
	return &busv1.ShmRegion{Name: name, Kind: busv1.ShmKind_SHM_KIND_CUDA, Node: "n1", Id: "id-" + name, DeviceId: 1, RawHandle: make([]byte, 64), ByteSize: 128}
}

// stores runs body against both implementations.
func stores(t *testing.T, body func(t *testing.T, s store)) {
	t.Run("memory", func(t *testing.T) { body(t, newMemStore()) })
	t.Run("redis", func(t *testing.T) {
		_, newClient := startRedis(t)
		body(t, newRedisStore(newClient(), "test"))
	})
}

func TestStoreContract(t *testing.T) {
	stores(t, func(t *testing.T, s store) {
		ctx := context.Background()
		now := time.Now()
		if err := s.Register(ctx, sysRegion("a")); err != nil {
			t.Fatal(err)
		}
		if err := s.Register(ctx, cudaRegion("c")); err != nil {
			t.Fatal(err)
		}
		// One name space: a CUDA region cannot take a system region's name.
		err := s.Register(ctx, cudaRegion("a"))
		if tritonerr.KindOf(err) != tritonerr.AlreadyExists || tritonerr.From(err).Msg != "shared memory region 'a' already in manager" {
			t.Fatalf("duplicate: %v", err)
		}
		got, err := s.Get(ctx, "c")
		if err != nil || got.GetDeviceId() != 1 || len(got.GetRawHandle()) != 64 || got.GetId() != "id-c" {
			t.Fatalf("Get: %v %v", got, err)
		}
		if r, _ := s.Get(ctx, "nope"); r != nil {
			t.Fatalf("Get unknown: %v", r)
		}
		all, err := s.List(ctx)
		if err != nil || len(all) != 2 {
			t.Fatalf("List: %v %v", all, err)
		}

		// Wrong kind and unknown names are left alone.
		if r, d, err := s.Unregister(ctx, "a", busv1.ShmKind_SHM_KIND_CUDA, now); r != nil || d || err != nil {
			t.Fatalf("unregister other kind: %v %v %v", r, d, err)
		}
		if r, d, err := s.Unregister(ctx, "zz", busv1.ShmKind_SHM_KIND_SYSTEM, now); r != nil || d || err != nil {
			t.Fatalf("unregister unknown: %v %v %v", r, d, err)
		}

		// Held: unregister is deferred until the last hold ends.
		found, missing, err := s.Acquire(ctx, "h1", []string{"a", "gone"}, now.Add(time.Minute))
		if err != nil || len(found) != 1 || found[0].GetKey() != "/k-a" || len(missing) != 1 || missing[0] != "gone" {
			t.Fatalf("Acquire: %v %v %v", found, missing, err)
		}
		if _, _, err := s.Acquire(ctx, "h2", []string{"a"}, now.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if r, d, err := s.Unregister(ctx, "a", busv1.ShmKind_SHM_KIND_SYSTEM, now); r != nil || !d || err != nil {
			t.Fatalf("unregister held: %v %v %v", r, d, err)
		}
		if r, _ := s.Get(ctx, "a"); r == nil || !r.GetAwaitingUnregister() {
			t.Fatalf("awaiting region: %v", r)
		}
		// Still usable while awaiting; re-registering the name still fails.
		if found, _, _ := s.Acquire(ctx, "h3", []string{"a"}, now.Add(time.Minute)); len(found) != 1 {
			t.Fatal("awaiting region not usable")
		}
		if err := s.Register(ctx, sysRegion("a")); tritonerr.KindOf(err) != tritonerr.AlreadyExists {
			t.Fatalf("re-register while awaiting: %v", err)
		}
		for _, h := range []string{"h1", "h2"} {
			if removed, err := s.Release(ctx, h, []string{"a"}, now); err != nil || len(removed) != 0 {
				t.Fatalf("Release %s: %v %v", h, removed, err)
			}
		}
		removed, err := s.Release(ctx, "h3", []string{"a"}, now)
		if err != nil || len(removed) != 1 || removed[0].GetName() != "a" {
			t.Fatalf("last Release: %v %v", removed, err)
		}
		if r, _ := s.Get(ctx, "a"); r != nil {
			t.Fatalf("region outlived its last hold: %v", r)
		}

		// A hold whose holder never releases lapses; the sweeper then
		// removes the awaiting region.
		if _, _, err := s.Acquire(ctx, "crashed", []string{"c"}, now.Add(2*time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, d, _ := s.Unregister(ctx, "c", busv1.ShmKind_SHM_KIND_CUDA, now); !d {
			t.Fatal("held CUDA region removed at once")
		}
		if removed, _ := s.Sweep(ctx, now.Add(time.Second)); len(removed) != 0 {
			t.Fatalf("swept a live hold: %v", removed)
		}
		removed, err = s.Sweep(ctx, now.Add(3*time.Second))
		if err != nil || len(removed) != 1 || removed[0].GetName() != "c" {
			t.Fatalf("Sweep: %v %v", removed, err)
		}
		// Unheld: removed at once.
		if err := s.Register(ctx, sysRegion("b")); err != nil {
			t.Fatal(err)
		}
		if r, d, err := s.Unregister(ctx, "b", busv1.ShmKind_SHM_KIND_SYSTEM, now); r.GetName() != "b" || d || err != nil {
			t.Fatalf("unregister free: %v %v %v", r, d, err)
		}
		if all, _ := s.List(ctx); len(all) != 0 {
			t.Fatalf("left over: %v", all)
		}
	})
}

// TestRedisRegisterIsAtomicAcrossRegistries: many registries (separate
// clients) racing to register one name; exactly one wins.
func TestRedisRegisterIsAtomicAcrossRegistries(t *testing.T) {
	_, newClient := startRedis(t)
	const n = 8
	var wins, dups atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		s := newRedisStore(newClient(), "race")
		wg.Go(func() {
			r := sysRegion("same")
			r.Id = fmt.Sprint(i)
			switch err := s.Register(context.Background(), r); tritonerr.KindOf(err) {
			case tritonerr.Unknown:
				if err == nil {
					wins.Add(1)
				}
			case tritonerr.AlreadyExists:
				dups.Add(1)
			default:
				t.Errorf("register: %v", err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 || dups.Load() != n-1 {
		t.Fatalf("%d registries won, %d saw the duplicate", wins.Load(), dups.Load())
	}
}
