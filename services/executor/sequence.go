package executor

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/backoff"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/failover"
	"github.com/nereid-io/nereid/pkg/infer"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/seqbatch"
	"github.com/nereid-io/nereid/pkg/tracing"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/executor/internal/seqstate"
)

// Sequence models (sequence_batching in the config) are not fed by the
// executor's scheduler: the sequence router owns their batching. Each
// instance runs a puller that asks the router for its next batch when it is
// idle (busv1.SequencePull on bus.SequencePullSubject), executes it with the
// control tensors the batch calls for, and answers every request straight
// to the gateway that sent it (the reply subject travels in the batch). The
// next pull tells the router the batch is done.
//
// Failover: a pull nobody answers (no router serves the model, or the one
// serving it stopped answering) is also published as a claim, so that a
// router takes the model's lease. Batches carry the epoch of the lease of
// the router that formed them; once an executor has seen a newer epoch (a
// batch, or the new router's takeover announcement) it refuses older
// batches, answering their requests UNAVAILABLE without running them. On a
// takeover it tells the new router which requests it runs or ran lately
// (their tokens), so that the router can tell gateways which of their
// requests the old router held and lost.

const (
	// pullTimeout bounds one pull; the router answers within its hold
	// time (a second), so this only fires when the router is gone.
	pullTimeout = 2500 * time.Millisecond
	// pullRetry bounds the first pause after a failed pull (no router
	// yet, or a takeover in progress); the pauses grow to 4*pullRetry.
	pullRetry = 50 * time.Millisecond
)

type seqRunner struct {
	mv       *modelVersion
	controls *seqbatch.Controls
	cancel   context.CancelFunc
	done     sync.WaitGroup
	takeover *bus.Subscription
	// streams are the decoupled requests still streaming after their
	// execution (finishStream).
	streams sync.WaitGroup

	mu        sync.Mutex
	lastClaim time.Time
	// fence is the newest router lease epoch seen for the model; holdings
	// are the tokens of the requests this executor runs or answered
	// lately, reported to a router taking the model over (pkg/failover).
	fence    failover.Fence
	holdings failover.Holdings

	// states holds, per instance, the implicit state of the sequences in
	// its slots; each map is used only by its instance's puller.
	states []map[int]*slotState

	// unloaded is set when the version is unloaded, not replaced: stop
	// then tells the router that the instances leave for good (their
	// sequences end), with the last batch each ran (lastDone, under mu).
	unloaded atomic.Bool
	lastDone []uint64

	// drained is, per instance, whether the router said in answer to a
	// draining pull that the instance holds no sequence (or no router
	// serves the model: nothing can be bound to it).
	drained []atomic.Bool

	// durable: the model's state_durability is "redis" (durable.go); ttl
	// is how long a sequence's durable state outlives its last write.
	durable bool
	ttl     time.Duration
}

// slotState is the implicit state of the sequence in one slot.
type slotState struct {
	id   seqbatch.ID
	st   *seqstate.Slot
	used time.Time // last ran; see sweep
	// after and fence are, for durable state, the token and batch fence of
	// the durable record st is ("" before the first write).
	after string
	fence uint64
	// key is where its durable record lives, made once per sequence
	// (recordKey).
	key string
}

// startSequence starts one puller per instance. ctx is the executions'
// context; the pullers stop with stop().
func startSequence(ctx context.Context, mv *modelVersion) (*seqRunner, error) {
	c, err := seqbatch.NewControls(mv.cfg)
	if err != nil {
		return nil, err
	}
	d, err := modelconfig.StateDurability(mv.cfg)
	if err != nil {
		return nil, err
	}
	// stop ends the pulls; a batch already received runs to its end under
	// the executions' context, so that an unload lets the requests in
	// flight finish.
	execCtx := ctx
	pullCtx, cancel := context.WithCancel(ctx)
	s := &seqRunner{mv: mv, controls: c, cancel: cancel, durable: d == modelconfig.DurabilityRedis && mv.states != nil}
	if s.durable {
		s.ttl = 2*seqIdle(mv.cfg) + stateSweepMargin
		if mv.e.cfg.RedisURL == "" {
			mv.e.log.Warn("the model asks for durable sequence state but the executor has no Redis (--redis-url): its states are kept in memory and do not survive the executor",
				"model", mv.name)
		}
	}
	s.states = make([]map[int]*slotState, len(mv.instances))
	s.lastDone = make([]uint64, len(mv.instances))
	s.drained = make([]atomic.Bool, len(mv.instances))
	for i := range s.states {
		s.states[i] = map[int]*slotState{}
	}
	s.takeover, err = mv.e.bus.Handle(bus.SequenceTakeoverSubject(mv.name, mv.vstr), "", s.onTakeover)
	if err != nil {
		cancel()
		return nil, tritonerr.Unavailablef("model '%s': cannot subscribe to sequence takeovers: %v", mv.name, err)
	}
	for idx, in := range mv.instances {
		s.done.Go(func() { s.pull(pullCtx, execCtx, idx, in) })
	}
	return s, nil
}

