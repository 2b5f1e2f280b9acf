package gateway

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/ensemble"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/infer"
	"github.com/nereid-io/nereid/pkg/infercodec"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/shm"
	"github.com/nereid-io/nereid/pkg/tracesetting"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Ensembles run here, in the gateway: the executors whose repositories hold
// one announce it as a scheduler-only version with its configuration, the
// catalog validates it against the composing models the whole constellation
// serves (checkEnsembles), and a request to it runs its step graph
// (pkg/ensemble), each step an inference request routed exactly as a
// client's request to that model would be (forwardInfer): to any executor
// serving it, through its dynamic batcher, or through the sequence router.
// Where one executor serves every step's model, the request goes to it
// whole and it runs the steps (ensembleExecutor): the tensors between
// them never leave it.

// checkEnsembles validates every READY ensemble version of v against the
// composing models v holds, as Triton's repository manager does whenever a
// model an ensemble depends on changes: an ensemble whose composing model
// is missing, unloaded or does not match is UNAVAILABLE with Triton's
// message as its reason, and is READY again once they are back. A valid
// one gets its plan. Called on each new view (publishLocked).
func checkEnsembles(v *view) {
	var ens []*versionView
	for _, mv := range v.models {
		for _, vv := range mv.versions {
			if vv.ready() && modelconfig.IsEnsemble(vv.config) {
				ens = append(ens, vv)
			}
		}
	}
	if len(ens) == 0 {
		return
	}
	// A failed ensemble fails those composing it, and a decoupled one
	// makes those composing it decoupled: check until nothing changes.
	for changed := true; changed; {
		changed = false
		for _, vv := range ens {
			if !vv.ready() {
				continue
			}
			decoupled, err := modelconfig.ValidateComposition(vv.config, v.composing)
			if err != nil {
				vv.state, vv.reason = stateUnavailable, tritonerr.From(err).Msg
				changed = true
				continue
			}
			if decoupled != isDecoupled(vv) {
				// As Triton, the ensemble's configuration says whether it
				// is decoupled (a decoupled step on its data path).
				cfg := proto.Clone(vv.config).(*inference.ModelConfig)
				cfg.ModelTransactionPolicy = &inference.ModelTransactionPolicy{Decoupled: decoupled}
				vv.config = cfg
				changed = true
			}
		}
	}
	for _, vv := range ens {
		if vv.ready() {
			vv.plan = ensemble.Compile(vv.config, func(model string) bool {
				c, _ := v.composing(model)
				return c.Config.GetModelTransactionPolicy().GetDecoupled()
			})
		}
	}
	for _, vv := range ens {
		if vv.plan != nil {
			vv.wholeOn = wholeOn(v, vv)
			vv.wholeRerun = stepsRerun(v, vv.plan, 0)
		}
	}
}

// wholeExec is an executor to which requests to an ensemble may go whole.
type wholeExec struct {
	id, node string
	subject  string // its bus.ExecutorEnsembleSubject
}

// wholeOn are the executors to which a request to ensemble vv may go
// whole, so that the tensors between its steps never leave one: those
// holding vv and the version each step resolves to READY, not draining
// (execNodes), when none of the steps is a sequence model or cached
// (those keep the gateway's path, which goes through the sequence router
// or reads the cache): holdingSteps. A decoupled step streams to the next
// inside the executor, a decoupled ensemble's responses stream from it
// (ensembleStreamOn), and a nested ensemble runs there too (a decoupled
// one streaming to the steps that read it), counting its own statistics
// there. nil: none.
func wholeOn(v *view, vv *versionView) []wholeExec {
	if len(vv.execNodes) == 0 {
		return nil
	}
	candidates := slices.Sorted(maps.Keys(vv.execNodes))
	if !holdingSteps(v, vv.plan, &candidates, 0) {
		return nil
	}
	on := make([]wholeExec, len(candidates))
	for i, id := range candidates {
		on[i] = wholeExec{id: id, node: vv.execNodes[id], subject: bus.ExecutorEnsembleSubject(id)}
	}
	return on
}

