package seqrouter

import (
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/seqbatch"
)

// A stream's START that no router took while the router was starting is
// sent again by the gateway after a jittered backoff of up to a second,
// each request on its own: the requests after it can arrive first, and the
// START most of a second later. The router waits for it and enqueues the
// three in stream order (before, the later two were enqueued without their
// START after 250 ms and failed, and the sequence waited for them until it
// went idle). A predecessor that never comes is still given up on.
func TestStreamOrderWaitsForResentStart(t *testing.T) {
	m := &model{}
	id := seqbatch.UintID(1004)
	req := func(n uint64) *item { return &item{id: id, start: n == 1, end: n == 3, stream: "s", seq: n} }
	in := func(it *item) []*item {
		m.lock()
		defer m.unlock()
		return m.inOrder(time.Now(), it)
	}
	r1, r2, r3 := req(1), req(2), req(3)
	if got := in(r3); len(got) != 0 {
		t.Fatalf("the END was accepted before its predecessors: %v", got)
	}
	time.Sleep(100 * time.Millisecond)
	if got := in(r2); len(got) != 0 {
		t.Fatalf("the second request was accepted before the START: %v", got)
	}
	time.Sleep(800 * time.Millisecond) // within the gateway's resend delay
	m.lock()
	pre := len(m.pre)
	m.unlock()
	if pre != 0 {
		t.Fatalf("%d requests were accepted without their START", pre)
	}
	if got := in(r1); len(got) != 3 || got[0] != r1 || got[1] != r2 || got[2] != r3 {
		t.Fatalf("accepted %v, want the three in stream order", got)
	}

	// Sequence 1005's START never comes: its END is accepted once the
	// wait is over (and fails in the batcher as Triton's would).
	lone := &item{id: seqbatch.UintID(1005), end: true, stream: "s", seq: 2}
	if got := in(lone); len(got) != 0 {
		t.Fatalf("accepted %v before the wait was over", got)
	}
	if !waitUntil(func() bool {
		m.lock()
		defer m.unlock()
		return len(m.pre) == 1 && m.pre[0] == lone
	}) {
		t.Fatal("the request waiting for a predecessor that never came was not accepted")
	}
}
