package routines_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nereid-io/nereid/internal/testutil/leakcheck"
	"github.com/nereid-io/nereid/pkg/routines"
)

func TestStopCancelsWaitsAndRefuses(t *testing.T) {
	leakcheck.Check(t)
	g := routines.New(context.Background())
	var ended atomic.Int32
	started := make(chan struct{})
	for range 3 {
		if !g.Go(func(ctx context.Context) {
			started <- struct{}{}
			<-ctx.Done()
			ended.Add(1)
		}) {
			t.Fatal("Go refused before Stop")
		}
	}
	for range 3 {
		<-started
	}
	g.Stop()
	if n := ended.Load(); n != 3 {
		t.Fatalf("Stop returned with %d of 3 goroutines ended", n)
	}
	if g.Go(func(context.Context) { t.Error("ran after Stop") }) {
		t.Fatal("Go accepted after Stop")
	}
	if !g.Stopping() {
		t.Fatal("Stopping is false after Stop")
	}
}

func TestCloseWaitsWithoutCancelling(t *testing.T) {
	leakcheck.Check(t)
	g := routines.New(context.Background())
	release := make(chan struct{})
	var cancelled atomic.Bool
	g.Go(func(ctx context.Context) {
		<-release
		cancelled.Store(ctx.Err() != nil)
	})
	done := make(chan struct{})
	go func() { g.Close(); close(done) }()
	close(release)
	<-done
	if cancelled.Load() {
		t.Fatal("Close cancelled the goroutine's context")
	}
	if g.Go(func(context.Context) {}) {
		t.Fatal("Go accepted after Close")
	}
	g.Stop()
}

// TestPool: calls run concurrently (one blocked call does not hold up the
// next), each exactly once, and Close lets the idle goroutines go.
func TestPool(t *testing.T) {
	before := runtime.NumGoroutine()
	var p routines.Pool
	release := make(chan struct{})
	blocked := make(chan struct{})
	p.Go(func() { close(blocked); <-release })
	<-blocked
	var ran sync.WaitGroup
	var count atomic.Int64
	for range 100 {
		ran.Add(1)
		p.Go(func() { count.Add(1); ran.Done() })
	}
	ran.Wait() // with the first call still blocked
	if n := count.Load(); n != 100 {
		t.Fatalf("%d calls ran, want 100", n)
	}
	close(release)
	// Calls one after another after the burst run on the idle goroutines.
	done := make(chan struct{})
	for range 100 {
		p.Go(func() { done <- struct{}{} })
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("call did not run")
		}
	}
	p.Close()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left after Close, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
