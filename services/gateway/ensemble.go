package gateway

import (
	"context"
	"maps"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/infer"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/shm"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/gateway/internal/ensemble"
)

// Ensembles run here, in the gateway: the executors whose repositories hold
// one announce it as a scheduler-only version with its configuration, the
// catalog validates it against the composing models the whole constellation
// serves (checkEnsembles), and a request to it runs its step graph
// (internal/ensemble), each step an inference request routed exactly as a
// client's request to that model would be (forwardInfer): to any executor
// serving it, through its dynamic batcher, or through the sequence router.

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

// stepTensor is a value of an ensemble tensor in one request: what a
// step's input needs, as it came from the client or from the response
// that wrote it.
type stepTensor struct {
	datatype string
	shape    []int64
	params   map[string]*inference.InferParameter // a client's shared-memory reference
	data     []byte
}

// stepEvent is what one step's request came back with: a response (resp,
// or err) and, on the last, final with the time the request took. A
// decoupled step's request has any number of events before its final one.
type stepEvent struct {
	launch ensemble.Launch
	resp   *inference.ModelInferResponse
	err    error
	final  bool
	took   time.Duration
}

// errEnsembleDeadlock is Triton's error when an ensemble that is not
// decoupled ends without its response.
func errEnsembleDeadlock(name string) error {
	return tritonerr.InvalidArgf("in ensemble '%s', unexpected deadlock, at least one output is not set while no more ensemble steps can be made", name)
}

// inferEnsemble runs a request to an ensemble that is not decoupled and
// returns its one response (runEnsemble).
func (g *Gateway) inferEnsemble(ctx context.Context, vv *versionView, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	start := time.Now()
	var out *inference.ModelInferResponse
	batch, compute, err := g.runEnsemble(ctx, vv, req, func(r response) error {
		if r.resp != nil {
			out = r.resp
		}
		return nil
	})
	if err == nil && out == nil {
		err = errEnsembleDeadlock(vv.plan.Name)
	}
	g.ensStats.record(statsKey{req.GetModelName(), vv.versionString()}, start, batch, compute, err)
	return out, err
}

// streamEnsemble runs a request to a decoupled ensemble, handing each of
// its responses to emit as it is made, then the final flag (runEnsemble).
func (g *Gateway) streamEnsemble(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, emit func(response) error) error {
	start := time.Now()
	batch, compute, err := g.runEnsemble(ctx, vv, req, emit)
	g.ensStats.record(statsKey{req.GetModelName(), vv.versionString()}, start, batch, compute, err)
	return err
}

// runEnsemble runs a request to an ensemble: it is checked against the
// ensemble's configuration as Triton normalizes it, then each step's
// request starts once the tensors it reads exist, independent ones
// concurrently, and each set of the outputs the client asked for (all,
// when none) goes to emit under the ensemble's names as soon as it is
// complete: once for an ensemble that is not decoupled; for a decoupled
// one, once per response of a decoupled step that reaches the outputs,
// the last response final or, when the last request ends without one,
// the final flag alone (Triton's rules, internal/ensemble). The first step
// to fail fails the request with the step's error, as Triton passes it
// on, after the responses already made; the steps still running are
// cancelled, and so are they when the client's request is or emit fails
// (whose error is returned).
func (g *Gateway) runEnsemble(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, emit func(response) error) (int, time.Duration, error) {
	plan := vv.plan
	cfg := vv.config
	r := backend.NewRequest(nil, nil)
	if err := infer.NormalizeShm(cfg, req, r, shmInputSizes(req)); err != nil {
		return 0, 0, err
	}
	batch := max(int(r.BatchSize), 1)
	var wanted []string
	for _, o := range req.GetOutputs() {
		if _, ok, _ := shm.FromParams(o.GetName(), o.GetParameters(), true); ok {
			return batch, 0, tritonerr.Unsupportedf("output '%s' of ensemble '%s' is requested in shared memory, which ensembles do not support", o.GetName(), plan.Name)
		}
		wanted = append(wanted, o.GetName())
	}
	tensors := map[ensemble.Key]*stepTensor{}
	provided := make([]string, 0, len(req.GetInputs()))
	raw := req.GetRawInputContents()
	for i, in := range req.GetInputs() {
		t := &stepTensor{datatype: in.GetDatatype(), shape: in.GetShape(), params: in.GetParameters()}
		if i < len(raw) {
			t.data = raw[i]
		}
		tensors[ensemble.Key{Tensor: in.GetName()}] = t
		provided = append(provided, in.GetName())
	}
	if len(wanted) == 0 {
		wanted = plan.Outputs()
	}

	ctx, cancel := context.WithCancel(ensembleStep(ctx)) // traced steps: under the request's span
	defer cancel()
	run, ready := plan.Start(provided, wanted)
	events := make(chan stepEvent, len(plan.Steps))
	var wg sync.WaitGroup
	defer wg.Wait() // every step's request has returned before this does
	running := 0
	launch := func(ls []ensemble.Launch) {
		for _, l := range ls {
			sreq := g.stepRequest(req, plan.Steps[l.Step], l.Iter, tensors)
			running++
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				resp, err := g.runStep(ctx, plan.Steps[l.Step], sreq, func(resp *inference.ModelInferResponse, err error) {
					events <- stepEvent{launch: l, resp: resp, err: err}
				})
				events <- stepEvent{launch: l, resp: resp, err: err, final: true, took: time.Since(t0)}
			}()
		}
	}
	launch(ready)
	var firstErr error
	var compute time.Duration
	finalSent := false
	for running > 0 {
		ev := <-events
		if ev.final {
			running--
			compute += ev.took
		}
		if firstErr != nil {
			continue
		}
		if ev.err != nil {
			firstErr = ev.err
			cancel() // the steps still running
			continue
		}
		if ev.resp == nil && !ev.final {
			continue
		}
		pr := run.Response(ev.launch, ev.resp != nil, ev.final)
		for i, k := range pr.Written {
			tensors[k] = stepOutput(plan.Steps[ev.launch.Step].Outputs[i].Model, ev.resp)
		}
		launch(pr.Launch)
		if pr.Answer >= 0 {
			out := ensembleResponse(req, vv, wanted, pr.Answer, tensors)
			finalSent = pr.Final
			if err := emit(response{resp: out, final: pr.Final}); err != nil {
				firstErr = err
				cancel()
			}
		}
		for _, k := range pr.Drop {
			delete(tensors, k)
		}
	}
	if firstErr != nil {
		return batch, compute, firstErr
	}
	if err := ctx.Err(); err != nil {
		return batch, compute, tritonerr.From(err)
	}
	if !finalSent {
		if err := emit(response{final: true}); err != nil {
			return batch, compute, err
		}
	}
	return batch, compute, nil
}

