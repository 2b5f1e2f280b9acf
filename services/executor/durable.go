package executor

import (
	"context"
	"time"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/backoff"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/seqbatch"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/executor/internal/seqstate"
)

// Durable state (model parameter state_durability "redis"): the executor
// keeps a sequence's state in memory as for any implicit state, and also
// writes each new output state to the state store (statestore.go) before
// the request's answer leaves: one write per request that changed its
// state, the writes of one batch in one round trip. The write is fenced
// (seqstate.Save): it carries the batch's fence (the router's lease epoch
// and the batch's number) and chains on the token of the record its input
// came from, so an executor the sequence has left behind cannot overwrite
// a newer state; a refused write is never answered, since the request ran
// again elsewhere. When the router moves a sequence here from a lost
// executor, the first request reads the record (resume); the request the
// lost executor was running runs again from the state before it when that
// executor had already written its state. The END request deletes the
// record once answered; records of sequences that time out expire after
// twice the idle timeout plus a margin, and an unloaded model deletes the
// records of the sequences it held.

// durableWait bounds how long a request waits for the store (Redis
// restarting) before it fails.
const durableWait = 15 * time.Second

func (s *seqRunner) stateKey(id seqbatch.ID) string {
	return stateKey(bus.ModelKey(s.mv.name, s.mv.vstr), id.Key())
}

// recordKey is st's stateKey, made on the sequence's first write rather
// than on every one.
func (s *seqRunner) recordKey(st *slotState) string {
	if st.key == "" {
		st.key = s.stateKey(st.id)
	}
	return st.key
}

// retrying runs op until it succeeds, durableWait passes or ctx ends,
// backing off between tries.
func (s *seqRunner) retrying(ctx context.Context, what string, op func(context.Context) error) error {
	retry := backoff.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	limit := time.Now().Add(durableWait)
	for {
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := op(octx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(limit) || retry.Wait(ctx) != nil {
			return err
		}
		s.mv.e.log.Debug("durable sequence state: retrying", "model", s.mv.name, "op", what, "err", err)
	}
}

// persist writes the new states of a batch's requests and makes each the
// sequence's state once written. A request whose write is refused as stale
// is marked not to be answered and its sequence forgotten here; one whose
// state is gone from the store, or that cannot be written, fails.
func (s *seqRunner) persist(ctx context.Context, idx int, items []*seqItem, fence uint64) {
	var ws []keyedWrite
	var its []*seqItem
	for _, it := range items {
		if it.next == nil {
			continue
		}
		ws = append(ws, keyedWrite{key: s.recordKey(it.state), w: seqstate.Write{
			Fence: fence, Token: it.w.GetToken(), After: it.state.after, Start: it.w.GetStart(), State: seqstate.Encode(it.next)}})
		its = append(its, it)
	}
	if len(ws) == 0 {
		return
	}
	var verdicts []seqstate.Verdict
	err := s.retrying(ctx, "save", func(ctx context.Context) (err error) {
		verdicts, err = s.mv.e.states.save(ctx, ws, s.ttl)
		return err
	})
	for i, it := range its {
		slot := int(it.w.GetSlot())
		if it.p.resp == nil {
			it.p.resp = &backend.Response{}
		}
		switch {
		case err != nil:
			it.p.resp.Err = tritonerr.Unavailablef("cannot write the state of sequence %s of model '%s' to Redis: %v; the state was not changed", it.state.id, s.mv.name, err)
		case verdicts[i] == seqstate.Saved:
			it.state.st, it.state.after, it.state.fence = it.next, it.w.GetToken(), fence
		case verdicts[i] == seqstate.Stale:
			it.stale = true
			delete(s.states[idx], slot)
			s.mv.e.log.WarnContext(it.p.logContext(), "durable sequence state: a newer batch wrote the sequence's state; this executor's answer is not sent",
				"model", s.mv.name, "sequence", it.state.id.Key(), "fence", fence)
		default:
			delete(s.states[idx], slot)
			it.p.resp.Err = errStateGone(it.state.id, s.mv.name)
		}
	}
}

func errStateGone(id seqbatch.ID, model string) *tritonerr.Error {
	return tritonerr.Unavailablef("the durable state of sequence %s of model '%s' is not in Redis: the sequence ended or timed out, or Redis lost its data", id, model)
}

// resume reads a durable sequence's state from the store, for its request
// token: the state before the request when the store holds the request's
// own (the lost executor wrote it before its answer could leave).
func (s *seqRunner) resume(ctx context.Context, id seqbatch.ID, token string) (*slotState, error) {
	var rec *seqstate.Record
	err := s.retrying(ctx, "load", func(ctx context.Context) (err error) {
		rec, err = s.mv.e.states.load(ctx, s.stateKey(id))
		return err
	})
	if err != nil {
		return nil, tritonerr.Unavailablef("cannot read the state of sequence %s of model '%s' from Redis: %v; the request was not run", id, s.mv.name, err)
	}
	if rec == nil {
		return nil, errStateGone(id, s.mv.name)
	}
	data, after, ok := seqstate.Resume(rec, token)
	if !ok {
		return nil, tritonerr.Unavailablef("the durable state of sequence %s of model '%s' before this request is not in Redis; the request was not run", id, s.mv.name)
	}
	st, err := seqstate.Decode(data)
	if err != nil {
		return nil, tritonerr.Internalf("the durable state of sequence %s of model '%s': %v", id, s.mv.name, err)
	}
	s.mv.e.log.Info("durable sequence state resumed", "model", s.mv.name, "sequence", id.Key(), "rerun", after == "")
	return &slotState{id: id, st: st, used: time.Now(), after: after, fence: rec.Fence}, nil
}

// dropStates deletes the records of ended sequences (fenced: only the
// sequence's own, written by no newer batch).
func (s *seqRunner) dropStates(ctx context.Context, ds []keyedDrop) {
	err := s.retrying(ctx, "drop", func(ctx context.Context) error { return s.mv.e.states.drop(ctx, ds) })
	if err != nil {
		s.mv.e.log.Warn("durable sequence state: cannot delete the states of ended sequences; they expire", "model", s.mv.name, "err", err)
	}
}

// dropDurable deletes the records of the sequences this executor holds,
// when the model is unloaded (not when the executor shuts down: then
// another executor continues them). The pullers have stopped.
func (s *seqRunner) dropDurable() {
	if !s.durable {
		return
	}
	var ds []keyedDrop
	for _, slots := range s.states {
		for _, st := range slots {
			if st.after != "" {
				ds = append(ds, keyedDrop{key: s.recordKey(st), fence: st.fence, token: st.after, after: st.after})
			}
		}
	}
	if len(ds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.mv.e.states.drop(ctx, ds); err != nil {
		s.mv.e.log.Warn("durable sequence state: cannot delete the states of an unloaded model; they expire", "model", s.mv.name, "err", err)
	}
}
