// Package decoupled tests decoupled models through the constellation as
// real processes: Triton's qa/L0_decoupled cases over gRPC ModelStreamInfer
// with the repeat and square example models, and the generate extension
// (qa/L0_http generate endpoint tests) with the words model, plus
// cancellation, a lost executor and a slow reader.
package decoupled

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/pkg/bus"
)

// TestDecoupled runs the cases that leave the constellation intact on one
// constellation with two executors.
func TestDecoupled(t *testing.T) {
	e := start(t, 2)
	for _, tc := range []struct {
		name string
		f    func(*testing.T, *env)
	}{
		{"Repeat", testRepeat},
		{"RepeatInterleaved", testRepeatInterleaved},
		{"Square", testSquare},
		{"NoStreaming", testNoStreaming},
		{"ErrorsKeepStreamOpen", testErrorsKeepStreamOpen},
		{"ConcurrentStreams", testConcurrentStreams},
		{"Generate", testGenerate},
		{"GenerateStream", testGenerateStream},
		{"GenerateErrors", testGenerateErrors},
		{"Statistics", testStatistics},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, e) })
	}
}

// collect reads a stream's responses until every request id has its final
// response (with triton_enable_empty_final_response) or until want
// responses in all have come.
func collect(t *testing.T, stream inference.GRPCInferenceService_ModelStreamInferClient, finals, want int) (map[string][]*inference.ModelStreamInferResponse, []string) {
	t.Helper()
	got := map[string][]*inference.ModelStreamInferResponse{}
	var order []string
	n, f := 0, 0
	for (finals > 0 && f < finals) || (finals == 0 && n < want) {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d responses: %v", n, err)
		}
		id := r.GetInferResponse().GetId()
		got[id] = append(got[id], r)
		order = append(order, id)
		n++
		if fin, _ := isFinal(r.GetInferResponse()); fin {
			f++
		}
	}
	return got, order
}

// L0_decoupled test_one_to_none / one_to_one / one_to_many /
// one_to_multi_many / response_order, with and without the empty final
// response.
func testRepeat(t *testing.T, e *env) {
	c := grpcClient(t, e.g.GRPC())
	cases := []struct {
		name   string
		in     []int32
		delays []uint32
		wait   uint32
	}{
		{"none", nil, nil, 0},
		{"one", []int32{7}, []uint32{1}, 0},
		{"many", []int32{4, 2, 0, 1}, []uint32{1, 2, 3, 4}, 5},
		{"many, released first", []int32{10, 11, 12, 13, 14, 15}, []uint32{5, 5, 5, 5, 5, 5}, 1},
	}
	for _, emptyFinal := range []bool{true, false} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/empty_final=%v", tc.name, emptyFinal), func(t *testing.T) {
				stream, err := c.ModelStreamInfer(testCtx(t))
				if err != nil {
					t.Fatal(err)
				}
				if err := stream.Send(repeatRequest("r1", tc.in, tc.delays, tc.wait, emptyFinal)); err != nil {
					t.Fatal(err)
				}
				finals := 0
				if emptyFinal {
					finals = 1
				}
				got, _ := collect(t, stream, finals, len(tc.in))
				rs := got["r1"]
				want := len(tc.in)
				if emptyFinal {
					want++ // the empty final response
				}
				if len(rs) != want {
					t.Fatalf("%d responses, want %d", len(rs), want)
				}
				for i, v := range tc.in {
					r := rs[i].GetInferResponse()
					if rs[i].GetErrorMessage() != "" {
						t.Fatalf("response %d: %s", i, rs[i].GetErrorMessage())
					}
					if out, idx := outInt32(t, r, "OUT"), outInt32(t, r, "IDX"); out != int64(v) || idx != int64(i) {
						t.Errorf("response %d: OUT %d IDX %d, want %d %d", i, out, idx, v, i)
					}
					fin, present := isFinal(r)
					if present != emptyFinal || fin {
						t.Errorf("response %d: triton_final_response %v (present %v)", i, fin, present)
					}
					if r.GetModelName() != "repeat_int32" || r.GetModelVersion() != "1" {
						t.Errorf("response %d names %s/%s", i, r.GetModelName(), r.GetModelVersion())
					}
				}
				if emptyFinal {
					last := rs[len(rs)-1].GetInferResponse()
					if fin, _ := isFinal(last); !fin || len(last.GetOutputs()) != 0 || last.GetId() != "r1" {
						t.Errorf("empty final response: %v", last)
					}
				}
				if err := stream.CloseSend(); err != nil {
					t.Fatal(err)
				}
				if _, err := stream.Recv(); err != io.EOF {
					t.Errorf("after the last response: %v, want EOF", err)
				}
			})
		}
	}
}

