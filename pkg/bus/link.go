package bus

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// DefaultReconnectWait is how long a request made while the connection to
// NATS is down waits for it to come back before it fails, not sent
// (WithReconnectWait).
const DefaultReconnectWait = 5 * time.Second

// WithReconnectWait sets how long a request made while the connection to
// NATS is down waits for the reconnect (default DefaultReconnectWait).
func WithReconnectWait(d time.Duration) Option { return func(o *options) { o.reconnectWait = d } }

// errLinkLost ends a transfer whose connection dropped: its replies, sent
// to the old connection's subscriptions, can no longer arrive.
var errLinkLost = errors.New("bus: the connection to NATS was lost")

// link follows the state of the NATS connection. Each time the connection
// comes up it starts a generation; lost is closed when that generation's
// connection drops, which fails every transfer waiting on it at once
// (instead of at its deadline); up is closed while connected, so that a
// request made during an outage can wait for the reconnect.
type link struct {
	mu   sync.Mutex
	gen  uint64
	isUp bool
	lost chan struct{}
	up   chan struct{}
}

func newLink(connected bool) *link {
	l := &link{lost: make(chan struct{}), up: make(chan struct{})}
	if connected {
		l.isUp = true
		close(l.up)
	} else {
		close(l.lost)
	}
	return l
}

// state returns the current generation's lost channel and the up channel.
func (l *link) state() (lost, up <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost, l.up
}

func (l *link) dropped() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isUp {
		l.isUp = false
		close(l.lost)
		l.up = make(chan struct{})
	}
}

func (l *link) restored() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.isUp {
		l.isUp = true
		l.gen++
		l.lost = make(chan struct{})
		close(l.up)
	}
}

// Generation counts the reconnects of the connection: state tied to the
// connection (a held request's reply subject, an executor's liveness
// while nothing could be heard) is stale once it changes.
func (c *Conn) Generation() uint64 {
	c.link.mu.Lock()
	defer c.link.mu.Unlock()
	return c.link.gen
}

// Connected reports whether the connection to NATS is up.
func (c *Conn) Connected() bool {
	c.link.mu.Lock()
	defer c.link.mu.Unlock()
	return c.link.isUp
}

// followLink updates the link from the connection's status events until
// the Conn closes.
func (c *Conn) followLink(events chan nats.Status) {
	defer c.nc.RemoveStatusListener(events)
	for {
		select {
		case <-c.done:
			return
		case _, ok := <-events:
			if !ok {
				return
			}
			// Events may be dropped when they come in a burst: the
			// connection's own state is the truth.
			if c.nc.IsConnected() {
				c.link.restored()
			} else {
				c.link.dropped()
			}
		}
	}
}

// awaitLink waits, at most the reconnect wait, for the connection to be
// up, so that a request is not sent into a connection that cannot answer.
func (c *Conn) awaitLink(ctx context.Context, subject string) error {
	_, up := c.link.state()
	select {
	case <-up:
		return nil
	default:
	}
	t := time.NewTimer(c.opts.reconnectWait)
	defer t.Stop()
	select {
	case <-up:
		return nil
	case <-ctx.Done():
		return transferError(ctx.Err(), subject)
	case <-c.done:
		return transferError(errClosed, subject)
	case <-t.C:
		return tritonerr.Unavailablef("request to %s was not sent: the connection to NATS is down and did not come back within %v; the request was not run",
			target(subject), c.opts.reconnectWait)
	}
}
