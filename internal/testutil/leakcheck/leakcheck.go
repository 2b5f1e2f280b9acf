// Package leakcheck fails a test that leaves goroutines behind, in the
// manner of grpc-go's leakcheck: Check, deferred at the start of a test
// (or registered with t.Cleanup), compares the goroutines running at the
// end with those running at the start and waits a while for stragglers
// that are already on their way out.
package leakcheck

import (
	"runtime"
	"slices"
	"strings"
	"time"
)

// TB is the part of testing.TB that Check uses.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Cleanup(func())
}

// Grace is how long Check waits for goroutines that are ending: a
// generous bound, not a measure of speed, so that a loaded machine does
// not make a test fail.
var Grace = 20 * time.Second

// Check records the goroutines running now and, at the test's cleanup,
// fails t with the stacks of those started since that are still running
// Grace later. Call it first thing in a test: cleanups run last-in
// first-out, so the check comes after every cleanup the test registers
// later, and after the test's deferred calls.
func Check(t TB) {
	t.Helper()
	before := ids(stacks())
	t.Cleanup(func() {
		deadline := time.Now().Add(Grace)
		var left []string
		for {
			left = left[:0]
			for _, g := range stacks() {
				if !before[id(g)] && !ignored(g) {
					left = append(left, g)
				}
			}
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		for _, g := range left {
			t.Errorf("leaked goroutine:\n%s", g)
		}
	})
}

// stacks returns one entry per goroutine other than the caller's.
func stacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := strings.Split(string(buf), "\n\n")
	if len(all) > 0 {
		all = all[1:] // the calling goroutine
	}
	return slices.DeleteFunc(all, func(s string) bool { return strings.TrimSpace(s) == "" })
}

// id is a goroutine's header line's number ("goroutine 12 [running]:").
func id(stack string) string {
	head, _, _ := strings.Cut(stack, "\n")
	f := strings.Fields(head)
	if len(f) < 2 {
		return head
	}
	return f[1]
}

func ids(stacks []string) map[string]bool {
	out := make(map[string]bool, len(stacks))
	for _, s := range stacks {
		out[id(s)] = true
	}
	return out
}

// ignored are goroutines of the runtime and the test framework (other
// tests' bodies among them), which come and go on their own.
func ignored(stack string) bool {
	for _, fn := range []string{
		"testing.tRunner",
		"testing.runFuzzing",
		"testing.(*F).Fuzz",
		"os/signal.signal_recv",
		"runtime.ensureSigM",
	} {
		if strings.Contains(stack, fn) {
			return true
		}
	}
	return false
}
