package seqbatch

import (
	"slices"
	"time"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Cancel withdraws r, which its client cancelled, with the rules of
// Triton's sequence batcher for cancelled requests (a cancelled request
// ends its sequence):
//
//   - r fails with CANCELLED (CancelledError), and so does every request of
//     its sequence queued behind it in its slot. Requests ahead of it in the
//     slot still run: Triton's batcher finds a cancellation when the
//     request reaches the front of its slot's queue.
//   - A sequence waiting in the backlog is cancelled as a whole: every
//     request of its backlog queue fails with CANCELLED (Triton checks the
//     whole queue when the sequence would take a slot).
//   - The sequence ends: its id is forgotten (its later requests without
//     START fail with Triton's START error, saying the sequence was
//     cancelled), and its slot is released once the requests ahead of r
//     have left, at once when there are none, for the oldest backlog
//     sequence.
//
// Triton finds cancellations when it next looks at the queue; Cancel acts
// at once, so the requests fail without waiting for the slot's turn. It
// returns nil when the batcher no longer holds r: it left in a batch (the
// executor running it follows the cancellation) or failed already.
func (m *Model) Cancel(now time.Time, r *Request) []Failure {
	for _, in := range m.instances {
		for i := range in.slots {
			at := slices.Index(in.slots[i].queue, r)
			if at < 0 {
				continue
			}
			m.log.Info("sequence cancelled by its client: releasing its slot", "model", m.cfg.Model, "sequence", r.ID.text(),
				"executor", in.key.Executor, "instance", in.key.Index, "slot", i, "cancelled", len(in.slots[i].queue)-at, "still to run", at)
			return m.withdraw(now, in, i, at, func(q *Request) error { return m.cancelErr(r, q) }, whyCancelled)
		}
	}
	for qi, q := range m.backlog {
		if !slices.Contains(q.reqs, r) {
			continue
		}
		out := m.cancelled(r, q.reqs)
		m.backlog = slices.Delete(m.backlog, qi, qi+1)
		if !q.ended {
			m.endCancelled(now, q.id)
		}
		m.log.Info("sequence cancelled by its client in the backlog", "model", m.cfg.Model, "sequence", r.ID.text(), "cancelled", len(out))
		return out
	}
	return nil
}

// cancelled fails reqs, r (the request its client cancelled) among them.
func (m *Model) cancelled(r *Request, reqs []*Request) []Failure {
	out := make([]Failure, 0, len(reqs))
	for _, q := range reqs {
		out = append(out, m.failed(q, m.cancelErr(r, q)))
	}
	return out
}

// cancelErr is the error of q, which fails because its client cancelled r
// (q itself, or an earlier request of its sequence).
func (m *Model) cancelErr(r, q *Request) error {
	if q != r {
		return tritonerr.New(tritonerr.Cancelled, "inference request for sequence %s to model '%s' was cancelled: another request of the sequence was cancelled", q.ID.text(), m.cfg.Model)
	}
	return CancelledError(m.cfg.Model, q.ID)
}

// whyCancelled is what the START error of a cancelled sequence's next
// request says.
const whyCancelled = "the sequence was cancelled"

// endCancelled forgets a cancelled sequence, remembering why for its next
// request's START error.
func (m *Model) endCancelled(now time.Time, id ID) {
	m.forget(id)
	m.lost[id] = lostSeq{why: whyCancelled, at: now}
}

// withdraw gives up on the requests of slot i of in from position at on:
// the one given up on (cancelled, timed out) and the requests of its
// sequence behind it, each failing with errFor's error. Requests ahead of
// it still run. The slot's sequence ends (only its owner's requests queue
// in an owned slot): its id is forgotten, and its next request's START
// error says why; the slot goes to the oldest backlog sequence once the
// requests ahead have left, at once when there are none.
func (m *Model) withdraw(now time.Time, in *instance, i, at int, errFor func(*Request) error, why string) []Failure {
	sl := &in.slots[i]
	id := sl.queue[at].ID
	out := make([]Failure, 0, len(sl.queue)-at)
	for _, q := range sl.queue[at:] {
		out = append(out, m.failed(q, errFor(q)))
	}
	clear(sl.queue[at:])
	sl.queue = sl.queue[:at]
	if sl.owner != nil {
		sl.owner = nil
		m.forget(id)
		m.lost[id] = lostSeq{why: why, at: now}
	}
	if sl.free() {
		m.fill(now, in, i)
	}
	return out
}

// CancelledError is the CANCELLED error of a sequence request its client
// cancelled.
func CancelledError(model string, id ID) error {
	return tritonerr.New(tritonerr.Cancelled, "inference request for sequence %s to model '%s' was cancelled", id.text(), model)
}

// failed is r's failure for good: an END request's sequence leaves the
// store (Answered).
func (m *Model) failed(r *Request, err error) Failure {
	m.Answered(r)
	return Failure{r, err}
}