// stepsRerun reports whether every step of plan, and of the ensembles
// among them, may run again when its executor is lost (reruns): only then
// may a request whose executor was lost while running it whole run again
// from the gateway, since the loss may otherwise be the request's doing.
func stepsRerun(v *view, plan *ensemble.Plan, depth int) bool {
	for _, s := range plan.Steps {
		svv, err := v.step(s)
		if err != nil || depth >= maxNesting {
			return false
		}
		if svv.plan != nil {
			if !stepsRerun(v, svv.plan, depth+1) {
				return false
			}
		} else if !reruns(svv) {
			return false
		}
	}
	return true
}

// step is the version step s resolves to in the view.
func (v *view) step(s ensemble.Step) (*versionView, error) {
	version, err := parseVersion(s.Version)
	if err != nil {
		return nil, err
	}
	return v.resolve(s.Model, version)
}

// maxNesting bounds how deep holdingSteps follows ensembles within
// ensembles (validation refuses cycles; this keeps a bad view finite).
const maxNesting = 16

// holdingSteps narrows candidates to the executors holding READY the
// version each step of plan resolves to, and, for a step that is itself an
// ensemble, every step of it in turn. It reports false when none is left,
// or a step keeps the gateway's path.
func holdingSteps(v *view, plan *ensemble.Plan, candidates *[]string, depth int) bool {
	for _, s := range plan.Steps {
		svv, err := v.step(s)
		if err != nil || svv.cached || svv.config.GetSequenceBatching() != nil {
			return false
		}
		*candidates = slices.DeleteFunc(*candidates, func(id string) bool {
			_, ok := svv.execNodes[id]
			return !ok
		})
		if len(*candidates) == 0 {
			return false
		}
		if modelconfig.IsEnsemble(svv.config) {
			if svv.plan == nil || depth >= maxNesting || !holdingSteps(v, svv.plan, candidates, depth+1) {
				return false
			}
		}
	}
	return true
}

// composing is modelconfig.ValidateComposition's lookup over the view.
func (v *view) composing(name string) (modelconfig.Composing, bool) {
	var c modelconfig.Composing
	mv := v.models[name]
	if mv == nil {
		return c, v.listed[name]
	}
	var best int64 = -1
	for n, vv := range mv.versions {
		if vv.ready() {
			c.Versions = append(c.Versions, n)
			if n > best {
				best, c.Config = n, vv.config
			}
		} else if vv.reason != "" && c.Err == nil {
			c.Err = tritonerr.Unavailablef("%s", vv.reason)
		}
	}
	if len(c.Versions) > 0 {
		c.Err = nil
	} else if mv.failed != nil && mv.failed.reason != "" {
		c.Err, c.Invalid = tritonerr.InvalidArgf("%s", mv.failed.reason), true
	}
	return c, true
}

