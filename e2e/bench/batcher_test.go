package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

// The dynamic batcher's efficiency (testdata/batcher_repository): a model
// that takes 2 ms per execution whatever its batch size, max_batch_size 8,
// dynamic batching, one and two instances, driven over gRPC at c=64.
// Ideal throughput is 8 inferences per 2 ms per instance; the statistics
// say how full the batches were and how long requests queued.

const (
	batchExec       = 2 * time.Millisecond
	batchMax        = 8
	batchConcurrent = 64
)

func init() {
	comparisons = append(comparisons,
		comparison{"nereid-batcher-1/c64", "ideal-batcher-1/c64", throughput, 0.90, 0},
		comparison{"nereid-batcher-2/c64", "ideal-batcher-2/c64", throughput, 0.90, 0},
	)
}

var batcherOnce struct {
	sync.Mutex
	addr string
	err  error
}

func batcherServer(b *testing.B) string {
	batcherOnce.Lock()
	defer batcherOnce.Unlock()
	if batcherOnce.addr == "" && batcherOnce.err == nil {
		batcherOnce.addr, batcherOnce.err = startRepoServer(filepath.Join("testdata", "batcher_repository"), "batch2ms_1", "batch2ms_2")
	}
	if batcherOnce.err != nil {
		b.Fatalf("starting the batcher fixture: %v", batcherOnce.err)
	}
	return batcherOnce.addr
}

func BenchmarkBatcher(b *testing.B) {
	payload := FP32Payload(small)
	for _, instances := range []int{1, 2} {
		model := fmt.Sprintf("batch2ms_%d", instances)
		b.Run(fmt.Sprintf("%s/c=%d", model, batchConcurrent), func(b *testing.B) {
			client := inference.NewGRPCInferenceServiceClient(fx.conn(b, batcherServer(b)))
			req := InferRequest(payload)
			req.ModelName = model
			before := modelStats(b, client, model)
			key := fmt.Sprintf("nereid-batcher-%d/c%d", instances, batchConcurrent)
			res := measure(b, key, batchConcurrent, warmSmall, InferUnary(client, req))
			after := modelStats(b, client, model)

			ideal := float64(instances*batchMax) / batchExec.Seconds()
			record(fmt.Sprintf("ideal-batcher-%d/c%d", instances, batchConcurrent), Result{Conc: batchConcurrent, N: res.N, PerSec: ideal}, 0)
			execs := after.GetExecutionCount() - before.GetExecutionCount()
			infers := after.GetInferenceCount() - before.GetInferenceCount()
			queue := after.GetInferenceStats().GetQueue()
			queueNs := queue.GetNs() - before.GetInferenceStats().GetQueue().GetNs()
			queued := queue.GetCount() - before.GetInferenceStats().GetQueue().GetCount()
			if execs == 0 || queued == 0 {
				b.Fatalf("%s: no executions recorded", model)
			}
			meanBatch := float64(infers) / float64(execs)
			// The executions' own time (batch_stats' compute_infer): the
			// rest of each cycle is the gap between executions.
			bn, bc := batchCompute(after)
			an, ac := batchCompute(before)
			meanExec := time.Duration(0)
			if bc > ac {
				meanExec = time.Duration((bn - an) / (bc - ac))
			}
			cycle := time.Duration(float64(time.Second) * float64(instances) / (res.PerSec / meanBatch))
			meanQueue := time.Duration(queueNs / queued)
			// The client's p50 is queue + execution + transport, so p50
			// minus one execution bounds the queue time's p50 from above.
			queueP50 := max(res.P50-batchExec, 0)
			b.ReportMetric(res.PerSec/ideal, "ratio-ideal")
			b.ReportMetric(meanBatch, "batch-size")
			b.ReportMetric(float64(meanQueue)/float64(batchExec), "queue-mean/exec")
			setNote(key, fmt.Sprintf("%s: %.0f inferences/s = %.2fx ideal (%.0f/s); mean batch %.2f of %d; an execution took %s, one every %s per instance; queue mean %s = %.2fx the execution time, p50 <= %s (client p50 %s minus one execution) = %.2fx; %d instance(s) at c=%d (closed loop: at saturation Little's law puts the wait at about c/ideal - exec = %s)",
				model, res.PerSec, res.PerSec/ideal, ideal, meanBatch, batchMax, dur(meanExec), dur(cycle), dur(meanQueue), float64(meanQueue)/float64(batchExec),
				dur(queueP50), dur(res.P50), float64(queueP50)/float64(batchExec), instances, batchConcurrent,
				dur(time.Duration(float64(batchConcurrent)/ideal*float64(time.Second))-batchExec)))
		})
	}
}

// batchCompute sums batch_stats' compute_infer: the time executions took
// and how many there were.
func batchCompute(st *inference.ModelStatistics) (ns, count uint64) {
	for _, b := range st.GetBatchStats() {
		ns += b.GetComputeInfer().GetNs()
		count += b.GetComputeInfer().GetCount()
	}
	return ns, count
}

func modelStats(b *testing.B, c inference.GRPCInferenceServiceClient, model string) *inference.ModelStatistics {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: model, Version: "1"})
	if err != nil {
		b.Fatalf("statistics of %s: %v", model, err)
	}
	if len(resp.GetModelStats()) != 1 {
		b.Fatalf("statistics of %s: %d models", model, len(resp.GetModelStats()))
	}
	return proto.Clone(resp.GetModelStats()[0]).(*inference.ModelStatistics)
}
