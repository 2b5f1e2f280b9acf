package executor

import (
	"fmt"
	"net"
	"syscall"
	"time"
)

// blockingReads puts the socket under nc in blocking mode, with timeout
// as its kernel timeouts (SO_RCVTIMEO, SO_SNDTIMEO): Go's reads and writes
// on it are then plain blocking system calls (see writeConn). When a
// timeout passes, the call fails with EAGAIN and Go's poller takes over,
// under the connection's deadlines. A connection that is not a socket is
// left as it is.
func blockingReads(nc net.Conn, timeout time.Duration) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	tv := syscall.NsecToTimeval(timeout.Nanoseconds())
	var serr error
	err = rc.Control(func(fd uintptr) {
		if serr = syscall.SetsockoptTimeval(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); serr != nil {
			return
		}
		if serr = syscall.SetsockoptTimeval(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv); serr != nil {
			return
		}
		serr = syscall.SetNonblock(int(fd), false)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("blocking mode: %w", err)
	}
	return nil
}
