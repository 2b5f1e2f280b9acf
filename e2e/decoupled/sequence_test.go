package decoupled

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// Decoupled sequence models (sequence_batching with the decoupled policy):
// the gateway sends each request to the sequence router, which queues it
// for its sequence's slot; the executor that runs it streams the responses
// straight back to the gateway. As in Triton, a sequence's next request
// runs once the previous one's execution has returned, while the previous
// one may still be streaming.
func TestDecoupledSequence(t *testing.T) {
	e := &env{c: constellation.NewCluster(t), repo: constellation.RepoPath(t, "e2e/decoupled/testdata/model_repository")}
	redis, _ := constellation.Redis(t)
	constellation.Start(t, "router", e.c.Bin.Path("nereid-sequence-router"),
		"--nats-url", e.c.NATSURL, "--redis-url", redis, "--id", "router0")
	for i := range 2 {
		e.execs = append(e.execs, e.c.Executor(e.repo, fmt.Sprintf("exec%d", i), "--load-model", seqModel, "--load-model", oldestModel, "--load-model", "repeat_int32"))
	}
	e.g = e.c.Gateway("--metrics-config", "histogram_latencies=true")
	for _, m := range []string{seqModel, oldestModel, "repeat_int32"} {
		if !constellation.WaitFor(30*time.Second, func() bool {
			r, err := http.Get(e.g.HTTP() + "/v2/models/" + m + "/ready")
			if err != nil {
				return false
			}
			r.Body.Close()
			return r.StatusCode == 200
		}) {
			t.Fatalf("model %s not ready\n%s", m, e.execs[0].Output())
		}
	}
	for _, tc := range []struct {
		name string
		f    func(*testing.T, *env)
	}{
		{"NextRequestRunsWhilePreviousStreams", testSeqReleaseOrder},
		{"ConcurrentSequences", func(t *testing.T, e *env) { testSeqConcurrent(t, e, seqModel) }},
		{"ConcurrentSequencesOldest", func(t *testing.T, e *env) { testSeqConcurrent(t, e, oldestModel) }},
		{"Errors", testSeqErrors},
		{"NoStreaming", testSeqNoStreaming},
		{"GenerateStream", testSeqGenerateStream},
		{"ResponseStatistics", testResponseStatistics},
		{"FirstResponseHistogram", testFirstResponseHistogram},
		{"ExecutorsKilledMidStream", testSeqExecutorsKilled}, // last: it takes the executors down
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, e) })
	}
}

const (
	seqModel    = "sequence_repeat_int32"
	oldestModel = "sequence_repeat_oldest"
)

// seqRequest is a request of sequence id to sequence_repeat_int32; delay
// < 0 leaves DELAY out.
func seqRequest(reqID string, id int64, start, end bool, in []int32, delay int64) *inference.ModelInferRequest {
	return seqRequestFor(seqModel, reqID, id, start, end, in, delay)
}

// seqRequestFor is seqRequest for another model of the same backend; one
// with a batch dimension (sequence_repeat_oldest) gets shapes with it.
func seqRequestFor(model, reqID string, id int64, start, end bool, in []int32, delay int64) *inference.ModelInferRequest {
	var batch []int64
	if model == oldestModel {
		batch = []int64{1}
	}
	req := &inference.ModelInferRequest{
		ModelName: model, Id: reqID,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: append(batch, int64(len(in)))}},
		RawInputContents: [][]byte{int32Bytes(in...)},
		Parameters: map[string]*inference.InferParameter{
			"sequence_id":                        {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: id}},
			"sequence_start":                     boolParam(start),
			"sequence_end":                       boolParam(end),
			"triton_enable_empty_final_response": boolParam(true),
		},
	}
	if delay >= 0 {
		req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: "DELAY", Datatype: "UINT32", Shape: append(batch, 1)})
		req.RawInputContents = append(req.RawInputContents, uint32Bytes(uint32(delay)))
	}
	return req
}