// ensembleResponse is the ensemble's response made of the wanted outputs'
// values of iteration it; an output no step produced is left out, as
// Triton does.
func ensembleResponse(req *inference.ModelInferRequest, vv *versionView, wanted []string, it int, tensors map[ensemble.Key]*stepTensor) *inference.ModelInferResponse {
	out := &inference.ModelInferResponse{ModelName: req.GetModelName(), ModelVersion: vv.versionString(), Id: req.GetId()}
	for _, name := range wanted {
		t := tensors[ensemble.Key{Tensor: name, Iter: it}]
		if t == nil {
			continue
		}
		out.Outputs = append(out.Outputs, &inference.ModelInferResponse_InferOutputTensor{Name: name, Datatype: t.datatype, Shape: t.shape})
		out.RawOutputContents = append(out.RawOutputContents, t.data)
	}
	return out
}

// stepRequest is the request of one step reading iteration it of its
// inputs: the ensemble request's id and parameters (correlation id and
// sequence flags, priority, timeout and the client's own), the step's
// inputs from the ensemble tensors it maps, and every output it maps
// requested.
func (g *Gateway) stepRequest(req *inference.ModelInferRequest, s ensemble.Step, it int, tensors map[ensemble.Key]*stepTensor) *inference.ModelInferRequest {
	sreq := &inference.ModelInferRequest{ModelName: s.Model, ModelVersion: s.Version, Id: req.GetId()}
	if len(req.GetParameters()) > 0 {
		sreq.Parameters = maps.Clone(req.GetParameters()) // forwarding may add its own
	}
	for _, b := range s.Inputs {
		t := tensors[ensemble.Key{Tensor: b.Ensemble, Iter: it}]
		if t == nil {
			continue // an optional input the request left out
		}
		in := &inference.ModelInferRequest_InferInputTensor{Name: b.Model, Datatype: t.datatype, Shape: t.shape}
		if len(t.params) > 0 {
			in.Parameters = maps.Clone(t.params)
		}
		sreq.Inputs = append(sreq.Inputs, in)
		sreq.RawInputContents = append(sreq.RawInputContents, t.data)
	}
	for _, b := range s.Outputs {
		sreq.Outputs = append(sreq.Outputs, &inference.ModelInferRequest_InferRequestedOutputTensor{Name: b.Model})
	}
	return sreq
}

// runStep routes one step's request as a client's request to its model:
// a decoupled model's responses go to got as they stream (streamInfer),
// another model's one response is returned (forwardInfer), as is the
// request's failure.
func (g *Gateway) runStep(ctx context.Context, s ensemble.Step, sreq *inference.ModelInferRequest, got func(*inference.ModelInferResponse, error)) (*inference.ModelInferResponse, error) {
	svv, err := g.resolveRequest(s.Model, s.Version)
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

// stepOutput is the value a step's response gives its output name; nil
// (a placeholder) when the response lacks it.
func stepOutput(name string, resp *inference.ModelInferResponse) *stepTensor {
	raw := resp.GetRawOutputContents()
	for i, o := range resp.GetOutputs() {
		if o.GetName() != name {
			continue
		}
		t := &stepTensor{datatype: o.GetDatatype(), shape: o.GetShape()}
		if i < len(raw) {
			t.data = raw[i]
		}
		return t
	}
	return nil
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