func (s *seqRunner) stop() {
	_ = s.takeover.Unsubscribe()
	s.cancel()
	s.done.Wait()
	s.streams.Wait()
	if !s.unloaded.Load() {
		return
	}
	mv := s.mv
	s.mu.Lock()
	defer s.mu.Unlock()
	for idx := range mv.instances {
		p := &busv1.SequencePull{ExecutorId: mv.e.cfg.ID, Generation: mv.e.generation, Instance: uint32(idx),
			Instances: uint32(len(mv.instances)), DoneBatch: s.lastDone[idx], FenceEpoch: s.fence.Epoch(), Unloaded: true}
		if err := mv.e.bus.Publish(bus.SequencePullSubject(mv.name, mv.vstr), p); err != nil {
			mv.e.log.Warn("cannot tell the sequence router that the model was unloaded", "model", mv.name, "version", mv.vstr, "err", err)
		}
	}
}

// busyInstances counts the instances not known to hold no sequence, once
// the executor drains.
func (s *seqRunner) busyInstances() int {
	n := 0
	for i := range s.drained {
		if !s.drained[i].Load() {
			n++
		}
	}
	return n
}

// onTakeover raises the fence to the new router's epoch and answers with
// the tokens this executor runs or answered lately.
func (s *seqRunner) onTakeover(_ context.Context, data []byte) (proto.Message, error) {
	var t busv1.SequenceTakeover
	if err := proto.Unmarshal(data, &t); err != nil {
		return nil, tritonerr.InvalidArgf("malformed sequence takeover for model '%s': %v", s.mv.name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fence.Admit(t.GetEpoch())
	return &busv1.SequenceHeld{ExecutorId: s.mv.e.cfg.ID, Tokens: s.holdings.Tokens(time.Now()), Epoch: s.fence.Epoch()}, nil
}

// admit raises the fence to a batch's epoch and reports whether the batch
// may run; a batch that may records its requests as running.
func (s *seqRunner) admit(batch *busv1.SequenceBatch) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.fence.Admit(batch.GetEpoch()) {
		return false
	}
	for _, w := range batch.GetWork() {
		s.holdings.Running(w.GetToken())
	}
	return true
}

// fenceEpoch is the newest epoch seen.
func (s *seqRunner) fenceEpoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fence.Epoch()
}

// claim publishes the pull as a claim on the model, at most every
// failover.ClaimSpacing for all instances together.
func (s *seqRunner) claim(req *busv1.SequencePull) {
	now := time.Now()
	s.mu.Lock()
	if now.Sub(s.lastClaim) < failover.ClaimSpacing {
		s.mu.Unlock()
		return
	}
	s.lastClaim = now
	s.mu.Unlock()
	c := proto.Clone(req).(*busv1.SequencePull)
	c.Config, c.FenceEpoch = s.mv.cfg, s.fenceEpoch()
	if err := s.mv.e.bus.Publish(bus.SequenceClaimSubject(s.mv.name, s.mv.vstr), c); err != nil {
		s.mv.e.log.Debug("sequence claim not sent", "model", s.mv.name, "err", err)
	}
}

// answered records a batch's requests as answered.
func (s *seqRunner) answered(batch *busv1.SequenceBatch) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range batch.GetWork() {
		s.holdings.Answered(now, w.GetToken())
	}
}

