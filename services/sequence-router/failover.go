package seqrouter

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/failover"
	"github.com/nereid-io/nereid/pkg/seqbatch"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// The failover protocol's decisions are pkg/failover's (the lease, the
// takeover, the epoch floor); this file performs them: store calls,
// subscriptions, the takeover announcement, replies.

func modelKey(name, version string) string { return bus.ModelKey(name, version) }

// floor returns key's epoch floor; s.mu is held.
func (s *Service) floor(key string) *failover.Floor {
	f := s.floors[key]
	if f == nil {
		f = &failover.Floor{}
		s.floors[key] = f
	}
	return f
}

// claim is an executor instance of a model no router serves (its pull found
// no responders, or timed out, or its batch came from a lease older than
// its fence): take the model's lease if it is free. Attempts per model are
// spaced by failover.ClaimSpacing, so a crowd of instances costs the store a few
// commands per second. The claim carries the executor's fence, which the
// next lease's epoch must exceed; a router serving the model at an older
// epoch steps down, so that a higher one is taken.
func (s *Service) claim(_ context.Context, subject string, data []byte) {
	name, version, _, ok := bus.ParseSequenceSubject(subject)
	if !ok {
		return
	}
	var p busv1.SequencePull
	if err := proto.Unmarshal(data, &p); err != nil || p.GetConfig() == nil {
		return
	}
	key := modelKey(name, version)
	now := time.Now()
	s.mu.Lock()
	s.floor(key).Report(p.GetFenceEpoch())
	if m := s.models[key]; m != nil {
		s.mu.Unlock()
		m.lock()
		if m.tk != nil {
			m.tk.Expect(p.GetExecutorId())
		}
		m.unlock()
		if p.GetFenceEpoch() > m.epoch {
			s.stepDown(m, failover.EpochBehind)
		}
		return
	}
	if now.Sub(s.claims[key]) < failover.ClaimSpacing || s.group.Stopping() {
		s.mu.Unlock()
		return
	}
	s.claims[key] = now
	s.mu.Unlock()
	s.group.Go(func(ctx context.Context) { s.takeover(ctx, name, version, &p) })
}

// takeover takes a model's lease, restores its state from the store,
// serves its subjects, then announces the new epoch: executors fence older
// epochs and report what they hold from them, gateways ask (resolve) about
// the requests they still wait for, and the requests the previous router
// held but never handed out are failed instead of left to time out.
func (s *Service) takeover(runCtx context.Context, name, version string, claim *busv1.SequencePull) {
	key := modelKey(name, version)
	s.mu.Lock()
	floor := s.floor(key).Min()
	s.mu.Unlock()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(runCtx, s.cfg.LeaseTTL/4)
	epoch, err := s.st.acquire(ctx, key, s.cfg.ID, floor, s.cfg.LeaseTTL)
	cancel()
	if err != nil || epoch == 0 {
		if err != nil {
			s.log.Warn("cannot take the lease of a model", "model", name, "err", err)
		}
		return
	}
	s.mu.Lock()
	s.floor(key).Report(epoch)
	s.mu.Unlock()
	m := &model{s: s, name: name, version: version, key: key, epoch: epoch,
		lease: failover.NewLease(s.cfg.LeaseTTL, epoch, t0), tk: failover.NewTakeover(t0, epoch),
		pulls: map[seqbatch.InstanceKey]*pull{}, inflight: map[uint64]*flight{}, nextBatch: epoch << 32,
		heldDone: make(chan struct{}), poke: make(chan struct{}, 1)}
	m.tk.Expect(claim.GetExecutorId())
	for e := range m.boundExecutors(runCtx) {
		m.tk.Expect(e)
	}
	m.lock()
	out := m.init(time.Now(), claim.GetConfig())
	m.unlock()
	m.deliver(out)

	// Ordered: requests of one gateway reach the batcher in the order it
	// sent them, and a resolve after every request sent before it.
	infer, err1 := s.bus.HandleDelegatedOrdered(bus.SequenceInferSubject(name, version), bus.QueueRouters, s.handleInfer)
	pullSub, err2 := s.bus.HandleDelegated(bus.SequencePullSubject(name, version), bus.QueueRouters, s.handlePull)
	statsSub, err3 := s.bus.Handle(bus.SequenceStatsSubject(name, version), bus.QueueRouters, func(context.Context, []byte) (proto.Message, error) {
		m.lock()
		defer m.unlock()
		return &busv1.StatisticsReply{ModelStats: []*inference.ModelStatistics{m.statistics()}, Metrics: []*busv1.VersionMetrics{m.metrics()}}, nil
	})
	m.subs = []*bus.Subscription{infer, pullSub, statsSub}
	for _, e := range []error{err1, err2, err3} {
		if e != nil {
			s.log.Error("cannot serve a model", "model", name, "err", e)
			close(m.heldDone)
			s.stepDown(m, failover.CannotServe)
			return
		}
	}
	if err := s.bus.Flush(runCtx); err != nil {
		s.log.Warn("flush", "err", err)
	}
	s.mu.Lock()
	s.models[key] = m
	s.mu.Unlock()
	s.group.Go(func(ctx context.Context) { s.leaseLoop(ctx, m) })
	s.log.Info("active: serving sequences", "model", name, "version", version, "epoch", epoch)
	if r := s.gatherHeld(runCtx, m); r != failover.NoReason {
		s.stepDown(m, r)
	}
}

