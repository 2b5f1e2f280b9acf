package gateway

import (
	"errors"
	"time"

	"github.com/nereid-io/nereid/pkg/bus"
)

// notRun says how a send of a sequence request to the router ended, as far
// as sending it again is concerned. Only a request that provably did not
// run is sent again: running a sequence step twice would apply it twice.
type notRun uint8

const (
	// ran: the request was answered (a success, or a failure that is the
	// client's answer), or it may have run (its responder was lost and no
	// router said it was not run).
	ran notRun = iota
	// notTaken: nobody acted on it: no router received it (none serves
	// the model yet, a takeover is in progress), or the one that did
	// refused it without running it (bus.IsNoResponders: it stepped down,
	// it could not record a START in its store, an executor refused the
	// batch of an old lease).
	notTaken
	// heldAndLost: the router holding it was lost before running it, as
	// the router that took the model over said (resolve); that router
	// never runs the request under the token it declared lost.
	heldAndLost
)

func (n notRun) String() string {
	switch n {
	case notTaken:
		return "not taken"
	case heldAndLost:
		return "held and lost"
	}
	return "ran"
}

// sendOutcome classifies a send's error: err is what the send returned,
// cause the cause of its request context's end (errRouterLost when a
// takeover's resolve declared the send lost).
func sendOutcome(err, cause error) notRun {
	switch {
	case err == nil:
		return ran
	case errors.Is(cause, errRouterLost):
		return heldAndLost
	case bus.IsNoResponders(err):
		return notTaken
	}
	return ran
}

// Bounds of the resends of a sequence request that was not run.
const (
	// ResendLimit is how long after its first send a request is sent
	// again at most, when its deadline does not end it earlier: the
	// takeover of a killed router (a lease TTL, then the takeover's
	// gather) or a Redis restart fit many times into it.
	ResendLimit = 30 * time.Second
	// resendMin and resendMax bound the backoff between sends (full
	// jitter, pkg/backoff).
	resendMin = 50 * time.Millisecond
	resendMax = time.Second
)

// resendAfter decides whether a request whose send ended with nr goes to
// the router again, and after how long: delay is the backoff's next
// (jittered) delay. It gives up when the request ran or may have run, and
// when the delay would reach past the request's deadline (zero: none) or
// past ResendLimit after began, its first send, so that a request given up
// on is answered while its client still waits.
func resendAfter(nr notRun, began, deadline, now time.Time, delay time.Duration) (time.Duration, bool) {
	if nr == ran {
		return 0, false
	}
	limit := began.Add(ResendLimit)
	if !deadline.IsZero() && deadline.Before(limit) {
		limit = deadline
	}
	if !now.Add(delay).Before(limit) {
		return 0, false
	}
	return delay, true
}
