package bus

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every job runs, concurrently when they block each other, and idle
// workers are reused rather than multiplied.
func TestWorkersRunEveryJobConcurrently(t *testing.T) {
	var w workers
	const n = 64
	var wg sync.WaitGroup
	var ran atomic.Int64
	release := make(chan struct{})
	for range n {
		wg.Add(1)
		w.run(func() {
			defer wg.Done()
			ran.Add(1)
			<-release // all jobs block until every one has started
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for ran.Load() < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := ran.Load(); got != n {
		t.Fatalf("%d of %d blocking jobs started: jobs waited for each other", got, n)
	}
	close(release)
	wg.Wait()

	// Sequential jobs after the burst run on the idle workers.
	done := make(chan struct{})
	for range 100 {
		w.run(func() { done <- struct{}{} })
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("job did not run")
		}
	}
}
