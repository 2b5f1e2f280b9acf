package seqrouter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/failover"
	"github.com/nereid-io/nereid/pkg/seqbatch"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// item is one request the router holds: what the executor needs to run it
// and where the answer goes.
type item struct {
	reply      string
	deadline   time.Time
	body       []byte
	received   time.Time
	id         seqbatch.ID
	start, end bool
	timeout    time.Duration
	token      string
	// stream and seq: the request's place in its sequence on a gRPC
	// stream (busv1.SequenceRequest.stream, stream_seq).
	stream string
	seq    uint64
	shape  string // busv1.SequenceRequest.shape
	// trace is the W3C context of the router's span for the request, nil
	// when it is not traced.
	trace map[string]string
	// window is busv1.SequenceRequest.stream_window: the executor streams
	// a decoupled model's responses to reply.
	window uint32
	// key is the request's cancellation key (bus.Conn.RequestKey), sent
	// with it to the executor and with the cancellations forwarded there.
	key uint64

	// The fields below are the model's, under its mutex.
	//
	// req is the request in the batcher, once enqueued; running: it is in
	// a batch handed to an executor and not reported done.
	req     *seqbatch.Request
	running bool
	// cancelled: its client cancelled it (track); finished: the router
	// answered it, or its batch is done, so nothing more is owed to it.
	cancelled, finished bool
	// untrack stops following the client's cancellation.
	untrack func()
}

// finish marks it answered or done and stops following its cancellation;
// m.mu is held. It reports false when it was finished already.
func (it *item) finish() bool {
	if it.finished {
		return false
	}
	it.finished, it.running = true, false
	if it.untrack != nil {
		it.untrack()
		it.untrack = nil
	}
	return true
}

// orderWait is how long a stream's request waits for an earlier one of its
// sequence that has not arrived. The earlier one may never come (the
// gateway failed it before sending it, or it ran on the router this one
// took the model over from), or come late: the gateway sends a request
// that no router took (none served the model yet, one stepped down) again
// after a jittered backoff of up to a second (services/gateway resendMax),
// each request of the stream on its own, so a START refused while the
// router was starting can arrive most of a second after the requests that
// follow it. Giving up on it earlier enqueues those without their START:
// they fail, and the START then starts a sequence that waits for them.
const orderWait = 2 * time.Second

type orderKey struct {
	stream string
	id     seqbatch.ID
}

// orderState puts the requests of one sequence on one stream back in
// stream order: the router handles requests concurrently.
type orderState struct {
	next    uint64
	parked  map[uint64]*item
	touched time.Time
	timer   *time.Timer
}

type pull struct {
	reply string
	at    time.Time
	gen   uint64 // the bus connection's generation it arrived on
	// draining: the instance's executor drains (busv1.SequencePull.draining).
	draining bool
}

type flight struct {
	executor   string
	generation uint64
	instance   int
	reqs       []*seqbatch.Request // Data: *item
}

// model is the router's state for one model version whose lease it holds.
// Its mutex serializes the batcher; replies are sent after it is released.
type model struct {
	s                  *Service
	name, version, key string
	cfg                *inference.ModelConfig
	// epoch is the lease's fencing token: batches carry it, store writes
	// check it.
	epoch uint64
	subs  []*bus.Subscription

	// leaseMu guards lease only, so that the lease loop never waits for the
	// batcher (mu).
	leaseMu sync.Mutex
	lease   *failover.Lease
	poke    chan struct{} // asks the lease loop to renew now (capacity 1)

	// tk is the takeover's account of the older epochs' requests (under
	// mu); heldDone is closed once its gather is over.
	tk       *failover.Takeover
	heldDone chan struct{}

	mu        sync.Mutex
	orders    map[orderKey]*orderState
	core      *seqbatch.Model // nil until an executor sent the config
	pre       []*item         // requests that arrived before the config
	pulls     map[seqbatch.InstanceKey]*pull
	inflight  map[uint64]*flight
	nextBatch uint64
	timer     *time.Timer
	wakeAt    time.Time
	dead      bool
	// failures counts the requests the router failed itself, by Triton's
	// reason label (nv_inference_request_failure); the executors count
	// those they ran.
	failures failureCounts
	// storeDown is the last store write's error when waiting can fix it
	// (redisconn.Transient), and storeRetry when the next write may try
	// the store again (fencedWrites).
	storeDown  error
	storeRetry time.Time
}

