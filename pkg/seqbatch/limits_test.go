package seqbatch

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// step is one event of a limits case, at t0 plus at:
//
//   - "enq" label: enqueue a request ("2S" START of 2, "2b" a middle
//     request, "2E" END; "/30" after it: its own timeout, in ms); want is
//     the error, "" for none;
//   - "next": the instance asks for a batch; want is batchString's;
//   - "tick": want is the failures, "label: message" joined by " | ";
//   - "wake": want is Wake's time after t0 in ms, "none" for zero;
//   - "again" id: a request of sequence id without START; want is the
//     error.
type step struct {
	at   time.Duration
	do   string
	arg  string
	want string
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func limitReq(l string) *Request {
	name, t, ok := strings.Cut(l, "/")
	r := labelled(name)
	if ok {
		n, _ := strconv.Atoi(t)
		r.Timeout = ms(n)
	}
	return r
}

// The exact messages of the limits.
const (
	backlogByModel  = "Request timeout expired: sequence %s of model 'm' waited in the sequence backlog for a free slot past the model's timeout of 100000 microseconds (nereid_sequence_queue_timeout_microseconds); the sequence was not started and none of its requests ran"
	backlogByOwn    = "Request timeout expired: sequence %s of model 'm' waited in the sequence backlog for a free slot past the request's timeout of %s microseconds; the sequence was not started and none of its requests ran"
	slotByModel     = "Request timeout expired: inference request for sequence %s to model 'm' waited for its turn in the sequence's batch slot past the model's timeout of 100000 microseconds (nereid_sequence_queue_timeout_microseconds); the request was not run and the sequence %s"
	slotByOwn       = "Request timeout expired: inference request for sequence %s to model 'm' waited for its turn in the sequence's batch slot past the request's timeout of %s microseconds; the request was not run and the sequence %s"
	slotFollower    = "Request timeout expired: inference request for sequence %s to model 'm' was not run: an earlier request of the sequence timed out in the sequence router and the sequence %s"
	startError      = "inference request for sequence %s to model 'm' must specify the START flag on the first request of the sequence"
	tritonTimeout   = "timeout of the corresponding sequence has been expired"
	backlogFull     = "Exceeds maximum queue size: the sequence backlog of model 'm' is full (max sequence backlog %s); sequence %s was not started"
	whyBacklog      = ": the sequence timed out in the sequence backlog before it started"
	whySlotStart    = ": its START request timed out in the sequence router, so the sequence was not started"
	whySlotMidstart = ": a request of the sequence timed out in the sequence router"
)

func f(format string, args ...any) string {
	for _, a := range args {
		format = strings.Replace(format, "%s", a.(string), 1)
	}
	return format
}

// Nereid's limits on the sequence backlog and on the wait of a sequence's
// requests, as functions of the batcher's state and the clock: a
// direct model with one instance of Config.QueueTimeout 100 ms (0 in the
// cases that show Triton's behaviour, kept without the parameter).
func TestQueueTimeout(t *testing.T) {
	cases := []struct {
		name    string
		slots   int
		timeout time.Duration
		steps   []step
		store   string
	}{{
		name: "without the parameter a request in a slot never times out, its own timeout included",
		steps: []step{
			{0, "enq", "1S", ""}, {0, "next", "", "1S"},
			// The next thing to do is the idle release, in an hour.
			{0, "enq", "1b/50", ""}, {0, "wake", "", "3600000"},
			{ms(10_000), "tick", "", ""}, {ms(10_000), "next", "", "1"},
		},
		store: "bind u:1 e1/0",
	}, {
		name: "without the parameter the request's own timeout expires a backlog sequence with Triton's message",
		steps: []step{
			{0, "enq", "1S", ""}, {0, "enq", "2S/50", ""}, {ms(10), "enq", "2b", ""},
			{0, "wake", "", "50"}, {ms(49), "tick", "", ""},
			{ms(50), "tick", "", "2S: " + tritonTimeout + " | 2b: " + tritonTimeout},
			{ms(50), "again", "2", f(startError, "2")},
		},
		store: "bind u:1 e1/0,backlog u:2,unbind u:2",
	}, {
		name:    "a START that times out in the backlog fails with its requests, and the sequence does not exist",
		timeout: ms(100),
		steps: []step{
			{0, "enq", "1S", ""}, {0, "next", "", "1S"},
			{ms(10), "enq", "2S", ""}, {ms(20), "enq", "2b", ""},
			{ms(20), "wake", "", "110"}, {ms(109), "tick", "", ""},
			{ms(110), "tick", "", "2S: " + f(backlogByModel, "2") + " | 2b: " + f(backlogByModel, "2")},
			{ms(110), "again", "2", f(startError, "2") + whyBacklog},
			// The slot's sequence is not touched: its request left in a
			// batch before the timeout and is never timed out.
			{ms(500), "tick", "", ""}, {ms(500), "enq", "1b", ""}, {ms(500), "next", "", "1"},
		},
		store: "bind u:1 e1/0,backlog u:2,unbind u:2",
	}, {
		name:    "the request's own timeout shortens the model's",
		timeout: ms(100),
		steps: []step{
			{0, "enq", "1S", ""}, {0, "enq", "2S/30", ""}, {0, "wake", "", "30"},
			{ms(30), "tick", "", "2S: " + f(backlogByOwn, "2", "30000")},
		},
		store: "bind u:1 e1/0,backlog u:2,unbind u:2",
	}, {
		name:    "the request's own timeout never lengthens the model's",
		timeout: ms(100),
		steps: []step{
			{0, "enq", "1S", ""}, {0, "next", "", "1S"}, {0, "enq", "2S/500", ""}, {0, "wake", "", "100"},
			{ms(100), "tick", "", "2S: " + f(backlogByModel, "2")},
		},
		store: "bind u:1 e1/0,backlog u:2,unbind u:2",
	}, {
		name:    "a START that times out in its slot while the instance is busy leaves no sequence, in memory or in the store",
		slots:   2,
		timeout: ms(100),
		steps: []step{
			{0, "enq", "1S", ""}, {0, "next", "", "1S"},
			// The instance runs 1S: 2S waits in the free slot 1.
			{ms(10), "enq", "2S", ""}, {ms(10), "wake", "", "110"},
			{ms(110), "tick", "", "2S: " + f(slotByModel, "2", "was not started")},
			{ms(110), "again", "2", f(startError, "2") + whySlotStart},
			{ms(120), "enq", "3S", ""}, {ms(120), "next", "", "_ 3S"},
		},
		store: "bind u:1 e1/0,bind u:2 e1/1,unbind u:2,bind u:3 e1/1",
	}, {
		name:    "a middle request that times out fails with those behind it, the sequence ends, and its slot goes to the backlog",
		timeout: ms(100),
		steps: []step{
			{0, "enq", "1S", ""}, {0, "next", "", "1S"},
			{ms(10), "enq", "1b", ""}, {ms(50), "enq", "1c", ""}, {ms(60), "enq", "3S", ""},
			{ms(60), "wake", "", "110"},
			{ms(110), "tick", "", "1b: " + f(slotByModel, "1", "ended") + " | 1c: " + f(slotFollower, "1", "ended")},
			{ms(110), "again", "1", f(startError, "1") + whySlotMidstart},
			// 3S took the slot and leaves in the next batch: its own
			// deadline, 160 ms, passes with it running.
			{ms(110), "next", "", "3S"}, {ms(200), "tick", "", ""},
		},
		store: "bind u:1 e1/0,backlog u:3,unbind u:1,bind u:3 e1/0",
	}, {
		name:    "requests ahead of the one that timed out still run",
		timeout: ms(100),
		steps: []step{
			{0, "enq", "1S", ""}, {0, "next", "", "1S"},
			{0, "enq", "1b", ""}, {ms(10), "enq", "1c/20", ""}, {ms(10), "enq", "1d", ""},
			{ms(10), "wake", "", "30"},
			{ms(30), "tick", "", "1c: " + f(slotByOwn, "1", "20000", "ended") + " | 1d: " + f(slotFollower, "1", "ended")},
			{ms(40), "next", "", "1"}, {ms(40), "next", "", "<nil>"},
			{ms(40), "again", "1", f(startError, "1") + whySlotMidstart},
		},
		store: "bind u:1 e1/0,unbind u:1",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &memStore{}
			m := NewModel(Config{Model: "m", SlotsPerInstance: max(1, tc.slots), MaxBatch: max(1, tc.slots), Idle: time.Hour, QueueTimeout: tc.timeout}, st, quiet)
			k := InstanceKey{Executor: "e1"}
			m.AddInstance(t0, k)
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				got := ""
				switch s.do {
				case "enq":
					if err := m.Enqueue(now, limitReq(s.arg)); err != nil {
						got = err.Error()
					}
				case "next":
					b, _ := m.Next(now, k)
					got = batchString(b)
					if b != nil {
						answer(m, b)
					}
				case "tick":
					var parts []string
					for _, fl := range m.Tick(now) {
						if tritonerr.KindOf(fl.Err) != tritonerr.Unavailable || !errors.Is(fl.Err, ErrRejected) {
							t.Errorf("step %d: %v is not an UNAVAILABLE rejection", i, fl.Err)
						}
						parts = append(parts, fl.Req.Data.(string)+": "+fl.Err.Error())
					}
					got = strings.Join(parts, " | ")
				case "wake":
					got = "none"
					if w := m.Wake(); !w.IsZero() {
						got = strconv.FormatInt(w.Sub(t0).Milliseconds(), 10)
					}
				case "again":
					n, _ := strconv.ParseUint(s.arg, 10, 64)
					err := m.Enqueue(now, req(n, false, false))
					if tritonerr.KindOf(err) != tritonerr.InvalidArg {
						t.Errorf("step %d: %v is not INVALID_ARG", i, err)
					}
					if err != nil {
						got = err.Error()
					}
				}
				if got != s.want {
					t.Fatalf("step %d (%s %s at %v):\n got %q\nwant %q", i, s.do, s.arg, s.at, got, s.want)
				}
			}
			if got := strings.Join(st.ops, ","); got != tc.store {
				t.Fatalf("store ops %s, want %s", got, tc.store)
			}
		})
	}
}

