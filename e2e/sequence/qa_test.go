package sequence

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// Triton's L0_sequence_batcher delay tests (MODEL_INSTANCES=1: one instance
// of four slots) and L0_dyna_sequence_batcher backlog tests, with Triton's
// expected statistics. As in Triton (check_sequence_async), every sequence
// is one gRPC stream that sends all its requests without waiting for
// answers; the delay hook holds the batcher until the requests are queued,
// so the batches, and the statistics, are exact.

// step is one request of a sequence: its value, flags, and how long to
// wait before sending it (Triton's pre_delay_ms), or which sequences the
// router must have placed before it is sent.
type step struct {
	v          int32
	start, end bool
	pause      time.Duration
	placed     []uint64
}

// qaSeq is one sequence: its id, its requests, and when it starts. An
// ordered sequence starts once the router has placed the START of every
// earlier one (in a slot or the backlog), so that it takes the next slot
// or backlog place whatever the load (Triton starts such threads seconds
// apart); the others start at once.
type qaSeq struct {
	id    uint64
	steps []step
	// ordered: sent once the router has placed the STARTs of the
	// sequences before it; for one that reuses an earlier sequence's id,
	// once the router has also received every request of those (Triton's
	// QA sends it after them).
	ordered bool
	width   int // elements per request (a [1, width] INPUT), default 1
}

// S, M and E build steps: START, middle, END.
func S(v int32) step  { return step{v: v, start: true} }
func M(v int32) step  { return step{v: v} }
func E(v int32) step  { return step{v: v, end: true} }
func SE(v int32) step { return step{v: v, start: true, end: true} }

func (s step) wait(d time.Duration) step { s.pause = d; return s }

func (s step) afterPlaced(ids ...uint64) step { s.placed = ids; return s }

// streamSequence sends one sequence on its own stream and returns the
// outputs in order. placed waits until the router has placed the STARTs of
// the sequences a step names (nil when no step names any).
func streamSequence(t *testing.T, c inference.GRPCInferenceServiceClient, model string, q qaSeq, placed func([]uint64) bool) ([]int32, error) {
	stream, err := c.ModelStreamInfer(ctx(t))
	if err != nil {
		return nil, err
	}
	go func() {
		for i, s := range q.steps {
			time.Sleep(s.pause)
			if len(s.placed) > 0 && !placed(s.placed) {
				// The outputs or the statistics then tell what went wrong.
				t.Logf("sequence %d: the router did not place %v", q.id, s.placed)
			}
			req := grpcRequest(model, fmt.Sprintf("%d_%d", q.id, i), q.id, s.v, s.start, s.end)
			if q.width > 1 {
				req.Inputs[0].Shape = []int64{1, int64(q.width)}
				req.Inputs[0].Contents.IntContents = slices.Repeat([]int32{s.v}, q.width)
			}
			if err := stream.Send(req); err != nil {
				return
			}
		}
		_ = stream.CloseSend()
	}()
	var out []int32
	for range q.steps {
		resp, err := stream.Recv()
		if err != nil {
			return out, err
		}
		if m := resp.GetErrorMessage(); m != "" {
			return out, fmt.Errorf("%s", m)
		}
		out = append(out, output(resp.GetInferResponse()))
	}
	return out, nil
}

// expect is what the QA models answer: READY x (INPUT + START), plus
// END x CORRID for dyna_sequence.
func expect(q qaSeq, dyna bool) []int32 {
	var out []int32
	for _, s := range q.steps {
		v := s.v + b2i(s.start)
		if dyna {
			v += b2i(s.end) * int32(q.id)
		}
		out = append(out, v)
	}
	return out
}