// failureCounts are nv_inference_request_failure's counts by reason, and
// the failed requests' total time (the statistics extension's fail).
type failureCounts struct{ rejected, canceled, other, ns uint64 }

// send is a reply to deliver once the model's lock is released.
type send struct {
	reply string
	batch *busv1.SequenceBatch
	err   error
}

func (m *model) deliver(out []send) {
	for _, o := range out {
		if o.err != nil {
			m.s.bus.ReplyError(o.reply, o.err)
			continue
		}
		if err := m.s.bus.Reply(context.Background(), o.reply, o.batch); err != nil {
			m.s.log.Debug("batch not delivered", "model", m.name, "err", err)
		}
	}
}

// fail appends the error reply of it to out, unless it is answered
// already (a cancelled request is answered when it is cancelled); m.mu is
// held.
func (m *model) fail(out []send, it *item, err error) []send {
	return m.failAs(out, it, err, false)
}

// failAs is fail; rejected counts the failure with reason REJECTED, as
// Triton counts a request timeout in the scheduler or a full queue's
// refusal (seqbatch.ErrRejected).
func (m *model) failAs(out []send, it *item, err error, rejected bool) []send {
	if !it.finish() {
		return out
	}
	if it.req != nil && m.core != nil && !bus.IsNoResponders(err) {
		// Failed for good: an END request's sequence leaves the store.
		// One failed as not run keeps it, for the request sent again.
		m.core.Answered(it.req)
	}
	switch {
	case rejected:
		m.failures.rejected++
	case tritonerr.KindOf(err) == tritonerr.Cancelled:
		m.failures.canceled++
	default:
		m.failures.other++
	}
	return append(out, send{reply: it.reply, err: err})
}

// failAll appends the replies of the batcher's failures to out.
func (m *model) failAll(out []send, fs []seqbatch.Failure) []send {
	for _, f := range fs {
		out = m.fail(out, f.Req.Data.(*item), f.Err)
	}
	return out
}

// metrics is the router's part of the version's Triton metrics: the
// requests it failed and those it holds, queued in a slot, in the backlog
// or waiting for the model's configuration; m.mu is held.
func (m *model) metrics() *busv1.VersionMetrics {
	pending := len(m.pre)
	if m.core != nil {
		pending += m.core.Snapshot().Queued
	}
	return &busv1.VersionMetrics{Name: m.name, Version: m.version, Pending: uint64(pending),
		FailureRejected: m.failures.rejected, FailureCanceled: m.failures.canceled, FailureOther: m.failures.other}
}

// statistics is the router's part of the statistics extension: the
// requests it failed itself count in fail, as Triton's sequence batcher's
// failures do; m.mu is held.
func (m *model) statistics() *inference.ModelStatistics {
	f := m.failures
	return &inference.ModelStatistics{Name: m.name, Version: m.version, InferenceStats: &inference.InferStatistics{
		Fail: &inference.StatisticDuration{Count: f.rejected + f.canceled + f.other, Ns: f.ns}}}
}

// track follows the client's cancellation of it, from its arrival until it
// is finished; m.mu is held. The bus may report a cancellation that
// arrived before the request at once: cancel then waits for m.mu and finds
// the request where infer put it.
func (m *model) track(it *item) {
	ctx, untrack := m.s.bus.TrackRequest(context.Background(), it.reply)
	stop := context.AfterFunc(ctx, func() { m.cancel(it) })
	// untrack ends ctx: the hook must be stopped first.
	it.untrack = func() { stop(); untrack() }
}

// cancel acts on the client's cancellation of it, with Triton's rules
// (pkg/seqbatch Cancel): a request the batcher holds fails with CANCELLED
// and ends its sequence. A request not in the batcher yet (waiting for its
// turn on its stream, or for the model's config) is answered at once, and
// withdrawn the same way when it reaches the batcher (accept). A request
// already handed to an executor is the executor's to cancel: it follows
// the same cancellation, which the router publishes again (forwardCancel).
func (m *model) cancel(it *item) {
	now := time.Now()
	st := m.leaseState(now)
	m.lock()
	if it.finished || it.cancelled || m.dead {
		m.unlock()
		return
	}
	it.cancelled = true
	if it.running {
		m.unlock()
		m.s.forwardCancel(it.reply, it.key)
		return
	}
	var out []send
	if it.req != nil && m.core != nil {
		out = m.failAll(out, m.core.Cancel(now, it.req))
		if st == failover.Serving {
			// A released slot may take a backlog sequence.
			out = append(out, m.dispatch(now)...)
		}
	} else {
		m.pre = slices.DeleteFunc(m.pre, func(p *item) bool { return p == it })
		out = m.fail(out, it, seqbatch.CancelledError(m.name, it.id))
	}
	m.unlock()
	m.deliver(out)
}