// refuse answers the requests of a batch from a router that lost the model.
func (s *seqRunner) refuse(batch *busv1.SequenceBatch) {
	for _, w := range batch.GetWork() {
		if !w.GetPadding() && w.GetReply() != "" {
			// Not run: the gateway may send it again, to the router that
			// serves the model now.
			s.mv.e.bus.ReplyError(w.GetReply(), bus.NotTaken(
				"the sequence router that sent this request of model '%s' no longer serves it (lease epoch %d, now %d); the request was not run",
				s.mv.name, batch.GetEpoch(), s.fenceEpoch()))
		}
	}
}

// errNotDirect refuses requests sent to a sequence model's plain infer
// subject: without the router there are no slots or control tensors.
func (s *seqRunner) errNotDirect() error {
	return tritonerr.Unavailablef("model '%s' has a sequence batcher: its requests go through the sequence router", s.mv.name)
}

func (s *seqRunner) pull(ctx, execCtx context.Context, idx int, in *instance) {
	mv := s.mv
	e := mv.e
	subject := bus.SequencePullSubject(mv.name, mv.vstr)
	sendConfig := true
	var done uint64
	defer func() { // the batch run but not yet reported, for stop
		s.mu.Lock()
		s.lastDone[idx] = done
		s.mu.Unlock()
	}()
	retry := backoff.Backoff{Min: pullRetry, Max: 4 * pullRetry}
	for ctx.Err() == nil {
		req := &busv1.SequencePull{
			ExecutorId: e.cfg.ID, Generation: e.generation,
			Instance: uint32(idx), Instances: uint32(len(mv.instances)), DoneBatch: done,
			FenceEpoch: s.fenceEpoch(), Draining: e.draining.Load(),
		}
		if sendConfig {
			req.Config = mv.cfg
		}
		batch := &busv1.SequenceBatch{}
		pctx, cancel := context.WithTimeout(ctx, pullTimeout)
		err := e.bus.Request(pctx, subject, req, batch)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !bus.IsNoResponders(err) {
				e.log.Debug("sequence pull failed", "model", mv.name, "err", err)
			} else if req.Draining {
				// No router serves the model: no sequence can be bound
				// to this instance.
				s.drained[idx].Store(true)
			}
			// Nobody serves the model (or its router stopped answering):
			// ask the routers to take it.
			s.claim(req)
			if retry.Wait(ctx) != nil {
				return
			}
			continue
		}
		retry.Reset()
		done = 0
		if req.Draining {
			s.drained[idx].Store(batch.GetDrained())
		}
		if batch.GetNeedConfig() {
			sendConfig = true
			continue
		}
		sendConfig = false
		if len(batch.GetWork()) == 0 {
			continue
		}
		if !s.admit(batch) {
			s.refuse(batch)
			// The router that sent it serves the model with a lease older
			// than the fence (its store lost its data): the claim, which
			// carries the fence, makes it step down and a router take a
			// higher epoch.
			s.claim(req)
			continue
		}
		s.sweep(idx, batch)
		s.execute(execCtx, idx, in, batch)
		s.answered(batch)
		done = batch.GetBatchId()
	}
}

// seqItem is one entry of a batch: a real request (p, reply) or padding.
type seqItem struct {
	w     *busv1.SequenceWork
	req   *inference.ModelInferRequest
	p     *pending
	r     *backend.Request
	cctx  context.CancelFunc
	reply string
	sh    *shmRequest // tensors in shared memory (shm.go), nil for none
	state *slotState  // the sequence's implicit state, nil for none
	key   string      // the shapes of its states (seqstate.Config.Key)
	// next is the state a durable sequence's request produced, made the
	// sequence's once the store has it (persist); stale marks a request
	// whose sequence moved on without this executor: it is not answered.
	next  *seqstate.Slot
	stale bool

	// A decoupled model's request streams its responses to the gateway
	// (stream), ended once final is closed; ctx ends when the client
	// cancels or its deadline passes.
	ctx     context.Context
	untrack func()
	stream  *bus.StreamWriter
	final   <-chan struct{}
}

// release ends what the item holds: its deadline's context, its
// shared-memory uses and its stream. Nothing touches the mappings once it
// runs.
func (it *seqItem) release() {
	if it.p != nil {
		tracing.End(it.p.span, nil) // ended before unless the request was not run
	}
	if it.cctx != nil {
		it.cctx()
	}
	if it.untrack != nil {
		it.untrack()
	}
	if it.stream != nil {
		it.stream.Close()
	}
	it.sh.releaseNow()
}