// runQA starts a constellation with the delay hooks, runs the sequences
// concurrently (an ordered one once the earlier ones are placed), checks
// every output and then the model's statistics exactly: batch_stats as
// batch size -> executions, execution_count, inference_count.
func runQA(t *testing.T, model string, delay, backlogDelay int, seqs []qaSeq, batches map[uint64]uint64, execs, infers uint64) {
	t.Helper()
	var env []string
	if delay > 0 {
		env = append(env, fmt.Sprintf("TRITONSERVER_DELAY_SCHEDULER=%d", delay))
	}
	if backlogDelay > 0 {
		env = append(env, fmt.Sprintf("TRITONSERVER_BACKLOG_DELAY_SCHEDULER=%d", backlogDelay))
	}
	e := start(t, opts{models: []string{model}, routerEnv: env, routerArgs: []string{"--log-verbose", "1"}})
	c := grpcClient(t, e.g.GRPC())
	dyna := model == "seq_dyna4"
	var wg sync.WaitGroup
	errs := make(chan string, len(seqs))
	for i, q := range seqs {
		if q.ordered {
			var ids []uint64
			sameID := 0
			for _, p := range seqs[:i] {
				ids = append(ids, p.id)
				if p.id == q.id {
					sameID += len(p.steps)
				}
			}
			if !e.placed(ids) {
				t.Fatalf("the router did not place the STARTs of sequences %v", ids)
			}
			if sameID > 0 && !e.received(q.id, sameID) {
				t.Fatalf("the router did not receive the %d requests of sequence %d sent before", sameID, q.id)
			}
		}
		wg.Go(func() {
			got, err := streamSequence(t, c, model, q, e.placed)
			if want := expect(q, dyna); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				errs <- fmt.Sprintf("sequence %d: %v %v, want %v", q.id, got, err, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for m := range errs {
		t.Error(m)
	}
	exec, inf, got := stats(t, e.g.HTTP(), model)
	if !maps.Equal(got, batches) || exec != execs || inf != infers {
		t.Fatalf("statistics: batch_stats %v execution_count %d inference_count %d; want %v %d %d", got, exec, inf, batches, execs, infers)
	}
}

// placed waits until the router has logged where the START of every
// sequence in ids went (a slot or the backlog; a START that restarts an
// active id goes nowhere new and is not counted); an id listed twice must
// have been placed twice. It reports false if that did not happen in 30 s.
func (e *env) placed(ids []uint64) bool {
	want := map[uint64]int{}
	for _, id := range ids {
		want[id]++
	}
	return constellation.WaitFor(30*time.Second, func() bool {
		got := map[uint64]int{}
		for _, line := range strings.Split(e.routers[0].Output(), "\n") {
			if !strings.Contains(line, `msg="sequence takes a slot"`) && !strings.Contains(line, `msg="sequence waits in the backlog"`) {
				continue
			}
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "sequence=u:"); ok {
					if id, err := strconv.ParseUint(v, 10, 64); err == nil {
						got[id]++
					}
				}
			}
		}
		for id, n := range want {
			if got[id] < n {
				return false
			}
		}
		return true
	})
}

// received waits until the router has logged n requests of sequence id.
// It reports false if that did not happen in 30 s.
func (e *env) received(id uint64, n int) bool {
	return constellation.WaitFor(30*time.Second, func() bool {
		got := 0
		for _, line := range strings.Split(e.routers[0].Output(), "\n") {
			if strings.Contains(line, `msg="sequence request"`) && strings.Contains(line, " sequence=u:"+strconv.FormatUint(id, 10)+" ") {
				got++
			}
		}
		return got >= n
	})
}

// test_half_batch: two sequences on four slots batch as pairs.
func TestQAHalfBatch(t *testing.T) {
	runQA(t, "seq4", 8, 0, []qaSeq{
		{id: 987, steps: []step{S(1), M(2), M(3), E(4)}},
		{id: 988, steps: []step{S(0), M(9), M(5), E(13)}, ordered: true},
	}, map[uint64]uint64{2: 4}, 4, 8)
}

// test_skip_batch: the long sequences take slots 0 and 1, the short ones 2
// and 3; once those end, batches shrink to the highest active slot.
func TestQASkipBatch(t *testing.T) {
	runQA(t, "seq4", 12, 0, []qaSeq{
		{id: 1002, steps: []step{S(11), M(12), M(13), E(14)}},
		{id: 1004, steps: []step{S(1111), M(1112), M(1113), E(1114)}, ordered: true},
		{id: 1001, steps: []step{S(1), E(3)}, ordered: true},
		{id: 1003, steps: []step{S(111), E(113)}, ordered: true},
	}, map[uint64]uint64{2: 2, 4: 2}, 4, 12)
}

// test_full_batch: four sequences fill every slot of every batch.
func TestQAFullBatch(t *testing.T) {
	runQA(t, "seq4", 12, 0, []qaSeq{
		{id: 1001, steps: []step{S(1), M(2), E(3)}},
		{id: 1002, steps: []step{S(11), M(12), E(13)}},
		{id: 1003, steps: []step{S(111), M(112), E(113)}},
		{id: 1004, steps: []step{S(1111), M(1112), E(1113)}},
	}, map[uint64]uint64{4: 3}, 3, 12)
}

// test_ragged_batch: requests of different shapes (the input does not allow
// a ragged batch) never share a batch: the two [1,2] sequences batch
// together, the [1,1] and [1,3] ones alone, each padded to the four slots.
func TestQARaggedBatch(t *testing.T) {
	runQA(t, "seq4_var", 12, 0, []qaSeq{
		{id: 1001, steps: []step{S(1), M(2), E(3)}, width: 2},
		{id: 1002, steps: []step{S(11), M(12), E(13)}, width: 2},
		{id: 1003, steps: []step{S(111), M(112), E(113)}, width: 1},
		{id: 1004, steps: []step{S(1111), M(1112), E(1113)}, width: 3, ordered: true},
	}, map[uint64]uint64{4: 9}, 9, 12)
}

// test_backlog_fill: two backlogged sequences take the slots of the two
// short ones as soon as their END leaves in a batch.
func TestQABacklogFill(t *testing.T) {
	runQA(t, "seq4", 10, 2, []qaSeq{
		{id: 1001, steps: []step{S(1), M(2), E(3)}},
		{id: 1002, steps: []step{S(11), E(13)}, ordered: true},
		{id: 1003, steps: []step{S(111), E(113)}, ordered: true},
		{id: 1004, steps: []step{S(1111), M(1112), E(1113)}, ordered: true},
		{id: 1005, steps: []step{SE(11111)}, ordered: true},
		{id: 1006, steps: []step{SE(22222)}, ordered: true},
	}, map[uint64]uint64{4: 3}, 3, 12)
}

// test_backlog_fill_no_end: one backlogged sequence has not ended when it
// takes its slot; it then runs alone, padded up to its slot (2: size 3).
func TestQABacklogFillNoEnd(t *testing.T) {
	runQA(t, "seq4", 10, 3, []qaSeq{
		{id: 1001, steps: []step{S(1), M(2), E(3)}},
		{id: 1002, steps: []step{S(11), E(13)}, ordered: true},
		{id: 1003, steps: []step{S(111), E(113)}, ordered: true},
		{id: 1004, steps: []step{S(1111), M(1112), E(1113)}, ordered: true},
		{id: 1005, steps: []step{SE(11111)}, ordered: true},
		{id: 1006, steps: []step{S(22222), M(22223), E(22224).wait(500 * time.Millisecond)}, ordered: true},
	}, map[uint64]uint64{4: 3, 3: 2}, 5, 14)
}

// test_backlog_same_correlation_id: a new sequence with the id of one whose
// END is queued waits in the backlog, then runs alone in slot 0.
func TestQABacklogSameCorrelationID(t *testing.T) {
	runQA(t, "seq4", 12, 2, []qaSeq{
		{id: 1001, steps: []step{S(1), M(2), E(3)}},
		{id: 1002, steps: []step{S(11), M(12), E(13)}, ordered: true},
		{id: 1003, steps: []step{S(111), M(112), E(113)}, ordered: true},
		{id: 1004, steps: []step{S(1111), M(1112), E(1113)}, ordered: true},
		{id: 1002, steps: []step{S(11111), E(11113)}, ordered: true},
	}, map[uint64]uint64{4: 3, 1: 2}, 5, 14)
}

// test_backlog_same_correlation_id_no_end: a START on an active id with no
// END (Triton's conflict) continues in the same slot, behind it.
func TestQABacklogSameCorrelationIDNoEnd(t *testing.T) {
	runQA(t, "seq4", 16, 0, []qaSeq{
		{id: 1001, steps: []step{S(1), M(3)}},
		{id: 1002, steps: []step{S(11), M(12), M(12), E(13)}, ordered: true},
		{id: 1003, steps: []step{S(111), M(112), M(112), E(113)}, ordered: true},
		{id: 1004, steps: []step{S(1111), M(1112), M(1112), E(1113)}, ordered: true},
		{id: 1001, steps: []step{S(11111), E(11113)}, ordered: true},
	}, map[uint64]uint64{4: 4}, 4, 16)
}

// L0_dyna_sequence_batcher test_backlog_fill: the oldest strategy with four
// candidates and a preferred batch of four. The second batch waits for the
// middle request of 1004, which Triton sends a second later; here it leaves
// once 1005 and 1006 wait in the backlog, so that they take the slots of
// 1002 and 1003 when those end (well within the 2 s queue delay that would
// otherwise send a batch of three).
func TestQADynaBacklogFill(t *testing.T) {
	runQA(t, "seq_dyna4", 0, 0, []qaSeq{
		{id: 1001, steps: []step{S(1), M(2), E(3)}},
		{id: 1002, steps: []step{S(11), E(13)}},
		{id: 1003, steps: []step{S(111), E(113)}},
		{id: 1004, steps: []step{S(1111), M(1112).afterPlaced(1005, 1006), E(1113)}},
		{id: 1005, steps: []step{SE(11111)}, ordered: true},
		{id: 1006, steps: []step{SE(22222)}, ordered: true},
	}, map[uint64]uint64{4: 3}, 3, 12)
}

// L0_dyna_sequence_batcher test_backlog_fill_no_end: the sequence that has
// not ended runs its last two requests alone (one request per sequence in
// flight), each after the queue delay. 1004's middle request waits for the
// backlog as in TestQADynaBacklogFill.
func TestQADynaBacklogFillNoEnd(t *testing.T) {
	runQA(t, "seq_dyna4", 0, 0, []qaSeq{
		{id: 1001, steps: []step{S(1), M(2), E(3)}},
		{id: 1002, steps: []step{S(11), E(13)}},
		{id: 1003, steps: []step{S(111), E(113)}},
		{id: 1004, steps: []step{S(1111), M(1112).afterPlaced(1005, 1006), E(1113)}},
		{id: 1005, steps: []step{SE(11111)}, ordered: true},
		{id: 1006, steps: []step{S(22222), M(22223), E(22224).wait(500 * time.Millisecond)}, ordered: true},
	}, map[uint64]uint64{4: 3, 1: 2}, 5, 14)
}

// test_no_sequence_end over HTTP, gRPC and a gRPC stream: a second START on
// an active id restarts the sequence in the same slot (Triton's conflict);
// one slot active, so every batch has size 1.
func TestQANoSequenceEnd(t *testing.T) {
	e := start(t, opts{models: []string{"seq4"}})
	h := e.g.HTTP()
	c := grpcClient(t, e.g.GRPC())
	steps := []step{S(1), M(2), S(42), E(9)}
	want := fmt.Sprint(expect(qaSeq{steps: steps}, false))
	transports := []struct {
		name string
		run  func(id uint64) ([]int32, error)
	}{
		{"http", func(id uint64) ([]int32, error) {
			var out []int32
			for _, s := range steps {
				v, code, msg := httpInfer(t, h, "seq4", id, s.v, s.start, s.end, nil)
				if code != 200 {
					return out, fmt.Errorf("%d %s", code, msg)
				}
				out = append(out, v)
			}
			return out, nil
		}},
		{"grpc", func(id uint64) ([]int32, error) {
			var out []int32
			for _, s := range steps {
				resp, err := c.ModelInfer(ctx(t), grpcRequest("seq4", "", id, s.v, s.start, s.end))
				if err != nil {
					return out, err
				}
				out = append(out, output(resp))
			}
			return out, nil
		}},
		{"grpc stream", func(id uint64) ([]int32, error) {
			return streamSequence(t, c, "seq4", qaSeq{id: id, steps: steps}, nil)
		}},
	}
	for i, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			got, err := tr.run(4566 + uint64(i))
			if err != nil || fmt.Sprint(got) != want {
				t.Fatalf("outputs %v %v, want %s", got, err, want)
			}
			n := 4 * uint64(i+1)
			exec, inf, batches := stats(t, h, "seq4")
			if !maps.Equal(batches, map[uint64]uint64{1: n}) || exec != n || inf != n {
				t.Fatalf("statistics: batch_stats %v execution_count %d inference_count %d; want {1:%d} %d %d", batches, exec, inf, n, n, n)
			}
		})
	}
}
