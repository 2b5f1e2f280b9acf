package sequence

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// The sequence router's limits (model parameters nereid_max_sequence_backlog
// and nereid_sequence_queue_timeout_microseconds, docs/scheduling.md
// "Sequences") hold for the whole cluster: the router serving a model
// enforces them, and the router taking over from it keeps them, the
// backlog it restores from Redis included. Each is checked over HTTP and
// gRPC with its exact status and message.

// grpcResult is the answer to a gRPC request sent in the background.
type grpcResult struct {
	v   int32
	err error
}

// grpcAsync sends r in the background.
func grpcAsync(c inference.GRPCInferenceServiceClient, ctx context.Context, r *inference.ModelInferRequest) <-chan grpcResult {
	ch := make(chan grpcResult, 1)
	go func() {
		resp, err := c.ModelInfer(ctx, r)
		if err != nil {
			ch <- grpcResult{err: err}
			return
		}
		ch <- grpcResult{v: output(resp)}
	}()
	return ch
}

// httpResult is the answer to an HTTP request sent in the background, and
// how long it took.
type httpResult struct {
	v, code int
	msg     string
	took    time.Duration
}

func httpAsync(t *testing.T, base, model string, id uint64, value int32, start, end bool, extra map[string]any) <-chan httpResult {
	ch := make(chan httpResult, 1)
	go func() {
		t0 := time.Now()
		v, code, msg := httpInfer(t, base, model, id, value, start, end, extra)
		ch <- httpResult{int(v), code, msg, time.Since(t0)}
	}()
	return ch
}

// withTimeout adds the request's timeout parameter (microseconds) to a
// gRPC request.
func withTimeout(r *inference.ModelInferRequest, us int64) *inference.ModelInferRequest {
	r.Parameters["timeout"] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: us}}
	return r
}

// placedAnywhere waits until a router (any of them: the one serving the
// model changes in these tests) has logged where the START of sequence id
// went, n times in all.
func (e *env) placedAnywhere(id uint64, n int) bool {
	return constellation.WaitFor(20*time.Second, func() bool {
		got := 0
		for _, r := range e.routers {
			for _, line := range strings.Split(r.Output(), "\n") {
				if (strings.Contains(line, `msg="sequence takes a slot"`) || strings.Contains(line, `msg="sequence waits in the backlog"`)) &&
					strings.Contains(line, " sequence=u:"+strconv.FormatUint(id, 10)+" ") {
					got++
				}
			}
		}
		return got >= n
	})
}

// rejectedAfter waits until the constellation's metrics count want
// failures of model with reason REJECTED (a full backlog's refusals and
// timeouts, counted by the router serving the model), and fails the test
// with the count seen otherwise.
func (e *env) rejectedAfter(t *testing.T, model string, want int) {
	t.Helper()
	got := "none"
	if !constellation.WaitFor(10*time.Second, func() bool {
		resp, err := http.Get(e.g.Metrics() + "/constellation")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		page, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(page), "\n") {
			if strings.HasPrefix(line, "nv_inference_request_failure{") && strings.Contains(line, `model="`+model+`"`) &&
				strings.Contains(line, `reason="REJECTED"`) {
				got = line[strings.LastIndexByte(line, ' ')+1:]
				return got == strconv.Itoa(want)
			}
		}
		return false
	}) {
		t.Fatalf("nv_inference_request_failure{model=%q,reason=\"REJECTED\"} is %s, want %d", model, got, want)
	}
}

// wantGRPC checks a gRPC error's code and exact message.
func wantGRPC(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	if st := status.Convert(err); err == nil || st.Code() != code || st.Message() != msg {
		t.Fatalf("%s: %v, want %v %q", what, err, code, msg)
	}
}

// wantHTTP checks an HTTP answer's status and exact error.
func wantHTTP(t *testing.T, what string, code int, msg string, wantCode int, wantMsg string) {
	t.Helper()
	if code != wantCode || msg != wantMsg {
		t.Fatalf("%s: %d %q, want %d %q", what, code, msg, wantCode, wantMsg)
	}
}

