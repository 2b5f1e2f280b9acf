package seqbatch

import (
	"log/slog"
	"slices"
	"time"

	"github.com/nereid-io/nereid/pkg/backoff"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// InstanceKey names one model instance of one executor process.
// Generation changes when the executor restarts (its state is gone).
type InstanceKey struct {
	Executor   string
	Generation uint64
	Index      int
}

// SlotRef is where a sequence is bound.
type SlotRef struct {
	Instance InstanceKey
	Slot     int
}

// Request is one request of a sequence as the batcher sees it.
type Request struct {
	ID         ID
	Start, End bool
	// Timeout is the request's timeout parameter; 0 means none. It
	// expires a sequence waiting in the backlog (Triton's rule), and
	// shortens Config.QueueTimeout where that is set.
	Timeout time.Duration
	// Shape is the request's input shapes as a key: requests whose keys
	// differ never share a batch (Triton batches only equal shapes, unless
	// the inputs allow a ragged batch, which the caller leaves out of the
	// key).
	Shape   string
	Arrived time.Time
	// Data is the caller's: how to run and answer the request.
	Data any

	// deadline is when the request times out while it waits (deadline);
	// zero for never.
	deadline time.Time
}

// Entry is one place of a batch: a request with its control values, or
// padding (Req nil) for an idle direct slot: READY false, CORRID 0.
type Entry struct {
	Req               *Request
	Slot              int
	ID                ID
	Start, End, Ready bool
	// Resume: the sequence was moved here from a lost executor (durable
	// state, Config.Durable) and this is its first request on the new
	// instance, which loads the state from the durable store.
	Resume bool
}

// Batch is what one instance executes next.
type Batch struct {
	Instance InstanceKey
	Entries  []Entry
}

// Real counts the entries that are requests (not padding).
func (b *Batch) Real() int {
	n := 0
	for _, e := range b.Entries {
		if e.Req != nil {
			n++
		}
	}
	return n
}

// Failure is a request the batcher gave up on, with the error to answer.
type Failure struct {
	Req *Request
	Err error
}

// Store persists bindings so that another router can take over (Restore).
// Bind and Backlog are called before the change is made, and a sequence's
// requests run in a slot only once Bind recorded it there: a failed Bind
// fails the START that needed it (Enqueue), or keeps a backlog sequence
// waiting in the backlog until a later try succeeds (Wake, Tick). Backlog's
// error fails the START too. Errors of Unbind are only logged: the state in
// memory stays authoritative, and the stale binding goes with the slot's
// next Bind, or with the idle timeout after a takeover.
type Store interface {
	// Bind records id in slot, removes it from the backlog, and forgets
	// any other sequence the store still has in that slot: the batcher
	// binds only a slot it holds free, so such a binding is stale (its
	// Unbind failed, or its END request left the slot in a batch and is
	// not answered yet) and would make Restore choose between the two.
	Bind(id ID, at SlotRef) error
	// Backlog appends id to the backlog order.
	Backlog(id ID) error
	// Unbind forgets id, bound or backlogged.
	Unbind(id ID) error
}

type slot struct {
	owner *ID // the sequence bound here; nil once it ended or went idle
	queue []*Request
	// resume: the slot's sequence was moved here from a lost executor;
	// the next request leaving the slot is marked Entry.Resume.
	resume bool
}

func (s *slot) free() bool { return s.owner == nil && len(s.queue) == 0 }

type instance struct {
	key   InstanceKey
	slots []slot
	// draining: its executor drains; no sequence is bound to it any more.
	draining bool
}

type backlogQueue struct {
	id    ID
	ended bool // END arrived: the id no longer maps here
	reqs  []*Request
	// expire is the earliest deadline of reqs (or, for a sequence
	// restored from the store, its restore time plus
	// Config.QueueTimeout); zero for none.
	expire time.Time
	resume bool // moved from a lost executor (slot.resume)
}

// expireBy moves q's expiry to d when d comes first.
func (q *backlogQueue) expireBy(d time.Time) {
	if !d.IsZero() && (q.expire.IsZero() || d.Before(q.expire)) {
		q.expire = d
	}
}

// seq is where an active id lives: a slot, or a backlog queue.
type seq struct {
	at          *SlotRef
	backlog     *backlogQueue
	lastArrival time.Time
}

// Model is the sequence batcher of one model version. It is not safe for
// concurrent use: the caller serializes calls.
type Model struct {
	cfg       Config
	store     Store
	log       *slog.Logger
	instances []*instance
	seqs      map[ID]*seq
	backlog   []*backlogQueue
	holding   bool
	// lost remembers the sequences forgotten with a lost executor (state
	// not durable) or cancelled by their client, so that their next
	// request's START error says why.
	lost map[ID]lostSeq
	// ended are sequences whose instances left for good (the model was
	// unloaded): their later requests fail with the reason instead of
	// Triton's START error, until they START again or Config.Idle passes.
	ended map[ID]endedSeq
	// closing are the sequences whose END request is enqueued but not
	// answered yet: forgotten here, as Triton forgets them, but still
	// bound in the store until Answered, so that a router taking over
	// while the END request waits (and fails it as not run, for its
	// gateway to send again) finds the sequence.
	closing map[ID]bool
	// retryAt, when set, is when a backlog sequence whose Bind failed
	// (fill) may try again; until then no backlog sequence takes a slot.
	// retries spaces the tries while the store keeps failing.
	retryAt time.Time
	retries backoff.Backoff
}

// Bounds of the spacing of the tries to bind a backlog sequence while the
// store fails: a Redis restart is seconds, and a router whose store stays
// unreachable steps down within its lease TTL.
const (
	bindRetryMin = 50 * time.Millisecond
	bindRetryMax = time.Second
)

// endedSeq is why and when a sequence ended with its instance.
type endedSeq struct {
	err error
	at  time.Time
}

// lostSeq is a sequence forgotten before its END: why, and since when.
type lostSeq struct {
	why string
	at  time.Time
}

// lostFor is how long a sequence lost with its executor (or cancelled) is
// remembered: its client's next request, sent soon after, learns what
// happened to it.
const lostFor = time.Minute

// NewModel makes an empty batcher. store may be nil (nothing persisted).
func NewModel(cfg Config, store Store, log *slog.Logger) *Model {
	if log == nil {
		log = slog.Default()
	}
	if cfg.SlotsPerInstance < 1 {
		cfg.SlotsPerInstance = 1
	}
	if cfg.MaxBatch < 1 {
		cfg.MaxBatch = 1
	}
	return &Model{cfg: cfg, store: store, log: log, seqs: map[ID]*seq{}, lost: map[ID]lostSeq{}, closing: map[ID]bool{}, holding: cfg.HoldSlots > 0 || cfg.HoldBacklog > 0,
		retries: backoff.Backoff{Min: bindRetryMin, Max: bindRetryMax}}
}

// Config returns the batcher's configuration.
func (m *Model) Config() Config { return m.cfg }

func (m *Model) instance(k InstanceKey) *instance {
	for _, in := range m.instances {
		if in.key == k {
			return in
		}
	}
	return nil
}

// HasInstance reports whether k is known.
func (m *Model) HasInstance(k InstanceKey) bool { return m.instance(k) != nil }

// AddInstance adds an instance's slots; waiting backlog sequences take them.
func (m *Model) AddInstance(now time.Time, k InstanceKey) {
	if m.instance(k) != nil {
		return
	}
	in := &instance{key: k, slots: make([]slot, m.cfg.SlotsPerInstance)}
	m.instances = append(m.instances, in)
	m.log.Debug("instance adds its slots", "model", m.cfg.Model, "executor", k.Executor, "instance", k.Index, "slots", len(in.slots))
	for i := range in.slots {
		m.fill(now, in, i)
	}
}

// DrainInstance marks instance k draining: no sequence is bound to it from now on
// (new ones take other instances' slots or wait in the backlog), while
// those bound already run to their END or go idle there. It reports false
// for an unknown instance.
func (m *Model) DrainInstance(k InstanceKey) bool {
	in := m.instance(k)
	if in == nil {
		return false
	}
	if !in.draining {
		in.draining = true
		m.log.Debug("instance drains: no new sequences", "model", m.cfg.Model, "executor", k.Executor, "instance", k.Index)
	}
	return true
}

// UndrainInstance undoes DrainInstance for instance k: its executor's
// drain was undone, and sequences are bound to it again, the backlog's
// first to its free slots. It reports false for an unknown instance.
func (m *Model) UndrainInstance(now time.Time, k InstanceKey) bool {
	in := m.instance(k)
	if in == nil {
		return false
	}
	if in.draining {
		in.draining = false
		m.log.Debug("instance no longer drains: it takes sequences again", "model", m.cfg.Model, "executor", k.Executor, "instance", k.Index)
		for i := range in.slots {
			m.fill(now, in, i)
		}
	}
	return true
}

// DrainExecutor marks every instance of k's executor (its executor id and
// generation) draining, as DrainInstance does for one. A drain is the whole
// executor's, but each instance says so in its own pull, and an instance
// busy with a batch pulls only when it is done: marking its siblings as
// soon as the first pull says so keeps new sequences off all of them from
// that moment. It reports how many instances it marked.
func (m *Model) DrainExecutor(k InstanceKey) int {
	n := 0
	for _, in := range m.instances {
		if in.key.Executor == k.Executor && in.key.Generation == k.Generation {
			m.DrainInstance(in.key)
			n++
		}
	}
	return n
}

// HandOver moves the sequences bound to draining instance k to free slots
// of instances that do not drain, when the model's state is durable
// (Config.Durable): their next request there is marked Resume and reads
// the state from the durable store, as for a sequence moved from a lost
// executor. Only a sequence with no request queued in its slot moves (a
// queued request runs where the state is); the caller calls it while k
// runs no batch, so every state k wrote is in the store. A sequence that
// finds no free slot stays where it is. It returns how many moved.
func (m *Model) HandOver(now time.Time, k InstanceKey) int {
	in := m.instance(k)
	if in == nil || !in.draining || !m.cfg.Durable {
		return 0
	}
	n := 0
	for i := range in.slots {
		from := &in.slots[i]
		if from.owner == nil || len(from.queue) > 0 {
			continue
		}
		id := *from.owner
		s := m.seqs[id]
		if s == nil {
			continue
		}
		ref, ok := m.lowestFree()
		if !ok {
			break
		}
		if m.store != nil {
			if err := m.store.Bind(id, ref); err != nil {
				m.log.Warn("sequence store: bind failed; the sequence stays on the draining instance", "model", m.cfg.Model, "sequence", id.Key(), "err", err)
				break
			}
		}
		*from = slot{}
		to := &m.instance(ref.Instance).slots[ref.Slot]
		to.owner, to.resume = &id, true
		s.at = &ref
		n++
		m.log.Info("sequence handed over from a draining executor", "model", m.cfg.Model, "sequence", id.Key(),
			"from", k.Executor, "executor", ref.Instance.Executor, "instance", ref.Instance.Index, "slot", ref.Slot)
	}
	return n
}

// Idle reports whether instance k holds no sequence and no queued request
// (an unknown instance holds none).
func (m *Model) Idle(k InstanceKey) bool {
	in := m.instance(k)
	if in == nil {
		return true
	}
	for i := range in.slots {
		if !in.slots[i].free() {
			return false
		}
	}
	return true
}

// Usage is what the batcher holds, for the admin API.
type Usage struct {
	// Slots of every instance, and those holding a sequence or requests.
	Slots, SlotsInUse int
	// Sequences bound to slots, and waiting in the backlog.
	Active, Backlog int
	// Requests queued in slots, and in the backlog.
	QueuedSlots, QueuedBacklog int
	Instances                  []InstanceUsage
}

// InstanceUsage is one instance's share of Usage.
type InstanceUsage struct {
	Key      InstanceKey
	Active   int
	Draining bool
}

// Usage counts what the batcher holds now.
func (m *Model) Usage() Usage {
	var u Usage
	for _, in := range m.instances {
		iu := InstanceUsage{Key: in.key, Draining: in.draining}
		for i := range in.slots {
			sl := &in.slots[i]
			u.Slots++
			if !sl.free() {
				u.SlotsInUse++
			}
			if sl.owner != nil {
				iu.Active++
			}
		}
		u.Active += iu.Active
		u.Instances = append(u.Instances, iu)
	}
	u.Backlog = len(m.backlog)
	u.QueuedSlots, u.QueuedBacklog = m.queued()
	return u
}

// RemoveExecutor withdraws every instance of executor (all generations but
// keep, when keep > 0). running are the requests the router handed to
// those instances and got no "done" for, oldest first.
//
// Without durable state its sequences are forgotten (their next request
// fails with the START error, naming the executor) and requests queued in
// its slots fail; the router fails running itself. With durable state
// (Config.Durable) nothing fails: each sequence moves, with the request
// that was running on the lost executor (run again from the last durable
// state) ahead of those queued, to the lowest free slot of another
// instance or to the front of the backlog, and its first request there is
// marked Resume. A running request whose sequence has started again
// elsewhere meanwhile (its id reused after END) is failed, never run.
func (m *Model) RemoveExecutor(now time.Time, executor string, keep uint64, running []*Request) []Failure {
	var out []Failure
	type moved struct {
		id    ID
		reqs  []*Request
		owned bool // still bound (not ended)
	}
	var order []ID
	units := map[ID]*moved{}
	unit := func(id ID) *moved {
		u := units[id]
		if u == nil {
			u = &moved{id: id}
			units[id] = u
			order = append(order, id)
		}
		return u
	}
	lostOne := func(k InstanceKey) bool {
		return k.Executor == executor && (keep == 0 || k.Generation != keep)
	}
	if m.cfg.Durable {
		for _, r := range running {
			if s := m.seqs[r.ID]; s != nil && (s.at == nil || !lostOne(s.at.Instance)) {
				out = append(out, m.failed(r, tritonerr.Unavailablef(
					"executor '%s' running sequence %s of model '%s' was lost, and the sequence has started again since; the request was not run again", executor, r.ID.text(), m.cfg.Model)))
				continue
			}
			// It left a queue in a batch once: it waits for its new slot
			// without a timeout, as a request that started executing.
			r.deadline = time.Time{}
			u := unit(r.ID)
			u.reqs = append(u.reqs, r)
		}
	}
	m.instances = slices.DeleteFunc(m.instances, func(in *instance) bool {
		if !lostOne(in.key) {
			return false
		}
		for i := range in.slots {
			s := &in.slots[i]
			switch {
			case m.cfg.Durable:
				if s.owner != nil {
					u := unit(*s.owner)
					u.owned = true
				}
				for _, r := range s.queue {
					u := unit(r.ID)
					u.reqs = append(u.reqs, r)
				}
			default:
				if s.owner != nil {
					m.lost[*s.owner] = lostSeq{why: "its state was lost with executor '" + executor + "'", at: now}
					m.forget(*s.owner)
				}
				for _, r := range s.queue {
					out = append(out, m.failed(r, tritonerr.Unavailablef(
						"executor '%s' running sequence %s of model '%s' was lost; the sequence's state is gone", executor, r.ID.text(), m.cfg.Model)))
				}
			}
			*s = slot{}
		}
		return true
	})
	var front []*backlogQueue
	for _, id := range order {
		u := units[id]
		if q := m.move(now, u.id, u.reqs, u.owned); q != nil {
			front = append(front, q)
		}
	}
	// Those that found no slot go ahead of the sequences that never ran.
	m.backlog = append(front, m.backlog...)
	m.pruneLost(now)
	return out
}

// RemoveInstance withdraws one instance that left for good, as when its
// executor unloaded the model version: the sequences in its slots end,
// their queued requests fail with "sequence N of model 'M' ended: why", and
// so do their later requests (until they START again or Config.Idle has
// passed). When no instance is left, the sequences waiting in the backlog
// end the same way: nothing could run them.
func (m *Model) RemoveInstance(now time.Time, k InstanceKey, why string) []Failure {
	var out []Failure
	endSeq := func(id ID) error {
		err := tritonerr.Unavailablef("sequence %s of model '%s' ended: %s", id.text(), m.cfg.Model, why)
		if m.ended == nil {
			m.ended = map[ID]endedSeq{}
		}
		m.ended[id] = endedSeq{err: err, at: now}
		return err
	}
	m.instances = slices.DeleteFunc(m.instances, func(in *instance) bool {
		if in.key != k {
			return false
		}
		for i := range in.slots {
			sl := &in.slots[i]
			if sl.owner != nil {
				endSeq(*sl.owner)
				m.forget(*sl.owner)
			}
			for _, r := range sl.queue {
				out = append(out, m.failed(r, endSeq(r.ID)))
			}
			*sl = slot{}
		}
		return true
	})
	if len(m.instances) == 0 {
		for _, q := range m.backlog {
			for _, r := range q.reqs {
				out = append(out, m.failed(r, endSeq(r.ID)))
			}
			if !q.ended {
				endSeq(q.id)
				m.forget(q.id)
			}
		}
		m.backlog = nil
	}
	m.pruneEnded(now)
	return out
}

// pruneEnded drops the ended sequences older than the idle time: by then
// their slots would have been released anyway.
func (m *Model) pruneEnded(now time.Time) {
	for id, e := range m.ended {
		if now.Sub(e.at) >= m.cfg.Idle {
			delete(m.ended, id)
		}
	}
}

// move places a sequence of a lost executor (durable state) with its
// requests in the lowest free slot, or returns the backlog queue the
// caller puts at the front of the backlog. owned is false for a sequence
// that ended (its END among reqs): it runs in a slot without binding it.
func (m *Model) move(now time.Time, id ID, reqs []*Request, owned bool) *backlogQueue {
	if !owned && len(reqs) == 0 {
		return nil
	}
	s := m.seqs[id]
	if owned && s == nil {
		owned = false
	}
	// A sequence runs in its new slot only once the store has it there
	// (fill); otherwise it waits at the front of the backlog, and the
	// store keeps its old slot meanwhile.
	if ref, ok := m.lowestFree(); ok && !now.Before(m.retryAt) && (!owned || m.bind(now, id, ref)) {
		sl := &m.instance(ref.Instance).slots[ref.Slot]
		sl.queue, sl.resume = reqs, true
		if owned {
			idc := id
			sl.owner = &idc
			s.at, s.backlog, s.lastArrival = &ref, nil, now
		}
		m.log.Info("sequence moved from a lost executor", "model", m.cfg.Model, "sequence", id.Key(),
			"executor", ref.Instance.Executor, "instance", ref.Instance.Index, "slot", ref.Slot, "requests", len(reqs))
		return nil
	}
	q := &backlogQueue{id: id, reqs: reqs, ended: !owned, resume: true}
	if m.cfg.QueueTimeout > 0 {
		for _, r := range reqs {
			q.expireBy(r.deadline)
		}
	}
	if owned {
		if m.store != nil {
			if err := m.store.Backlog(id); err != nil {
				m.log.Warn("sequence store: backlog failed", "model", m.cfg.Model, "sequence", id.Key(), "err", err)
			}
		}
		s.at, s.backlog, s.lastArrival = nil, q, now
	}
	m.log.Info("sequence moved from a lost executor to the front of the backlog", "model", m.cfg.Model, "sequence", id.Key(), "requests", len(reqs))
	return q
}

// pruneLost forgets the lost sequences remembered longer than lostFor.
func (m *Model) pruneLost(now time.Time) {
	for id, l := range m.lost {
		if now.Sub(l.at) > lostFor {
			delete(m.lost, id)
		}
	}
}

func (m *Model) forget(id ID) {
	delete(m.seqs, id)
	delete(m.closing, id)
	if m.store != nil {
		if err := m.store.Unbind(id); err != nil {
			m.log.Warn("sequence store: unbind failed", "model", m.cfg.Model, "sequence", id.Key(), "err", err)
		}
	}
}

// StoreError is the failure of a START whose binding the Store could not
// record: the START was not enqueued and did not run, so it may be sent
// again. Its message and kind are the UNAVAILABLE tritonerr.Error it
// unwraps to; it unwraps to the Store's error (Err) too, for a caller to
// tell whether that one is worth waiting out.
type StoreError struct {
	Err error
	te  *tritonerr.Error
}

func (e *StoreError) Error() string   { return e.te.Msg }
func (e *StoreError) Unwrap() []error { return []error{e.te, e.Err} }

func (m *Model) errStore(id ID, err error) error {
	return &StoreError{te: tritonerr.Unavailablef("cannot start sequence %s of model '%s': the sequence store failed: %v", id.text(), m.cfg.Model, err), Err: err}
}

// errNoStart is Triton's error for a request that continues an unknown
// sequence.
func (m *Model) errNoStart(id ID) error {
	if l, ok := m.lost[id]; ok {
		return tritonerr.InvalidArgf("inference request for sequence %s to model '%s' must specify the START flag on the first request of the sequence: %s", id.text(), m.cfg.Model, l.why)
	}
	return tritonerr.InvalidArgf("inference request for sequence %s to model '%s' must specify the START flag on the first request of the sequence", id.text(), m.cfg.Model)
}

// Enqueue accepts a request, in Triton's order of checks (after the batch
// size and correlation id checks, which the gateway makes): a request
// without START for an unknown id fails; START on an active id continues in
// the same slot or backlog queue (Triton's "conflict", logged); the idle
// clock restarts; then the request joins its slot, its backlog queue, the
// lowest free slot, or a new backlog queue.
func (m *Model) Enqueue(now time.Time, r *Request) error {
	r.Arrived = now
	r.deadline = m.deadline(now, r)
	s := m.seqs[r.ID]
	if s == nil && !r.Start {
		if e, ok := m.ended[r.ID]; ok && now.Sub(e.at) < m.cfg.Idle {
			return e.err
		}
		return m.errNoStart(r.ID)
	}
	if r.Start {
		delete(m.lost, r.ID)
		delete(m.ended, r.ID)
	}
	if s != nil && r.Start {
		m.log.Warn("sequence " + r.ID.text() + " for model '" + m.cfg.Model + "' has a conflict. The previous sequence did not end before this sequence start. Previous sequence will be terminated early.")
	}
	if s == nil {
		// A free slot while sequences wait in the backlog: the store failed
		// to bind the first of them. They try again now, and go first.
		if len(m.backlog) > 0 {
			m.retryFill(now)
		}
		ref, ok := m.lowestFree()
		if ok && (len(m.backlog) == 0 || m.retryAt.IsZero()) {
			if m.store != nil {
				if err := m.store.Bind(r.ID, ref); err != nil {
					return m.errStore(r.ID, err)
				}
			}
			id := r.ID
			sl := &m.instance(ref.Instance).slots[ref.Slot]
			sl.owner, sl.resume = &id, false
			s = &seq{at: &ref}
			// Triton logs where each sequence goes at verbose level; tests
			// read it to start sequences in a known slot order.
			m.log.Debug("sequence takes a slot", "model", m.cfg.Model, "sequence", id.Key(), "executor", ref.Instance.Executor, "instance", ref.Instance.Index, "slot", ref.Slot)
		} else {
			if m.cfg.MaxBacklog > 0 && m.backlogSequences() >= m.cfg.MaxBacklog {
				return m.errBacklogFull(r.ID)
			}
			if m.store != nil {
				if m.closing[r.ID] {
					// The previous sequence of this id is still bound
					// until its END is answered: a backlogged sequence is
					// not bound.
					if err := m.store.Unbind(r.ID); err != nil {
						return m.errStore(r.ID, err)
					}
				}
				if err := m.store.Backlog(r.ID); err != nil {
					return m.errStore(r.ID, err)
				}
			}
			q := &backlogQueue{id: r.ID}
			m.backlog = append(m.backlog, q)
			s = &seq{backlog: q}
			m.log.Debug("sequence waits in the backlog", "model", m.cfg.Model, "sequence", r.ID.Key(), "position", len(m.backlog))
		}
		m.seqs[r.ID] = s
		delete(m.closing, r.ID) // the new sequence's binding replaced the old one
	}
	s.lastArrival = now
	if s.at != nil {
		sl := &m.instance(s.at.Instance).slots[s.at.Slot]
		sl.queue = append(sl.queue, r)
		if r.End {
			// Triton drops the id's slot mapping at enqueue time; the slot
			// is released once the END request leaves the queue. The
			// store's binding goes once the END request is answered.
			sl.owner = nil
			m.close(r.ID)
		}
		return nil
	}
	q := s.backlog
	q.reqs = append(q.reqs, r)
	q.expireBy(r.deadline)
	if r.End {
		q.ended = true
		m.close(r.ID)
	}
	return nil
}

// close forgets a sequence whose END request was just enqueued, keeping
// its binding in the store until the request is answered (Answered).
func (m *Model) close(id ID) {
	delete(m.seqs, id)
	if m.store != nil {
		m.closing[id] = true
	}
}

// Answered tells the model that r's executor answered it, or that it failed
// for good (not "not run": a request sent again must find its sequence).
// An END request's sequence leaves the store then, unless the sequence
// started again since.
func (m *Model) Answered(r *Request) {
	if !r.End || !m.closing[r.ID] {
		return
	}
	delete(m.closing, r.ID)
	if err := m.store.Unbind(r.ID); err != nil {
		m.log.Warn("sequence store: unbind failed", "model", m.cfg.Model, "sequence", r.ID.Key(), "err", err)
	}
}

func (m *Model) backlogSequences() int { return len(m.backlog) }

// lowestFree is the free slot with the lowest number, then the lowest
// instance (Triton's ready-slot priority queue orders by slot).
func (m *Model) lowestFree() (SlotRef, bool) {
	for i := 0; i < m.cfg.SlotsPerInstance; i++ {
		for _, in := range m.instances {
			if !in.draining && in.slots[i].free() {
				return SlotRef{in.key, i}, true
			}
		}
	}
	return SlotRef{}, false
}

// fill gives a free slot to the oldest backlog queue, with all its
// requests, once the store recorded the binding: a sequence whose binding
// the store does not have is unknown to the router that takes over from
// the store, and its next request would fail with the START error. When
// Bind fails the queue stays first in the backlog, the slot stays free,
// and no backlog sequence takes a slot before the retry time (Wake); a
// router that cannot reach its store for longer steps down, and its
// gateways send the waiting requests, which did not run, to the next one.
// Expired queues were removed by Tick already.
func (m *Model) fill(now time.Time, in *instance, i int) {
	sl := &in.slots[i]
	if in.draining || !sl.free() || len(m.backlog) == 0 || now.Before(m.retryAt) {
		return
	}
	q := m.backlog[0]
	ref := SlotRef{in.key, i}
	if !q.ended && !m.bind(now, q.id, ref) {
		return
	}
	m.backlog = m.backlog[1:]
	sl.queue, sl.resume = q.reqs, q.resume
	if !q.ended {
		id := q.id
		sl.owner = &id
		if s := m.seqs[id]; s != nil {
			// The idle clock starts when the sequence gets its slot: a
			// sequence does not go idle waiting in the backlog.
			s.backlog, s.at, s.lastArrival = nil, &ref, now
		}
	}
	if sl.free() {
		// An empty, ended queue: nothing to run, the slot stays free.
		m.fill(now, in, i)
	}
}

// bind records a backlog sequence in the slot it is about to take. On
// failure it sets the retry time (Wake) and reports false: the sequence
// does not take the slot.
func (m *Model) bind(now time.Time, id ID, ref SlotRef) bool {
	if m.store == nil {
		return true
	}
	if err := m.store.Bind(id, ref); err != nil {
		m.retryAt = now.Add(m.retries.Next())
		m.log.Warn("sequence store: bind failed; the sequence waits in the backlog", "model", m.cfg.Model, "sequence", id.Key(),
			"executor", ref.Instance.Executor, "instance", ref.Instance.Index, "slot", ref.Slot, "retry_at", m.retryAt, "err", err)
		return false
	}
	m.retryAt = time.Time{}
	m.retries.Reset()
	return true
}

// retryFill gives the free slots to the backlog, the store having failed
// to bind its first sequence before: at the retry time (Tick), or when a
// new sequence would otherwise take a free slot ahead of it (Enqueue).
func (m *Model) retryFill(now time.Time) {
	if m.retryAt.IsZero() {
		return
	}
	m.retryAt = time.Time{}
	for i := 0; i < m.cfg.SlotsPerInstance; i++ {
		for _, in := range m.instances {
			m.fill(now, in, i)
		}
	}
}

// queued counts the requests waiting in slots and in the backlog.
func (m *Model) queued() (slots, backlog int) {
	for _, in := range m.instances {
		for i := range in.slots {
			slots += len(in.slots[i].queue)
		}
	}
	for _, q := range m.backlog {
		backlog += len(q.reqs)
	}
	return
}

// Holding reports whether the delay-scheduler test hook still holds
// batches back.
func (m *Model) Holding() bool {
	if !m.holding {
		return false
	}
	s, b := m.queued()
	if s >= m.cfg.HoldSlots && b >= m.cfg.HoldBacklog {
		m.holding = false
	}
	return m.holding
}

// Next forms the next batch for an idle instance, or returns nil with how
// long to wait before asking again (0: until something changes).
func (m *Model) Next(now time.Time, k InstanceKey) (*Batch, time.Duration) {
	in := m.instance(k)
	if in == nil || m.Holding() {
		return nil, 0
	}
	var b *Batch
	var wait time.Duration
	if m.cfg.Strategy == Direct {
		b = m.nextDirect(in)
	} else {
		b, wait = m.nextOldest(now, in)
	}
	if b == nil {
		return nil, wait
	}
	for i := range in.slots {
		m.fill(now, in, i)
	}
	return b, 0
}

// nextDirect takes one request per slot, from slot 0 to the highest active
// slot, padding the slots with nothing to run, and the slots whose next
// request has another shape than the lowest slot's (they wait for a batch
// of their shape).
func (m *Model) nextDirect(in *instance) *Batch {
	top, queued := -1, false
	var shape string
	for i := range in.slots {
		s := &in.slots[i]
		if s.owner != nil || len(s.queue) > 0 {
			top = i
		}
		if len(s.queue) > 0 && !queued {
			queued, shape = true, s.queue[0].Shape
		}
	}
	if !queued {
		return nil
	}
	b := &Batch{Instance: in.key, Entries: make([]Entry, 0, top+1)}
	for i := 0; i <= top; i++ {
		s := &in.slots[i]
		if len(s.queue) == 0 || s.queue[0].Shape != shape {
			b.Entries = append(b.Entries, Entry{Slot: i})
			continue
		}
		b.Entries = append(b.Entries, s.take(i))
	}
	return b
}

// take removes the slot's next request as a batch entry.
func (s *slot) take(i int) Entry {
	r := s.queue[0]
	s.queue[0] = nil
	s.queue = s.queue[1:]
	e := Entry{Req: r, Slot: i, ID: r.ID, Start: r.Start, End: r.End, Ready: true, Resume: s.resume}
	s.resume = false
	return e
}

// nextOldest is Triton's dynamic batcher over the candidate sequences'
// oldest requests, at most one per sequence: send when max_batch_size is
// reached, else the largest preferred batch size reached, else wait until
// the oldest has waited max_queue_delay_microseconds.
func (m *Model) nextOldest(now time.Time, in *instance) (*Batch, time.Duration) {
	var ready []int
	for i := range in.slots {
		if len(in.slots[i].queue) > 0 {
			ready = append(ready, i)
		}
	}
	if len(ready) == 0 {
		return nil, 0
	}
	slices.SortStableFunc(ready, func(a, b int) int {
		return in.slots[a].queue[0].Arrived.Compare(in.slots[b].queue[0].Arrived)
	})
	// Only requests of the oldest one's shape batch with it.
	shape := in.slots[ready[0]].queue[0].Shape
	ready = slices.DeleteFunc(ready, func(i int) bool { return in.slots[i].queue[0].Shape != shape })
	n := min(len(ready), m.cfg.MaxBatch)
	best := 0
	for _, p := range m.cfg.Preferred {
		if p <= n && p > best {
			best = p
		}
	}
	switch {
	case n >= m.cfg.MaxBatch:
	case best > 0:
		n = best
	default:
		oldest := in.slots[ready[0]].queue[0].Arrived
		if left := oldest.Add(m.cfg.MaxQueueDelay).Sub(now); left > 0 {
			return nil, left
		}
	}
	b := &Batch{Instance: in.key, Entries: make([]Entry, 0, n)}
	for _, i := range ready[:n] {
		b.Entries = append(b.Entries, in.slots[i].take(i))
	}
	return b, 0
}

// Tick releases the slots of sequences idle for Config.Idle since their
// last request arrived, fails backlog sequences whose request timeout
// passed (every queued request, UNAVAILABLE, Triton's message; with
// Config.QueueTimeout, Nereid's, and the sequence is not started), and,
// with Config.QueueTimeout, fails the requests that waited in their slot
// past their timeout, ending their sequences (expireSlot).
func (m *Model) Tick(now time.Time) []Failure {
	m.pruneEnded(now)
	var out []Failure
	m.pruneLost(now)
	m.backlog = slices.DeleteFunc(m.backlog, func(q *backlogQueue) bool {
		if q.expire.IsZero() || now.Before(q.expire) {
			return false
		}
		err := m.errBacklogTimeout(q)
		for _, r := range q.reqs {
			out = append(out, m.failed(r, err))
		}
		if !q.ended {
			m.forget(q.id)
			if m.cfg.QueueTimeout > 0 {
				m.lost[q.id] = lostSeq{why: backlogTimeoutWhy(q), at: now}
			}
		}
		m.log.Info("sequence timed out in the backlog", "model", m.cfg.Model, "sequence", q.id.text(), "requests", len(q.reqs))
		return true
	})
	if m.cfg.QueueTimeout > 0 {
		for _, in := range m.instances {
			for i := range in.slots {
				out = append(out, m.expireSlot(now, in, i)...)
			}
		}
	}
	for id, s := range m.seqs {
		if s.at == nil || now.Sub(s.lastArrival) < m.cfg.Idle {
			continue
		}
		m.log.Info("sequence idle: releasing its slot", "model", m.cfg.Model, "sequence", id.text())
		in := m.instance(s.at.Instance)
		m.forget(id)
		if in == nil {
			continue
		}
		in.slots[s.at.Slot].owner = nil
		m.fill(now, in, s.at.Slot)
	}
	if !m.retryAt.IsZero() && !now.Before(m.retryAt) {
		m.retryFill(now)
	}
	return out
}

// Wake is the next time Tick has something to do (zero: nothing pending).
func (m *Model) Wake() time.Time {
	var t time.Time
	early := func(c time.Time) {
		if !c.IsZero() && (t.IsZero() || c.Before(t)) {
			t = c
		}
	}
	for _, q := range m.backlog {
		early(q.expire)
	}
	if len(m.backlog) > 0 {
		early(m.retryAt)
	}
	if m.cfg.QueueTimeout > 0 {
		for _, in := range m.instances {
			for i := range in.slots {
				for _, r := range in.slots[i].queue {
					early(r.deadline)
				}
			}
		}
	}
	for _, s := range m.seqs {
		if s.at != nil {
			early(s.lastArrival.Add(m.cfg.Idle))
		}
	}
	return t
}

// Restore rebuilds bindings and the backlog order read from a store after a
// takeover. Every restored sequence's idle clock starts at now; backlog
// sequences have no queued requests (those died with the old router) and
// take slots as they free up. They count against Config.MaxBacklog, and
// with Config.QueueTimeout they time out that long after now unless they
// get a slot first: the requests their gateways send again (they were not
// run) join them.
func (m *Model) Restore(now time.Time, bound map[ID]SlotRef, backlog []ID) {
	for id, ref := range bound {
		if ref.Slot < 0 || ref.Slot >= m.cfg.SlotsPerInstance || m.seqs[id] != nil {
			continue
		}
		in := m.instance(ref.Instance)
		if in == nil {
			in = &instance{key: ref.Instance, slots: make([]slot, m.cfg.SlotsPerInstance)}
			m.instances = append(m.instances, in)
		}
		if o := in.slots[ref.Slot].owner; o != nil {
			// Two sequences in one slot: a store whose Bind does not
			// forget the slot's stale binding (Store). One is lost.
			m.log.Warn("sequence store: two sequences bound to one slot; one is not restored", "model", m.cfg.Model,
				"sequence", id.Key(), "restored", o.Key(), "executor", ref.Instance.Executor, "instance", ref.Instance.Index, "slot", ref.Slot)
			continue
		}
		id := id
		in.slots[ref.Slot].owner = &id
		r := ref
		m.seqs[id] = &seq{at: &r, lastArrival: now}
	}
	for _, id := range backlog {
		if m.seqs[id] != nil {
			continue
		}
		q := &backlogQueue{id: id}
		if m.cfg.QueueTimeout > 0 {
			q.expire = now.Add(m.cfg.QueueTimeout)
		}
		m.backlog = append(m.backlog, q)
		m.seqs[id] = &seq{backlog: q, lastArrival: now}
	}
	for _, in := range m.instances {
		for i := range in.slots {
			m.fill(now, in, i)
		}
	}
}

// Stats is a snapshot for tests and logs.
type Stats struct {
	Instances, Active, Backlog, Queued int
}

// Snapshot counts what the batcher holds.
func (m *Model) Snapshot() Stats {
	s, b := m.queued()
	act := 0
	for _, sq := range m.seqs {
		if sq.at != nil {
			act++
		}
	}
	return Stats{Instances: len(m.instances), Active: act, Backlog: len(m.backlog), Queued: s + b}
}

// Where reports where id is bound, for tests.
func (m *Model) Where(id ID) (SlotRef, bool) {
	if s := m.seqs[id]; s != nil && s.at != nil {
		return *s.at, true
	}
	return SlotRef{}, false
}

// Drain empties the batcher: every request queued in a slot or in the
// backlog is returned, oldest slot first, and every binding forgotten in
// memory (not in the store: the router that takes over needs them). A
// router that loses a model's lease fails what Drain returns.
func (m *Model) Drain() []*Request {
	var out []*Request
	for _, in := range m.instances {
		for i := range in.slots {
			out = append(out, in.slots[i].queue...)
			in.slots[i] = slot{}
		}
	}
	for _, q := range m.backlog {
		out = append(out, q.reqs...)
	}
	m.backlog = nil
	m.seqs = map[ID]*seq{}
	return out
}
