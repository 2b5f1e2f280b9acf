package redisconn

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/nereid-io/nereid/pkg/backoff"
)

// Transient reports whether err is a Redis failure that waiting fixes: the
// connection was refused, reset or closed (Redis restarting, a network
// blip), or Redis answered LOADING (it restarted and is still reading its
// data set into memory; it runs no command until it is done). go-redis
// retries these a few times within a command (tens of milliseconds), which
// outlasts neither a restart nor the load of a large data set: callers that
// can wait retry them (Retry), and callers that cannot hand the failure back
// as one to try again. Refused credentials and certificates, error replies
// of other kinds (a script's own errors) and the caller's own deadline are
// not transient.
func Transient(err error) bool {
	if err == nil || permanent(err) {
		return false
	}
	if redis.IsLoadingError(err) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op)
}

// Retry runs op until it succeeds, fails with an error that is not
// Transient, or ctx ends, backing off with jitter between tries (b's
// bounds; nil is backoff's defaults). It returns nil or op's last error.
func Retry(ctx context.Context, b *backoff.Backoff, op func(context.Context) error) error {
	if b == nil {
		b = &backoff.Backoff{}
	}
	for {
		err := op(ctx)
		if err == nil || !Transient(err) {
			return err
		}
		if b.Wait(ctx) != nil {
			return err
		}
	}
}