func (m *model) lock()   { m.mu.Lock() }
func (m *model) unlock() { m.mu.Unlock() }

// errNotServing answers a request this router received but will not take:
// the gateway sends it again (bus.IsNoResponders), to the next router.
func (m *model) errNotServing() error {
	return bus.NotTaken("the sequence router for model '%s' is not serving it any more (it lost the model's lease); the request was not run", m.name)
}

// storeRefusal turns the failure of a START the store could not record
// into one its gateway sends again, when waiting can fix it: Redis
// restarting, loading its data set or not answering (storeAway), or this
// router's lease lost (the next router records it). The START did not run
// (seqbatch.StoreError). Other errors stay as they are.
func (m *model) storeRefusal(it *item, err error) error {
	var se *seqbatch.StoreError
	if !errors.As(err, &se) || !(storeAway(se.Err) || errors.Is(se.Err, errLeaseLost)) {
		return err
	}
	return bus.NotTaken("the sequence router for model '%s' cannot record the start of sequence %s in its store now (%v); the request was not run",
		m.name, it.id.String(), se.Err)
}

// infer accepts a request. While the lease is suspended (a renewal is
// late) the request is queued but no batch goes out until the renewal is
// accepted (resume) or the router steps down (the request then fails as
// not run, and its gateway sends it to the next router).
func (m *model) infer(now time.Time, it *item) {
	st := m.leaseState(now)
	m.lock()
	if m.dead || st == failover.Stepped {
		m.unlock()
		m.s.bus.ReplyError(it.reply, m.errNotServing())
		return
	}
	if !m.tk.Admit(now, it.token) {
		// Declared lost to its gateway after the takeover, which has
		// failed it: never run it.
		m.unlock()
		m.s.bus.ReplyError(it.reply, tritonerr.Unavailablef("the sequence router serving model '%s' was replaced before running the request; it was not run", m.name))
		return
	}
	m.track(it)
	var out []send
	for _, r := range m.inOrder(now, it) {
		out = append(out, m.accept(now, r)...)
	}
	if m.core != nil && st == failover.Serving {
		out = append(out, m.dispatch(now)...)
	}
	m.unlock()
	m.deliver(out)
}

// accept enqueues one request (or keeps it until an executor introduced the
// model: a takeover, or a start); m.mu is held.
func (m *model) accept(now time.Time, it *item) []send {
	if m.core == nil {
		if !it.cancelled {
			m.pre = append(m.pre, it)
		}
		return nil
	}
	return m.enqueue(now, it)
}

// inOrder returns the requests to accept now, in stream order: it itself
// when it is next on its stream (or not on a stream), followed by parked
// successors; nothing when an earlier request of its sequence is missing
// (it waits for it at most orderWait). m.mu is held.
func (m *model) inOrder(now time.Time, it *item) []*item {
	if it.stream == "" {
		return []*item{it}
	}
	k := orderKey{it.stream, it.id}
	if m.orders == nil {
		m.orders = map[orderKey]*orderState{}
	}
	st := m.orders[k]
	if st == nil {
		// Streams number from 1; a router that took over mid-stream waits
		// orderWait once for predecessors that will not come.
		st = &orderState{next: 1, parked: map[uint64]*item{}}
		m.orders[k] = st
	}
	st.touched = now
	switch {
	case it.seq < st.next:
		return []*item{it}
	case it.seq > st.next:
		st.parked[it.seq] = it
		if st.timer == nil {
			st.timer = time.AfterFunc(orderWait, func() { m.flushOrder(k) })
		}
		return nil
	}
	out := []*item{it}
	st.next++
	for p := st.parked[st.next]; p != nil; p = st.parked[st.next] {
		delete(st.parked, st.next)
		out = append(out, p)
		st.next++
	}
	return out
}

