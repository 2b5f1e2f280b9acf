package executor

import (
	"testing"
	"time"

	"github.com/nereid-io/nereid/services/executor/internal/dynbatch"
)

// BenchmarkSchedulerBatch measures the scheduler's own work per batch under
// load, on its real paths and with no backend: eight requests queued while
// every instance is busy (enqueue), then an instance frees up and the
// batcher cuts them (next: dropping the cancelled ones, cutting, taking
// the batch off the queue).
func BenchmarkSchedulerBatch(b *testing.B) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
		sizes []int
	}{
		{"no-delay/8x1", 0, []int{1, 1, 1, 1, 1, 1, 1, 1}},
		{"delay/8x1", time.Hour, []int{1, 1, 1, 1, 1, 1, 1, 1}},
		{"no-delay/3,3,2", 0, []int{3, 3, 2}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := benchScheduler(tc.delay)
			in := &instance{}
			ps := make([]*pending, len(tc.sizes))
			for i, n := range tc.sizes {
				ps[i] = &pending{size: n}
			}
			b.ReportAllocs()
			for b.Loop() {
				for _, p := range ps {
					if err := s.enqueue(p); err != nil {
						b.Fatal(err)
					}
				}
				<-s.notify
				s.free = append(s.free, in)
				got, batch := s.next()
				if got != in || len(batch) != len(ps) {
					b.Fatalf("batch of %d", len(batch))
				}
			}
		})
	}
}

// benchScheduler is a scheduler of max_batch_size 8 with no instances of
// its own and no batcher goroutine: the benchmark plays both.
func benchScheduler(delay time.Duration) *scheduler {
	return &scheduler{mv: &modelVersion{stats: newStats()}, notify: make(chan struct{}, 1),
		queue: dynbatch.New[*pending](dynbatch.Config{MaxBatchSize: 8, MaxQueueDelay: delay})}
}