// ensemblesUsing names the ensembles of the view whose steps use model,
// directly or through other ensembles, sorted. Every version counts,
// whatever its state: an ensemble made UNAVAILABLE by its composing
// model's unload still has the responses it cached before.
func (v *view) ensemblesUsing(model string) []string {
	var out []string
	seen := map[string]bool{model: true}
	for next := []string{model}; len(next) > 0; {
		m := next[0]
		next = next[1:]
		for name, mv := range v.models {
			if seen[name] {
				continue
			}
			for _, vv := range mv.versions {
				if slices.Contains(modelconfig.EnsembleModels(vv.config), m) {
					seen[name] = true
					out = append(out, name)
					next = append(next, name)
					break
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// errEnsembleDeadlock is Triton's error when an ensemble that is not
// decoupled ends without its response.
func errEnsembleDeadlock(name string) error { return ensemble.ErrDeadlock(name) }

// inferEnsemble runs a request to an ensemble that is not decoupled and
// returns its one response (runEnsemble). With passOn (and fw) the answer
// may come as enc instead: the encoding of the response made by the
// executor that ran the steps, which goes to the client as it is
// (forwardInfer).
func (g *Gateway) inferEnsemble(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, passOn bool, fw *forwarding) (*inference.ModelInferResponse, *encodedResponse, error) {
	start := time.Now()
	var out *inference.ModelInferResponse
	var raw []byte
	batch, compute, err := g.runEnsemble(ctx, vv, req, passOn && fw != nil, func(r response) error {
		if r.resp != nil {
			out = r.resp
		}
		if r.enc != nil {
			raw = r.enc
		}
		return nil
	})
	if err == nil && out == nil && raw == nil {
		err = errEnsembleDeadlock(vv.plan.Name)
	}
	g.ensStats.record(statsKey{req.GetModelName(), vv.versionString()}, start, batch, compute, err)
	if err != nil {
		return nil, nil, err
	}
	if raw != nil {
		return nil, fw.encoded(raw), nil
	}
	return out, nil, nil
}

// streamEnsemble runs a request to a decoupled ensemble, handing each of
// its responses to emit as it is made, then the final flag (runEnsemble).
func (g *Gateway) streamEnsemble(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, emit func(response) error) error {
	start := time.Now()
	batch, compute, err := g.runEnsemble(ctx, vv, req, false, emit)
	g.ensStats.record(statsKey{req.GetModelName(), vv.versionString()}, start, batch, compute, err)
	return err
}

// runEnsemble runs a request to an ensemble: it is checked against the
// ensemble's configuration as Triton normalizes it, then its step graph
// runs (ensemble.Plan.Drive: each step's request starts once the tensors
// it reads exist, independent ones concurrently, each set of the wanted
// outputs emitted as soon as it is complete, the first step to fail
// failing the request, the steps still running cancelled with the
// client's request). Where one executor serves every step's model, the
// whole request goes to it and it runs the graph (ensembleExecutor);
// otherwise, or when it cannot be reached, this gateway does, each step
// routed as a client's request to its model (runStep). With encoded, the
// response of an executor that ran the steps may go to emit as that
// executor encoded it (response.enc).
func (g *Gateway) runEnsemble(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, encoded bool, emit func(response) error) (int, time.Duration, error) {
	plan := vv.plan
	cfg := vv.config
	r := backend.NewRequest(nil, nil)
	if err := infer.NormalizeShm(cfg, req, r, shmInputSizes(req)); err != nil {
		return 0, 0, err
	}
	batch := max(int(r.BatchSize), 1)
	var wanted []string
	for _, o := range req.GetOutputs() {
		// An output in shared memory is written into the client's region
		// by the step that produces it (ensemble.Plan.Drive), which is
		// routed to the region's node; a decoupled ensemble's responses
		// would each overwrite the one before in the region.
		if _, ok, _ := shm.FromParams(o.GetName(), o.GetParameters(), true); ok && isDecoupled(vv) {
			return batch, 0, tritonerr.Unsupportedf("output '%s' of decoupled ensemble '%s' is requested in shared memory, which decoupled ensembles do not support", o.GetName(), plan.Name)
		}
		wanted = append(wanted, o.GetName())
	}
	kept := stepFiles{threshold: g.handoffThreshold()}
	defer kept.release()
	// The request's large inputs may have arrived in a file of this node
	// (readInferBody, the gRPC codec).
	body := handoff.TakeRegion(req)
	kept.hold(body)
	on, held, err := g.ensembleExecutor(ctx, vv, req)
	if err != nil {
		return batch, 0, err
	}
	defer held()
	if on != nil && isDecoupled(vv) {
		start := time.Now()
		if err, ran := g.ensembleStreamOn(ctx, on, vv, req, emit); ran {
			return batch, time.Since(start), err
		}
	} else if on != nil {
		start := time.Now()
		r, lent, err, ran := g.ensembleOn(ctx, on, vv, req, encoded, body)
		defer lent.Release()
		if ran {
			// The ensemble's compute time is the time its steps' requests
			// took: here, the one request that ran them all.
			compute := time.Since(start)
			if err == nil {
				err = emit(r)
			}
			return batch, compute, err
		}
	}
	// The body is kept for every step that reads it to name it.
	body.Keep()
	compute, err := plan.Drive(ensembleStep(ctx), req, vv.versionString(), wanted, kept.lend(g.runStep), func(resp *inference.ModelInferResponse, final bool) error {
		// Its outputs may lie in the files held: they stay mapped until
		// the response is written (its writer releases them).
		handoff.AttachResponse(resp, kept.under(resp))
		return emit(response{resp: resp, final: final})
	})
	return batch, compute, err
}

// stepFiles are the files of this node that an ensemble request's large
// tensors lie in while its steps run here: the request's body, when it
// arrived in one, and the request and response files of each step whose
// executor is on this node. The body and the steps' response files are
// kept (Region.Keep; forwardUncached tells a step's hand-off to keep its
// response's) for later steps: a step whose large inputs all lie in one of
// them names it to its executor (handoff.ModeKept), which maps the tensors
// where they are. So a large tensor is copied once per hop between
// executors of one node: by the executor that wrote it into its response
// file, or, for an output that lies in its step's own request file (an
// identity's, which the executor names there without a copy), by the
// gateway into the next step's file. Large inputs spread over several
// files are copied into one, as any request's are. The ensemble's
// responses hold the files their outputs lie in until they are written
// (under).
type stepFiles struct {
	threshold int
	mu        sync.Mutex
	held      []*handoff.Region // one reference each
}

// hold keeps rs (references the caller gives up; nil ones are none)
// until release.
func (s *stepFiles) hold(rs ...*handoff.Region) {
	s.mu.Lock()
	for _, r := range rs {
		if r != nil {
			s.held = append(s.held, r)
		}
	}
	s.mu.Unlock()
}

// release drops the references held, once no step runs any more.
func (s *stepFiles) release() {
	for _, r := range s.held {
		r.Release()
	}
	s.held = nil
}

// lend wraps run: a step request whose large inputs all lie in one of the
// kept files held carries a reference on it to its hand-off
// (prepareHandoff takes it), and the files each response it gets may lie
// in are held (the kept ones for later steps to name, all of them for the
// ensemble's responses made of its outputs: under).
func (s *stepFiles) lend(run ensemble.StepFunc) ensemble.StepFunc {
	return func(ctx context.Context, st ensemble.Step, sreq *inference.ModelInferRequest, got func(*inference.ModelInferResponse, error)) (*inference.ModelInferResponse, error) {
		if r := s.holding(sreq.GetRawInputContents()); r != nil {
			handoff.AttachRegion(sreq, r)
		}
		resp, err := run(ctx, st, sreq, func(resp *inference.ModelInferResponse, err error) {
			s.hold(handoff.ResponseRegions(resp)...)
			got(resp, err)
		})
		s.hold(handoff.ResponseRegions(resp)...)
		return resp, err
	}
}

// under returns an Outgoing holding a new reference on each file held
// that an output of resp lies in (handoff.Holding); nil when none does.
func (s *stepFiles) under(resp *inference.ModelInferResponse) *handoff.Outgoing {
	if resp == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var in []*handoff.Region
	for _, r := range s.held {
		for _, b := range resp.GetRawOutputContents() {
			if _, ok := r.Offset(b); ok {
				in = append(in, r.Retain())
				break
			}
		}
	}
	return handoff.Holding(in...)
}

// holding returns a new reference on the kept file held that every large
// tensor of raw lies in; nil when there is none, or no large tensor.
func (s *stepFiles) holding(raw [][]byte) *handoff.Region {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.held {
		if !r.Kept() {
			continue // its receiver removed it once mapped
		}
		large, in := false, true
		for _, b := range raw {
			if len(b) < s.threshold {
				continue
			}
			large = true
			if _, ok := r.Offset(b); !ok {
				in = false
				break
			}
		}
		if !large {
			return nil
		}
		if in {
			return r.Retain()
		}
	}
	return nil
}

// ensembleExecutor picks the executor to which a request to ensemble vv
// goes whole (vv.wholeOn), so that the tensors between its steps never
// leave it. A request traced with spans goes too: the executor makes the
// steps' spans under the request's, which the bus carries to it. So does
// one with tensors in system shared memory, to an executor of the
// regions' node: the regions are held for the request (release ends the
// hold; never nil) and their lease goes with it, so that the steps read
// and write them there, as they would on the gateway's path. One traced
// into Triton's trace file, or using CUDA shared memory, keeps this
// gateway's path: its steps' child traces are written here, and its steps
// reach the region's GPU, as any request's do. nil: none. An error is a
// region the request names wrongly.
func (g *Gateway) ensembleExecutor(ctx context.Context, vv *versionView, req *inference.ModelInferRequest) (on *wholeExec, release func(), err error) {
	release = func() {}
	if len(vv.wholeOn) == 0 || (g.traceFile != nil && g.trace.Level(req.GetModelName()) != tracesetting.LevelOff) {
		return nil, release, nil
	}
	if !usesSharedMemory(req) {
		return &vv.wholeOn[rand.IntN(len(vv.wholeOn))], release, nil
	}
	first, cuda, held, err := g.shmHold(ctx, req)
	if err != nil {
		return nil, release, err
	}
	var there []*wholeExec
	for i := range vv.wholeOn {
		if cuda == nil && first != nil && vv.wholeOn[i].node == first.GetNode() {
			there = append(there, &vv.wholeOn[i])
		}
	}
	if len(there) == 0 {
		// The steps take their own holds on the gateway's path.
		held()
		delete(req.Parameters, shm.LeaseParam)
		return nil, release, nil
	}
	return there[rand.IntN(len(there))], held, nil
}

// ensembleOn sends a request to ensemble vv to executor on, which runs its
// steps itself, and returns its response: with encoded, as the executor
// encoded it when that can go to the client as it is (response.enc). Its
// large inputs go as any request's do: handed off when on is on this node
// (wholeHandoff; body is the memory they may lie in), else carried by the
// bus. ran is false when the executor took no part in the answer (no
// longer serves the subject, or was lost with the request: its steps are
// stateless): this gateway runs the steps then, from req's inputs, which
// may lie in lent's memory until the caller releases it.
func (g *Gateway) ensembleOn(ctx context.Context, on *wholeExec, vv *versionView, req *inference.ModelInferRequest, encoded bool, body *handoff.Region) (r response, lent *handoff.Outgoing, err error, ran bool) {
	var bounded bus.Bounded
	g.boundInference(&bounded, ctx)
	defer bounded.Cancel()
	req.ModelVersion = vv.versionString()
	o, err := g.wholeHandoff(on, req, body)
	if err != nil {
		return r, nil, err, true
	}
	var out proto.Message
	var reply infercodec.Reply
	if encoded && o == nil && !g.bus.InProcess(on.subject) {
		out = &reply
	} else {
		reply.ModelInferResponse = &inference.ModelInferResponse{}
		out = reply.ModelInferResponse
	}
	err = g.bus.Request(&bounded, on.subject, req, out)
	if bus.IsNoResponders(err) && o.Undo(req) {
		// The executor could not map the file (it does not share this
		// node's /dev/shm) or went away: the bus carries the inputs.
		err = g.bus.Request(&bounded, on.subject, req, out)
	}
	o.Unset(req)
	if err != nil {
		// The steps run here after all read req's inputs, put back: when
		// the executor was gone, or was lost while running steps that may
		// all run again (rerun.go).
		restored := o == nil || o.Undo(req)
		again := bus.IsNoResponders(err) || (bus.IsResponderLost(err) && vv.wholeRerun && g.cfg.LostRequestReruns > 0)
		if restored && again && ctx.Err() == nil {
			return r, o, nil, false
		}
		o.Release()
		return r, nil, err, true
	}
	if o != nil {
		resp := reply.ModelInferResponse
		if err := o.Finish(resp); err != nil {
			o.Release()
			return r, nil, err, true
		}
		g.countHandoff(o)
		handoff.AttachResponse(resp, o) // its outputs may lie in o's files
	}
	return response{resp: reply.ModelInferResponse, enc: reply.Bytes, final: true}, nil, nil, true
}

// ensembleStreamOn is ensembleOn for a decoupled ensemble: the executor
// streams its responses, each handed to emit as it comes, then the final
// flag; a step's failure after them is the error returned, as when this
// gateway runs the steps. ran is false when the executor took no part
// (gone, or lost before its first response): this gateway runs the steps
// then.
func (g *Gateway) ensembleStreamOn(ctx context.Context, on *wholeExec, vv *versionView, req *inference.ModelInferRequest, emit func(response) error) (err error, ran bool) {
	req.ModelVersion = vv.versionString()
	gone := func(err error) bool {
		return (bus.IsNoResponders(err) || bus.IsResponderLost(err)) && ctx.Err() == nil
	}
	st, err := g.bus.Stream(ctx, on.subject, req, decoupledWindow)
	if err != nil {
		return err, !gone(err)
	}
	lostRerun := vv.wholeRerun && g.cfg.LostRequestReruns > 0
	defer st.Close()
	emitted := false
	var failed error
	err = relay(st, false, func(r response) error {
		if r.err != nil {
			failed = r.err
			return nil
		}
		emitted = true
		return emit(r)
	})
	if err != nil && !emitted && gone(err) && (bus.IsNoResponders(err) || lostRerun) {
		return nil, false
	}
	if err == nil {
		err = failed
	}
	return err, true
}

// wholeHandoff hands off the large inputs of a request to an ensemble
// going whole to executor on, when on is on this node, as prepareHandoff
// does for a request to a model; nil when the bus carries them.
func (g *Gateway) wholeHandoff(on *wholeExec, req *inference.ModelInferRequest, body *handoff.Region) (*handoff.Outgoing, error) {
	if g.cfg.HandoffThreshold < 0 || on.node != g.cfg.Node || g.bus.InProcess(on.subject) || rawSize(req) < g.handoffThreshold() {
		return nil, nil
	}
	route := handoff.RouteNode
	if handoff.LocalExecutor(on.id) {
		route = handoff.RouteProcess
	}
	if routeForTest != nil {
		route = *routeForTest
	}
	return handoff.PrepareInto(nil, req, route, body, g.handoffThreshold())
}

// runStep routes one step's request as a client's request to its model:
// a decoupled model's responses go to got as they stream (streamInfer),
// another model's one response is returned (forwardInfer), as is the
// request's failure. Under placement, a step's model evicted meanwhile is
// placed again on demand, as for a client's request.
func (g *Gateway) runStep(ctx context.Context, s ensemble.Step, sreq *inference.ModelInferRequest, got func(*inference.ModelInferResponse, error)) (*inference.ModelInferResponse, error) {
	svv, err := g.resolveInfer(ctx, s.Model, s.Version)
	if err != nil {
		return nil, err
	}
	if isDecoupled(svv) {
		return nil, g.streamInfer(ctx, svv, sreq, false, func(r response) error {
			if r.resp != nil || r.err != nil {
				got(r.resp, r.err)
			}
			return nil
		})
	}
	resp, _, err := g.forwardInfer(ctx, svv, sreq, false, nil)
	return resp, err
}

// ensembleStats are the statistics of the ensembles this gateway ran, as
// Triton keeps them for an ensemble: a success or failure per request with
// its duration, and for a success an execution of the request's batch size
// whose compute time is its steps' (here: the time their requests took).
// Composing models count their own executions on their executors.
type ensembleStats struct {
	mu sync.Mutex
	by map[statsKey]*inference.ModelStatistics
}

func (s *ensembleStats) record(k statsKey, start time.Time, batch int, compute time.Duration, err error) {
	now := time.Now()
	d := uint64(now.Sub(start))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[statsKey]*inference.ModelStatistics{}
	}
	ms := s.by[k]
	if ms == nil {
		ms = emptyModelStats(k)
		s.by[k] = ms
	}
	is := ms.InferenceStats
	if err != nil {
		is.Fail.Count++
		is.Fail.Ns += d
		return
	}
	ms.LastInference = uint64(now.UnixMilli())
	is.Success.Count++
	is.Success.Ns += d
	is.Queue.Count++
	is.ComputeInput.Count++
	is.ComputeInfer.Count++
	is.ComputeInfer.Ns += uint64(compute)
	is.ComputeOutput.Count++
	ms.InferenceCount += uint64(batch)
	ms.ExecutionCount++
	var bs *inference.InferBatchStatistics
	for _, b := range ms.BatchStats {
		if b.BatchSize == uint64(batch) {
			bs = b
		}
	}
	if bs == nil {
		bs = &inference.InferBatchStatistics{BatchSize: uint64(batch), ComputeInput: emptyDuration(), ComputeInfer: emptyDuration(), ComputeOutput: emptyDuration()}
		ms.BatchStats = append(ms.BatchStats, bs)
	}
	bs.ComputeInput.Count++
	bs.ComputeInfer.Count++
	bs.ComputeInfer.Ns += uint64(compute)
	bs.ComputeOutput.Count++
}

// reply gives the statistics of the versions in want that are ensembles
// this gateway ran, for sumStats; nil when none.
func (s *ensembleStats) reply(want []statsKey) *busv1.StatisticsReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out *busv1.StatisticsReply
	for _, k := range want {
		if ms := s.by[k]; ms != nil {
			if out == nil {
				out = &busv1.StatisticsReply{}
			}
			c := emptyModelStats(k)
			addModelStats(c, ms)
			out.ModelStats = append(out.ModelStats, c)
		}
	}
	return out
}
