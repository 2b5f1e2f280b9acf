package seqrouter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/failover"
	"github.com/nereid-io/nereid/pkg/redisconn/redistest"
	"github.com/nereid-io/nereid/pkg/seqbatch"
)

// storeCase is one store under test, with the faults the contract needs
// to inject: a lease that lapsed, and the store losing all its data.
type storeCase struct {
	st     store
	expire func(key string)
	wipe   func()
}

// stores runs body against the in-memory store and the Redis store.
func stores(t *testing.T, body func(t *testing.T, c storeCase)) {
	t.Run("memory", func(t *testing.T) {
		s := newMemStore()
		body(t, storeCase{st: s,
			expire: func(key string) {
				s.mu.Lock()
				r := s.record(key)
				r.Owner, r.Epoch, r.Expires = "", 0, time.Time{}
				s.mu.Unlock()
			},
			wipe: func() {
				s.mu.Lock()
				s.models, s.records = map[string]*memModel{}, map[string]*failover.Record{}
				s.mu.Unlock()
			}})
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Plain(t)
		s := &redisStore{rdb: rdb, opTimeout: 5 * time.Second}
		ctx := context.Background()
		body(t, storeCase{st: s,
			expire: func(key string) { rdb.Del(ctx, leaseKey(key)) },
			wipe:   func() { rdb.FlushAll(ctx) }})
	})
}

const ttl = 10 * time.Second // long: no lease lapses by itself during a test

func TestStoreContract(t *testing.T) {
	stores(t, func(t *testing.T, c storeCase) {
		ctx := context.Background()
		const key = "seq.1"
		st := c.st
		acquire := func(owner string, floor uint64) uint64 {
			t.Helper()
			e, err := st.acquire(ctx, key, owner, floor, ttl)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		renew := func(owner string, epoch uint64) failover.Answer {
			t.Helper()
			a, err := st.renew(ctx, key, owner, epoch, ttl)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
		id := seqbatch.UintID(7)
		at := seqbatch.SlotRef{Instance: seqbatch.InstanceKey{Executor: "ex|1", Generation: 3, Index: 1}, Slot: 2}

		// Two routers race: one lease, epoch 1.
		if e := acquire("a", 1); e != 1 {
			t.Fatalf("first acquire: epoch %d", e)
		}
		if e := acquire("b", 1); e != 0 {
			t.Fatalf("acquire of a held lease: epoch %d", e)
		}
		if a := renew("a", 1); a != failover.Renewed {
			t.Fatalf("holder's renewal: %v", a)
		}
		if a := renew("b", 1); a != failover.Taken {
			t.Fatalf("renewal by another router: %v", a)
		}
		wa := st.model(key, "a", 1)
		if err := wa.Bind(id, at); err != nil {
			t.Fatal(err)
		}
		if err := wa.Backlog(seqbatch.StringID("waiting")); err != nil {
			t.Fatal(err)
		}

		// The lease lapses unnoticed; nobody took it: the holder's renewal
		// takes it back at its epoch.
		c.expire(key)
		if a := renew("a", 1); a != failover.Restored {
			t.Fatalf("renewal of a lapsed lease nobody took: %v", a)
		}

		// a steps down and releases; b takes over with epoch 2: a's writes
		// are fenced, b's go through, and b reads what a wrote.
		if err := st.release(ctx, key, "a", 1); err != nil {
			t.Fatal(err)
		}
		if e := acquire("b", 1); e != 2 {
			t.Fatalf("takeover: epoch %d, want 2", e)
		}
		if err := wa.Unbind(id); !errors.Is(err, errLeaseLost) {
			t.Fatalf("write of the old epoch: %v, want errLeaseLost", err)
		}
		if a := renew("a", 1); a != failover.Taken {
			t.Fatalf("old holder's renewal: %v", a)
		}
		bound, backlog, err := st.load(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(bound) != 1 || bound[id] != at || len(backlog) != 1 || backlog[0] != seqbatch.StringID("waiting") {
			t.Fatalf("loaded bound %v backlog %v", bound, backlog)
		}
		wb := st.model(key, "b", 2)
		if err := wb.Unbind(id); err != nil {
			t.Fatal(err)
		}

		// b's lease lapses and a takes a newer epoch: b's renewal finds a
		// newer epoch handed out and may not take the lease back.
		c.expire(key)
		if e := acquire("a", 1); e != 3 {
			t.Fatalf("epoch %d, want 3", e)
		}
		if err := st.release(ctx, key, "a", 3); err != nil {
			t.Fatal(err)
		}
		if a := renew("b", 2); a != failover.Missing {
			t.Fatalf("renewal after a newer epoch: %v", a)
		}

		// The store loses its data: the holder takes its lease back at its
		// epoch, and the counter with it.
		if e := acquire("a", 1); e != 4 {
			t.Fatalf("epoch %d, want 4", e)
		}
		c.wipe()
		if a := renew("a", 4); a != failover.Restored {
			t.Fatalf("renewal after the store lost its data: %v", a)
		}
		if err := st.model(key, "a", 4).Bind(id, at); err != nil {
			t.Fatalf("write after the restore: %v", err)
		}
		if err := st.release(ctx, key, "a", 4); err != nil {
			t.Fatal(err)
		}
		if e := acquire("b", 1); e != 5 {
			t.Fatalf("epoch after the restore: %d, want 5", e)
		}

		// Wiped with nobody holding the lease: the floor (the executors'
		// fence) decides the next epoch.
		c.wipe()
		if e := acquire("c", 6); e != 6 {
			t.Fatalf("epoch from the floor: %d, want 6", e)
		}
		if err := st.release(ctx, key, "c", 6); err != nil {
			t.Fatal(err)
		}
		if e := acquire("c", 1); e != 7 {
			t.Fatalf("epoch after the floor: %d, want 7", e)
		}
	})
}

// Binding a sequence to a slot forgets any other sequence the store still
// has there (seqbatch.Store): a takeover then restores the slot's current
// sequence, not one of two at random.
func TestStoreBindReplacesStale(t *testing.T) {
	stores(t, func(t *testing.T, c storeCase) {
		ctx := context.Background()
		const key = "seq.1"
		e, err := c.st.acquire(ctx, key, "a", 1, ttl)
		if err != nil || e == 0 {
			t.Fatalf("acquire: %d %v", e, err)
		}
		w := c.st.model(key, "a", e)
		x := seqbatch.SlotRef{Instance: seqbatch.InstanceKey{Executor: "ex", Generation: 1}, Slot: 0}
		y := seqbatch.SlotRef{Instance: seqbatch.InstanceKey{Executor: "ex", Generation: 1}, Slot: 1}
		ended, next, other := seqbatch.UintID(1), seqbatch.StringID("1"), seqbatch.UintID(2)
		for _, b := range []struct {
			id seqbatch.ID
			at seqbatch.SlotRef
		}{{ended, x}, {other, y}, {next, x}, {next, x}} {
			if err := w.Bind(b.id, b.at); err != nil {
				t.Fatal(err)
			}
		}
		bound, _, err := c.st.load(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(bound) != 2 || bound[next] != x || bound[other] != y {
			t.Fatalf("bound %v, want %v in slot 0 and %v in slot 1 only", bound, next, other)
		}
	})
}