// seq_backlog has one slot and nereid_max_sequence_backlog 1. With sequence
// 1 in the slot and sequence 2 waiting in the backlog, a third START is
// refused with UNAVAILABLE (HTTP 503, gRPC UNAVAILABLE) and Triton's words
// for a full queue, over HTTP and gRPC. The router serving the model is
// killed: the one taking over restores the backlog from Redis (sequence
// 2, whose START its gateway sends again) and refuses a new START the
// same way. Sequence 1's END frees the slot for sequence 2; the refused
// STARTs never ran.
func TestBacklogBoundAcrossRouters(t *testing.T) {
	const model = "seq_backlog"
	e := start(t, opts{routers: 2, models: []string{model}, routerArgs: []string{"--log-verbose", "1"}})
	h, c := e.g.HTTP(), grpcClient(t, e.g.GRPC())
	full := func(id uint64) string {
		return fmt.Sprintf("Exceeds maximum queue size: the sequence backlog of model '%s' is full (max sequence backlog 1); sequence %d was not started", model, id)
	}
	grpcStart := func(id uint64, v int32) error {
		_, err := c.ModelInfer(ctx(t), grpcRequest(model, "", id, v, true, false))
		return err
	}

	if v, code, msg := httpInfer(t, h, model, uint64(1), 1, true, false, nil); code != 200 || v != 2 {
		t.Fatalf("sequence 1 START: %d %d %s", code, v, msg)
	}
	seq2 := grpcAsync(c, ctx(t), grpcRequest(model, "", uint64(2), 10, true, false))
	if !e.placedAnywhere(2, 1) {
		t.Fatal("sequence 2 did not reach the backlog")
	}
	_, code, msg := httpInfer(t, h, model, uint64(3), 1, true, false, nil)
	wantHTTP(t, "HTTP START beyond the bound", code, msg, 503, full(3))
	wantGRPC(t, "gRPC START beyond the bound", grpcStart(4, 1), codes.Unavailable, full(4))

	old := e.activeRouter(t, nil)
	e.routers[old].Kill()
	next := e.activeRouter(t, map[int]bool{old: true})
	t.Logf("router %d took the model over from router %d", next, old)

	_, code, msg = httpInfer(t, h, model, uint64(5), 1, true, false, nil)
	wantHTTP(t, "HTTP START beyond the bound after the takeover", code, msg, 503, full(5))
	wantGRPC(t, "gRPC START beyond the bound after the takeover", grpcStart(6, 1), codes.Unavailable, full(6))
	if !strings.Contains(e.routers[next].Output(), "restored sequences") {
		t.Fatalf("the router taking over did not restore the sequences from the store:\n%s", e.routers[next].Output())
	}
	// The router serving the model now counts its two refusals.
	e.rejectedAfter(t, model, 2)
	select {
	case r := <-seq2:
		t.Fatalf("sequence 2 ran before a slot was free: %d %v", r.v, r.err)
	default:
	}

	// Sequence 1 ends; sequence 2 takes the slot and runs, then ends; a
	// new START is accepted again.
	if v, code, msg := httpInfer(t, h, model, uint64(1), 3, false, true, nil); code != 200 || v != 3 {
		t.Fatalf("sequence 1 END: %d %d %s", code, v, msg)
	}
	select {
	case r := <-seq2:
		if r.err != nil || r.v != 11 {
			t.Fatalf("sequence 2 START from the backlog: %d %v, want 11", r.v, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("sequence 2 did not leave the backlog")
	}
	if v, code, msg := httpInfer(t, h, model, uint64(2), 4, false, true, nil); code != 200 || v != 4 {
		t.Fatalf("sequence 2 END: %d %d %s", code, v, msg)
	}
	if r, err := c.ModelInfer(ctx(t), grpcRequest(model, "", uint64(3), 5, true, true)); err != nil || output(r) != 6 {
		t.Fatalf("sequence 3 once the backlog has room: %v", err)
	}
	if exec, inf, _ := stats(t, h, model); exec != 5 || inf != 5 {
		t.Fatalf("statistics: execution_count %d inference_count %d, want 5 and 5 (no refused START ran)", exec, inf)
	}
}

// seq_timeout has one slot, nereid_sequence_queue_timeout_microseconds
// 1000000 and executions of 1.5 s. While sequence 1's START executes:
//
//   - sequence 1's next request waits in its slot past the timeout: 503
//     (HTTP) naming the model, the sequence and the timeout; the sequence
//     ends, and its next request needs START again, saying why;
//   - sequence 2's START waits in the backlog past it (gRPC UNAVAILABLE):
//     the sequence is not started;
//   - sequences 3 (HTTP parameters.timeout) and 4 (gRPC timeout
//     parameter) wait in the backlog with a timeout of their own, 300 ms,
//     which shortens the model's.
//
// Then, with sequence 5 in the slot, the router serving the model is
// killed while sequence 6 waits in the backlog: the router taking over
// times it out in its turn. Only the two STARTs that got the slot ran.
func TestQueueTimeoutAcrossRouters(t *testing.T) {
	const model = "seq_timeout"
	e := start(t, opts{routers: 2, models: []string{model}, routerArgs: []string{"--log-verbose", "1"}})
	h, c := e.g.HTTP(), grpcClient(t, e.g.GRPC())
	const byModel = "the model's timeout of 1000000 microseconds (nereid_sequence_queue_timeout_microseconds)"
	backlog := func(id uint64, by string) string {
		return fmt.Sprintf("Request timeout expired: sequence %d of model '%s' waited in the sequence backlog for a free slot past %s; the sequence was not started and none of its requests ran", id, model, by)
	}
	noStart := func(id uint64, why string) string {
		return fmt.Sprintf("inference request for sequence %d to model '%s' must specify the START flag on the first request of the sequence: %s", id, model, why)
	}

	seq1 := grpcAsync(c, ctx(t), grpcRequest(model, "", uint64(1), 1, true, false))
	if !e.placedAnywhere(1, 1) {
		t.Fatal("sequence 1 did not start")
	}
	time.Sleep(100 * time.Millisecond) // its START leaves for the executor
	// Sequence 2 first: it times out before sequence 1's request, whose
	// timeout frees the slot, could hand it the slot.
	seq2 := grpcAsync(c, ctx(t), grpcRequest(model, "", uint64(2), 10, true, false))
	if !e.placedAnywhere(2, 1) {
		t.Fatal("sequence 2 did not reach the backlog")
	}
	seq1b := httpAsync(t, h, model, 1, 2, false, false, nil)
	seq3 := httpAsync(t, h, model, 3, 1, true, false, map[string]any{"timeout": 300000})
	seq4 := grpcAsync(c, ctx(t), withTimeout(grpcRequest(model, "", uint64(4), 1, true, false), 300000))

	r3 := <-seq3
	wantHTTP(t, "HTTP START with its own timeout", r3.code, r3.msg, 503, backlog(3, "the request's timeout of 300000 microseconds"))
	if r3.took < 300*time.Millisecond || r3.took >= time.Second {
		t.Fatalf("sequence 3 failed after %v, want its own 300 ms (not the model's 1 s)", r3.took)
	}
	wantGRPC(t, "gRPC START with its own timeout", (<-seq4).err, codes.Unavailable, backlog(4, "the request's timeout of 300000 microseconds"))
	r1b := <-seq1b
	wantHTTP(t, "HTTP request queued in its slot", r1b.code, r1b.msg, 503, fmt.Sprintf(
		"Request timeout expired: inference request for sequence 1 to model '%s' waited for its turn in the sequence's batch slot past %s; the request was not run and the sequence ended", model, byModel))
	if r1b.took < time.Second {
		t.Fatalf("sequence 1's request failed after %v, before the model's timeout of 1 s", r1b.took)
	}
	wantGRPC(t, "gRPC START in the backlog", (<-seq2).err, codes.Unavailable, backlog(2, byModel))
	if r := <-seq1; r.err != nil || r.v != 2 {
		t.Fatalf("sequence 1 START: %d %v", r.v, r.err)
	}
	_, code, msg := httpInfer(t, h, model, uint64(1), 3, false, false, nil)
	wantHTTP(t, "HTTP sequence 1 after its request timed out", code, msg, 400, noStart(1, "a request of the sequence timed out in the sequence router"))
	_, err := c.ModelInfer(ctx(t), grpcRequest(model, "", uint64(2), 3, false, false))
	wantGRPC(t, "gRPC sequence 2 after its START timed out", err, codes.InvalidArgument, noStart(2, "the sequence timed out in the sequence backlog before it started"))

	// The router taking over keeps the timeout.
	if r, err := c.ModelInfer(ctx(t), grpcRequest(model, "", uint64(5), 1, true, false)); err != nil || output(r) != 2 {
		t.Fatalf("sequence 5 START: %v", err)
	}
	seq6 := grpcAsync(c, ctx(t), grpcRequest(model, "", uint64(6), 1, true, false))
	seq7 := httpAsync(t, h, model, 7, 1, true, false, nil)
	if !e.placedAnywhere(6, 1) || !e.placedAnywhere(7, 1) {
		t.Fatal("sequences 6 and 7 did not reach the backlog")
	}
	old := e.activeRouter(t, nil)
	e.routers[old].Kill()
	next := e.activeRouter(t, map[int]bool{old: true})
	wantGRPC(t, "gRPC START in the backlog across the takeover", (<-seq6).err, codes.Unavailable, backlog(6, byModel))
	r7 := <-seq7
	wantHTTP(t, "HTTP START in the backlog across the takeover", r7.code, r7.msg, 503, backlog(7, byModel))
	if !strings.Contains(e.routers[next].Output(), `msg="sequence timed out in the backlog"`) {
		t.Fatalf("the router taking over did not time the sequences out:\n%s", e.routers[next].Output())
	}
	e.rejectedAfter(t, model, 2)
	_, code, msg = httpInfer(t, h, model, uint64(7), 3, false, false, nil)
	wantHTTP(t, "HTTP sequence 7 after the takeover", code, msg, 400, noStart(7, "the sequence timed out in the sequence backlog before it started"))
	// Sequence 5 goes on with the router taking over.
	if v, code, msg := httpInfer(t, h, model, uint64(5), 4, false, true, nil); code != 200 || v != 4 {
		t.Fatalf("sequence 5 END after the takeover: %d %d %s", code, v, msg)
	}
	if exec, inf, _ := stats(t, h, model); exec != 3 || inf != 3 {
		t.Fatalf("statistics: execution_count %d inference_count %d, want 3 and 3 (no timed-out request ran)", exec, inf)
	}
}
