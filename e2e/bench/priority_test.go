package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
)

// Priority under overload (testdata/priority_repository): a model taking
// 5 ms per execution, one request at a time, with two priority levels.
// 1,000 clients keep a backlog of about 1,000 requests at the default,
// low level; one client sends requests at priority 1, one after the other,
// each after a pause drawn uniformly from [0, 2 executions), so that they
// arrive at any point of the execution under way rather than just after
// the one their predecessor freed. Each waits for the execution under way
// (on average half of one) and is then the next to run, whatever the
// backlog: its wait, its latency less its own execution, should stay
// within one execution time (target: p50 <= 1x the execution time).

const (
	priorityModel   = "priority_5ms"
	priorityExec    = 5 * time.Millisecond // its execute_delay_ms
	priorityBacklog = 1000
)

func init() {
	comparisons = append(comparisons,
		comparison{"nereid-priority-wait/backlog1000", "priority-exec/backlog1000", latency, 1.0, 0})
}

var priorityOnce struct {
	sync.Mutex
	addr string
	err  error
}

func priorityServer(b *testing.B) string {
	priorityOnce.Lock()
	defer priorityOnce.Unlock()
	if priorityOnce.addr == "" && priorityOnce.err == nil {
		priorityOnce.addr, priorityOnce.err = startRepoServer(filepath.Join("testdata", "priority_repository"), priorityModel)
	}
	if priorityOnce.err != nil {
		b.Fatalf("starting the priority fixture: %v", priorityOnce.err)
	}
	return priorityOnce.addr
}

// priorityRequest is a request of 16 FP32 to the priority model at the
// given priority (as tritonclient.grpc sends it: uint64_param).
func priorityRequest(priority uint64) *inference.ModelInferRequest {
	payload := FP32Payload(small)
	return &inference.ModelInferRequest{
		ModelName: priorityModel,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{{
			Name: "INPUT0", Datatype: "FP32", Shape: []int64{int64(len(payload) / 4)},
		}},
		RawInputContents: [][]byte{payload},
		Parameters: map[string]*inference.InferParameter{
			"priority": {ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: priority}},
		},
	}
}

func BenchmarkPriorityOverload(b *testing.B) {
	client := inference.NewGRPCInferenceServiceClient(fx.conn(b, priorityServer(b)))
	high, low := priorityRequest(1), priorityRequest(2)
	high.Id = "high"

	// The backlog: closed-loop clients at the low level, each sending its
	// next request as soon as its last is answered.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var sent atomic.Int64
	var failed atomic.Value // the first error of a low-priority request
	for range priorityBacklog {
		wg.Go(func() {
			for ctx.Err() == nil {
				sent.Add(1)
				if _, err := client.ModelInfer(ctx, low); err != nil && ctx.Err() == nil {
					failed.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	for sent.Load() < priorityBacklog {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // every low request has reached the queue

	before := modelStats(b, client, priorityModel)
	waits := NewRecorder(b.N)
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		time.Sleep(rand.N(2 * priorityExec))
		b.StartTimer()
		start := time.Now()
		if _, err := client.ModelInfer(context.Background(), high); err != nil {
			b.Fatalf("high-priority request: %v", err)
		}
		waits.Add(time.Since(start))
	}
	b.StopTimer()
	after := modelStats(b, client, priorityModel)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("low-priority request: %v", err)
	}

	// One execution's time, measured: batch_stats' compute_infer over the
	// run, low and high requests alike.
	bn, bc := batchCompute(after)
	an, ac := batchCompute(before)
	if bc <= ac {
		b.Fatal("no executions recorded")
	}
	exec := time.Duration((bn - an) / (bc - ac))
	// A high request's wait is its latency less its own execution.
	latP50, latP99 := waits.Percentile(50), waits.Percentile(99)
	waitP50, waitP99 := max(latP50-exec, 0), max(latP99-exec, 0)
	n := waits.Len()
	record("priority-exec/backlog1000", Result{Conc: 1, N: n, P50: exec, P99: exec}, 0)
	record("nereid-priority-wait/backlog1000", Result{Conc: 1, N: n, P50: waitP50, P99: waitP99}, 0)
	ratio := float64(waitP50) / float64(exec)
	b.ReportMetric(ratio, "wait-p50/exec")
	b.ReportMetric(float64(waitP99)/float64(exec), "wait-p99/exec")
	// The backlog shows in the queue time of the low requests that ran.
	lowDone := (bc - ac) - uint64(n)
	queueNs := after.GetInferenceStats().GetQueue().GetNs() - before.GetInferenceStats().GetQueue().GetNs()
	lowQueue := time.Duration(0)
	if lowDone > 0 {
		lowQueue = (time.Duration(queueNs) - time.Duration(n)*waitP50) / time.Duration(lowDone)
	}
	setNote("nereid-priority-wait/backlog1000", fmt.Sprintf(
		"priority under overload: %d requests at priority 1 behind a backlog of %d at the default level 2 (%d low-priority executions meanwhile, queued about %s each): wait p50 %s = %.2fx one execution (%s), p99 %s = %.2fx; latency p50 %s, p99 %s",
		n, priorityBacklog, lowDone, dur(lowQueue), dur(waitP50), ratio, dur(exec), dur(waitP99), float64(waitP99)/float64(exec), dur(latP50), dur(latP99)))
}
