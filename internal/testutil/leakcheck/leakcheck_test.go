package leakcheck

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a TB that keeps the errors and runs the cleanups on demand.
type recorder struct {
	errs     []string
	cleanups []func()
}

func (r *recorder) Helper()                      {}
func (r *recorder) Errorf(f string, args ...any) { r.errs = append(r.errs, fmt.Sprintf(f, args...)) }
func (r *recorder) Cleanup(f func())             { r.cleanups = append(r.cleanups, f) }
func (r *recorder) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func TestReportsALeakedGoroutine(t *testing.T) {
	old := Grace
	Grace = 50 * time.Millisecond
	defer func() { Grace = old }()
	r := &recorder{}
	Check(r)
	stop := make(chan struct{})
	go leakyWorker(stop)
	r.end()
	close(stop)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "leakyWorker") {
		t.Fatalf("errors %q, want one naming leakyWorker", r.errs)
	}
}

func TestWaitsForAGoroutineOnItsWayOut(t *testing.T) {
	r := &recorder{}
	Check(r)
	go leakyWorker(closedAfter(20 * time.Millisecond))
	r.end()
	if len(r.errs) != 0 {
		t.Fatalf("errors %q for a goroutine that ended", r.errs)
	}
}

func leakyWorker(stop <-chan struct{}) { <-stop }

func closedAfter(d time.Duration) <-chan struct{} {
	c := make(chan struct{})
	time.AfterFunc(d, func() { close(c) })
	return c
}
