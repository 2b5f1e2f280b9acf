package placer

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/failover"
	"github.com/nereid-io/nereid/pkg/redisconn/redistest"
)

// TestStoreLease holds the Redis lease to failover.Record's rules: one
// holder, renewals by the holder only, a lapsed lease taken with a newer
// epoch, the old holder's renewal then refused, a release letting the next
// controller in at once; and footprints written only by the holder.
func TestStoreLease(t *testing.T) {
	ctx := context.Background()
	s := &store{rdb: redistest.Plain(t)}
	ttl := 300 * time.Millisecond

	e1, err := s.acquire(ctx, "a", ttl)
	if err != nil || e1 == 0 {
		t.Fatalf("a acquires: %d, %v", e1, err)
	}
	if e, _ := s.acquire(ctx, "b", ttl); e != 0 {
		t.Fatalf("b acquired epoch %d while a holds the lease", e)
	}
	if a, _ := s.renew(ctx, "a", e1, ttl); a != failover.Renewed {
		t.Fatalf("a's renewal: %v", a)
	}
	if a, _ := s.renew(ctx, "b", e1, ttl); a != failover.Taken {
		t.Fatalf("b's renewal of a's lease: %v", a)
	}
	if err := s.saveFootprints(ctx, "a", e1, map[string]uint64{"m": 42}); err != nil {
		t.Fatal(err)
	}

	time.Sleep(ttl + 100*time.Millisecond) // a's lease lapses
	e2, err := s.acquire(ctx, "b", ttl)
	if err != nil || e2 <= e1 {
		t.Fatalf("b takes the lapsed lease: epoch %d after %d, %v", e2, e1, err)
	}
	if a, _ := s.renew(ctx, "a", e1, ttl); a != failover.Taken {
		t.Fatalf("a's late renewal: %v, want taken", a)
	}
	if err := s.saveFootprints(ctx, "a", e1, map[string]uint64{"m": 1}); err != errNotLeading {
		t.Fatalf("a's fenced-off write: %v, want %v", err, errNotLeading)
	}
	got, err := s.footprints(ctx)
	if err != nil || got["m"] != 42 {
		t.Fatalf("footprints after a fenced-off write: %v, %v; want m=42", got, err)
	}

	if err := s.release(ctx, "b", e2); err != nil {
		t.Fatal(err)
	}
	if a, _ := s.renew(ctx, "b", e2, ttl); a != failover.Restored {
		t.Fatalf("renewal after release with no newer epoch: %v, want restored", a)
	}
	_ = s.release(ctx, "b", e2)
	e3, err := s.acquire(ctx, "c", ttl)
	if err != nil || e3 <= e2 {
		t.Fatalf("c after b's release: epoch %d, %v", e3, err)
	}
	if a, _ := s.renew(ctx, "b", e2, ttl); a != failover.Taken {
		t.Fatalf("b's renewal once c holds: %v", a)
	}
}

// TestStorePins: the operator's pins are kept by the lease's holder only,
// read back whole by the next controller, and removed by an empty pin.
func TestStorePins(t *testing.T) {
	ctx := context.Background()
	s := &store{rdb: redistest.Plain(t)}
	ttl := 300 * time.Millisecond
	e1, err := s.acquire(ctx, "a", ttl)
	if err != nil || e1 == 0 {
		t.Fatalf("a acquires: %d, %v", e1, err)
	}
	if err := s.savePin(ctx, "a", e1, "m", []string{"e1", "e,2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.savePin(ctx, "a", e1, "n", []string{"e3"}); err != nil {
		t.Fatal(err)
	}
	if err := s.savePin(ctx, "b", e1, "n", []string{"e9"}); err != errNotLeading {
		t.Fatalf("a pin written by a controller without the lease: %v, want %v", err, errNotLeading)
	}
	if err := s.savePin(ctx, "a", e1, "n", nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 100*time.Millisecond) // a's lease lapses; b takes over
	e2, err := s.acquire(ctx, "b", ttl)
	if err != nil || e2 <= e1 {
		t.Fatalf("b takes the lapsed lease: epoch %d, %v", e2, err)
	}
	if err := s.savePin(ctx, "a", e1, "m", []string{"e9"}); err != errNotLeading {
		t.Fatalf("the old holder's pin: %v, want %v", err, errNotLeading)
	}
	got, err := s.pins(ctx)
	if err != nil || len(got) != 1 || strings.Join(got["m"], "|") != "e1|e,2" {
		t.Fatalf("pins read by the next controller: %v, %v; want m=[e1 e,2] only", got, err)
	}
}

// TestStoreLoaded: the loaded models (explicit model control), with how
// each was loaded (a load of its own, a dependency of an ensemble, the
// configuration and files of its load), and the executor generations
// whose startup models were loaded are kept by the lease's holder only,
// and read back whole by the next controller.
func TestStoreLoaded(t *testing.T) {
	ctx := context.Background()
	s := &store{rdb: redistest.Plain(t)}
	ttl := 300 * time.Millisecond
	e1, err := s.acquire(ctx, "a", ttl)
	if err != nil || e1 == 0 {
		t.Fatalf("a acquires: %d, %v", e1, err)
	}
	override := &busv1.ModelControlRequest{Name: "m3", Load: true, Config: `{"max_batch_size":4}`, Files: map[string][]byte{"1/model.bin": {0, 1, 2, 0xff}}}
	for _, ch := range []loadedChange{
		{add: map[string]loadedModel{"m0": {}, "m1": {}}, executor: "exec0", generation: 7},
		{add: map[string]loadedModel{"m2": {dependency: true}, "m3": {override: override}}},
		{remove: []string{"m1", "never"}},
	} {
		if err := s.saveLoaded(ctx, "a", e1, ch); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.saveLoaded(ctx, "b", e1, loadedChange{add: map[string]loadedModel{"m9": {}}, executor: "exec9", generation: 1}); err != errNotLeading {
		t.Fatalf("a change by a controller without the lease: %v, want %v", err, errNotLeading)
	}
	time.Sleep(ttl + 100*time.Millisecond)
	if _, err := s.acquire(ctx, "b", ttl); err != nil {
		t.Fatal(err)
	}
	if err := s.saveLoaded(ctx, "a", e1, loadedChange{remove: []string{"m0"}}); err != errNotLeading {
		t.Fatalf("the old holder's change: %v, want %v", err, errNotLeading)
	}
	loaded, started, err := s.loaded(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, m0 := loaded["m0"]
	if len(loaded) != 3 || !m0 || loaded["m0"].dependency || loaded["m0"].override != nil || !loaded["m2"].dependency ||
		!proto.Equal(loaded["m3"].override, override) || loaded["m3"].dependency || len(started) != 1 || started["exec0"] != 7 {
		t.Fatalf("read by the next controller: loaded %v started %v; want m0 (its own), m2 (a dependency), m3 (with its override) and exec0=7", loaded, started)
	}
}
