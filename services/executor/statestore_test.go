package executor

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/redisconn/redistest"
	"github.com/nereid-io/nereid/services/executor/internal/seqstate"
)

// stateStores runs body against the memory store and the Redis store (a
// private redis-server), which must both apply seqstate's rules.
func stateStores(t *testing.T, body func(t *testing.T, st stateStore)) {
	t.Run("memory", func(t *testing.T) { body(t, newMemStates()) })
	t.Run("redis", func(t *testing.T) {
		body(t, newRedisStates(redistest.Plain(t)))
	})
}

func fenceOf(epoch, batch uint64) uint64 { return epoch<<32 | batch }

// The store takes a sequence's states in order, keeps the one before the
// last, refuses a stale executor's writes (an older batch fence, an older
// lease epoch, an input the sequence has left behind) and a write for a
// sequence it does not hold, deletes only what MayDrop allows, and lets
// records expire.
func TestStateStoreContract(t *testing.T) {
	stateStores(t, func(t *testing.T, st stateStore) {
		ctx := context.Background()
		const k, other = "nereid:state:{m.1}:u:7", "nereid:state:{m.1}:u:8"
		save := func(w seqstate.Write) seqstate.Verdict {
			t.Helper()
			v, err := st.save(ctx, []keyedWrite{{key: k, w: w}}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			return v[0]
		}
		load := func() *seqstate.Record {
			t.Helper()
			r, err := st.load(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		if r := load(); r != nil {
			t.Fatalf("record before any write: %+v", r)
		}
		if v := save(seqstate.Write{Fence: fenceOf(2, 1), Token: "t1", After: "t0", State: []byte("s1")}); v != seqstate.Gone {
			t.Fatalf("write without a record: %v", v)
		}
		if v := save(seqstate.Write{Fence: fenceOf(2, 1), Token: "t0", Start: true, State: []byte("s0")}); v != seqstate.Saved {
			t.Fatalf("START: %v", v)
		}
		if v := save(seqstate.Write{Fence: fenceOf(2, 3), Token: "t1", After: "t0", State: []byte("s1")}); v != seqstate.Saved {
			t.Fatalf("second request: %v", v)
		}
		r := load()
		if r == nil || r.Fence != fenceOf(2, 3) || r.Token != "t1" || string(r.State) != "s1" || string(r.Prev) != "s0" || !r.HasPrev {
			t.Fatalf("record %+v", r)
		}
		// Fencing: a stale executor's writes are refused, whatever they
		// carry, and change nothing.
		for name, w := range map[string]seqstate.Write{
			"an older batch of the lease":      {Fence: fenceOf(2, 2), Token: "t2", After: "t1", State: []byte("x")},
			"a batch of an older lease epoch":  {Fence: fenceOf(1, 900), Token: "t2", After: "t1", State: []byte("x")},
			"a START of an older batch":        {Fence: fenceOf(2, 2), Token: "u0", Start: true, State: []byte("x")},
			"an input the sequence moved past": {Fence: fenceOf(2, 4), Token: "t2", After: "t0", State: []byte("x")},
		} {
			if v := save(w); v != seqstate.Stale {
				t.Fatalf("%s: %v", name, v)
			}
		}
		if r2 := load(); r2.Token != "t1" || string(r2.State) != "s1" || r2.Fence != fenceOf(2, 3) {
			t.Fatalf("a refused write changed the record: %+v", r2)
		}
		// The stored request running again elsewhere keeps Prev; a newer
		// epoch writes.
		if v := save(seqstate.Write{Fence: fenceOf(3, 0), Token: "t1", After: "", State: []byte("s1")}); v != seqstate.Saved {
			t.Fatalf("rerun: %v", v)
		}
		if r := load(); string(r.Prev) != "s0" || r.Fence != fenceOf(3, 0) {
			t.Fatalf("after the rerun: %+v", r)
		}
		if v := save(seqstate.Write{Fence: fenceOf(3, 1), Token: "t2", After: "t1", State: []byte("s2")}); v != seqstate.Saved {
			t.Fatalf("after the rerun, next: %v", v)
		}
		// Several sequences in one round trip.
		vs, err := st.save(ctx, []keyedWrite{
			{key: other, w: seqstate.Write{Fence: fenceOf(3, 2), Token: "v0", Start: true, State: []byte("o")}},
			{key: k, w: seqstate.Write{Fence: fenceOf(3, 2), Token: "t3", After: "t2", State: []byte("s3")}},
		}, time.Minute)
		if err != nil || vs[0] != seqstate.Saved || vs[1] != seqstate.Saved {
			t.Fatalf("pipelined: %v %v", vs, err)
		}
		// Drop: not for an older batch, not for another sequence's tokens.
		if err := st.drop(ctx, []keyedDrop{{key: k, fence: fenceOf(3, 1), token: "t4", after: "t3"}, {key: k, fence: fenceOf(3, 5), token: "w4", after: "w3"}}); err != nil {
			t.Fatal(err)
		}
		if load() == nil {
			t.Fatal("a stale or foreign drop deleted the record")
		}
		if err := st.drop(ctx, []keyedDrop{{key: k, fence: fenceOf(3, 5), token: "t4", after: "t3"}}); err != nil {
			t.Fatal(err)
		}
		if r := load(); r != nil {
			t.Fatalf("END did not delete the record: %+v", r)
		}
		// Records expire ttl after their last write.
		if _, err := st.save(ctx, []keyedWrite{{key: k, w: seqstate.Write{Fence: fenceOf(3, 6), Token: "x0", Start: true, State: []byte("s")}}}, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for load() != nil {
			if time.Now().After(deadline) {
				t.Fatal("the record did not expire")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// Writes go over the store's own connection, kept between writes: none
// checks a connection out of the client's pool (which probes its health
// with a syscall each time). A write whose kept connection Redis closed
// goes again over a new one, and a Redis that lost its scripts
// (restarted) is sent their text.
func TestRedisStatesKeepConnection(t *testing.T) {
	rdb := redistest.Plain(t)
	st := newRedisStates(rdb)
	ctx := context.Background()
	const k = "nereid:state:{m.1}:u:9"
	prev := ""
	state := []byte("s")
	write := func(i int) error {
		tok := fmt.Sprintf("t%d", i)
		vs, err := st.save(ctx, []keyedWrite{{key: k, w: seqstate.Write{Fence: uint64(i + 1), Token: tok, After: prev, Start: i == 0, State: state}}}, time.Minute)
		if err == nil && vs[0] != seqstate.Saved {
			t.Fatalf("write %d: %v", i, vs[0])
		}
		if err == nil {
			prev = tok
		}
		return err
	}
	if err := write(0); err != nil {
		t.Fatal(err)
	}
	before := *rdb.PoolStats()
	for i := 1; i <= 20; i++ {
		if err := write(i); err != nil {
			t.Fatal(err)
		}
	}
	if after := *rdb.PoolStats(); after.Hits != before.Hits || after.Misses != before.Misses {
		// Without a connection of the store's own, each write is a hit.
		t.Fatalf("20 writes checked connections out of the pool: hits %d -> %d, misses %d -> %d", before.Hits, after.Hits, before.Misses, after.Misses)
	}
	// Redis drops every client connection, with three kept by the store:
	// the next write goes over a new one, without failing.
	for range 3 {
		c, err := dialWrite(ctx, rdb.Options())
		if err != nil {
			t.Fatal(err)
		}
		st.release(c, nil)
	}
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "no").Err(); err != nil && !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("CLIENT KILL: %v", err)
	}
	for i := 21; i < 23; i++ {
		if err := write(i); err != nil {
			t.Fatalf("write %d after Redis closed the kept connections: %v", i, err)
		}
	}
	// Which is harmless when Redis had applied it: a write applied twice
	// leaves the record as once.
	const k2 = "nereid:state:{m.1}:u:10"
	for _, w := range []seqstate.Write{
		{Fence: 1, Token: "a0", Start: true, State: []byte("s0")},
		{Fence: 2, Token: "a1", After: "a0", State: []byte("s1")},
		{Fence: 2, Token: "a1", After: "a0", State: []byte("s1")},
	} {
		if vs, err := st.save(ctx, []keyedWrite{{key: k2, w: w}}, time.Minute); err != nil || vs[0] != seqstate.Saved {
			t.Fatalf("write %+v: %v %v", w, vs, err)
		}
	}
	if r, err := st.load(ctx, k2); err != nil || r.Token != "a1" || string(r.State) != "s1" || string(r.Prev) != "s0" || r.Fence != 2 {
		t.Fatalf("record after a write applied twice: %+v %v", r, err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 23; i < 25; i++ {
		if err := write(i); err != nil {
			t.Fatalf("write %d after SCRIPT FLUSH: %v", i, err)
		}
	}
	if r, err := st.load(ctx, k); err != nil || r == nil || r.Token != "t24" || string(r.State) != "s" {
		t.Fatalf("record after the writes: %+v %v", r, err)
	}
	// A large state is sent from its own buffer; the connection goes on.
	state = bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)
	for i := 25; i < 27; i++ {
		if err := write(i); err != nil {
			t.Fatalf("write %d of 100 KiB: %v", i, err)
		}
	}
	if r, err := st.load(ctx, k); err != nil || r == nil || r.Token != "t26" || !bytes.Equal(r.State, state) || !bytes.Equal(r.Prev, state) {
		t.Fatalf("record after the large writes: token %q, %d bytes, %v", r.Token, len(r.State), err)
	}
}