// gatherHeld announces the takeover and collects, from every executor that
// may hold batches of an older epoch, the tokens of those requests and the
// newest epoch it has seen, until every expected executor answered or
// failover.GatherWait passed. An executor fenced above the lease's epoch
// makes the router step down (the reason is returned) with the floor
// raised, so that the next claim takes an epoch executors accept.
func (s *Service) gatherHeld(ctx context.Context, m *model) failover.Reason {
	defer close(m.heldDone)
	m.lock()
	m.tk.Announced(time.Now())
	m.unlock()
	ctx, cancel := context.WithTimeout(ctx, failover.GatherWait)
	defer cancel()
	reason := failover.NoReason
	err := s.bus.Gather(ctx, bus.SequenceTakeoverSubject(m.name, m.version), &busv1.SequenceTakeover{Epoch: m.epoch, RouterId: s.cfg.ID}, func(data []byte) bool {
		var h busv1.SequenceHeld
		if proto.Unmarshal(data, &h) != nil {
			return true
		}
		m.lock()
		reason = m.tk.Held(h.GetExecutorId(), h.GetEpoch(), h.GetTokens())
		complete := m.tk.Complete(time.Now())
		m.unlock()
		return reason == failover.NoReason && !complete
	})
	m.lock()
	m.tk.Complete(time.Now().Add(failover.GatherWait)) // the gather is over either way
	silent, behind := m.tk.Silent(), m.tk.Behind()
	m.unlock()
	if behind > 0 {
		s.mu.Lock()
		s.floor(m.key).Report(behind)
		s.mu.Unlock()
		s.log.Warn("takeover: an executor has seen a newer epoch than the lease's (the store lost its data?); taking a higher one",
			"model", m.name, "epoch", m.epoch, "executor_epoch", behind)
		return failover.EpochBehind
	}
	if err != nil {
		s.log.Warn("takeover: cannot announce", "model", m.name, "err", err)
	} else if len(silent) > 0 {
		s.log.Warn("takeover: some executors did not say what they hold", "model", m.name, "silent", silent)
	}
	return reason
}

// boundExecutors are the executors the restored bindings name.
func (m *model) boundExecutors(ctx context.Context) map[string]bool {
	out := map[string]bool{}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	bound, _, err := m.s.st.load(ctx, m.key)
	if err != nil {
		return out
	}
	for _, ref := range bound {
		out[ref.Instance.Executor] = true
	}
	return out
}

