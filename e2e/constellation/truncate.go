package constellation

import (
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// TruncateLoop plays a hostile shared-memory client: it shrinks the file at
// path to nothing and grows it back to size, over and over, until the
// returned stop is called. stop waits for the loop and returns how many
// times it truncated the file.
func TruncateLoop(t testing.TB, path string, size int64) (stop func() int64) {
	done := make(chan struct{})
	var truncations atomic.Int64
	var loop sync.WaitGroup
	loop.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := os.Truncate(path, 0); err != nil {
				t.Error(err)
				return
			}
			if err := os.Truncate(path, size); err != nil {
				t.Error(err)
				return
			}
			truncations.Add(1)
		}
	})
	return func() int64 {
		close(done)
		loop.Wait()
		return truncations.Load()
	}
}
