//go:build cgo

package cbackend

import (
	"runtime"
	"sync"

	"github.com/nereid-io/nereid/api/inference"
)

// runner runs an instance's calls into the backend one at a time: on a
// dedicated locked OS thread (thread) or on the caller's (callerThread).
type runner interface {
	do(f func())
	stop()
}

// thread runs functions on one locked OS thread, one at a time.
type thread struct {
	work chan func()
	done chan struct{}
}

func startThread() *thread {
	t := &thread{work: make(chan func()), done: make(chan struct{})}
	go func() {
		// Never unlocked: the thread ends with the goroutine, so thread-local
		// state a backend left behind dies with it.
		runtime.LockOSThread()
		defer close(t.done)
		for f := range t.work {
			f()
		}
	}()
	return t
}

func (t *thread) do(f func()) {
	ch := make(chan struct{})
	t.work <- func() { f(); close(ch) }
	<-ch
}

func (t *thread) stop() {
	close(t.work)
	<-t.done
}

// callerThread runs functions on the calling goroutine's OS thread (a cgo
// call keeps its thread until it returns, callbacks into Go included),
// one at a time. Handing each execution to a dedicated thread and back
// costs two wake-ups of sleeping threads, which for a small request is
// most of the time an execution takes.
type callerThread struct{ mu sync.Mutex }

func (t *callerThread) do(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f()
}

func (t *callerThread) stop() {}

// runnerFor chooses where an instance's calls run. Triton runs each
// instance on a thread of its own; what a backend can observe of that is
// thread-local state kept from one call to the next. That matters on a
// GPU: CUDA's current device and context are per thread, set by the
// backend (or by Triton) once and relied on by every later Execute, so GPU
// and MODEL instances (a MODEL instance places itself, usually on GPUs)
// keep a dedicated locked thread. A CPU instance has no such state worth
// the two thread wake-ups per execution: it runs on the scheduler's
// goroutine, still never two calls at once. Within one call the thread
// does not change, so locks a backend takes and releases in a call, and
// thread-local state of a call, behave as on Triton's thread.
func runnerFor(kind inference.ModelInstanceGroup_Kind) runner {
	switch kind {
	case inference.ModelInstanceGroup_KIND_GPU, inference.ModelInstanceGroup_KIND_MODEL:
		return startThread()
	}
	return &callerThread{}
}