// resolve answers a gateway's resolve tokens after a takeover: the tokens
// that neither this router received nor an executor holds were held by the
// previous router and are gone; they are marked lost (never run if they
// turn up) and returned, so the gateway fails them at once. It runs after
// every request the gateway sent before it was handled (ordered infer
// subject), so "received" is complete for those but a request may still
// trail its resolve by a moment (failover.ResolveGrace).
func (m *model) resolve(ctx context.Context, reply string, tokens []string) {
	wait := time.NewTimer(resolveWait)
	defer wait.Stop()
	select {
	case <-m.heldDone:
	case <-ctx.Done():
		m.s.bus.ReplyError(reply, bus.NotTaken("the sequence router for model '%s' is shutting down", m.name))
		return
	case <-wait.C:
		m.s.bus.ReplyError(reply, tritonerr.Unavailablef("sequence router takeover of model '%s' still in progress", m.name))
		return
	}
	m.lock()
	missing := m.tk.Missing(tokens)
	m.unlock()
	var lost []string
	if len(missing) > 0 {
		grace := time.NewTimer(failover.ResolveGrace)
		select {
		case <-grace.C:
		case <-ctx.Done():
			grace.Stop()
		}
		m.lock()
		lost = m.tk.DeclareLost(missing)
		m.unlock()
	}
	if len(lost) > 0 {
		m.s.log.Warn("requests held by the previous router are lost; their gateways fail them", "model", m.name, "count", len(lost))
	}
	if err := m.s.bus.Reply(ctx, reply, &busv1.SequenceResolved{Lost: lost}); err != nil {
		m.s.log.Debug("resolve answer not delivered", "model", m.name, "err", err)
	}
}

// resolveWait bounds how long a resolve waits for the takeover's gather.
const resolveWait = 5 * time.Second

// leaseLoop keeps a model's lease: it renews when failover.Lease says a
// renewal is due (at once when a handler found the lease suspended), and
// steps down when the lease says so. It runs on its own goroutine and
// takes only the lease's lock, never the model's: request handling cannot
// delay a renewal. Renewals run late only when the process itself is
// starved of CPU; how late is logged past TTL/8.
func (s *Service) leaseLoop(ctx context.Context, m *model) {
	ttl := s.cfg.LeaseTTL
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := time.Now()
		m.leaseMu.Lock()
		if r := m.lease.Check(now); r != failover.NoReason {
			m.leaseMu.Unlock()
			s.stepDown(m, r)
			return
		}
		next := m.lease.NextRenewal(now)
		if next.After(now) {
			m.leaseMu.Unlock()
			// Wake for the renewal, or for the check at the lapse.
			timer.Reset(min(next.Sub(now), ttl/4))
			select {
			case <-ctx.Done():
				return
			case <-m.poke:
				m.leaseMu.Lock()
				m.lease.Expedite()
				m.leaseMu.Unlock()
			case <-timer.C:
			}
			continue
		}
		m.lease.Renewing(now)
		late, _ := m.lease.Lateness()
		m.leaseMu.Unlock()
		if late > ttl/8 {
			s.log.Info("lease renewal ran late", "model", m.name, "late", late)
		} else {
			s.log.Debug("lease renewal", "model", m.name, "late", late)
		}
		rctx, cancel := context.WithTimeout(ctx, ttl/4)
		answer, err := s.st.renew(rctx, m.key, s.cfg.ID, m.epoch, ttl)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("lease renewal failed", "model", m.name, "err", err)
			answer = failover.Unreachable
		}
		m.leaseMu.Lock()
		suspended := m.lease.State(time.Now()) == failover.Suspended
		r := m.lease.Renewal(now, answer)
		resumed := suspended && m.lease.State(time.Now()) == failover.Serving
		m.leaseMu.Unlock()
		if answer == failover.Restored {
			s.log.Warn("the store had lost the model's lease; taken back at the same epoch", "model", m.name, "epoch", m.epoch)
		}
		if r != failover.NoReason {
			s.stepDown(m, r)
			return
		}
		if resumed {
			s.log.Info("lease renewed late; serving again", "model", m.name)
			m.resume()
		}
	}
}

// leaseState is what the lease allows now; a suspended lease asks the
// lease loop to renew at once.
func (m *model) leaseState(now time.Time) failover.State {
	m.leaseMu.Lock()
	st := m.lease.State(now)
	m.leaseMu.Unlock()
	if st == failover.Suspended {
		select {
		case m.poke <- struct{}{}:
		default:
		}
	}
	return st
}

