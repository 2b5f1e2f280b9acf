package seqbatch

import (
	"errors"
	"fmt"
	"time"

	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// ErrRejected is what every error of a request refused or given up on by
// the batcher's limits unwraps to (errors.Is): a full backlog
// (Config.MaxBacklog) and timeouts (Request.Timeout, Config.QueueTimeout).
// Triton counts such failures with reason REJECTED. The error also unwraps
// to its UNAVAILABLE tritonerr.Error.
var ErrRejected = errors.New("rejected by the sequence batcher's limits")

// rejection is an error that unwraps to ErrRejected and to te.
type rejection struct{ te *tritonerr.Error }

func (e *rejection) Error() string   { return e.te.Msg }
func (e *rejection) Unwrap() []error { return []error{e.te, ErrRejected} }

func rejected(format string, args ...any) error {
	return &rejection{tritonerr.Unavailablef(format, args...)}
}

// errBacklogFull refuses the START of id: the backlog holds
// Config.MaxBacklog sequences. It begins with the words of Triton's
// dynamic batcher for a full queue, so that a client that knows them
// knows this one.
func (m *Model) errBacklogFull(id ID) error {
	return rejected("Exceeds maximum queue size: the sequence backlog of model '%s' is full (max sequence backlog %d); sequence %s was not started",
		m.cfg.Model, m.cfg.MaxBacklog, id.text())
}

// deadline is when r, arriving at now, times out while it waits: after
// Config.QueueTimeout, or after its own Timeout when that is shorter (a
// request never lengthens the model's timeout). Zero when neither is set.
// Without Config.QueueTimeout it applies in the backlog only, as Triton's
// request timeout does.
func (m *Model) deadline(now time.Time, r *Request) time.Time {
	d := m.cfg.QueueTimeout
	if r.Timeout > 0 && (d == 0 || r.Timeout < d) {
		d = r.Timeout
	}
	if d <= 0 {
		return time.Time{}
	}
	return now.Add(d)
}

// timeoutText names the timeout that applies to r (nil: the model's).
func (m *Model) timeoutText(r *Request) string {
	if r != nil && r.Timeout > 0 && r.Timeout < m.cfg.QueueTimeout {
		return fmt.Sprintf("the request's timeout of %d microseconds", r.Timeout.Microseconds())
	}
	return fmt.Sprintf("the model's timeout of %d microseconds (%s)", m.cfg.QueueTimeout.Microseconds(), modelconfig.SequenceQueueTimeoutParameter)
}

// errBacklogTimeout fails the requests of backlog queue q, whose timeout
// passed: Triton's message without Config.QueueTimeout (only a request's
// own timeout expires a backlog sequence then), Nereid's, naming the
// sequence, the model and the timeout, with it.
func (m *Model) errBacklogTimeout(q *backlogQueue) error {
	if m.cfg.QueueTimeout <= 0 {
		return rejected("timeout of the corresponding sequence has been expired")
	}
	// The request whose deadline expired the queue; none when it is a
	// sequence restored from the store, timed by the model's timeout.
	var by *Request
	for _, r := range q.reqs {
		if r.deadline.Equal(q.expire) {
			by = r
			break
		}
	}
	what := "the sequence was not started and none of its requests ran"
	if q.resume {
		what = "the sequence ended and none of its waiting requests ran"
	}
	return rejected("Request timeout expired: sequence %s of model '%s' waited in the sequence backlog for a free slot past %s; %s",
		q.id.text(), m.cfg.Model, m.timeoutText(by), what)
}

// backlogTimeoutWhy is what the START error of the next request of a
// sequence that timed out in the backlog says.
func backlogTimeoutWhy(q *backlogQueue) string {
	if q.resume {
		return "the sequence timed out in the sequence backlog"
	}
	return "the sequence timed out in the sequence backlog before it started"
}

// expireSlot applies Config.QueueTimeout to the requests waiting in slot i
// of in: the first whose deadline has passed fails, with the requests of
// its sequence queued behind it, and its sequence ends (withdraw), as a
// cancelled request's does: the requests ahead of it still run, its later
// requests need START again (the START error says why), and the slot goes
// to the backlog. A timed-out START leaves no sequence behind: it was not
// run. A timed-out request in the middle of a sequence ends the sequence
// rather than letting it continue without that step: a stateful model's
// later results would silently be wrong, and Triton, too, gives up on the
// whole sequence when one of its requests times out in the backlog.
func (m *Model) expireSlot(now time.Time, in *instance, i int) []Failure {
	sl := &in.slots[i]
	at := -1
	for j, r := range sl.queue {
		if !r.deadline.IsZero() && !now.Before(r.deadline) {
			at = j
			break
		}
	}
	if at < 0 {
		return nil
	}
	r := sl.queue[at]
	outcome, why := "ended", "a request of the sequence timed out in the sequence router"
	if r.Start {
		outcome, why = "was not started", "its START request timed out in the sequence router, so the sequence was not started"
	}
	m.log.Info("request timed out in its slot: the sequence ends", "model", m.cfg.Model, "sequence", r.ID.text(),
		"executor", in.key.Executor, "instance", in.key.Index, "slot", i, "failed", len(sl.queue)-at, "still to run", at)
	return m.withdraw(now, in, i, at, func(q *Request) error {
		if q == r {
			return rejected("Request timeout expired: inference request for sequence %s to model '%s' waited for its turn in the sequence's batch slot past %s; the request was not run and the sequence %s",
				q.ID.text(), m.cfg.Model, m.timeoutText(q), outcome)
		}
		return rejected("Request timeout expired: inference request for sequence %s to model '%s' was not run: an earlier request of the sequence timed out in the sequence router and the sequence %s",
			q.ID.text(), m.cfg.Model, outcome)
	}, why)
}