// flushOrder gives up waiting for a missing request of a stream: the
// parked ones are accepted in their order.
func (m *model) flushOrder(k orderKey) {
	m.lock()
	st := m.orders[k]
	if st == nil || m.dead {
		m.unlock()
		return
	}
	st.timer = nil
	seqs := make([]uint64, 0, len(st.parked))
	for n := range st.parked {
		seqs = append(seqs, n)
	}
	slices.Sort(seqs)
	now := time.Now()
	var out []send
	for _, n := range seqs {
		out = append(out, m.accept(now, st.parked[n])...)
		delete(st.parked, n)
		st.next = n + 1
	}
	if m.core != nil {
		out = append(out, m.dispatch(now)...)
	}
	m.unlock()
	m.deliver(out)
}

// enqueue hands one request to the batcher; m.mu is held. A request
// cancelled before it got there (answered already) is enqueued and
// cancelled at once, so that its sequence ends as if the batcher had held
// it.
func (m *model) enqueue(now time.Time, it *item) []send {
	r := &seqbatch.Request{ID: it.id, Start: it.start, End: it.end, Timeout: it.timeout, Shape: it.shape, Data: it}
	if err := m.core.Enqueue(now, r); err != nil {
		// A START refused by the backlog bound counts as Triton counts a
		// full queue's refusal: REJECTED.
		return m.failAs(nil, it, m.storeRefusal(it, err), errors.Is(err, seqbatch.ErrRejected))
	}
	it.req = r
	if it.cancelled {
		return m.failAll(nil, m.core.Cancel(now, r))
	}
	return nil
}

// init builds the batcher from the config an executor sent, restores the
// bindings a previous router left, and replays the requests that waited.
func (m *model) init(now time.Time, cfg *inference.ModelConfig) []send {
	c := seqbatch.ConfigFrom(cfg)
	if c.MaxBacklog == 0 {
		c.MaxBacklog = m.s.cfg.MaxBacklog
	}
	c.HoldSlots, c.HoldBacklog = m.s.cfg.DelaySlots, m.s.cfg.DelayBacklog
	m.cfg = cfg
	m.core = seqbatch.NewModel(c, fencedWrites{m.s.st.model(m.key, m.s.cfg.ID, m.epoch), m}, m.s.log)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	bound, backlog, err := m.s.st.load(ctx, m.key)
	cancel()
	if err != nil {
		m.s.log.Error("cannot read the sequence state of the model; starting empty", "model", m.name, "err", err)
	} else if len(bound)+len(backlog) > 0 {
		m.core.Restore(now, bound, backlog)
		m.s.log.Info("restored sequences", "model", m.name, "bound", len(bound), "backlog", len(backlog))
		// Executors named by the bindings must prove they are alive.
		for _, ref := range bound {
			m.s.seen(ref.Instance.Executor, ref.Instance.Generation, now)
		}
	}
	var out []send
	for _, it := range m.pre {
		out = append(out, m.enqueue(now, it)...)
	}
	m.pre = nil
	return out
}

func (m *model) pull(now time.Time, reply string, p *busv1.SequencePull) {
	st := m.leaseState(now)
	m.lock()
	if m.dead || st == failover.Stepped {
		m.unlock()
		m.s.bus.ReplyError(reply, m.errNotServing())
		return
	}
	m.tk.Expect(p.GetExecutorId())
	m.done(p.GetDoneBatch())
	var out []send
	if m.core == nil {
		if p.GetConfig() == nil {
			m.unlock()
			_ = m.s.bus.Reply(context.Background(), reply, &busv1.SequenceBatch{NeedConfig: true})
			return
		}
		out = m.init(now, p.GetConfig())
	}
	key := seqbatch.InstanceKey{Executor: p.GetExecutorId(), Generation: p.GetGeneration(), Index: int(p.GetInstance())}
	if !m.core.HasInstance(key) {
		m.core.AddInstance(now, key)
	}
	if p.GetDraining() {
		// The executor drains as a whole: its other instances, whose
		// pulls may be held or not yet sent, take no new sequence either.
		m.core.DrainExecutor(key)
		if !m.flying(key) {
			// The instance runs nothing (it pulls): with durable state its
			// sequences move to instances that stay.
			m.core.HandOver(now, key)
		}
	} else {
		// A pull without the mark from an instance marked draining: its
		// executor's drain was undone.
		m.core.UndrainInstance(now, key)
	}
	if old := m.pulls[key]; old != nil {
		out = append(out, send{reply: old.reply, batch: &busv1.SequenceBatch{Drained: m.drained(key, old)}})
	}
	m.pulls[key] = &pull{reply: reply, at: now, gen: m.s.bus.Generation(), draining: p.GetDraining()}
	if st == failover.Serving {
		out = append(out, m.dispatch(now)...)
	}
	m.unlock()
	m.deliver(out)
	if p.GetFenceEpoch() > m.epoch {
		// The executor has seen a newer epoch than this lease's: its
		// batches would be refused.
		m.s.stepDown(m, failover.EpochBehind)
	}
}

