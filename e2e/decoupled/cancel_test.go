package decoupled

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/pkg/bus"
)

// A decoupled sequence model's requests are cancelled in the router as a
// stateless model's are in the executor: closing the stream of a sequence
// waiting in the router's backlog cancels its requests there (none reaches
// the backend), and closing the stream of the sequence that is running
// still reaches its backend on the executor.
//
// sequence_repeat_one has one slot. The router's delay hooks hold the
// first batch until one request waits in a slot and two in the backlog, so
// sequence 1's first response arrives only once both requests of sequence
// 2 are in the backlog.
func TestDecoupledSequenceCancel(t *testing.T) {
	const model = "sequence_repeat_one"
	e := &env{c: constellation.NewCluster(t), repo: constellation.RepoPath(t, "e2e/decoupled/testdata/model_repository")}
	redis, _ := constellation.Redis(t)
	t.Setenv("TRITONSERVER_DELAY_SCHEDULER", "1") // read by the router only
	t.Setenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", "2")
	router := constellation.Start(t, "router", e.c.Bin.Path("nereid-sequence-router"),
		"--nats-url", e.c.NATSURL, "--redis-url", redis, "--id", "router0", "--log-verbose", "1")
	e.execs = append(e.execs, e.c.Executor(e.repo, "exec0", "--load-model", model))
	e.g = e.c.Gateway()
	if !waitFor(func() bool {
		r, err := http.Get(e.g.HTTP() + "/v2/models/" + model + "/ready")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	}) {
		t.Fatalf("model %s not ready\n%s", model, e.execs[0].Output())
	}
	logged := func(what string) bool {
		return waitFor(func() bool { return strings.Contains(router.Output(), what) })
	}
	// placed: the router put the sequence's START in a slot or the backlog.
	placed := func(id string) bool {
		return waitFor(func() bool {
			for _, l := range strings.Split(router.Output(), "\n") {
				if (strings.Contains(l, `msg="sequence takes a slot"`) || strings.Contains(l, `msg="sequence waits in the backlog"`)) &&
					strings.Contains(l, " sequence=u:"+id+" ") {
					return true
				}
			}
			return false
		})
	}
	// Another process that learns the reply subjects of the sequence's
	// requests (here: a connection with the router's rights, which sees
	// them arrive) but not their cancellation keys.
	spy := e.c.ConnectAs(bus.RoleSequenceRouter)
	replies, err := spy.SubscribeSync(bus.SequenceInferSubject(model, "1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	c := grpcClient(t, e.g.GRPC())
	open := func() (inference.GRPCInferenceService_ModelStreamInferClient, func()) {
		ctx, cancel := context.WithCancel(testCtx(t))
		s, err := c.ModelStreamInfer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cancel)
		return s, cancel
	}
	send := func(s inference.GRPCInferenceService_ModelStreamInferClient, rs ...*inference.ModelInferRequest) {
		for _, r := range rs {
			if err := s.Send(r); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Sequence 1 takes the slot (its START may wait in the backlog until
	// the executor's instance has pulled): its first response, then it
	// waits a minute before the second.
	s1, cancel1 := open()
	send(s1, seqRequestFor(model, "a", 1, true, false, []int32{1, 2}, 60_000))
	if !placed("1") {
		t.Fatal("sequence 1 did not start")
	}
	s2, cancel2 := open()
	send(s2, seqRequestFor(model, "b", 2, true, false, []int32{10}, 0), seqRequestFor(model, "c", 2, false, true, []int32{20}, 0))
	r, err := s1.Recv()
	if err != nil || r.GetErrorMessage() != "" || outInt32(t, r.GetInferResponse(), "OUT") != 1 {
		t.Fatalf("sequence 1's first response: %v %v", r, err)
	}

	// Sequence 2's client goes away while both its requests wait.
	cancel2()
	if !logged(`msg="sequence cancelled by its client in the backlog"`) {
		t.Fatal("the router did not cancel the backlogged sequence")
	}
	if _, err := s2.Recv(); err == nil {
		t.Fatal("the cancelled stream received a response")
	}

	// Sequence 1's client goes away: its backend ends the request (a final
	// flag alone) instead of waiting out its minute.
	empty := func() float64 {
		rs, _ := statistics(t, e.g.HTTP(), model)["response_stats"].(map[string]any)
		at, _ := rs["1"].(map[string]any)
		k, _ := at["empty_response"].(map[string]any)
		n, _ := k["count"].(float64)
		return n
	}
	before := empty()
	// Cancellations of sequence 1's running request without its key (none,
	// a wrong one) from another connection: neither the router nor the
	// executor running it follows them.
	m, err := replies.NextMsg(10 * time.Second)
	if err != nil || m.Reply == "" {
		t.Fatalf("sequence 1's request not seen: %v", err)
	}
	forger := e.c.ConnectAs(bus.RoleGateway)
	for _, c := range []string{m.Reply, m.Reply + " 1", m.Reply + " deadbeefdeadbeef"} {
		if err := forger.Publish(bus.CancelSubject, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	if err := forger.Flush(); err != nil {
		t.Fatal(err)
	}
	// The statistics can take a few seconds to show a cancellation.
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if n := empty(); n != before {
			t.Fatalf("a cancellation without the request's key reached the running request's backend (empty responses %v -> %v)", before, n)
		}
	}
	cancel1()
	if !waitFor(func() bool { return empty() > before }) {
		t.Fatal("the running request's backend did not see the cancellation")
	}
	// Only sequence 1's request ever executed.
	st := statistics(t, e.g.HTTP(), model)
	if n, _ := st["execution_count"].(float64); n != 1 {
		t.Fatalf("execution_count %v, want 1: a cancelled request ran (%v)", st["execution_count"], st)
	}
}