// A router taking a model over restores its backlog from the store: the
// restored sequences count against the bound, so a new START finds the
// backlog as full as the old router left it, while the START of a
// restored sequence, sent again by its gateway, joins it; and with a
// queue timeout a restored sequence times out that long after the
// takeover.
func TestLimitsAfterRestore(t *testing.T) {
	k := InstanceKey{Executor: "e1"}
	m := NewModel(Config{Model: "m", SlotsPerInstance: 1, MaxBatch: 1, Idle: time.Hour, MaxBacklog: 1, QueueTimeout: ms(100)}, &memStore{}, quiet)
	m.Restore(t0, map[ID]SlotRef{UintID(1): {k, 0}}, []ID{UintID(2)})
	err := m.Enqueue(t0.Add(ms(10)), limitReq("3S"))
	if want := f(backlogFull, "1", "3"); err == nil || err.Error() != want || tritonerr.KindOf(err) != tritonerr.Unavailable || !errors.Is(err, ErrRejected) {
		t.Fatalf("START beyond the restored backlog: %v, want UNAVAILABLE %q", err, want)
	}
	mustEnqueue(t, m, t0.Add(ms(50)), limitReq("2S"))
	if w := m.Wake(); !w.Equal(t0.Add(ms(100))) {
		t.Fatalf("wake %v after t0, want the restored sequence's timeout at 100ms", w.Sub(t0))
	}
	fs := m.Tick(t0.Add(ms(100)))
	if len(fs) != 1 || fs[0].Err.Error() != f(backlogByModel, "2") {
		t.Fatalf("failures %v, want 2S with %q", fs, f(backlogByModel, "2"))
	}
	// The backlog has room again.
	mustEnqueue(t, m, t0.Add(ms(100)), limitReq("3S"))
	if s := m.Snapshot(); s.Backlog != 1 {
		t.Fatalf("backlog %d, want 3 alone", s.Backlog)
	}
}