// drained reports whether the instance of a draining pull holds nothing:
// no sequence bound or queued in its slots, no batch of it in flight. It
// is answered at the end of the pull's hold like any empty pull, so that
// a drained instance does not spin. m.mu is held.
func (m *model) drained(key seqbatch.InstanceKey, pl *pull) bool {
	return pl.draining && m.core.Idle(key) && !m.flying(key)
}

// flying reports whether a batch handed to the instance is not reported
// done yet; m.mu is held.
func (m *model) flying(key seqbatch.InstanceKey) bool {
	for _, f := range m.inflight {
		if f.executor == key.Executor && f.generation == key.Generation && f.instance == key.Index {
			return true
		}
	}
	return false
}

// usage is the model as the admin API lists it.
func (m *model) usage() *adminv1.RouterModel {
	m.lock()
	defer m.unlock()
	rm := &adminv1.RouterModel{Name: m.name, Version: m.version, Epoch: m.epoch}
	if m.core == nil {
		return rm
	}
	u := m.core.Usage()
	rm.ActiveSequences, rm.BacklogSequences = int64(u.Active), int64(u.Backlog)
	rm.QueuedRequests, rm.BacklogRequests = int64(u.QueuedSlots), int64(u.QueuedBacklog)
	rm.Slots, rm.SlotsInUse = int64(u.Slots), int64(u.SlotsInUse)
	byExec := map[string]*adminv1.RouterExecutor{}
	for _, in := range u.Instances {
		e := byExec[in.Key.Executor]
		if e == nil {
			e = &adminv1.RouterExecutor{Id: in.Key.Executor}
			byExec[in.Key.Executor] = e
			rm.Executors = append(rm.Executors, e)
		}
		e.Instances++
		e.ActiveSequences += int64(in.Active)
		e.Draining = e.Draining || in.Draining
	}
	slices.SortFunc(rm.Executors, func(a, b *adminv1.RouterExecutor) int { return strings.Compare(a.Id, b.Id) })
	return rm
}

// resume hands out the batches held while the lease was suspended.
func (m *model) resume() {
	m.lock()
	if m.dead || m.core == nil {
		m.unlock()
		return
	}
	out := m.dispatch(time.Now())
	m.unlock()
	m.deliver(out)
}