// streaming reports whether the item is a decoupled request whose stream
// is open: it outlives its execution (finishStream).
func (it *seqItem) streaming() bool { return it.stream != nil }

// execute runs one batch from the router: each entry is prepared (decode,
// attach, normalize and its implicit state), the batch runs on the
// executor's one execution path (instance.execute), and each real request
// is answered straight to its gateway (reply).
func (s *seqRunner) execute(ctx context.Context, idx int, in *instance, batch *busv1.SequenceBatch) {
	var template *busv1.SequenceWork // padding copies a real request's inputs
	for _, w := range batch.GetWork() {
		if !w.GetPadding() {
			template = w
			break
		}
	}
	if template == nil {
		return
	}
	now := time.Now()
	items := make([]*seqItem, 0, len(batch.GetWork()))
	reqs := make([]*backend.Request, 0, len(batch.GetWork()))
	var real []*pending
	fence := batch.GetBatchId()
	for _, w := range batch.GetWork() {
		it, err := s.prepare(ctx, now, idx, w, template)
		if err != nil {
			if it.p != nil {
				tracing.End(it.p.span, err)
			}
			it.release()
			if !w.GetPadding() {
				s.mv.stats.failed(it.p.received, reasonOther)
				s.mv.e.bus.ReplyError(it.reply, err)
			}
			continue
		}
		items = append(items, it)
		reqs = append(reqs, it.r)
		if !w.GetPadding() {
			real = append(real, it.p)
		}
	}
	defer func() {
		for _, it := range items {
			// A streaming request is released once its stream ends
			// (finishStream), a stale one here: it is not answered.
			if !it.streaming() || it.stale {
				it.release()
			}
		}
	}()
	if len(real) == 0 {
		return
	}
	s.mv.inflight.Add(int64(len(real)))
	defer s.mv.inflight.Add(-int64(len(real)))
	if s.mv.states == nil || s.ragged() {
		in.execute(ctx, reqs, real, false)
	} else {
		// Requests whose states differ in shape do not batch together,
		// as inputs of different shapes do not.
		for _, g := range groupByKey(items) {
			s.executeGroup(ctx, in, g)
		}
	}
	for _, it := range items {
		if !it.w.GetPadding() {
			s.updateState(it)
		}
	}
	if s.durable {
		s.persist(ctx, idx, items, fence) // before any answer leaves
	}
	var drops []keyedDrop
	for _, it := range items {
		if it.w.GetPadding() || it.stale {
			continue
		}
		if it.streaming() {
			s.finishStream(ctx, it)
		} else {
			s.reply(ctx, it)
		}
		if it.p.resp != nil && it.p.resp.Err != nil {
			tracing.End(it.p.span, it.p.resp.Err)
		}
		if it.state != nil && it.w.GetEnd() {
			if s.durable && it.state.after != "" {
				drops = append(drops, keyedDrop{key: s.recordKey(it.state), fence: fence, token: it.w.GetToken(), after: it.state.after})
			}
			delete(s.states[idx], int(it.w.GetSlot()))
		}
	}
	if len(drops) > 0 {
		s.dropStates(ctx, drops)
	}
}

// executeGroup runs items that may share a batch.
func (s *seqRunner) executeGroup(ctx context.Context, in *instance, items []*seqItem) {
	reqs := make([]*backend.Request, 0, len(items))
	var real []*pending
	for _, it := range items {
		reqs = append(reqs, it.r)
		if !it.w.GetPadding() {
			real = append(real, it.p)
		}
	}
	if len(real) > 0 {
		in.execute(ctx, reqs, real, false)
	}
}

// groupByKey splits items by the shapes of their states, in order of first
// appearance.
func groupByKey(items []*seqItem) [][]*seqItem {
	var groups [][]*seqItem
	at := map[string]int{}
	for _, it := range items {
		i, ok := at[it.key]
		if !ok {
			i = len(groups)
			at[it.key] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], it)
	}
	return groups
}

// ragged reports whether the model accepts ragged batches (an input with
// allow_ragged_batch): then states of any shapes batch together.
func (s *seqRunner) ragged() bool {
	for _, in := range s.mv.cfg.GetInput() {
		if in.GetAllowRaggedBatch() {
			return true
		}
	}
	return false
}

