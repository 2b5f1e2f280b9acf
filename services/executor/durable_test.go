package executor

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/seqbatch"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/services/executor/internal/seqstate"
)

// fakeRouter answers an executor's sequence pulls with the batches a test
// hands it, and collects the executor's answers on one inbox.
type fakeRouter struct {
	t       *testing.T
	batches chan *busv1.SequenceBatch
	answers chan *nats.Msg
	inbox   string
}

func newFakeRouter(t *testing.T, h *harness, model string) *fakeRouter {
	t.Helper()
	nc := connect(t, h.url)
	r := &fakeRouter{t: t, batches: make(chan *busv1.SequenceBatch, 16), answers: make(chan *nats.Msg, 16), inbox: nats.NewInbox()}
	if _, err := nc.ChanSubscribe(r.inbox, r.answers); err != nil {
		t.Fatal(err)
	}
	// A pull waits for the next batch for a moment, then gets an empty one
	// (as the router's hold does); the executor pulls again.
	_, err := nc.Subscribe(bus.SequencePullSubject(model, "1"), func(m *nats.Msg) {
		b := &busv1.SequenceBatch{}
		select {
		case next := <-r.batches:
			b = next
		case <-time.After(100 * time.Millisecond):
		}
		data, _ := proto.Marshal(b)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// run hands the executor one request of sequence 5 in a batch with fence
// (epoch 1), and returns OUTPUT[0] of its answer, or the error it carries.
func (r *fakeRouter) run(fence uint64, token string, v int32, start, end, resume bool) (int32, string) {
	r.t.Helper()
	r.send(fence, token, v, start, end, resume)
	return r.answer()
}

func (r *fakeRouter) send(fence uint64, token string, v int32, start, end, resume bool) {
	r.t.Helper()
	req := &inference.ModelInferRequest{ModelName: "implicit_accumulate_durable", ModelVersion: "1",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT", Datatype: "INT32", Shape: []int64{1, 1}}},
		RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, uint32(v))}}
	body, err := proto.Marshal(req)
	if err != nil {
		r.t.Fatal(err)
	}
	r.batches <- &busv1.SequenceBatch{BatchId: fence, Epoch: 1, Work: []*busv1.SequenceWork{{
		Slot: 0, Id: seqbatch.UintID(5).Proto(), Start: start, End: end, Reply: r.inbox, Request: body, Token: token, Resume: resume}}}
}

func (r *fakeRouter) answer() (int32, string) {
	r.t.Helper()
	select {
	case m := <-r.answers:
		if msg := m.Header.Get(bus.HeaderError); msg != "" {
			return 0, msg
		}
		resp := &inference.ModelInferResponse{}
		if err := proto.Unmarshal(m.Data, resp); err != nil {
			r.t.Fatalf("answer: %v", err)
		}
		return int32(binary.LittleEndian.Uint32(resp.GetRawOutputContents()[0])), ""
	case <-time.After(10 * time.Second):
		r.t.Fatal("no answer")
	}
	return 0, ""
}

func int32State(v int32) []byte {
	return seqstate.Encode(seqstate.Restore(map[string]seqstate.Tensor{
		"INPUT_STATE": {DataType: tensor.Int32, Shape: []int64{1, 1}, Data: binary.LittleEndian.AppendUint32(nil, uint32(v))}}))
}

// A durable sequence moved to this executor resumes from the store: its
// request whose state the lost executor had written (the store holds the
// request's own token) runs again from the state before it, and gives the
// answer the first run gave; a batch of an older fence is run but its
// write is refused, and it is not answered; END deletes the record.
func TestDurableResume(t *testing.T) {
	h := start(t, exampleRepo, "implicit_accumulate_durable")
	r := newFakeRouter(t, h, "implicit_accumulate_durable")
	key := stateKey(bus.ModelKey("implicit_accumulate_durable", "1"), seqbatch.UintID(5).Key())
	st := h.ex.states
	ctx := context.Background()

	if got, msg := r.run(10, "t0", 1, true, false, false); got != 1 || msg != "" {
		t.Fatalf("START: %d %s", got, msg)
	}
	if got, msg := r.run(11, "t1", 2, false, false, false); got != 3 || msg != "" {
		t.Fatalf("second: %d %s", got, msg)
	}
	if rec, _ := st.load(ctx, key); rec == nil || rec.Token != "t1" || rec.Fence != 11 {
		t.Fatalf("record after two requests: %+v", rec)
	}
	// Another executor ran t2 (input 4) in batch 12, wrote its state (7),
	// and died before its answer left.
	if v, err := st.save(ctx, []keyedWrite{{key: key, w: seqstate.Write{Fence: 12, Token: "t2", After: "t1", State: int32State(7)}}}, time.Minute); err != nil || v[0] != seqstate.Saved {
		t.Fatalf("seeding the lost executor's write: %v %v", v, err)
	}
	// The router runs t2 again here, resumed: from the state before it.
	if got, msg := r.run(13, "t2", 4, false, false, true); got != 7 || msg != "" {
		t.Fatalf("t2 run again: %d %s, want 7 (3 + 4)", got, msg)
	}
	if got, msg := r.run(14, "t3", 10, false, false, false); got != 17 || msg != "" {
		t.Fatalf("after the rerun: %d %s", got, msg)
	}
	// A batch of an older fence (a router's batch the sequence has left
	// behind) runs, its write is refused and it is not answered: the next
	// answer on the inbox is the next batch's, computed from the stored
	// state (the refused run's memory is dropped).
	r.send(12, "t9", 100, false, false, false)
	if got, msg := r.run(15, "t4", 1, false, false, false); got != 18 || msg != "" {
		t.Fatalf("after a stale batch: %d %s, want 18", got, msg)
	}
	// END answers and deletes the record.
	if got, msg := r.run(16, "t5", 2, false, true, false); got != 20 || msg != "" {
		t.Fatalf("END: %d %s", got, msg)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec, _ := st.load(ctx, key)
		if rec == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("record left after END: %+v", rec)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A resumed request whose state is not in the store fails, naming the
	// sequence; it is not run from a fresh state.
	if _, msg := r.run(17, "t6", 1, false, false, true); !strings.Contains(msg, "the durable state of sequence 5 of model 'implicit_accumulate_durable' is not in Redis") {
		t.Fatalf("resume without a record: %q", msg)
	}
}

// An executor whose Redis does not answer (yet) still starts and serves
// after redisStartWait; its durable states wait for Redis.
func TestStartsWhileRedisIsAway(t *testing.T) {
	url := startNATS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, url: url, client: client}
	h.ex, h.stop = runExecutor(t, url, Config{RepositoryPath: exampleRepo, Models: []string{"identity_fp32"}, ID: "ex-1", Node: "node-a",
		RedisURL: "redis://" + addr + "/0"})
	req := &inference.ModelInferRequest{Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1, 1}}},
		RawInputContents: [][]byte{{0, 0, 128, 63}}}
	if _, err := h.infer("identity_fp32", req); err != nil {
		t.Fatalf("infer: %v", err)
	}
}