// With the oldest strategy a request waits in its candidate slot for the
// batch to fill or for max_queue_delay_microseconds: the queue timeout
// bounds that wait too.
func TestQueueTimeoutOldest(t *testing.T) {
	k := InstanceKey{Executor: "e1"}
	st := &memStore{}
	m := NewModel(Config{Model: "m", Strategy: Oldest, SlotsPerInstance: 2, MaxBatch: 2, MaxQueueDelay: time.Second, Idle: time.Hour, QueueTimeout: ms(100)}, st, quiet)
	m.AddInstance(t0, k)
	mustEnqueue(t, m, t0, limitReq("1S"))
	if b, wait := m.Next(t0, k); b != nil || wait != time.Second {
		t.Fatalf("Next = %s, %v; want nothing before the queue delay", batchString(b), wait)
	}
	if w := m.Wake(); !w.Equal(t0.Add(ms(100))) {
		t.Fatalf("wake %v after t0, want the timeout at 100ms", w.Sub(t0))
	}
	fs := m.Tick(t0.Add(ms(100)))
	if want := f(slotByModel, "1", "was not started"); len(fs) != 1 || fs[0].Err.Error() != want {
		t.Fatalf("failures %v, want 1S with %q", fs, want)
	}
	if got := strings.Join(st.ops, ","); got != "bind u:1 e1/0,unbind u:1" {
		t.Fatalf("store ops %s", got)
	}
	if b, _ := m.Next(t0.Add(2*time.Second), k); b != nil {
		t.Fatalf("a timed-out request left in a batch: %s", batchString(b))
	}
}