// Several requests on one stream: each request's responses arrive in
// order, interleaved with the others' (L0_decoupled test_one_to_multi_many).
func testRepeatInterleaved(t *testing.T, e *env) {
	c := grpcClient(t, e.g.GRPC())
	stream, err := c.ModelStreamInfer(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	const reqs = 4
	for k := range reqs {
		in := []int32{int32(100 * k), int32(100*k + 1), int32(100*k + 2)}
		if err := stream.Send(repeatRequest(fmt.Sprint("r", k), in, []uint32{3, 3, 3}, 0, true)); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := collect(t, stream, reqs, 0)
	for k := range reqs {
		rs := got[fmt.Sprint("r", k)]
		if len(rs) != 4 {
			t.Fatalf("request %d: %d responses", k, len(rs))
		}
		for i := range 3 {
			if out := outInt32(t, rs[i].GetInferResponse(), "OUT"); out != int64(100*k+i) {
				t.Errorf("request %d response %d: OUT %d", k, i, out)
			}
		}
	}
	stream.CloseSend()
}

// square: n responses of n; n = 0 only the final flag.
func testSquare(t *testing.T, e *env) {
	c := grpcClient(t, e.g.GRPC())
	for _, n := range []int32{0, 1, 10, 300} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			stream, err := c.ModelStreamInfer(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			stream.Send(squareRequest("square_int32", "s", n, true))
			got, _ := collect(t, stream, 1, 0)
			rs := got["s"]
			if len(rs) != int(n)+1 {
				t.Fatalf("%d responses, want %d", len(rs), n+1)
			}
			for _, r := range rs[:n] {
				if out := outInt32(t, r.GetInferResponse(), "OUT"); out != int64(n) {
					t.Fatalf("OUT %d, want %d", out, n)
				}
			}
			stream.CloseSend()
		})
	}
}

// L0_decoupled test_no_streaming: unary gRPC and HTTP infer refuse a
// decoupled model with Triton's errors.
func testNoStreaming(t *testing.T, e *env) {
	c := grpcClient(t, e.g.GRPC())
	_, err := c.ModelInfer(testCtx(t), squareRequest("square_int32", "u", 3, false))
	if s, _ := status.FromError(err); s.Code() != codes.Unimplemented || s.Message() != "ModelInfer RPC doesn't support models with decoupled transaction policy" {
		t.Errorf("ModelInfer: %v", err)
	}
	r := post(t, e.g.HTTP()+"/v2/models/square_int32/infer", `{"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[3]}]}`)
	if m := jsonBody(t, r); r.StatusCode != http.StatusNotImplemented || m["error"] != "HTTP end point doesn't support models with decoupled transaction policy" {
		t.Errorf("HTTP infer: %d %v", r.StatusCode, m)
	}
}

// L0_decoupled test_wrong_shape, and errors mid-stream: a failed request
// gets error_message and the stream stays open for the next one.
func testErrorsKeepStreamOpen(t *testing.T, e *env) {
	c := grpcClient(t, e.g.GRPC())
	stream, err := c.ModelStreamInfer(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	// DELAY has fewer elements than IN: the model fails the request.
	stream.Send(repeatRequest("bad", []int32{1, 2, 3}, []uint32{1}, 0, false))
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.GetErrorMessage(), "expected DELAY to have as many elements as IN") || r.GetInferResponse().GetId() != "bad" {
		t.Errorf("wrong shape: %q %v", r.GetErrorMessage(), r.GetInferResponse())
	}
	// An input that does not match the config: refused before execution.
	bad := squareRequest("square_int32", "shape", 1, false)
	bad.Inputs[0].Shape = []int64{2}
	stream.Send(bad)
	if r, err = stream.Recv(); err != nil || !strings.Contains(r.GetErrorMessage(), "unexpected shape for input 'IN'") {
		t.Errorf("bad shape: %v %q", err, r.GetErrorMessage())
	}
	// The stream still works.
	stream.Send(squareRequest("square_int32", "ok", 2, true))
	got, _ := collect(t, stream, 1, 0)
	if len(got["ok"]) != 3 {
		t.Errorf("after errors: %d responses", len(got["ok"]))
	}
	stream.CloseSend()
}

