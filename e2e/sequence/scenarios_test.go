package sequence

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
)

// Triton's L0_sequence_batcher no-delay tests and the parameter rules, over
// HTTP and gRPC.
func TestRules(t *testing.T) {
	e := start(t, opts{models: []string{"seq_direct", "seq_string", "seq_oldest"}})
	h := e.g.HTTP()
	c := grpcClient(t, e.g.GRPC())

	t.Run("server metadata lists the extensions", func(t *testing.T) {
		md, err := c.ServerMetadata(ctx(t), &inference.ServerMetadataRequest{})
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(md.GetExtensions(), ",")
		if !strings.Contains(got, "sequence,sequence(string_id)") {
			t.Fatalf("extensions %s", got)
		}
	})
	for _, model := range []string{"seq_direct", "seq_oldest"} {
		t.Run(model, func(t *testing.T) {
			// simple, length-1
			if v, code, msg := httpInfer(t, h, model, 7, 5, true, false, nil); code != 200 || v != 6 {
				t.Fatalf("start: %d %d %s", v, code, msg)
			}
			if v, code, msg := httpInfer(t, h, model, 7, 5, false, true, nil); code != 200 || v != 5+7*b2i(model == "seq_oldest") {
				t.Fatalf("end: %d %d %s", v, code, msg)
			}
			if v, code, _ := httpInfer(t, h, model, 8, 2, true, true, nil); code != 200 || v != 3+8*b2i(model == "seq_oldest") {
				t.Fatalf("length-1: %d %d", v, code)
			}
			// no start: after END the id is unknown again; 42 vs "42" on a uint64 model
			_, code, msg := httpInfer(t, h, model, 7, 1, false, false, nil)
			want := fmt.Sprintf("inference request for sequence 7 to model '%s' must specify the START flag on the first request of the sequence", model)
			if code != 400 || msg != want {
				t.Fatalf("no start: %d %s", code, msg)
			}
			// no correlation id, even with START
			for _, id := range []any{0, nil} {
				_, code, msg = httpInfer(t, h, model, id, 1, true, false, nil)
				if code != 400 || msg != fmt.Sprintf("inference request to model '%s' must specify a non-zero or non-empty correlation ID", model) {
					t.Fatalf("no correlation id %v: %d %s", id, code, msg)
				}
			}
			// batch size 2
			req := grpcRequest(model, "", uint64(9), 1, true, false)
			req.Inputs[0].Shape = []int64{2, 1}
			req.Inputs[0].Contents.IntContents = []int32{1, 2}
			_, err := c.ModelInfer(ctx(t), req)
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != fmt.Sprintf("inference request to model '%s' must specify batch-size 1 due to requirements of sequence batcher", model) {
				t.Fatalf("batch size: %v", err)
			}
			// a string id on a UINT64 CORRID model
			_, code, msg = httpInfer(t, h, model, "abc", 1, true, false, nil)
			if code != 400 || msg != fmt.Sprintf("sequence batching control 'CORRID' data-type is 'BYTES', but model '%s' expects 'UINT64'", model) {
				t.Fatalf("corrid type: %d %s", code, msg)
			}
		})
	}
	t.Run("string ids", func(t *testing.T) {
		_, code, msg := httpInfer(t, h, "seq_string", strings.Repeat("x", 129), 1, true, false, nil)
		if code != 501 || msg != "string correlation ID cannot be longer than 128 characters" {
			t.Fatalf("long id: %d %s", code, msg)
		}
		long := strings.Repeat("y", 128)
		if v, code, msg := httpInfer(t, h, "seq_string", long, 4, true, false, nil); code != 200 || v != 4 {
			t.Fatalf("128 chars: %d %d %s", v, code, msg)
		}
		if v, code, _ := httpInfer(t, h, "seq_string", long, 4, false, true, nil); code != 200 || v != 8 {
			t.Fatalf("128 chars end: %d %d", v, code)
		}
		_, code, msg = httpInfer(t, h, "seq_string", 42, 1, true, false, nil)
		if code != 400 || !strings.Contains(msg, "data-type is 'UINT64', but model 'seq_string' expects 'BYTES'") {
			t.Fatalf("numeric id on a string model: %d %s", code, msg)
		}
		// gRPC: uint64_param is refused
		req := grpcRequest("seq_direct", "", nil, 1, true, false)
		req.Parameters["sequence_id"] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: 5}}
		_, err := c.ModelInfer(ctx(t), req)
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "invalid value type for 'sequence_id' parameter, expected int64_param or string_param." {
			t.Fatalf("uint64_param: %v", err)
		}
	})
	t.Run("typed ids", func(t *testing.T) {
		// 42 and "42" are two sequences: on a model without CORRID type
		// constraints (simple_sequence) the string id needs its own START.
		if _, code, msg := httpInfer(t, h, "seq_direct", 42, 1, true, false, nil); code != 200 {
			t.Fatal(msg)
		}
		resp, err := c.ModelInfer(ctx(t), grpcRequest("seq_direct", "", uint64(42), 1, false, true))
		if err != nil || output(resp) != 1 {
			t.Fatalf("continue 42 over gRPC: %v", err)
		}
	})
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// Backlog, backlog timeout and exact batch statistics (padding included)
// for the direct strategy, with the delay hook holding the first batch.
func TestDirectBacklogAndStats(t *testing.T) {
	e := start(t, opts{models: []string{"seq_direct"}, routerEnv: []string{"TRITONSERVER_DELAY_SCHEDULER=2"}})
	h := e.g.HTTP()
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	run := func(id uint64, n int) {
		defer wg.Done()
		for i := range n {
			v, code, msg := httpInfer(t, h, "seq_direct", id, int32(i+10), i == 0, i == n-1, nil)
			want := int32(i + 10)
			if i == 0 {
				want++
			}
			if code != 200 || v != want {
				errs <- fmt.Sprintf("seq %d req %d: %d %d %s", id, i, v, code, msg)
			}
		}
	}
	wg.Add(2)
	go run(1, 3)
	go run(2, 3)
	wg.Wait()
	close(errs)
	for m := range errs {
		t.Fatal(m)
	}
	exec, inf, batches := stats(t, h, "seq_direct")
	// The hold makes the first batch hold both STARTs. Batches span slots 0
	// to the highest active one, padding included in batch_stats;
	// inference_count counts only the six real requests.
	entries, count := uint64(0), uint64(0)
	for size, n := range batches {
		entries += size * n
		count += n
	}
	if inf != 6 || count != exec || entries < 6 || batches[2] == 0 || len(batches) > 2 || exec > 6 {
		t.Fatalf("stats: execution_count %d inference_count %d batch_stats %v", exec, inf, batches)
	}

	// Backlog: both slots busy, a third sequence waits until one ends, then
	// runs with the requests it queued meanwhile.
	for _, id := range []uint64{11, 12} {
		if _, code, msg := httpInfer(t, h, "seq_direct", id, 1, true, false, nil); code != 200 {
			t.Fatal(msg)
		}
	}
	got := make(chan string, 1)
	go func() {
		v, code, msg := httpInfer(t, h, "seq_direct", 13, 5, true, true, nil)
		got <- fmt.Sprint(v, code, msg)
	}()
	select {
	case r := <-got:
		t.Fatalf("backlogged sequence ran with every slot busy: %s", r)
	case <-time.After(300 * time.Millisecond):
	}
	// Same id in the backlog: a request timeout expires the whole sequence.
	_, code, msg := httpInfer(t, h, "seq_direct", 14, 1, true, false, map[string]any{"timeout": 200000})
	if code != http.StatusServiceUnavailable || msg != "timeout of the corresponding sequence has been expired" {
		t.Fatalf("backlog timeout: %d %s", code, msg)
	}
	if _, code, msg = httpInfer(t, h, "seq_direct", 14, 1, false, false, nil); code != 400 || !strings.Contains(msg, "START flag") {
		t.Fatalf("after the timeout: %d %s", code, msg)
	}
	if _, code, msg := httpInfer(t, h, "seq_direct", 11, 1, false, true, nil); code != 200 {
		t.Fatal(msg)
	}
	select {
	case r := <-got:
		if r != "6 200" {
			t.Fatalf("backlogged sequence: %s", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the backlogged sequence never got the freed slot")
	}
	if _, code, msg := httpInfer(t, h, "seq_direct", 12, 1, false, true, nil); code != 200 {
		t.Fatal(msg)
	}
}

// The idle timeout releases a slot to the backlog; the idle sequence then
// needs a new START.
func TestIdleTimeoutWithBacklog(t *testing.T) {
	e := start(t, opts{models: []string{"seq_idle"}})
	h := e.g.HTTP()
	if _, code, msg := httpInfer(t, h, "seq_idle", 1, 1, true, false, nil); code != 200 {
		t.Fatal(msg)
	}
	t0 := time.Now()
	v, code, msg := httpInfer(t, h, "seq_idle", 2, 3, true, false, nil) // waits in the backlog
	if code != 200 || v != 4 {
		t.Fatalf("backlog: %d %d %s", v, code, msg)
	}
	if d := time.Since(t0); d < 300*time.Millisecond {
		t.Fatalf("backlogged sequence ran after %v, before the 400 ms idle timeout", d)
	}
	if _, code, msg = httpInfer(t, h, "seq_idle", 1, 1, false, false, nil); code != 400 || !strings.Contains(msg, "must specify the START flag") {
		t.Fatalf("idle sequence continued: %d %s", code, msg)
	}
}

// Oldest: the delay hook holds until four sequences' requests wait, then
// one batch of four runs on the instance they were given (max 4 candidates).
func TestOldestBatch(t *testing.T) {
	e := start(t, opts{models: []string{"seq_oldest"}, routerEnv: []string{"TRITONSERVER_DELAY_SCHEDULER=4"}})
	h := e.g.HTTP()
	var wg sync.WaitGroup
	for id := uint64(1); id <= 4; id++ {
		wg.Go(func() {
			if v, code, msg := httpInfer(t, h, "seq_oldest", id, 10, true, true, nil); code != 200 || v != 11+int32(id) {
				t.Errorf("seq %d: %d %d %s", id, v, code, msg)
			}
		})
	}
	wg.Wait()
	exec, inf, batches := stats(t, h, "seq_oldest")
	if exec != 1 || inf != 4 || batches[4] != 1 {
		t.Fatalf("stats: execution_count %d inference_count %d batch_stats %v", exec, inf, batches)
	}
}
