package executor

import (
	"context"
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
// not take it for lost while its sequences finish. Nothing undoes a drain
// but a restart.

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
	if req.GetStart() {
		e.startDrain()
	}
	return e.drainStatus(), nil
}

// startDrain drains the inference subscriptions of every version, once.
func (e *Executor) startDrain() {
	// Under controlMu, a repository load either served its version before
	// the drain began (drained below) or sees draining set (serve).
	e.controlMu.Lock()
	if !e.draining.CompareAndSwap(false, true) {
		e.controlMu.Unlock()
		return
	}
	models := e.snapshot()
	e.controlMu.Unlock()
	e.log.Info("draining: no new requests or sequences; finishing those in flight")
	e.group.Go(func(context.Context) {
		var wg sync.WaitGroup
		for _, mv := range models {
			for _, s := range append([]*bus.Subscription{mv.sub, mv.nodeSub}, mv.devSubs...) {
				if s != nil {
					wg.Go(func() { _ = s.Drain() })
				}
			}
		}
		wg.Wait()
		e.subsDrained.Store(true)
	})
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
