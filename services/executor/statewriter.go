package executor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// writeConn is a connection to Redis of the state store's own, for the
// scripts on the path of a sequence's answers (saves and drops). It speaks
// RESP2 itself instead of going through go-redis, whose every command
// checks a connection out of its pool (a health-check syscall, recvfrom),
// runs its hooks, peeks for RESP3 push notifications and boxes each
// argument: a write is one write and the reads of its answer, and its
// commands are built in a buffer kept with the connection. One batch uses
// it at a time.
//
// It reads through Go's poller like any connection. Blocking reads (the
// socket in blocking mode, the batch's thread asleep in the kernel until
// Redis answers) were tried: they took one read (EAGAIN) and the poller's
// hand-off off each write, but cost more context switches per request
// (12.5-13.8 against 8.0-11.8 over 4,000 durable requests, perf stat),
// since the processor stays with the sleeping thread.
//
// Dialing (TCP or unix socket, TLS) is go-redis's, with the client's
// options; the handshake is AUTH (user and password, or a password alone)
// and SELECT, as go-redis does it.
type writeConn struct {
	nc  net.Conn
	rd  *bufio.Reader
	out []byte
	big net.Buffers // out, then large arguments written without a copy
}

// writeTimeout bounds the handshake of a connection whose context has no
// deadline (writes and drops run under their try's, durable.go).
const writeTimeout = 2 * time.Second

// bigArg is the size from which an argument is written from its own
// buffer (writev) instead of being copied into the command's.
const bigArg = 32 << 10

// replyError is an error reply of Redis: the connection stays usable.
type replyError string

func (e replyError) Error() string { return string(e) }

func dialWrite(ctx context.Context, opt *redis.Options) (*writeConn, error) {
	nc, err := opt.Dialer(ctx, opt.Network, opt.Addr)
	if err != nil {
		return nil, fmt.Errorf("dialing Redis for state writes: %w", err)
	}
	c := &writeConn{nc: nc, rd: bufio.NewReaderSize(nc, 4096)}
	if err := c.handshake(ctx, opt); err != nil {
		_ = nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *writeConn) handshake(ctx context.Context, opt *redis.Options) error {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(writeTimeout)
	}
	_ = c.nc.SetDeadline(dl)
	defer func() { _ = c.nc.SetDeadline(time.Time{}) }()
	var cmds [][]string
	switch {
	case opt.Username != "":
		cmds = append(cmds, []string{"AUTH", opt.Username, opt.Password})
	case opt.Password != "":
		cmds = append(cmds, []string{"AUTH", opt.Password})
	}
	if opt.DB != 0 {
		cmds = append(cmds, []string{"SELECT", strconv.Itoa(opt.DB)})
	}
	for _, cmd := range cmds {
		c.array(len(cmd))
		for _, a := range cmd {
			c.str(a)
		}
		if err := c.flush(); err != nil {
			return fmt.Errorf("Redis handshake for state writes: %w", err)
		}
		if _, err := c.reply(); err != nil {
			return fmt.Errorf("Redis handshake for state writes (%s): %w", cmd[0], err)
		}
	}
	return nil
}

// The command being built: RESP arrays of bulk strings.

func (c *writeConn) array(n int) {
	c.out = append(c.out, '*')
	c.out = strconv.AppendInt(c.out, int64(n), 10)
	c.out = append(c.out, '\r', '\n')
}

func (c *writeConn) head(n int) {
	c.out = append(c.out, '$')
	c.out = strconv.AppendInt(c.out, int64(n), 10)
	c.out = append(c.out, '\r', '\n')
}

func (c *writeConn) str(s string) {
	c.head(len(s))
	c.out = append(c.out, s...)
	c.out = append(c.out, '\r', '\n')
}

func (c *writeConn) bytes(b []byte) {
	c.head(len(b))
	if len(b) < bigArg {
		c.out = append(c.out, b...)
		c.out = append(c.out, '\r', '\n')
		return
	}
	c.big = append(c.big, c.out, b)
	c.out = []byte{'\r', '\n'}
}

// fixed writes v in width digits, zero-padded (the fences, compared as
// strings by the scripts).
func (c *writeConn) fixed(v uint64, width int) {
	var d [20]byte
	s := strconv.AppendUint(d[:0], v, 10)
	c.head(max(width, len(s)))
	for range width - len(s) {
		c.out = append(c.out, '0')
	}
	c.out = append(c.out, s...)
	c.out = append(c.out, '\r', '\n')
}

func (c *writeConn) int(v int64) {
	var d [20]byte
	s := strconv.AppendInt(d[:0], v, 10)
	c.head(len(s))
	c.out = append(c.out, s...)
	c.out = append(c.out, '\r', '\n')
}

// flush sends the commands built so far.
func (c *writeConn) flush() error {
	var err error
	if len(c.big) == 0 {
		_, err = c.nc.Write(c.out)
	} else {
		c.big = append(c.big, c.out)
		bufs := c.big
		_, err = bufs.WriteTo(c.nc)
		clear(c.big)
		c.big = c.big[:0]
	}
	c.out = c.out[:0]
	return err
}

// reply reads one reply: an integer, OK, or Redis's error as a replyError.
func (c *writeConn) reply() (int64, error) {
	line, err := c.rd.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return 0, fmt.Errorf("malformed Redis reply %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case ':':
		return strconv.ParseInt(string(body), 10, 64)
	case '+':
		return 0, nil
	case '-':
		return 0, replyError(body)
	default:
		return 0, fmt.Errorf("unexpected Redis reply %q", line)
	}
}

// close ends the connection.
func (c *writeConn) close() error { return c.nc.Close() }

// isConnError reports whether err leaves the connection unusable (all but
// Redis's error replies, after which the replies still line up).
func isConnError(err error) bool {
	if err == nil {
		return false
	}
	var r replyError
	return !errors.As(err, &r)
}
