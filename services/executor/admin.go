package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// The admin API's view of an executor (bus.ExecutorStatusSubject) and its
// drain (bus.ExecutorDrainSubject).
//
// Draining stops the executor taking new work: its inference
// subscriptions are drained (the requests already received finish; NATS
// sends new ones to the other executors of the model), and every sequence
// model instance tells the router in its pulls that it drains, so that the
// router binds no new sequence to it while the sequences bound already run
// to their END (or go idle), or, with durable state, move to other
// executors between two requests (pkg/seqbatch HandOver). The executor is drained once no request is in
// flight and the router has answered a draining pull of every instance
// saying that it holds no sequence. It keeps its heartbeat: the router must
// not take it for lost while its sequences finish. Its catalog says that
// it drains (a new revision), so that gateways no longer count it as
// serving its models: a model whose every executor drains is not ready.
//
// Undraining (nereidctl undrain) undoes a drain, finished or not: the
// executor subscribes its READY versions again and its sequence instances
// pull without the draining mark, so the router binds sequences to them
// again.

// serveAdmin subscribes the admin subjects.
func (e *Executor) serveAdmin(bc *bus.Conn) ([]*bus.Subscription, error) {
	status, err := bc.Handle(bus.ExecutorStatusSubject(e.cfg.ID), "", func(context.Context, []byte) (proto.Message, error) {
		return e.status(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	drain, err := bc.Handle(bus.ExecutorDrainSubject(e.cfg.ID), "", e.handleDrain)
	if err != nil {
		_ = status.Unsubscribe()
		return nil, fmt.Errorf("executor: %w", err)
	}
	return []*bus.Subscription{status, drain}, nil
}

func (e *Executor) handleDrain(_ context.Context, data []byte) (proto.Message, error) {
	var req busv1.ExecutorDrainRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		return nil, tritonerr.InvalidArgf("malformed drain request: %v", err)
	}
	switch {
	case req.GetStart() && req.GetUndrain():
		return nil, tritonerr.InvalidArgf("a drain request either starts or undoes a drain, not both")
	case req.GetStart():
		e.startDrain()
	case req.GetUndrain():
		if err := e.undrain(); err != nil {
			return nil, err
		}
	}
	return e.drainStatus(), nil
}

// startDrain drains the inference subscriptions of every version, once.
func (e *Executor) startDrain() {
	// Under controlMu, a repository load either served its version before
	// the drain began (drained below) or sees draining set (serve); an
	// undrain waits for the subscriptions to be listed here.
	e.controlMu.Lock()
	if !e.draining.CompareAndSwap(false, true) {
		e.controlMu.Unlock()
		return
	}
	e.drainEpoch++
	epoch := e.drainEpoch
	e.subsDrained.Store(false)
	var subs []*bus.Subscription
	for _, mv := range e.snapshot() {
		for _, s := range append([]*bus.Subscription{mv.sub, mv.nodeSub}, mv.devSubs...) {
			if s != nil {
				subs = append(subs, s)
			}
		}
	}
	e.controlMu.Unlock()
	e.log.Info("draining: no new requests or sequences; finishing those in flight")
	e.changed() // gateways learn that this executor no longer serves
	e.group.Go(func(context.Context) {
		var wg sync.WaitGroup
		for _, s := range subs {
			wg.Go(func() { _ = s.Drain() })
		}
		wg.Wait()
		e.controlMu.Lock()
		defer e.controlMu.Unlock()
		if e.drainEpoch == epoch {
			e.subsDrained.Store(true)
		}
	})
}

// undrain undoes a drain: every READY version is subscribed again (the
// subscriptions the drain closes, or is still closing, are not reused),
// and the sequence instances' next pulls no longer say draining.
func (e *Executor) undrain() error {
	e.controlMu.Lock()
	if !e.draining.Load() {
		e.controlMu.Unlock()
		return nil
	}
	e.drainEpoch++
	e.draining.Store(false)
	e.subsDrained.Store(false)
	var errs []error
	for _, mv := range e.snapshot() {
		if mv.state != StateReady {
			continue
		}
		mv.sub, mv.nodeSub, mv.devSubs = nil, nil, nil
		if err := e.serve(mv); err != nil {
			errs = append(errs, err)
		}
	}
	e.controlMu.Unlock()
	e.changed()
	if err := errors.Join(errs...); err != nil {
		e.log.Error("undrain: a version could not be served again", "err", err)
		return tritonerr.Internalf("undrain: %v", err)
	}
	e.log.Info("undrained: taking new requests and sequences again")
	return nil
}

// inflight counts the requests the executor handles now.
func (e *Executor) inflight() int64 {
	var n int64
	for _, mv := range e.snapshot() {
		n += mv.inflight.Load()
	}
	return n
}

// drainStatus says where the drain stands.
func (e *Executor) drainStatus() *adminv1.DrainStatus {
	st := &adminv1.DrainStatus{ExecutorId: e.cfg.ID, State: adminv1.DrainState_DRAIN_STATE_SERVING, InflightRequests: e.inflight()}
	if !e.draining.Load() {
		return st
	}
	var busy int64
	for _, mv := range e.snapshot() {
		if seq := mv.seq; seq != nil {
			busy += int64(seq.busyInstances())
		}
	}
	st.BusySequenceInstances = busy
	var waits []string
	switch {
	case st.InflightRequests > 0:
		waits = append(waits, plural(st.InflightRequests, "request")+" in flight")
	case !e.subsDrained.Load():
		waits = append(waits, "the requests already delivered to it")
	}
	if busy > 0 {
		waits = append(waits, plural(busy, "sequence model instance")+" that may hold sequences")
	}
	st.State = adminv1.DrainState_DRAIN_STATE_DRAINED
	if len(waits) > 0 {
		st.State = adminv1.DrainState_DRAIN_STATE_DRAINING
		st.WaitingFor = strings.Join(waits, ", ")
	}
	return st
}

// plural says "1 request", "2 requests".
func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// status is the executor as the admin API lists it.
func (e *Executor) status() *adminv1.Executor {
	out := &adminv1.Executor{
		Id: e.cfg.ID, Node: e.cfg.Node, Generation: e.generation, StartedUnixMs: e.started.UnixMilli(),
		DrainState: e.drainStatus().GetState(),
	}
	if s := e.shm; s != nil {
		for _, d := range s.gpus {
			out.Gpus = append(out.Gpus, &adminv1.Gpu{Index: int64(d.Index), Name: d.Name, Uuid: d.UUID, PciBusId: d.BusID})
		}
		if len(out.Gpus) == 0 && s.gpuErr != nil {
			out.GpuNote = s.gpuErr.Error()
		}
	}
	for _, mv := range e.snapshot() {
		m := &adminv1.LoadedModel{Name: mv.name, Version: mv.vstr, State: mv.state, Reason: mv.reason,
			InflightRequests: mv.inflight.Load(), Sequence: mv.cfg.GetSequenceBatching() != nil}
		for _, in := range mv.instances {
			dev := int64(-1)
			if in.info.Kind == inference.ModelInstanceGroup_KIND_GPU {
				dev = int64(in.info.DeviceID)
			}
			m.Instances = append(m.Instances, &adminv1.ModelInstance{Name: in.info.Name, Kind: in.info.Kind.String(), DeviceId: dev})
		}
		out.InflightRequests += m.InflightRequests
		out.Models = append(out.Models, m)
	}
	return out
}
