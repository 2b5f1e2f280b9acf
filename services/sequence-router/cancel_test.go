package seqrouter

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/seqbatch"
)

// The router follows the gateway's cancellations (bus.CancelSubject) of
// the requests it holds. The test plays the gateway and the executor over
// a real NATS server: a sequence's request in the backlog fails with
// CANCELLED at once, a request cancelled while it waited for its turn on
// its stream ends its sequence when it reaches the batcher, and the
// cancellation of a request already handed to the executor is published
// again for it.
func TestCancelFollowed(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := New(Config{Conn: nc, PullHold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		stop()
		<-done
	}()
	<-s.Ready()

	// The test's own connection: gateway, executor, and a listener on
	// the cancellations.
	tc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	cancels, err := tc.SubscribeSync(bus.CancelSubject)
	if err != nil {
		t.Fatal(err)
	}

	const model = "m"
	cfg := &inference.ModelConfig{Name: model, SchedulingChoice: &inference.ModelConfig_SequenceBatching{
		SequenceBatching: &inference.ModelSequenceBatching{MaxSequenceIdleMicroseconds: 60_000_000}}}
	pull := &busv1.SequencePull{ExecutorId: "e1", Generation: 1, Instances: 1, Config: cfg}
	claim, _ := proto.Marshal(pull)
	if !waitUntil(func() bool {
		_ = tc.Publish(bus.SequenceClaimSubject(model, "1"), claim)
		for _, k := range s.Serving() {
			if k == modelKey(model, "1") {
				return true
			}
		}
		return false
	}) {
		t.Fatal("the router did not take the model")
	}

	// send sends a gateway's request and returns its reply inbox.
	send := func(r *busv1.SequenceRequest, header ...string) *nats.Subscription {
		t.Helper()
		inbox := nats.NewInbox()
		sub, err := tc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := proto.Marshal(r)
		msg := &nats.Msg{Subject: bus.SequenceInferSubject(model, "1"), Reply: inbox, Data: body}
		if len(header) == 2 {
			msg.Header = nats.Header{header[0]: {header[1]}}
		}
		if err := tc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	id := func(v uint64) *busv1.CorrelationId { return seqbatch.UintID(v).Proto() }
	cancelled := func(sub *nats.Subscription, want string) {
		t.Helper()
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		if kind := m.Header.Get(bus.HeaderErrorKind); kind != "CANCELLED" || !strings.Contains(m.Header.Get(bus.HeaderError), want) {
			t.Fatalf("answer %v, want CANCELLED with %q", m.Header, want)
		}
	}
	cancel := func(sub *nats.Subscription) {
		if err := tc.Publish(bus.CancelSubject, []byte(sub.Subject)); err != nil {
			t.Fatal(err)
		}
	}

	// Sequence 1 takes the only slot and goes to the executor, with its
	// cancellation key.
	const key = 0x1234abcd
	a := send(&busv1.SequenceRequest{Id: id(1), Start: true}, bus.HeaderKey, "1234abcd")
	pull.Config = nil
	preq, _ := proto.Marshal(pull)
	reply, err := tc.Request(bus.SequencePullSubject(model, "1"), preq, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var batch busv1.SequenceBatch
	if err := proto.Unmarshal(reply.Data, &batch); err != nil || len(batch.GetWork()) != 1 || batch.GetWork()[0].GetReply() != a.Subject ||
		batch.GetWork()[0].GetCancelKey() != key {
		t.Fatalf("batch %v %v, want sequence 1's START with its key", &batch, err)
	}

	// Sequence 2 waits in the backlog; its cancellation fails it at once.
	b := send(&busv1.SequenceRequest{Id: id(2), Start: true})
	waitBacklog(t, s, model, 1)
	cancel(b)
	cancelled(b, "sequence 2 to model 'm' was cancelled")
	waitBacklog(t, s, model, 0)

	// Sequence 3's second request on a stream arrives first and waits for
	// the first; cancelled meanwhile, it is answered at once, and when the
	// START arrives the sequence (in the backlog) is cancelled as a whole.
	c2 := send(&busv1.SequenceRequest{Id: id(3), Stream: "s", StreamSeq: 2})
	cancel(c2)
	cancelled(c2, "sequence 3 to model 'm' was cancelled")
	c1 := send(&busv1.SequenceRequest{Id: id(3), Start: true, Stream: "s", StreamSeq: 1})
	cancelled(c1, "another request of the sequence was cancelled")
	waitBacklog(t, s, model, 0)

	// Sequence 1's request runs on the executor: a cancellation without
	// its key is not followed (not forwarded); its own is heard there, and
	// published again by the router with the key, which the executor
	// requires.
	cancel(a)
	withKey := a.Subject + " 1234abcd"
	if err := tc.Publish(bus.CancelSubject, []byte(withKey)); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for seen < 2 {
		m, err := cancels.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("the router did not forward the cancellation of the running request with its key (%d seen)", seen)
		}
		switch string(m.Data) {
		case withKey:
			seen++
		case a.Subject:
		default:
			if strings.HasPrefix(string(m.Data), a.Subject) {
				t.Fatalf("cancellation forwarded as %q, want %q", m.Data, withKey)
			}
		}
	}
	if m, err := cancels.NextMsg(300 * time.Millisecond); err == nil && strings.HasPrefix(string(m.Data), a.Subject) {
		t.Fatalf("cancellation %q forwarded more than once", m.Data)
	}
}

func waitUntil(cond func() bool) bool {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// waitBacklog waits until the model's backlog holds n sequences.
func waitBacklog(t *testing.T, s *Service, model string, n int) {
	t.Helper()
	m := s.model(model, "1")
	if !waitUntil(func() bool {
		m.lock()
		defer m.unlock()
		return m.core.Snapshot().Backlog == n
	}) {
		t.Fatalf("the backlog never held %d sequences", n)
	}
}
