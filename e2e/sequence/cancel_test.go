package sequence

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// A client that cancels a request waiting in the router's backlog cancels
// its sequence there, as Triton's sequence batcher does: every request of
// the backlogged sequence fails with CANCELLED, none reaches the backend,
// the sequence's next request needs START again, and the sequence holding
// the slot goes on unharmed.
//
// seq_cancel has one slot. The delay hooks hold the first batch until one
// request waits in a slot and two in the backlog, so sequence 1's START
// returns only once both requests of sequence 2 are in the backlog: the
// cancellation reaches a request the router is known to hold.
func TestCancelQueuedInBacklog(t *testing.T) {
	const model = "seq_cancel"
	e := start(t, opts{models: []string{model},
		routerEnv:  []string{"TRITONSERVER_DELAY_SCHEDULER=1", "TRITONSERVER_BACKLOG_DELAY_SCHEDULER=2"},
		routerArgs: []string{"--log-verbose", "1"}})
	c := grpcClient(t, e.g.GRPC())
	type result struct {
		v   int32
		err error
	}
	call := func(ctx context.Context, r *inference.ModelInferRequest) <-chan result {
		ch := make(chan result, 1)
		go func() {
			resp, err := c.ModelInfer(ctx, r)
			if err != nil {
				ch <- result{err: err}
				return
			}
			ch <- result{v: output(resp)}
		}()
		return ch
	}
	infer := func(id uint64, value int32, start, end bool) (int32, error) {
		r := <-call(ctx(t), grpcRequest(model, "", id, value, start, end))
		return r.v, r.err
	}

	a1 := call(ctx(t), grpcRequest(model, "a1", uint64(1), 1, true, false))
	if !e.placed([]uint64{1}) {
		t.Fatal("sequence 1 did not start")
	}
	b1 := call(ctx(t), grpcRequest(model, "b1", uint64(2), 10, true, false))
	if !e.placed([]uint64{1, 2}) {
		t.Fatal("sequence 2 did not reach the backlog")
	}
	bctx, cancelB := context.WithCancel(ctx(t))
	defer cancelB()
	b2 := call(bctx, grpcRequest(model, "b2", uint64(2), 20, false, false))
	if r := <-a1; r.err != nil || r.v != 2 {
		t.Fatalf("sequence 1 START: %d %v", r.v, r.err)
	}

	cancelB()
	if r := <-b2; status.Code(r.err) != codes.Canceled {
		t.Fatalf("the cancelled request: %d %v, want CANCELLED", r.v, r.err)
	}
	// The server cancels the rest of the sequence: the START it held.
	r := <-b1
	if st := status.Convert(r.err); st.Code() != codes.Canceled || !strings.Contains(st.Message(), "sequence 2 to model 'seq_cancel' was cancelled") {
		t.Fatalf("sequence 2 START after the cancellation: %d %v, want CANCELLED", r.v, r.err)
	}
	// The router answered before its log line reached the test's pipe.
	if !constellation.WaitFor(10*time.Second, func() bool {
		return strings.Contains(e.routers[0].Output(), "sequence cancelled by its client in the backlog")
	}) {
		t.Fatal("the router did not log the cancellation")
	}
	_, err := infer(2, 30, false, false)
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "must specify the START flag") ||
		!strings.Contains(st.Message(), "the sequence was cancelled") {
		t.Fatalf("sequence 2 continued after its cancellation: %v", err)
	}

	// Sequence 1 goes on, then sequence 2 starts again in the freed slot.
	for _, s := range []struct {
		id         uint64
		in, want   int32
		start, end bool
	}{{1, 5, 5, false, false}, {1, 6, 6, false, true}, {2, 7, 8, true, false}, {2, 9, 9, false, true}} {
		if v, err := infer(s.id, s.in, s.start, s.end); err != nil || v != s.want {
			t.Fatalf("sequence %d, INPUT %d: %d %v, want %d", s.id, s.in, v, err, s.want)
		}
	}
	// The backend ran the five others, never the two cancelled ones.
	if exec, inf, _ := stats(t, e.g.HTTP(), model); exec != 5 || inf != 5 {
		t.Fatalf("statistics: execution_count %d inference_count %d, want 5 and 5", exec, inf)
	}
}