// updateState makes the states the backend updated for a request its
// sequence's states for the next request (a request that updated nothing
// leaves them), and gives the client a state output it asked for that the
// backend did not produce. A durable sequence's new state becomes its
// state only once the store has it (persist); the END request's is never
// stored (nothing follows it).
func (s *seqRunner) updateState(it *seqItem) {
	c := s.mv.states
	if c == nil || it.state == nil {
		return
	}
	next := it.state.st
	if updated := it.r.UpdatedStates(); len(updated) > 0 {
		if s.durable && !it.w.GetEnd() {
			next = c.Next(it.state.st, updated)
			it.next = next
		} else {
			c.Update(it.state.st, updated)
		}
	}
	it.state.used = time.Now()
	if it.p.resp == nil || it.p.resp.Err != nil {
		return
	}
	for _, name := range it.r.RequestedOutputs {
		if slices.ContainsFunc(it.p.resp.Outputs, func(o backend.Output) bool { return o.Name == name }) {
			continue
		}
		if o, ok := c.Output(next, name); ok {
			it.p.resp.Outputs = append(it.p.resp.Outputs, o)
		}
	}
}

// sweep frees the states of slots that have not run for well over the
// model's idle timeout: the router has released those slots (their next
// sequence starts with START, which resets the state anyway), so this only
// returns the memory. Slots of the batch about to run are kept.
func (s *seqRunner) sweep(idx int, batch *busv1.SequenceBatch) {
	if s.mv.states == nil {
		return
	}
	limit := time.Now().Add(-(2*seqIdle(s.mv.cfg) + stateSweepMargin))
	for slot, st := range s.states[idx] {
		if st.used.After(limit) {
			continue
		}
		inBatch := slices.ContainsFunc(batch.GetWork(), func(w *busv1.SequenceWork) bool {
			return !w.GetPadding() && int(w.GetSlot()) == slot
		})
		if !inBatch {
			delete(s.states[idx], slot)
		}
	}
}

// seqIdle is the model's sequence idle timeout (Triton's default 1 s).
func seqIdle(cfg *inference.ModelConfig) time.Duration {
	return time.Duration(modelconfig.MaxSequenceIdleMicroseconds(cfg)) * time.Microsecond
}

// stateSweepMargin is added to twice the idle timeout before an unused
// state is freed, so that a request the router still counts as in time is
// never left without its state.
const stateSweepMargin = 5 * time.Second

// bindState gives a request its sequence's input states: fresh ones on
// START, the slot's otherwise; padding gets initial states, as Triton's
// null requests get zeroed ones. A durable sequence this executor does not
// hold (it moved here from a lost executor: Resume, or a router that took
// over lost that mark) is read from the store.
func (s *seqRunner) bindState(ctx context.Context, idx int, it *seqItem, entry seqbatch.Entry) error {
	c := s.mv.states
	if c == nil {
		return nil
	}
	var st *seqstate.Slot
	switch {
	case it.w.GetPadding():
		st = c.Start()
	case entry.Start:
		it.state = &slotState{id: entry.ID, st: c.Start(), used: time.Now()}
		s.states[idx][entry.Slot] = it.state
		st = it.state.st
	default:
		cur := s.states[idx][entry.Slot]
		if s.durable && (it.w.GetResume() || cur == nil || cur.id != entry.ID) {
			var err error
			if cur, err = s.resume(ctx, entry.ID, it.w.GetToken()); err != nil {
				return err
			}
			s.states[idx][entry.Slot] = cur
		}
		if cur == nil || cur.id != entry.ID {
			return tritonerr.Unavailablef("the implicit state of sequence %s of model '%s' is not on executor '%s' (instance %d, slot %d): it was lost with the executor that ran the sequence",
				entry.ID, s.mv.name, s.mv.e.cfg.ID, idx, entry.Slot)
		}
		it.state = cur
		st = cur.st
	}
	it.key = c.Key(st)
	it.r.Inputs = append(it.r.Inputs, c.Inputs(st)...)
	return nil
}

// prepare turns one entry of a batch into a backend request: decode,
// attach its shared memory, normalize, and give it its implicit state. On
// error the item is still returned, to be released.
func (s *seqRunner) prepare(ctx context.Context, now time.Time, idx int, w, template *busv1.SequenceWork) (*seqItem, error) {
	it, err := s.decode(ctx, now, w, template)
	if err == nil {
		err = s.attach(it)
	}
	var entry seqbatch.Entry
	if err == nil {
		entry, err = s.normalize(it)
	}
	if err == nil {
		err = s.bindState(ctx, idx, it, entry)
	}
	if err == nil && s.mv.decoupled() && !w.GetPadding() {
		err = s.openStream(it)
	}
	return it, err
}

