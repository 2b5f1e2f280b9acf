package executor

import (
	"testing"

	"github.com/nereid-io/nereid/services/executor/internal/dynbatch"
)

// TestPreserveOrdering checks preserve_ordering: with it, a request is
// answered (finished) only once every request queued before it is, even
// when its execution ends first, as on another instance; without it each
// is answered as its execution ends.
func TestPreserveOrdering(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		s := &scheduler{mv: &modelVersion{stats: newStats()}, notify: make(chan struct{}, 1),
			queue: dynbatch.New[*pending](dynbatch.Config{}), ordered: ordered}
		ps := make([]*pending, 3)
		for i := range ps {
			ps[i] = &pending{size: 1}
			if err := s.enqueue(ps[i]); err != nil {
				t.Fatal(err)
			}
		}
		answered := func() (out []bool) {
			for _, p := range ps {
				out = append(out, p.answered())
			}
			return out
		}
		// The executions end last first.
		ps[2].finish()
		ps[1].finish()
		got := answered()
		if ordered && (got[1] || got[2]) {
			t.Fatalf("preserve_ordering: answered %v before the first request", got)
		}
		if !ordered && (!got[1] || !got[2]) {
			t.Fatalf("without preserve_ordering: answered %v, want the finished ones", got)
		}
		done := ps[2].doneCh()
		ps[0].finish()
		<-done
		if got := answered(); !got[0] || !got[1] || !got[2] {
			t.Fatalf("ordered %v: answered %v after all finished", ordered, got)
		}
	}
}
