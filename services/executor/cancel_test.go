package executor

import (
	"context"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// TestCancelledRequestIsNotExecuted: a request whose requester cancels it
// while it waits in the queue (the only instance is busy) is dropped, never
// executed; the request ahead of it runs normally.
func TestCancelledRequestIsNotExecuted(t *testing.T) {
	repo := t.TempDir()
	writeModel(t, repo, "slow", `name: "slow" backend: "identity" max_batch_size: 8
		input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
		output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
		instance_group [ { count: 1 kind: KIND_CPU } ]
		parameters { key: "execute_delay_ms" value { string_value: "400" } }`)
	h := start(t, repo)
	req := func(id string) *inference.ModelInferRequest {
		r := request(id, []tin{{"INPUT0", "FP32", []int64{1, 1}, tensor.AppendFloat32s(nil, 1)}})
		r.ModelName, r.ModelVersion = "slow", "1"
		return r
	}
	first := make(chan error, 1)
	go func() {
		_, err := h.infer("slow", req("a"))
		first <- err
	}()
	time.Sleep(100 * time.Millisecond) // "a" is executing

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err := h.client.Request(ctx, bus.InferSubject("slow", "1"), req("b"), &inference.ModelInferResponse{})
	if tritonerr.KindOf(err) != tritonerr.Cancelled {
		t.Fatalf("cancelled request: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first request: %v", err)
	}
	// Give the batcher the moment it needs to drop "b" after "a" finishes.
	time.Sleep(200 * time.Millisecond)
	st := h.stats("slow", "1").GetModelStats()[0]
	if st.GetExecutionCount() != 1 || st.GetInferenceCount() != 1 ||
		st.GetInferenceStats().GetSuccess().GetCount() != 1 || st.GetInferenceStats().GetFail().GetCount() != 1 {
		t.Fatalf("executions %d inferences %d success %d fail %d: the cancelled request ran or was not counted",
			st.GetExecutionCount(), st.GetInferenceCount(),
			st.GetInferenceStats().GetSuccess().GetCount(), st.GetInferenceStats().GetFail().GetCount())
	}
}
