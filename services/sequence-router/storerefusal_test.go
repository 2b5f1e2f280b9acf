package seqrouter

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/seqbatch"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// failingStore refuses every binding with err.
type failingStore struct{ err error }

func (f failingStore) Bind(seqbatch.ID, seqbatch.SlotRef) error { return f.err }
func (f failingStore) Backlog(seqbatch.ID) error                { return f.err }
func (f failingStore) Unbind(seqbatch.ID) error                 { return f.err }

// A START the store cannot record is refused as not run (its gateway sends
// it again) when waiting can fix the store: Redis restarting or loading its
// data set, or the router's lease lost; other store failures stay
// UNAVAILABLE errors for the client.
func TestStoreRefusal(t *testing.T) {
	tests := []struct {
		name     string
		storeErr error
		notTaken bool
	}{
		{"loading", errors.New("LOADING Redis is loading the dataset in memory"), true},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"lease lost", errLeaseLost, true},
		{"not answered", fmt.Errorf("%w within 2s", errStoreUnanswered), true},
		{"script error", errors.New("ERR Error running script (call to f_1234): @user_script:2: -OOM command not allowed"), false},
		{"no permission", errors.New("NOPERM User sequence-router has no permissions to access the 'x' key"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core := seqbatch.NewModel(seqbatch.Config{Model: "m", SlotsPerInstance: 1}, failingStore{tt.storeErr}, nil)
			now := time.Now()
			core.AddInstance(now, seqbatch.InstanceKey{Executor: "e", Generation: 1})
			it := &item{id: seqbatch.UintID(7), start: true}
			err := core.Enqueue(now, &seqbatch.Request{ID: it.id, Start: true, Data: it})
			var se *seqbatch.StoreError
			if !errors.As(err, &se) || tritonerr.KindOf(err) != tritonerr.Unavailable {
				t.Fatalf("Enqueue: %v, want an UNAVAILABLE seqbatch.StoreError", err)
			}
			got := (&model{name: "m"}).storeRefusal(it, err)
			if bus.IsNoResponders(got) != tt.notTaken {
				t.Fatalf("storeRefusal(%v) = %v: not taken %v, want %v", err, got, bus.IsNoResponders(got), tt.notTaken)
			}
			if tt.notTaken && (!strings.HasSuffix(got.Error(), "the request was not run") || !strings.Contains(got.Error(), tt.storeErr.Error())) {
				t.Fatalf("refusal %q does not say why and that the request was not run", got)
			}
			if !tt.notTaken && got != err {
				t.Fatalf("storeRefusal changed %v into %v", err, got)
			}
		})
	}
	// Errors that are not a START's store failure pass unchanged.
	noStart := tritonerr.InvalidArgf("must specify the START flag")
	if got := (&model{name: "m"}).storeRefusal(&item{}, noStart); got != noStart {
		t.Fatalf("storeRefusal(%v) = %v", noStart, got)
	}
}

// countingStore fails every write with err and counts the writes.
type countingStore struct {
	err    error
	writes int
}

func (c *countingStore) Bind(seqbatch.ID, seqbatch.SlotRef) error { c.writes++; return c.err }
func (c *countingStore) Backlog(seqbatch.ID) error                { c.writes++; return c.err }
func (c *countingStore) Unbind(seqbatch.ID) error                 { c.writes++; return c.err }

// After a write found the store away (redisconn.Transient), the next ones
// fail at once with the same error for storePause, instead of each waiting
// for Redis under the model's lock; then one tries the store again. Other
// errors do not pause the writes.
func TestStoreAwayPausesWrites(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	st := &countingStore{err: refused}
	m := &model{poke: make(chan struct{}, 1)}
	w := fencedWrites{st, m}
	id := seqbatch.UintID(1)
	if err := w.Bind(id, seqbatch.SlotRef{}); err != refused || st.writes != 1 {
		t.Fatalf("first write: %v after %d writes", err, st.writes)
	}
	if err := w.Unbind(id); err != refused || st.writes != 1 {
		t.Fatalf("write within the pause: %v after %d writes, want the same error without a write", err, st.writes)
	}
	// A START meanwhile is refused as not run, for its gateway to send
	// again.
	core := seqbatch.NewModel(seqbatch.Config{Model: "m", SlotsPerInstance: 1}, w, nil)
	core.AddInstance(time.Now(), seqbatch.InstanceKey{Executor: "e", Generation: 1})
	it := &item{id: seqbatch.UintID(2), start: true}
	err := core.Enqueue(time.Now(), &seqbatch.Request{ID: it.id, Start: true, Data: it})
	if got := (&model{name: "m"}).storeRefusal(it, err); !bus.IsNoResponders(got) || st.writes != 1 {
		t.Fatalf("START within the pause: %v after %d writes, want it refused as not run without a write", got, st.writes)
	}
	m.storeRetry = time.Now() // the pause is over
	st.err = nil
	if err := w.Backlog(id); err != nil || st.writes != 2 {
		t.Fatalf("write after the pause: %v after %d writes", err, st.writes)
	}
	st.err = errors.New("NOPERM this user has no permissions")
	for range 2 {
		_ = w.Bind(id, seqbatch.SlotRef{})
	}
	if st.writes != 4 {
		t.Fatalf("%d writes, want every write tried after an error waiting does not fix", st.writes)
	}
}
