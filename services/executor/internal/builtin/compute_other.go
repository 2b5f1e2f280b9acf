//go:build !linux

package builtin

import "time"

// computeClock waits on Go timers where timerfd(2) is not at hand.
type computeClock struct{}

func newComputeClock() *computeClock        { return nil }
func (*computeClock) sleep(d time.Duration) { time.Sleep(d) }
func (*computeClock) close()                {}