// outs returns the OUT values of a request's responses, checking that IDX
// counts up and that only the last response is final (and empty).
func outs(t *testing.T, id string, rs []*inference.ModelStreamInferResponse) []int64 {
	t.Helper()
	var got []int64
	for i, r := range rs {
		if msg := r.GetErrorMessage(); msg != "" {
			t.Fatalf("request %s: response %d is an error: %s", id, i, msg)
		}
		fin, present := isFinal(r.GetInferResponse())
		if !present {
			t.Fatalf("request %s: response %d lacks triton_final_response", id, i)
		}
		if fin != (i == len(rs)-1) {
			t.Fatalf("request %s: response %d of %d has triton_final_response %v", id, i, len(rs), fin)
		}
		if fin {
			if n := len(r.GetInferResponse().GetOutputs()); n != 0 {
				t.Fatalf("request %s: the empty final response has %d outputs", id, n)
			}
			break
		}
		if idx := outInt32(t, r.GetInferResponse(), "IDX"); idx != int64(i) {
			t.Fatalf("request %s: response %d has IDX %d", id, i, idx)
		}
		got = append(got, outInt32(t, r.GetInferResponse(), "OUT"))
	}
	return got
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The first request of the sequence sends its first response and then
// waits a minute before its second: the second and third requests must run
// and finish meanwhile (the model computes the running sums in Execute, so
// their values also show they ran after the first, in order). Closing the
// stream then cancels the first request in the backend.
func testSeqReleaseOrder(t *testing.T, e *env) {
	c := grpcClient(t, e.g.GRPC())
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	stream, err := c.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*inference.ModelInferRequest{
		seqRequest("a", 7, true, false, []int32{1, 2}, 60_000),
		seqRequest("b", 7, false, false, []int32{10}, -1),
		seqRequest("c", 7, false, true, []int32{5, 5}, 0),
	} {
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	// b and c end (two finals) while a has sent only its first response.
	got := map[string][]*inference.ModelStreamInferResponse{}
	finals := 0
	for finals < 2 {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("%v (so far %v)", err, got)
		}
		id := r.GetInferResponse().GetId()
		got[id] = append(got[id], r)
		if fin, _ := isFinal(r.GetInferResponse()); fin {
			if id == "a" {
				t.Fatal("request a ended before b and c, though its second response waits a minute")
			}
			finals++
		}
	}
	if v := outs(t, "b", got["b"]); !equal(v, []int64{13}) {
		t.Errorf("b: OUT %v, want [13]", v)
	}
	if v := outs(t, "c", got["c"]); !equal(v, []int64{18, 23}) {
		t.Errorf("c: OUT %v, want [18 23]", v)
	}
	// a's first response may come just after b and c ended.
	for len(got["a"]) == 0 {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got[r.GetInferResponse().GetId()] = append(got[r.GetInferResponse().GetId()], r)
	}
	if len(got["a"]) != 1 || outInt32(t, got["a"][0].GetInferResponse(), "OUT") != 1 {
		t.Fatalf("a: %v, want one response with OUT 1", got["a"])
	}
	// The client goes away: the backend sees the cancellation and ends a
	// with the final flag alone (an empty response in response_stats)
	// instead of waiting out its minute.
	before := responseCount(t, e, "1", "empty_response")
	cancel()
	if !waitFor(func() bool { return responseCount(t, e, "1", "empty_response") > before }) {
		t.Fatal("the cancelled request did not end in the backend")
	}
}

// responseCount is response_stats[index][kind].count of the model.
func responseCount(t *testing.T, e *env, index, kind string) float64 {
	t.Helper()
	rs, _ := statistics(t, e.g.HTTP(), seqModel)["response_stats"].(map[string]any)
	at, _ := rs[index].(map[string]any)
	k, _ := at[kind].(map[string]any)
	n, _ := k["count"].(float64)
	return n
}

// More sequences than slots (2 executors x 2 instances; the oldest model:
// 2 x 4 candidates, batched), each on its own stream: every sequence's
// sums come out right and in order, the sequences beyond the slots
// waiting in the router's backlog.
func testSeqConcurrent(t *testing.T, e *env, model string) {
	const sequences = 8
	c := grpcClient(t, e.g.GRPC())
	var wg sync.WaitGroup
	errs := make(chan error, sequences)
	for s := range sequences {
		wg.Go(func() {
			id := int64(100 + s)
			stream, err := c.ModelStreamInfer(testCtx(t))
			if err != nil {
				errs <- err
				return
			}
			base := int32(s * 10)
			reqs := []*inference.ModelInferRequest{
				seqRequestFor(model, "1", id, true, false, []int32{base, 1}, 1),
				seqRequestFor(model, "2", id, false, false, []int32{2}, -1),
				seqRequestFor(model, "3", id, false, true, []int32{3, 4, 5}, 0),
			}
			for _, r := range reqs {
				if err := stream.Send(r); err != nil {
					errs <- err
					return
				}
			}
			got := map[string][]int64{}
			finals := 0
			for finals < len(reqs) {
				r, err := stream.Recv()
				if err != nil {
					errs <- fmt.Errorf("sequence %d: %v", id, err)
					return
				}
				if msg := r.GetErrorMessage(); msg != "" {
					errs <- fmt.Errorf("sequence %d: %s", id, msg)
					return
				}
				resp := r.GetInferResponse()
				if fin, _ := isFinal(resp); fin {
					finals++
					continue
				}
				got[resp.GetId()] = append(got[resp.GetId()], outInt32(t, resp, "OUT"))
			}
			stream.CloseSend()
			b := int64(base)
			want := map[string][]int64{"1": {b, b + 1}, "2": {b + 3}, "3": {b + 6, b + 10, b + 15}}
			for k, w := range want {
				if !equal(got[k], w) {
					errs <- fmt.Errorf("sequence %d request %s: OUT %v, want %v", id, k, got[k], w)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A request the sequence batcher refuses (no START for a new sequence) is
// an error response on the stream, which stays open for the next request.
func testSeqErrors(t *testing.T, e *env) {
	c := grpcClient(t, e.g.GRPC())
	stream, err := c.ModelStreamInfer(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(seqRequest("nostart", 555, false, false, []int32{1}, -1)); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	want := "must specify the START flag on the first request of the sequence"
	if !strings.Contains(r.GetErrorMessage(), want) || r.GetInferResponse().GetId() != "nostart" {
		t.Fatalf("got %q (id %q), want an error containing %q", r.GetErrorMessage(), r.GetInferResponse().GetId(), want)
	}
	if err := stream.Send(seqRequest("ok", 556, true, true, []int32{4}, -1)); err != nil {
		t.Fatal(err)
	}
	got, _ := collect(t, stream, 1, 0)
	if v := outs(t, "ok", got["ok"]); !equal(v, []int64{4}) {
		t.Errorf("after the error: OUT %v, want [4]", v)
	}
	stream.CloseSend()
}

// Unary gRPC and HTTP infer refuse a decoupled sequence model with
// Triton's errors, as any decoupled model.
func testSeqNoStreaming(t *testing.T, e *env) {
	c := grpcClient(t, e.g.GRPC())
	_, err := c.ModelInfer(testCtx(t), seqRequest("u", 9, true, true, []int32{1}, -1))
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "ModelInfer RPC doesn't support models with decoupled transaction policy") {
		t.Errorf("ModelInfer: %v", err)
	}
	r := post(t, e.g.HTTP()+"/v2/models/"+seqModel+"/infer",
		`{"parameters":{"sequence_id":9,"sequence_start":true,"sequence_end":true},"inputs":[{"name":"IN","datatype":"INT32","shape":[1],"data":[1]}]}`)
	if m := jsonBody(t, r); r.StatusCode != http.StatusNotImplemented || m["error"] != "HTTP end point doesn't support models with decoupled transaction policy" {
		t.Errorf("HTTP infer: %d %v", r.StatusCode, m)
	}
}

// generate_stream serves a decoupled sequence model too: the sequence
// parameters are request parameters.
func testSeqGenerateStream(t *testing.T, e *env) {
	r := post(t, e.g.HTTP()+"/v2/models/"+seqModel+"/generate_stream",
		`{"IN": [3, 4], "sequence_id": 42, "sequence_start": true, "sequence_end": true}`)
	if r.StatusCode != 200 {
		t.Fatalf("status %d: %v", r.StatusCode, jsonBody(t, r))
	}
	events := readSSE(t, r.Body)
	if len(events) != 2 {
		t.Fatalf("events %v, want 2", events)
	}
	// A one-element output comes back as a JSON scalar, as in Triton.
	for i, want := range []float64{3, 7} {
		if got, _ := events[i]["OUT"].(float64); got != want {
			t.Errorf("event %d: OUT %v, want %v", i, events[i]["OUT"], want)
		}
	}
}

// responseStats is a model's response_stats as counts and durations:
// stats[index][kind] = {count, ns}.
func responseStats(t *testing.T, e *env, model string) map[string]map[string][2]float64 {
	t.Helper()
	out := map[string]map[string][2]float64{}
	rs, _ := statistics(t, e.g.HTTP(), model)["response_stats"].(map[string]any)
	for idx, v := range rs {
		out[idx] = map[string][2]float64{}
		for kind, d := range v.(map[string]any) {
			m := d.(map[string]any)
			out[idx][kind] = [2]float64{m["count"].(float64), m["ns"].(float64)}
		}
	}
	return out
}

// Triton's response_stats (qa/L0_response_statistics): per response index,
// a success counts compute_infer, compute_output and success; an error
// compute_infer and fail; the final flag alone compute_infer and
// empty_response. Durations: compute_infer runs from the previous response,
// so a 200 ms pause before a response shows in its index.
func testResponseStatistics(t *testing.T, e *env) {
	before := responseStats(t, e, seqModel)
	c := grpcClient(t, e.g.GRPC())
	stream, err := c.ModelStreamInfer(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(seqRequest("s", 301, true, true, []int32{1, 2, 3}, 200)); err != nil {
		t.Fatal(err)
	}
	collect(t, stream, 1, 0)
	stream.CloseSend()
	after := responseStats(t, e, seqModel)
	delta := func(idx, kind string) (count, ns float64) {
		return after[idx][kind][0] - before[idx][kind][0], after[idx][kind][1] - before[idx][kind][1]
	}
	type want struct{ infer, output, success, fail, empty float64 }
	for idx, w := range map[string]want{
		"0": {1, 1, 1, 0, 0}, "1": {1, 1, 1, 0, 0}, "2": {1, 1, 1, 0, 0}, "3": {1, 0, 0, 0, 1},
	} {
		for kind, n := range map[string]float64{"compute_infer": w.infer, "compute_output": w.output,
			"success": w.success, "fail": w.fail, "empty_response": w.empty, "cancel": 0} {
			if got, _ := delta(idx, kind); got != n {
				t.Errorf("response %s: %s count grew by %v, want %v", idx, kind, got, n)
			}
		}
	}
	for _, idx := range []string{"1", "2"} {
		if _, ns := delta(idx, "compute_infer"); ns < 200e6 {
			t.Errorf("response %s: compute_infer grew by %v ns, want at least the 200 ms pause", idx, ns)
		}
		if _, ns := delta(idx, "success"); ns < 200e6 {
			t.Errorf("response %s: success grew by %v ns, want at least the 200 ms pause", idx, ns)
		}
	}

	// An error response: compute_infer and fail at its index, no output.
	before = responseStats(t, e, "repeat_int32")
	stream, err = c.ModelStreamInfer(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	bad := repeatRequest("bad", []int32{1, 2}, []uint32{1}, 0, false) // DELAY shorter than IN
	if err := stream.Send(bad); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetErrorMessage() == "" {
		t.Fatalf("want an error response, got %v %v", r, err)
	}
	stream.CloseSend()
	after = responseStats(t, e, "repeat_int32")
	for kind, n := range map[string]float64{"compute_infer": 1, "compute_output": 0, "success": 0, "fail": 1, "empty_response": 0} {
		if got, _ := delta("0", kind); got != n {
			t.Errorf("error response: %s count grew by %v, want %v", kind, got, n)
		}
	}
}

// metricValues returns the samples of the metrics endpoint whose name and
// labels start with prefix, by their full name with labels.
func metricValues(t *testing.T, url, prefix string) map[string]float64 {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// nv_inference_first_response_histogram_ms on the gateway's
// /metrics/constellation with --metrics-config histogram_latencies=true:
// one observation per request at its first
// response, in Triton's buckets (100, 500, 2000, 5000 ms). repeat_int32
// waits DELAY[0] = 600 ms before its first response, so each observation
// lies above 500 ms.
func testFirstResponseHistogram(t *testing.T, e *env) {
	const fam = "nv_inference_first_response_histogram_ms"
	key := func(suffix, le string) string {
		k := fam + suffix + `{model="repeat_int32",version="1"`
		if le != "" {
			k += `,le="` + le + `"`
		}
		return k + "}"
	}
	before := metricValues(t, e.g.Metrics()+"/constellation", fam)
	if _, ok := before[key("_bucket", "5000")]; !ok {
		t.Fatalf("no histogram for repeat_int32 in %v", before)
	}
	c := grpcClient(t, e.g.GRPC())
	stream, err := c.ModelStreamInfer(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	const n = 2
	for i := range n {
		if err := stream.Send(repeatRequest(fmt.Sprint("h", i), []int32{1, 2}, []uint32{600, 0}, 0, true)); err != nil {
			t.Fatal(err)
		}
	}
	collect(t, stream, n, 0)
	stream.CloseSend()
	after := metricValues(t, e.g.Metrics()+"/constellation", fam)
	d := func(k string) float64 { return after[k] - before[k] }
	if got := d(key("_count", "")); got != n {
		t.Errorf("count grew by %v, want %d", got, n)
	}
	if got := d(key("_sum", "")); got < n*600 {
		t.Errorf("sum grew by %v ms, want at least %d", got, n*600)
	}
	for le, want := range map[string]float64{"100": 0, "500": 0, "+Inf": n} {
		if got := d(key("_bucket", le)); got != want {
			t.Errorf("bucket le=%s grew by %v, want %v", le, got, want)
		}
	}
	if got := d(key("_bucket", "5000")); got > n {
		t.Errorf("bucket le=5000 grew by %v, more than the %d requests", got, n)
	}
}

// Losing the executors mid-stream ends a sequence request with a clear
// error response on the stream, never a hang.
func testSeqExecutorsKilled(t *testing.T, e *env) {
	c := grpcClient(t, e.g.GRPC())
	stream, err := c.ModelStreamInfer(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(seqRequest("k", 901, true, true, []int32{1, 2}, 60_000)); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetErrorMessage() != "" {
		t.Fatalf("first response: %v %v", r, err)
	}
	for _, x := range e.execs {
		x.Kill()
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatalf("stream ended with %v instead of an error response", err)
	}
	if msg := r.GetErrorMessage(); !strings.Contains(msg, "went away") || r.GetInferResponse().GetId() != "k" {
		t.Errorf("error response: %q %v", msg, r.GetInferResponse())
	}
	stream.CloseSend()
}