// openStream starts the stream of a decoupled model's request to its
// gateway: the backend's responses go out as it sends them
// (streamResponses), in order, under the gateway's window.
func (s *seqRunner) openStream(it *seqItem) error {
	mv := s.mv
	window := it.w.GetStreamWindow()
	if window == 0 {
		return tritonerr.Unsupportedf("model '%s' is decoupled: its responses need a stream (gRPC ModelStreamInfer or HTTP generate)", mv.name)
	}
	it.stream = mv.e.bus.ReplyStream(bus.SequenceInferSubject(mv.name, mv.vstr), it.reply, int(window))
	it.final = mv.streamResponses(it.ctx, it.stream, it.req, it.p, it.sh)
	return nil
}

// finishStream waits, on a goroutine of the runner, for the final
// response of a decoupled request whose execution has returned, ends its
// stream and releases it. As in Triton, the sequence's next request does
// not wait for it: the instance pulls its next batch once Execute has
// returned (the requests are released), while these responses still flow.
func (s *seqRunner) finishStream(ctx context.Context, it *seqItem) {
	s.streams.Go(func() {
		defer it.release()
		end := context.WithoutCancel(it.ctx) // the end goes out even after a cancellation
		select {
		case <-it.final:
			s.mv.sendHeld(end, it.stream, it.p) // the execution has returned: its timestamps are known
			if err := it.stream.End(end); err != nil {
				s.mv.e.log.DebugContext(it.p.logContext(), "end of sequence stream not delivered", "model", s.mv.name, "err", err)
			}
		case <-ctx.Done():
			// The model is unloading and the backend did not end the
			// request: the client learns it did not complete.
			_ = it.stream.SendError(end, tritonerr.Unavailablef("model '%s' version %s is unloading", s.mv.name, s.mv.vstr), true)
		}
	})
}

// decode reads the entry's encoded ModelInferRequest (its template's for
// padding) and sets up its pending request, under the client's deadline.
func (s *seqRunner) decode(ctx context.Context, now time.Time, w, template *busv1.SequenceWork) (*seqItem, error) {
	it := &seqItem{w: w, reply: w.GetReply()}
	src := w
	if w.GetPadding() {
		src = template
	}
	received := now
	if n := src.GetReceivedUnixNano(); n > 0 {
		received = time.Unix(0, n)
	}
	rctx := ctx
	if s.mv.decoupled() && !w.GetPadding() && w.GetReply() != "" {
		// The client's cancellation reaches the backend
		// (Request.IsCancelled), as on the stateless path; only with the
		// request's key, which the router sent with it.
		rctx, it.untrack = s.mv.e.bus.TrackRequestKey(rctx, w.GetReply(), w.GetCancelKey())
	} else if !w.GetPadding() && w.GetReply() != "" {
		// Its gateway's liveness probes are answered while it runs here,
		// also when the router that handed it over is gone.
		it.untrack = s.mv.e.bus.Hold(w.GetReply())
	}
	if d := w.GetDeadlineUnixNano(); d > 0 && !w.GetPadding() {
		rctx, it.cctx = context.WithDeadline(rctx, time.Unix(0, d))
	}
	it.ctx = rctx
	it.p = &pending{received: received, queued: received, size: 1}
	if !w.GetPadding() && len(w.GetTraceContext()) > 0 {
		tctx := tracing.Extract(ctx, w.GetTraceContext())
		_, it.p.span = s.mv.e.tracer.StartChild(tctx, s.mv.name, s.mv.name)
		if it.p.span != nil {
			it.p.span.SetAttributes(tracing.AttrModelVersion.String(strconv.FormatInt(s.mv.version, 10)), attribute.String("nereid.executor", s.mv.e.cfg.ID))
		} else if tracing.TimestampsAsked(tctx) {
			// Its gateway writes Triton's trace file: the request's
			// timestamps go back with its answer (reply, sendHeld).
			it.p.stamps = new(requestStamps)
		}
	}
	if it.p.span != nil {
		// The backend sees the request's span (a C backend's RequestTrace).
		rctx = trace.ContextWithSpan(rctx, it.p.span)
	}
	it.r = backend.InitRequest(new(backend.Request), rctx, it.p)
	it.req = &inference.ModelInferRequest{}
	if err := proto.Unmarshal(src.GetRequest(), it.req); err != nil {
		return it, tritonerr.InvalidArgf("malformed sequence request for model '%s': %v", s.mv.name, err)
	}
	return it, nil
}