// Many concurrent streams over two executors: every response arrives, in
// order per request.
func testConcurrentStreams(t *testing.T, e *env) {
	c := grpcClient(t, e.g.GRPC())
	const streams, n = 12, 100
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for s := range streams {
		wg.Go(func() {
			stream, err := c.ModelStreamInfer(testCtx(t))
			if err != nil {
				errs <- err
				return
			}
			defer stream.CloseSend()
			for k := range 2 {
				stream.Send(repeatRequest(fmt.Sprintf("s%d-%d", s, k), seq(n, int32(1000*s+100*k)), make([]uint32, n), 0, true))
			}
			next := map[string]int{}
			for finals := 0; finals < 2; {
				r, err := stream.Recv()
				if err != nil {
					errs <- err
					return
				}
				ir := r.GetInferResponse()
				if fin, _ := isFinal(ir); fin {
					if next[ir.GetId()] != n {
						errs <- fmt.Errorf("%s: final after %d responses", ir.GetId(), next[ir.GetId()])
					}
					finals++
					continue
				}
				if idx := outInt32(t, ir, "IDX"); idx != int64(next[ir.GetId()]) {
					errs <- fmt.Errorf("%s: IDX %d, want %d", ir.GetId(), idx, next[ir.GetId()])
					return
				}
				next[ir.GetId()]++
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The streams spread over both executors (the executors' queue group
	// picks one at random per request: all 24 on one would be a 1 in 8
	// million chance).
	for _, id := range []string{"exec0", "exec1"} {
		if n := executorInferences(t, e, id, "repeat_int32"); n == 0 {
			t.Errorf("executor %s ran no request of the concurrent streams", id)
		}
	}
}

// executorInferences asks one executor, over the bus as a gateway does,
// for its inference count of model.
func executorInferences(t *testing.T, e *env, id, model string) uint64 {
	t.Helper()
	bc, err := bus.New(e.c.ConnectAs(bus.RoleGateway))
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	var reply busv1.StatisticsReply
	if err := bc.Request(testCtx(t), bus.ExecutorStatsSubject(id), &busv1.StatisticsRequest{Name: model}, &reply); err != nil {
		t.Fatalf("statistics of executor %s: %v", id, err)
	}
	var n uint64
	for _, ms := range reply.GetModelStats() {
		n += ms.GetInferenceCount()
	}
	return n
}

func seq(n int, from int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = from + int32(i)
	}
	return out
}

// Cancelling a stream reaches the backend: it stops producing, so the
// model's response statistics count far fewer responses than asked for.
func TestCancelStopsModel(t *testing.T) {
	e := start(t, 1)
	c := grpcClient(t, e.g.GRPC())
	const words = 400
	text := strings.Repeat("word ", words)
	ctx, cancel := context.WithCancel(testCtx(t))
	stream, err := c.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(wordsRequest("c", text, 20))
	for range 2 {
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	// The request ends (the final flag after the cancellation) long
	// before the words run out: wait for the statistics to show it.
	var produced float64
	if !waitFor(func() bool {
		st := statistics(t, e.g.HTTP(), "text_words")
		succ := st["inference_stats"].(map[string]any)["success"].(map[string]any)["count"].(float64)
		if succ < 1 {
			return false
		}
		produced = 0
		for _, v := range st["response_stats"].(map[string]any) {
			rs := v.(map[string]any)
			produced += rs["success"].(map[string]any)["count"].(float64) + rs["cancel"].(map[string]any)["count"].(float64)
		}
		return true
	}) {
		t.Fatal("the cancelled request never ended")
	}
	if produced >= words/2 {
		t.Errorf("the model produced %v of %d responses after the client cancelled", produced, words)
	}
}

// Losing the executor mid-stream ends the request with a clear error on
// the stream, never a hang.
func TestExecutorKilledMidStream(t *testing.T) {
	e := start(t, 1)
	c := grpcClient(t, e.g.GRPC())
	stream, err := c.ModelStreamInfer(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(wordsRequest("k", strings.Repeat("word ", 1000), 20))
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	e.execs[0].Kill()
	for {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream ended with %v instead of an error response", err)
		}
		if msg := r.GetErrorMessage(); msg != "" {
			if !strings.Contains(msg, "went away") || r.GetInferResponse().GetId() != "k" {
				t.Errorf("error response: %q %v", msg, r.GetInferResponse())
			}
			break
		}
	}
	stream.CloseSend()
}

func waitFor(cond func() bool) bool { return constellation.WaitFor(30*time.Second, cond) }

// Losing the executor in the middle of a generate_stream: the events sent
// stand, and the stream ends with an error event (the status is already
// 200), never a hang.
func TestExecutorKilledMidGenerateStream(t *testing.T) {
	e := start(t, 1)
	r := post(t, e.g.HTTP()+"/v2/models/text_words/generate_stream",
		`{"text_input": "`+strings.Repeat("word ", 1000)+`", "delay_ms": 20}`)
	if r.StatusCode != 200 {
		t.Fatalf("status %d", r.StatusCode)
	}
	body := bufio.NewReader(r.Body)
	for { // the first event
		line, err := body.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\n" {
			break
		}
	}
	e.execs[0].Kill()
	events := readSSE(t, body)
	if len(events) == 0 {
		t.Fatal("the stream ended without an error event")
	}
	last := events[len(events)-1]
	msg, _ := last["error"].(string)
	if !strings.Contains(msg, "went away") {
		t.Errorf("last event %v, want an error naming the lost executor", last)
	}
	for _, ev := range events[:len(events)-1] {
		if ev["text_output"] != " word" {
			t.Errorf("event before the error: %v", ev)
		}
	}
}