// stepDown stops serving a model: unsubscribes, fails what the model holds
// with UNAVAILABLE, and gives the lease back when the reason allows (so a
// standby need not wait for it to lapse).
func (s *Service) stepDown(m *model, why failover.Reason) {
	s.mu.Lock()
	if s.models[m.key] == m {
		delete(s.models, m.key)
	}
	s.mu.Unlock()
	m.leaseMu.Lock()
	why = m.lease.StepDown(why)
	m.leaseMu.Unlock()
	m.lock()
	subs := m.subs
	m.subs = nil
	m.unlock()
	for _, sub := range subs {
		if sub != nil {
			// Drain, not Unsubscribe: requests already delivered to this
			// process are answered (UNAVAILABLE) rather than dropped.
			if !s.group.Go(func(context.Context) { _ = sub.Drain() }) {
				_ = sub.Unsubscribe()
			}
		}
	}
	// Nothing failed here ran: its gateway sends it again, to the router
	// that serves the model next (bus.NotTaken).
	if !m.shutdown(bus.NotTaken("the sequence router serving model '%s' stopped serving it (%s); the request was not run", m.name, why)) {
		return
	}
	if why.Releases() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.group.Context()), time.Second)
		if err := s.st.release(ctx, m.key, s.cfg.ID, m.epoch); err != nil {
			s.log.Debug("lease release failed", "model", m.name, "err", err)
		}
		cancel()
	}
	s.log.Warn("standing by", "model", m.name, "version", m.version, "epoch", m.epoch, "why", why.String())
}

// RenewalLateness is how late the lease renewals of the models this router
// serves started, at worst (a measure of CPU starvation; see leaseLoop).
func (s *Service) RenewalLateness() time.Duration {
	var worst time.Duration
	for _, m := range s.allModels() {
		m.leaseMu.Lock()
		_, w := m.lease.Lateness()
		m.leaseMu.Unlock()
		worst = max(worst, w)
	}
	return worst
}

// fencedWrites asks the lease loop to renew at once when the store fences
// a write: the lease is gone, or the store lost it with its data, in which
// case the renewal takes it back and the next write goes through.
//
// It also spares the model's lock the wait for a store that is away: the
// batcher writes under it, and a write to a Redis that stopped costs the
// client seconds of dialling, while the requests of sequences already
// bound, which need no Redis, wait for the lock (their executors then run
// nothing, and their gateways, whose requests the ordered infer handler
// has not even taken, count them lost). After a write failed for a reason
// waiting fixes (Redis restarting, loading its data set or not
// answering: storeAway), the writes of the next storePause fail at once
// with that error: a START is refused as not run (storeRefusal), a
// backlog sequence keeps waiting (seqbatch fill), a failed unbind leaves
// a stale binding that the slot's next binding replaces. Calls come from
// the batcher, under the model's lock, which guards the state.
type fencedWrites struct {
	seqbatch.Store
	m *model
}

// storePause is how long writes fail at once after one found the store
// away.
const storePause = 500 * time.Millisecond

func (f fencedWrites) write(op func() error) error {
	m := f.m
	now := time.Now()
	if m.storeDown != nil && now.Before(m.storeRetry) {
		return m.storeDown
	}
	err := op()
	m.storeDown = nil
	if storeAway(err) {
		m.storeDown, m.storeRetry = err, time.Now().Add(storePause)
	}
	if errors.Is(err, errLeaseLost) {
		select {
		case m.poke <- struct{}{}:
		default:
		}
	}
	return err
}

func (f fencedWrites) Bind(id seqbatch.ID, at seqbatch.SlotRef) error {
	return f.write(func() error { return f.Store.Bind(id, at) })
}
func (f fencedWrites) Backlog(id seqbatch.ID) error {
	return f.write(func() error { return f.Store.Backlog(id) })
}
func (f fencedWrites) Unbind(id seqbatch.ID) error {
	return f.write(func() error { return f.Store.Unbind(id) })
}