// dispatch hands a batch to every waiting instance that has one, answers
// pulls held too long, and sets the timer for the next thing to do.
func (m *model) dispatch(now time.Time) []send {
	var out []send
	var wake time.Time
	early := func(t time.Time) {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	gen := m.s.bus.Generation()
	for key, pl := range m.pulls {
		if pl.gen != gen {
			// Held across a NATS reconnect: its requester gave up, and a
			// batch sent to it would be lost. The instance pulls again.
			delete(m.pulls, key)
			m.s.bus.Release(pl.reply)
			continue
		}
		b, wait := m.core.Next(now, key)
		if b != nil {
			delete(m.pulls, key)
			out = append(out, send{reply: pl.reply, batch: m.encode(b)})
			continue
		}
		if wait > 0 {
			early(now.Add(wait))
		}
		if exp := pl.at.Add(m.s.cfg.PullHold); !now.Before(exp) {
			delete(m.pulls, key)
			out = append(out, send{reply: pl.reply, batch: &busv1.SequenceBatch{Drained: m.drained(key, pl)}})
		} else {
			early(exp)
		}
	}
	early(m.core.Wake())
	m.arm(now, wake)
	return out
}

func (m *model) arm(now, wake time.Time) {
	if wake.IsZero() {
		return
	}
	if m.timer != nil && !m.wakeAt.IsZero() && !wake.Before(m.wakeAt) && m.wakeAt.After(now) {
		return // an earlier wake-up is already set
	}
	m.wakeAt = wake
	d := max(wake.Sub(now), 0)
	if m.timer == nil {
		m.timer = time.AfterFunc(d, m.fire)
	} else {
		m.timer.Reset(d)
	}
}

func (m *model) fire() {
	now := time.Now()
	st := m.leaseState(now)
	m.lock()
	if m.dead || m.core == nil || st == failover.Stepped {
		m.unlock()
		return
	}
	m.wakeAt = time.Time{}
	var out []send
	for _, f := range m.core.Tick(now) { // requests whose timeout passed (seqbatch.ErrRejected)
		out = m.failAs(out, f.Req.Data.(*item), f.Err, true)
	}
	if st == failover.Serving {
		out = append(out, m.dispatch(now)...)
	}
	m.unlock()
	m.deliver(out)
}

// encode turns a batch into its bus form, remembering it as in flight.
func (m *model) encode(b *seqbatch.Batch) *busv1.SequenceBatch {
	m.nextBatch++
	msg := &busv1.SequenceBatch{BatchId: m.nextBatch, Epoch: m.epoch, Work: make([]*busv1.SequenceWork, 0, len(b.Entries))}
	f := &flight{executor: b.Instance.Executor, generation: b.Instance.Generation, instance: b.Instance.Index}
	for _, e := range b.Entries {
		if e.Req == nil {
			msg.Work = append(msg.Work, &busv1.SequenceWork{Padding: true, Slot: uint32(e.Slot)})
			continue
		}
		it := e.Req.Data.(*item)
		it.running = true
		w := &busv1.SequenceWork{Slot: uint32(e.Slot), Id: e.ID.Proto(), Start: e.Start, End: e.End,
			Reply: it.reply, Request: it.body, ReceivedUnixNano: it.received.UnixNano(), Token: it.token, Resume: e.Resume,
			StreamWindow: it.window, TraceContext: it.trace, CancelKey: it.key}
		if !it.deadline.IsZero() {
			w.DeadlineUnixNano = it.deadline.UnixNano()
		}
		msg.Work = append(msg.Work, w)
		f.reqs = append(f.reqs, e.Req)
	}
	m.inflight[msg.BatchId] = f
	return msg
}

// done forgets a batch its instance ran (reported by its next pull): its
// requests were answered by the executor; m.mu is held.
func (m *model) done(batch uint64) {
	f := m.inflight[batch]
	if f == nil {
		return
	}
	for _, r := range f.reqs {
		it := r.Data.(*item)
		it.finish()
		if m.core != nil {
			m.core.Answered(r) // an END request's sequence leaves the store
		}
		// The bus held it for its gateway's liveness probes since it
		// arrived (bus.HandleDelegated): the executor has answered it.
		m.s.bus.Release(it.reply)
	}
	delete(m.inflight, batch)
}

// unloaded withdraws an instance whose executor unloaded the model
// version: the sequences in its slots end (pkg/seqbatch RemoveInstance),
// and a batch handed to it that it never ran (its pull was cancelled by the
// unload) fails with the same reason.
func (m *model) unloaded(now time.Time, p *busv1.SequencePull) {
	key := seqbatch.InstanceKey{Executor: p.GetExecutorId(), Generation: p.GetGeneration(), Index: int(p.GetInstance())}
	why := fmt.Sprintf("model '%s' version %s was unloaded", m.name, m.version)
	m.lock()
	m.done(p.GetDoneBatch())
	var out []send
	if m.core != nil {
		out = m.failAll(out, m.core.RemoveInstance(now, key, why))
	}
	for id, f := range m.inflight {
		if f.executor == key.Executor && f.generation == key.Generation && f.instance == key.Index {
			for _, r := range f.reqs {
				it := r.Data.(*item)
				out = m.fail(out, it, tritonerr.Unavailablef(
					"sequence %s of model '%s' ended: %s before the request ran", it.id.String(), m.name, why))
			}
			delete(m.inflight, id)
		}
	}
	if pl := m.pulls[key]; pl != nil {
		m.s.bus.Release(pl.reply)
		delete(m.pulls, key)
	}
	m.unlock()
	m.s.log.Info("instance left: the executor unloaded the model", "model", m.name, "version", m.version, "executor", key.Executor, "instance", key.Index)
	m.deliver(out)
}

// lose withdraws an executor's instances (all generations but keep).
// Without durable state, its sequences are forgotten and the requests it
// was running fail with UNAVAILABLE naming it. With durable state the
// sequences move to other instances, and the request each instance was
// running (the newest batch it got and did not report done) runs again
// there from the last durable state; older batches were answered before
// their instance pulled again, so their requests are not run again.
func (m *model) lose(executor string, keep uint64, why string) {
	m.lock()
	var out []send
	lost := func(f *flight) bool { return f.executor == executor && (keep == 0 || f.generation != keep) }
	var rerun []*seqbatch.Request
	if m.core != nil && m.core.Config().Durable {
		newest := map[int]uint64{}
		for id, f := range m.inflight {
			if lost(f) && id > newest[f.instance] {
				newest[f.instance] = id
			}
		}
		ids := make([]uint64, 0, len(newest))
		for _, id := range newest {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			for _, r := range m.inflight[id].reqs {
				r.Data.(*item).running = false
				rerun = append(rerun, r)
			}
			delete(m.inflight, id)
		}
	}
	if m.core != nil {
		now := time.Now()
		out = m.failAll(out, m.core.RemoveExecutor(now, executor, keep, rerun))
		for _, r := range rerun {
			// Cancelled while it ran on the lost executor: not run again.
			if it := r.Data.(*item); it.cancelled && !it.finished {
				out = m.failAll(out, m.core.Cancel(now, r))
			}
		}
	}
	for id, f := range m.inflight {
		if lost(f) {
			for _, r := range f.reqs {
				it := r.Data.(*item)
				out = m.fail(out, it, tritonerr.Unavailablef(
					"executor '%s' running sequence %s of model '%s' %s before answering", executor, it.id.String(), m.name, why))
			}
			delete(m.inflight, id)
		}
	}
	for key, pl := range m.pulls {
		if key.Executor == executor && (keep == 0 || key.Generation != keep) {
			m.s.bus.Release(pl.reply)
			delete(m.pulls, key)
		}
	}
	if m.core != nil {
		out = append(out, m.dispatch(time.Now())...)
	}
	m.unlock()
	m.deliver(out)
}

// expirePending fails requests that waited for a config past their
// deadline (no executor serves the model).
func (m *model) expirePending(now time.Time) {
	m.lock()
	var out []send
	keep := m.pre[:0]
	for _, it := range m.pre {
		limit := it.received.Add(10 * time.Second)
		if !it.deadline.IsZero() && it.deadline.Before(limit) {
			limit = it.deadline
		}
		if now.After(limit) {
			out = m.fail(out, it, tritonerr.Unavailablef("no executor is serving model '%s' version %s", m.name, m.version))
			continue
		}
		keep = append(keep, it)
	}
	m.pre = keep
	for k, st := range m.orders {
		if len(st.parked) == 0 && now.Sub(st.touched) > time.Minute {
			delete(m.orders, k)
		}
	}
	m.unlock()
	m.deliver(out)
}

// shutdown fails everything the model holds and has not handed to an
// executor (requests waiting for a config, in slots and in the backlog)
// with err, and answers held pulls empty. Batches already on executors are
// answered by them. It reports false when the model was already shut down.
func (m *model) shutdown(err error) bool {
	m.lock()
	if m.dead {
		m.unlock()
		return false
	}
	m.dead = true
	if m.timer != nil {
		m.timer.Stop()
	}
	var out []send
	for _, it := range m.pre {
		out = m.fail(out, it, err)
	}
	m.pre = nil
	for _, st := range m.orders {
		for _, it := range st.parked {
			out = m.fail(out, it, err)
		}
		if st.timer != nil {
			st.timer.Stop()
		}
	}
	m.orders = nil
	if m.core != nil {
		for _, r := range m.core.Drain() {
			out = m.fail(out, r.Data.(*item), err)
		}
	}
	// Batches on executors are answered by them: the router only stops
	// following their cancellations and answering their liveness probes.
	for id := range m.inflight {
		m.done(id)
	}
	for _, pl := range m.pulls {
		out = append(out, send{reply: pl.reply, batch: &busv1.SequenceBatch{}})
	}
	m.pulls = nil
	m.unlock()
	m.deliver(out)
	return true
}
