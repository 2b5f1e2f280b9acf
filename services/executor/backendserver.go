package executor

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/placementbus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// peerHeartbeat keeps the set of executors in the constellation, for the
// model queries of backends.
func (e *Executor) peerHeartbeat(_ context.Context, data []byte) {
	var hb busv1.ExecutorHeartbeat
	if proto.Unmarshal(data, &hb) != nil || hb.GetExecutorId() == "" || hb.GetExecutorId() == e.cfg.ID {
		return
	}
	e.peersMu.Lock()
	defer e.peersMu.Unlock()
	if e.peers == nil {
		e.peers = map[string]time.Time{}
	}
	if hb.GetWithdraw() {
		delete(e.peers, hb.GetExecutorId())
	} else {
		e.peers[hb.GetExecutorId()] = time.Now()
	}
}

// livePeers returns the executors heard from within bus.HeartbeatExpiry,
// as gateways count them: one that died without withdrawing drops out.
func (e *Executor) livePeers() []string {
	e.peersMu.Lock()
	defer e.peersMu.Unlock()
	ids := make([]string, 0, len(e.peers))
	for id, at := range e.peers {
		if time.Since(at) > bus.HeartbeatExpiry {
			delete(e.peers, id)
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// backendServer is the executor as Triton backends see TRITONSERVER_Server:
// their inference requests (BLS) go over the bus to whichever executor
// serves the model, as a client's do after the gateway, and their model
// queries read the catalogs of the constellation's executors.
type backendServer Executor

// catalog lists the model versions of this executor and of every peer
// that answers.
func (s *backendServer) catalog(ctx context.Context) []*busv1.ModelVersionState {
	select {
	case <-s.peersHeard:
	case <-ctx.Done():
		return nil
	}
	var out []*busv1.ModelVersionState
	for _, mv := range (*Executor)(s).snapshot() {
		out = append(out, &busv1.ModelVersionState{Name: mv.name, Version: mv.vstr, State: mv.state, Config: mv.cfg})
	}
	for _, id := range (*Executor)(s).livePeers() {
		var cat busv1.ExecutorCatalog
		if err := s.bus.Request(ctx, bus.ExecutorCatalogSubject(id), &busv1.CatalogRequest{}, &cat); err == nil {
			out = append(out, cat.GetModels()...)
		}
	}
	return out
}

// find returns the state of a model version (-1: the highest READY one).
func (s *backendServer) find(ctx context.Context, name string, v int64) *busv1.ModelVersionState {
	var best *busv1.ModelVersionState
	bestV := int64(-1)
	for _, m := range s.catalog(ctx) {
		if m.GetName() != name {
			continue
		}
		n, err := strconv.ParseInt(m.GetVersion(), 10, 64)
		if err != nil {
			continue
		}
		switch {
		case v >= 0 && n == v && (best == nil || m.GetState() == StateReady):
			best = m
		case v < 0 && m.GetState() == StateReady && n > bestV:
			best, bestV = m, n
		}
	}
	return best
}

// blsWindow bounds the responses of a decoupled model in flight to a
// backend that called it, as decoupledWindow does for a gateway.
const blsWindow = bus.DefaultStreamWindow

// Infer sends a backend's request to an executor of its model: a request
// and its reply for a model that is not decoupled; for a decoupled one, a
// bus stream whose responses go to emit in order as they come, as a
// gateway relays them to a client's stream. Cancelling ctx (the backend's
// TRITONSERVER_InferenceRequestCancel) ends the stream: no response is
// handed on after it, and the called model's request is cancelled.
func (s *backendServer) Infer(ctx context.Context, req *inference.ModelInferRequest, emit func(*inference.ModelInferResponse, error, bool) error) error {
	var decoupled bool
	if req.ModelVersion == "" {
		m := s.find(ctx, req.ModelName, -1)
		if m == nil {
			return tritonerr.Unavailablef("Request for unknown model: '%s' has no available versions", req.ModelName)
		}
		req.ModelVersion = m.GetVersion()
		decoupled = modelconfig.IsDecoupled(m.GetConfig())
	} else {
		decoupled = s.decoupled(ctx, req.ModelName, req.ModelVersion)
	}
	subject := bus.InferSubject(req.ModelName, req.ModelVersion)
	if !decoupled {
		resp := &inference.ModelInferResponse{}
		if err := s.bus.Request(ctx, subject, req, resp); err != nil {
			return err
		}
		return emit(resp, nil, true)
	}
	st, err := s.bus.Stream(ctx, subject, req, blsWindow)
	if err != nil {
		return err
	}
	defer st.Close()
	for {
		item, err := st.Recv()
		if err == nil && ctx.Err() != nil {
			// Cancelled while a response was already on its way: the
			// backend hears nothing after its cancellation but the end.
			err = tritonerr.New(tritonerr.Cancelled, "inference request for model '%s' was cancelled", req.ModelName)
		}
		if err != nil {
			return err
		}
		var resp *inference.ModelInferResponse
		if item.Err == nil && (len(item.Data) > 0 || !item.Final) {
			resp = &inference.ModelInferResponse{}
			if err := st.Unmarshal(item.Data, resp); err != nil {
				return err
			}
		}
		var rerr error
		if item.Err != nil {
			rerr = item.Err // a nil *tritonerr.Error must not become a non-nil error
		}
		if err := emit(resp, rerr, item.Final); err != nil || item.Final {
			return err
		}
	}
}

// decoupled reports whether a version of a model is decoupled: from this
// executor's own catalog when it serves the version, else from the
// constellation's. A version nobody serves is not: its request then fails
// as any request to it does.
func (s *backendServer) decoupled(ctx context.Context, name, version string) bool {
	for _, mv := range (*Executor)(s).snapshot() {
		if mv.name == name && mv.vstr == version && mv.state == StateReady {
			return modelconfig.IsDecoupled(mv.cfg)
		}
	}
	v, err := strconv.ParseInt(version, 10, 64)
	if err != nil {
		return false
	}
	m := s.find(ctx, name, v)
	return m != nil && m.GetState() == StateReady && modelconfig.IsDecoupled(m.GetConfig())
}

func (s *backendServer) ModelReady(ctx context.Context, name string, v int64) (bool, error) {
	m := s.find(ctx, name, v)
	return m != nil && m.GetState() == StateReady, nil
}

func (s *backendServer) ModelDecoupled(ctx context.Context, name string, v int64) (bool, error) {
	m := s.find(ctx, name, v)
	if m == nil || m.GetConfig() == nil {
		return false, tritonerr.NotFoundf("Request for unknown model: '%s' is not found", name)
	}
	return modelconfig.IsDecoupled(m.GetConfig()), nil
}

func (s *backendServer) LoadModel(ctx context.Context, name, config string, files map[string][]byte) error {
	if s.cfg.ControlMode != ControlExplicit {
		return errControlDisabled()
	}
	return s.control(ctx, &busv1.ModelControlRequest{Name: name, Load: true, Config: config, Files: files})
}

// UnloadModel checks the mode at once (Triton answers a backend in none or
// poll mode with an error) and then unloads in the background: a backend
// may unload the very model whose request it is executing, and that
// unload waits for the request to finish.
func (s *backendServer) UnloadModel(_ context.Context, name string, dependents bool) error {
	if s.cfg.ControlMode != ControlExplicit {
		return errControlDisabled()
	}
	req := &busv1.ModelControlRequest{Name: name, UnloadDependents: dependents}
	if !s.group.Go(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, controlTimeout)
		defer cancel()
		if err := s.control(ctx, req); err != nil {
			s.log.Warn("unload asked by a backend", "model", name, "err", err)
		}
	}) {
		return tritonerr.Unavailablef("failed to unload '%s', the executor is shutting down", name)
	}
	return nil
}

// controlTimeout bounds a load or unload a backend asked for.
const controlTimeout = 5 * time.Minute

// errControlDisabled is Triton's answer to a load or unload outside
// explicit mode.
func errControlDisabled() error {
	return tritonerr.Unavailablef("explicit model load / unload is not allowed if polling is enabled")
}

// control sends a load or unload to every executor of the constellation,
// this one included, as a gateway does for the repository API, and waits
// until each one known has answered. The error is the first executor's in
// id order, named with the executor when there are several. Under
// placement it goes to the placement controller instead, which loads or
// unloads the model for the whole cluster, as it does a gateway's.
func (s *backendServer) control(ctx context.Context, req *busv1.ModelControlRequest) error {
	if s.cfg.Placement {
		rep, err := placementbus.NewController(s.bus).Control(ctx, req)
		if err != nil {
			return err
		}
		if rep.GetError() != "" {
			return tritonerr.New(tritonerr.ParseKind(rep.GetErrorKind()), "%s", rep.GetError())
		}
		return nil
	}
	select {
	case <-s.peersHeard:
	case <-ctx.Done():
		return tritonerr.Unavailablef("failed to %s '%s': %v", controlAction(req), req.GetName(), ctx.Err())
	}
	pending := map[string]bool{s.cfg.ID: true}
	for _, id := range (*Executor)(s).livePeers() {
		pending[id] = true
	}
	named := len(pending) > 1
	var failed []*busv1.ModelControlReply
	err := s.bus.Gather(ctx, bus.ModelControlSubject, req, func(data []byte) bool {
		var rep busv1.ModelControlReply
		if proto.Unmarshal(data, &rep) != nil {
			return true
		}
		if rep.GetError() != "" {
			failed = append(failed, &rep)
		}
		delete(pending, rep.GetExecutorId())
		return len(pending) > 0
	})
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		slices.SortFunc(failed, func(a, b *busv1.ModelControlReply) int { return strings.Compare(a.GetExecutorId(), b.GetExecutorId()) })
		msg := failed[0].GetError()
		if named {
			msg += " (executor '" + failed[0].GetExecutorId() + "')"
		}
		return tritonerr.New(tritonerr.ParseKind(failed[0].GetErrorKind()), "%s", msg)
	}
	if len(pending) > 0 {
		missing := slices.Sorted(maps.Keys(pending))
		return tritonerr.Unavailablef("failed to %s '%s', executor '%s' did not answer", controlAction(req), req.GetName(), missing[0])
	}
	return nil
}

func controlAction(req *busv1.ModelControlRequest) string {
	if req.GetLoad() {
		return "load"
	}
	return "unload"
}
