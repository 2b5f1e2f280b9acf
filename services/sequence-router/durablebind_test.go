package seqrouter

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/redisconn"
	"github.com/nereid-io/nereid/pkg/redisconn/redistest"
	"github.com/nereid-io/nereid/pkg/seqbatch"
)

// No request of a sequence runs before the store has the sequence's
// binding, and a takeover restores every sequence where it runs. The test
// plays the gateway and one executor over a real NATS server, with a real
// redis-server: four sequences A fill the four slots, four sequences B
// wait in the backlog; Redis refuses writes (as while it restarts, in
// e2e/durablestate TestRedisRestarted) from when A's END requests leave in
// a batch, so that the binds of B to the freed slots, and the unbinds of A
// once their ENDs are answered, fail.
//
//   - B's START requests wait in the backlog while the store refuses
//     (before, they took the slots unrecorded and ran);
//   - once it takes writes again, B take the slots, and the store holds
//     B's bindings only (before, A's stayed beside them in the same slots,
//     and a router taking over restored, slot by slot, one of the two at
//     random: B's next request failed with the START error);
//   - a second router takes the model over and runs B's next requests in
//     B's slots;
//   - stepping down, it refuses a START waiting in the backlog as not run,
//     for its gateway to send again.
func TestBindingRecordedBeforeRun(t *testing.T) {
	rdb := redistest.Plain(t)
	// The routers log in as their own ACL user; refuse takes its right to
	// run the store's scripts away (every write of the store fails at
	// once, as while Redis restarts, without the seconds a client spends
	// dialling), or gives it back.
	const user, password = "router", "router-password"
	acl := func(rules ...any) {
		t.Helper()
		if err := rdb.Do(context.Background(), append([]any{"ACL", "SETUSER", user}, rules...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	acl("on", ">"+password, "~*", "+@all")
	refuse := func(on bool) {
		t.Helper()
		if on {
			acl("-evalsha", "-eval")
		} else {
			acl("+evalsha", "+eval")
		}
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	tc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()

	const model, slots = "m", 4
	cfg := &inference.ModelConfig{Name: model, MaxBatchSize: slots, SchedulingChoice: &inference.ModelConfig_SequenceBatching{
		SequenceBatching: &inference.ModelSequenceBatching{MaxSequenceIdleMicroseconds: 60_000_000}}}
	const key = "m.1"

	// router starts a router and waits until it serves the model.
	type running struct {
		s    *Service
		stop func()
	}
	router := func(id string) running {
		t.Helper()
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		// A long lease: Redis's restart must not make it lapse.
		s, err := New(Config{Conn: nc, ID: id, RedisURL: "redis://" + rdb.Options().Addr + "/0",
			RedisAuth: redisconn.Options{User: user, Password: password}, LeaseTTL: time.Minute, PullHold: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		stop := func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("router %s: %v", id, err)
			}
			nc.Close()
		}
		<-s.Ready()
		claim, _ := proto.Marshal(&busv1.SequencePull{ExecutorId: "e1", Generation: 1, Instances: 1, Config: cfg})
		if !waitUntil(func() bool {
			_ = tc.Publish(bus.SequenceClaimSubject(model, "1"), claim)
			return len(s.Serving()) == 1
		}) {
			stop()
			t.Fatalf("router %s did not take the model", id)
		}
		return running{s, stop}
	}

	// send sends a gateway's request and returns its reply inbox.
	send := func(id uint64, start, end bool) *nats.Subscription {
		t.Helper()
		inbox := nats.NewInbox()
		sub, err := tc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := proto.Marshal(&busv1.SequenceRequest{Id: seqbatch.UintID(id).Proto(), Start: start, End: end})
		if err := tc.PublishMsg(&nats.Msg{Subject: bus.SequenceInferSubject(model, "1"), Reply: inbox, Data: body}); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	// pull is the executor's instance asking for its next batch, reporting
	// the last one done.
	var last uint64
	pull := func() *busv1.SequenceBatch {
		t.Helper()
		req, _ := proto.Marshal(&busv1.SequencePull{ExecutorId: "e1", Generation: 1, Instances: 1, DoneBatch: last})
		inbox := nats.NewInbox()
		sub, err := tc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := tc.PublishRequest(bus.SequencePullSubject(model, "1"), inbox, req); err != nil {
			t.Fatal(err)
		}
		var msg *nats.Msg
		for msg == nil || msg.Header.Get(bus.HeaderAlive) != "" { // the bus's liveness messages
			if msg, err = sub.NextMsg(10 * time.Second); err != nil {
				t.Fatalf("pull: %v", err)
			}
		}
		if e := msg.Header.Get(bus.HeaderError); e != "" {
			t.Fatalf("pull answered %q", e)
		}
		var b busv1.SequenceBatch
		if err := proto.Unmarshal(msg.Data, &b); err != nil {
			t.Fatal(err)
		}
		if b.GetBatchId() != 0 {
			last = b.GetBatchId()
		}
		return &b
	}
	// runs describes a batch as "slot:id[S][E][R]" for each request.
	runs := func(b *busv1.SequenceBatch) string {
		var parts []string
		for _, w := range b.GetWork() {
			if w.GetPadding() {
				continue
			}
			p := strconv.Itoa(int(w.GetSlot())) + ":" + seqbatch.FromProto(w.GetId()).Key()
			if w.GetStart() {
				p += "S"
			}
			if w.GetEnd() {
				p += "E"
			}
			if w.GetResume() {
				p += "R"
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, " ")
	}
	wantRuns := func(b *busv1.SequenceBatch, first uint64, flags string) {
		t.Helper()
		var want []string
		for i := range slots {
			want = append(want, strconv.Itoa(i)+":"+seqbatch.UintID(first+uint64(i)).Key()+flags)
		}
		if got := runs(b); got != strings.Join(want, " ") {
			t.Fatalf("batch runs %q, want %q", got, strings.Join(want, " "))
		}
	}
	// noAnswer checks that the router did not answer (the executor
	// does); the bus's liveness messages do not count.
	noAnswer := func(subs []*nats.Subscription) {
		t.Helper()
		for _, sub := range subs {
			for {
				m, err := sub.NextMsg(0)
				if err != nil {
					break
				}
				if m.Header.Get(bus.HeaderAlive) == "" {
					t.Fatalf("the router answered %s: %q", sub.Subject, m.Header.Get(bus.HeaderError))
				}
			}
		}
	}
	// queued waits until the router holds n requests, none answered.
	queued := func(s *Service, n int, subs []*nats.Subscription) {
		t.Helper()
		m := s.model(model, "1")
		if !waitUntil(func() bool {
			noAnswer(subs)
			m.lock()
			defer m.unlock()
			return m.core != nil && m.core.Snapshot().Queued == n
		}) {
			t.Fatalf("the model never held %d requests", n)
		}
	}

	r1 := router("r1")
	const a, b = 1, 101 // sequences a..a+3 and b..b+3
	var bs []*nats.Subscription
	for i := range uint64(slots) {
		send(a+i, true, false)
	}
	queued(r1.s, slots, nil)
	wantRuns(pull(), a, "S") // the instance's first pull adds its slots
	for i := range uint64(slots) {
		bs = append(bs, send(b+i, true, false))
	}
	waitBacklog(t, r1.s, model, slots)
	for i := range uint64(slots) {
		send(a+i, false, true)
	}
	queued(r1.s, slots+slots, bs)

	refuse(true)
	wantRuns(pull(), a, "E") // B cannot be bound to the freed slots
	// A's ENDs are answered (their unbinds fail); B must not run while
	// the store does not have them.
	if got := runs(pull()); got != "" {
		t.Fatalf("ran %q while the store could not record the sequences' bindings", got)
	}
	noAnswer(bs)

	refuse(false)
	var got *busv1.SequenceBatch
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		if got = pull(); runs(got) != "" {
			break
		}
	}
	wantRuns(got, b, "S")
	bound, backlog, err := (&redisStore{rdb: rdb, opTimeout: 5 * time.Second}).load(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(bound) != slots || len(backlog) != 0 {
		t.Fatalf("the store holds bound %v backlog %v, want sequences %d..%d bound", bound, backlog, b, b+slots-1)
	}
	for i := range uint64(slots) {
		if ref := bound[seqbatch.UintID(b+i)]; ref.Slot != int(i) || ref.Instance.Executor != "e1" {
			t.Fatalf("the store holds bound %v, want sequence %d in slot %d", bound, b+i, i)
		}
	}

	// Takeover: r2 restores B where they run; their next requests run
	// there (no START error, no other slot).
	r1.stop()
	r2 := router("r2")
	defer func() {
		if r2.stop != nil {
			r2.stop()
		}
	}()
	bs = bs[:0]
	for i := range uint64(slots) {
		bs = append(bs, send(b+i, false, false))
	}
	queued(r2.s, slots, bs)
	wantRuns(pull(), b, "")
	noAnswer(bs)

	// A START waiting in the backlog when the router steps down is
	// refused as not run.
	c := send(200, true, false)
	waitBacklog(t, r2.s, model, 1)
	r2.stop()
	r2.stop = nil
	var m *nats.Msg
	for m == nil || m.Header.Get(bus.HeaderAlive) != "" {
		if m, err = c.NextMsg(10 * time.Second); err != nil {
			t.Fatalf("the backlogged START was not answered when the router stepped down: %v", err)
		}
	}
	if e := m.Header.Get(bus.HeaderError); !strings.HasPrefix(e, "not taken: ") || !strings.HasSuffix(e, "the request was not run") {
		t.Fatalf("the backlogged START was answered %q, want it refused as not run", e)
	}
}
