package seqbatch

import (
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// label names a request in the cancellation cases: "2S" is sequence 2's
// START, "2b" one of its middle requests, "2E" its END.
func labelled(l string) *Request {
	id := uint64(l[0] - '0')
	return &Request{ID: UintID(id), Start: strings.HasSuffix(l, "S"), End: strings.HasSuffix(l, "E"), Data: l}
}

func TestCancel(t *testing.T) {
	type tc struct {
		name     string
		strategy Strategy
		slots    int
		// enqueue is sent in order at t0; before takes that many batches
		// before the cancellation.
		enqueue []string
		before  int
		cancel  string
		// failed are the requests that fail, in order ("=" marks the
		// one the client cancelled); nil: Cancel finds nothing.
		failed []string
		// after are the batches that follow (as batchString prints
		// them).
		after []string
		// restart: the sequence's next request without START fails
		// with the START error naming the cancellation.
		restart uint64
		store   string
	}
	cases := []tc{{
		name:    "backlog sequence is cancelled as a whole",
		slots:   1,
		enqueue: []string{"1S", "2S", "2b", "2c"},
		before:  1,
		cancel:  "2b",
		failed:  []string{"2S", "=2b", "2c"},
		after:   []string{"<nil>"},
		restart: 2,
		store:   "bind u:1 e/0,backlog u:2,unbind u:2",
	}, {
		name:    "front of the slot: the slot goes to the backlog",
		slots:   1,
		enqueue: []string{"1S", "1b", "1c", "2S"},
		before:  1,
		cancel:  "1b",
		failed:  []string{"=1b", "1c"},
		after:   []string{"2S"},
		restart: 1,
		store:   "bind u:1 e/0,backlog u:2,unbind u:1,bind u:2 e/0",
	}, {
		name:    "requests ahead in the slot still run, then the slot is released",
		slots:   1,
		enqueue: []string{"1S", "1b", "1c", "1d", "2S"},
		before:  1,
		cancel:  "1c",
		failed:  []string{"=1c", "1d"},
		after:   []string{"1", "2S"},
		restart: 1,
		store:   "bind u:1 e/0,backlog u:2,unbind u:1,bind u:2 e/0",
	}, {
		name:    "the other slots are not touched",
		slots:   2,
		enqueue: []string{"1S", "2S", "1b", "2b"},
		before:  1,
		cancel:  "2b",
		failed:  []string{"=2b"},
		after:   []string{"1", "<nil>"},
		restart: 2,
		store:   "bind u:1 e/0,bind u:2 e/1,unbind u:2",
	}, {
		name:    "an ended sequence's queue: the id is not remembered",
		slots:   1,
		enqueue: []string{"1S", "1b", "1E", "2S"},
		before:  1,
		cancel:  "1b",
		failed:  []string{"=1b", "1E"},
		after:   []string{"2S"},
		// 1E failed for good: only then does sequence 1 leave the store.
		store: "bind u:1 e/0,backlog u:2,unbind u:1,bind u:2 e/0",
	}, {
		name:    "an ended backlog sequence",
		slots:   1,
		enqueue: []string{"1S", "2S", "2E", "3S"},
		before:  1,
		cancel:  "2S",
		failed:  []string{"=2S", "2E"},
		after:   []string{"<nil>"},
		store:   "bind u:1 e/0,backlog u:2,backlog u:3,unbind u:2",
	}, {
		name:    "a request that left in a batch is not held",
		slots:   1,
		enqueue: []string{"1S", "1b"},
		before:  1,
		cancel:  "1S",
		after:   []string{"1", "<nil>"},
		store:   "bind u:1 e/0",
	}, {
		name:     "oldest: the freed candidate slot goes to the backlog",
		strategy: Oldest,
		slots:    1,
		enqueue:  []string{"1S", "1b", "2S", "2b"},
		before:   1,
		cancel:   "1b",
		failed:   []string{"=1b"},
		after:    []string{"2S", "2", "<nil>"},
		restart:  1,
		store:    "bind u:1 e/0,backlog u:2,unbind u:1,bind u:2 e/0",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &memStore{}
			m := NewModel(Config{Model: "m", Strategy: c.strategy, SlotsPerInstance: c.slots, MaxBatch: c.slots, Idle: time.Second}, st, quiet)
			k := InstanceKey{Executor: "e"}
			m.AddInstance(t0, k)
			reqs := map[string]*Request{}
			for _, l := range c.enqueue {
				reqs[l] = labelled(l)
				mustEnqueue(t, m, t0, reqs[l])
			}
			for range c.before {
				if b, _ := m.Next(t0, k); b == nil {
					t.Fatal("no batch before the cancellation")
				}
			}
			now := t0.Add(time.Millisecond)
			var got []string
			for _, f := range m.Cancel(now, reqs[c.cancel]) {
				l := f.Req.Data.(string)
				if tritonerr.KindOf(f.Err) != tritonerr.Cancelled {
					t.Errorf("%s failed with %v, want CANCELLED", l, f.Err)
				}
				if f.Req == reqs[c.cancel] {
					want := "inference request for sequence " + f.Req.ID.text() + " to model 'm' was cancelled"
					if f.Err.Error() != want {
						t.Errorf("error %q, want %q", f.Err, want)
					}
					l = "=" + l
				} else if !strings.HasSuffix(f.Err.Error(), "another request of the sequence was cancelled") {
					t.Errorf("%s: error %q does not name the cancelled request", l, f.Err)
				}
				got = append(got, l)
			}
			if strings.Join(got, " ") != strings.Join(c.failed, " ") {
				t.Fatalf("failed %v, want %v", got, c.failed)
			}
			for _, want := range c.after {
				wantBatch(t, m, now, k, want)
			}
			if got := strings.Join(st.ops, ","); got != c.store {
				t.Fatalf("store ops %s, want %s", got, c.store)
			}
			if c.restart != 0 {
				err := m.Enqueue(now, req(c.restart, false, false))
				if tritonerr.KindOf(err) != tritonerr.InvalidArg || !strings.Contains(err.Error(), "must specify the START flag") ||
					!strings.HasSuffix(err.Error(), ": the sequence was cancelled") {
					t.Fatalf("the cancelled sequence's next request: %v", err)
				}
				// START begins it again.
				mustEnqueue(t, m, now, req(c.restart, true, false))
			}
		})
	}
}

// A cancelled sequence's START error is remembered for lostFor, like a
// lost executor's.
func TestCancelledSequenceForgottenLater(t *testing.T) {
	m, _, k := direct(1)
	a, b := req(1, true, false), req(1, false, false)
	mustEnqueue(t, m, t0, a, b)
	wantBatch(t, m, t0, k, "1S")
	if f := m.Cancel(t0, b); len(f) != 1 {
		t.Fatalf("failures %v", f)
	}
	m.Tick(t0.Add(lostFor + time.Second))
	err := m.Enqueue(t0.Add(lostFor+time.Second), req(1, false, false))
	if err == nil || strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("got %v, want the plain START error", err)
	}
	if s := m.Snapshot(); s.Active != 0 || s.Queued != 0 {
		t.Fatalf("left %+v", s)
	}
}
