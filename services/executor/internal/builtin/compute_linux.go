package builtin

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// computeClock is an instance's timer for the time its executions take: a
// timerfd(2) read through the runtime's network poller.
//
// A Go timer is not precise enough for a model that stands for a given
// compute time: the runtime's idle threads wait for the next timer in
// epoll_wait, whose timeout is in whole milliseconds, so a 2 ms wait ended
// 0.7 ms late at the median in a server busy with 64 clients on 2 vCPUs,
// and a "2 ms" model took 2.7 ms. A timerfd's expiry wakes that same
// epoll_wait when it happens (within about 0.1 ms there), while the waiting
// goroutine is parked like any other reader and holds no thread, as a
// blocking nanosleep(2) would (which kept clients off the CPU when two
// instances slept at once).
type computeClock struct {
	fd int
	f  *os.File // owns fd; reads go through the poller
}

// newComputeClock returns a clock, or nil where timerfds are not available
// (compute then falls back to Go timers).
func newComputeClock() *computeClock {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	return &computeClock{fd: fd, f: os.NewFile(uintptr(fd), "compute-timerfd")}
}

// sleep waits d (> 0). An instance executes one batch at a time, so its
// clock is never armed twice at once.
func (c *computeClock) sleep(d time.Duration) {
	if c == nil || c.f == nil {
		time.Sleep(d)
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(max(int64(d), 1))}
	if err := unix.TimerfdSettime(c.fd, 0, &spec, nil); err != nil {
		time.Sleep(d)
		return
	}
	var expirations [8]byte
	if _, err := c.f.Read(expirations[:]); err != nil {
		time.Sleep(d) // the clock is closed: still take the time asked
	}
}

// close releases the timerfd; the clock then waits on Go timers.
func (c *computeClock) close() {
	if c != nil && c.f != nil {
		c.f.Close()
		c.f = nil
	}
}