// attach makes the entry's shared-memory inputs slices of their mappings,
// as on the stateless path (private copies for a backend that cannot be
// guarded), unless the client's deadline has passed.
func (s *seqRunner) attach(it *seqItem) error {
	mv := s.mv
	var err error
	if it.sh, err = mv.e.shm.attach(it.req, mv.hostIns); err != nil {
		return err
	}
	if mv.noGuard {
		if err := it.sh.privatize(it.req); err != nil {
			return err
		}
	}
	it.sh.bindOutputs(it.r)
	if it.sh != nil && !it.w.GetPadding() && pastDeadline(it.w) {
		return errSeqTimedOut(mv.name)
	}
	return nil
}

// normalize validates the entry against the config and adds the control
// tensors and flags it calls for; it returns the entry.
func (s *seqRunner) normalize(it *seqItem) (seqbatch.Entry, error) {
	w, r := it.w, it.r
	// Validation reads BYTES inputs, which may lie in a client's region.
	if err := it.sh.guard(func() error { return infer.Normalize(s.mv.cfg, it.req, r) }); err != nil {
		return seqbatch.Entry{}, err
	}
	it.sh.bindInputDevices(r)
	entry := seqbatch.Entry{Slot: int(w.GetSlot()), ID: seqbatch.FromProto(w.GetId()),
		Start: w.GetStart(), End: w.GetEnd(), Ready: !w.GetPadding()}
	r.Decoupled = s.mv.decoupled()
	if w.GetPadding() {
		r.ID = ""
	} else {
		entry.Req = &seqbatch.Request{}
		r.CorrelationID = correlation(entry.ID)
		r.Flags = 0
		if entry.Start {
			r.Flags |= backend.SequenceStart
		}
		if entry.End {
			r.Flags |= backend.SequenceEnd
		}
	}
	r.Inputs = append(r.Inputs, s.controls.Inputs(entry)...)
	it.p.req, it.p.sh = r, it.sh
	return entry, nil
}

// reply answers one executed request to its gateway: the response, with
// its shared-memory outputs written into their regions, or the error.
func (s *seqRunner) reply(ctx context.Context, it *seqItem) {
	mv := s.mv
	if it.p.resp.Err != nil {
		mv.e.bus.ReplyError(it.reply, it.p.resp.Err)
		return
	}
	out, err := mv.response(it.req, it.p.req, it.p.resp)
	if err != nil {
		mv.e.bus.ReplyError(it.reply, err)
		return
	}
	if it.sh != nil && pastDeadline(it.w) {
		// The gateway stopped waiting and released its holds: the client
		// may have unregistered and reused the region.
		mv.e.bus.ReplyError(it.reply, errSeqTimedOut(mv.name))
		return
	}
	if err := it.sh.finish(out); err != nil { // outputs into their shared-memory regions
		mv.e.bus.ReplyError(it.reply, err)
		return
	}
	withStamps(out, tracing.TimestampsParameter, it.p.stamps)
	if err := mv.e.bus.Reply(ctx, it.reply, out); err != nil {
		mv.e.log.DebugContext(it.p.logContext(), "sequence reply not delivered", "model", mv.name, "err", err)
	}
}

// pastDeadline reports whether the client's deadline for w has passed:
// the gateway no longer waits and no longer holds w's shared-memory
// regions, so nothing may be read from or written into them.
func pastDeadline(w *busv1.SequenceWork) bool {
	d := w.GetDeadlineUnixNano()
	return d > 0 && time.Now().UnixNano() >= d
}

func errSeqTimedOut(model string) error {
	return tritonerr.Unavailablef("inference request for model '%s' timed out", model)
}

func correlation(id seqbatch.ID) backend.CorrelationID {
	if id.IsString {
		return backend.CorrelationString(id.Str)
	}
	return backend.CorrelationUint(id.Uint)
}
