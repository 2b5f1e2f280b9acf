package executor

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/infer"
	"github.com/nereid-io/nereid/pkg/infercodec"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tracing"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/executor/internal/seqstate"
)

// modelVersion is one version of one model: loaded through its backend
// (READY) or not (UNAVAILABLE, with the reason).
type modelVersion struct {
	e       *Executor
	name    string
	version int64
	vstr    string // "" when the model failed before its versions were known
	dir     string
	cfg     *inference.ModelConfig
	state   string
	reason  string

	model backend.Model
	// noGuard and hostIns are unguarded() and hostInputs' answer for the
	// loaded model, asked once rather than for every request.
	noGuard bool
	hostIns bool
	// ownResponseStats: the backend reports its responses' statistics
	// (backend.ResponseStatsOwner); response_stats count only those.
	ownResponseStats bool
	instances        []*instance
	sched            *scheduler
	seq              *seqRunner       // sequence models: fed by the sequence router
	states           *seqstate.Config // implicit states (sequence_batching.state), nil for none
	labels           infer.Labels
	stats            *stats
	// inflight counts the requests being handled (admin API, drain).
	inflight atomic.Int64
	// footprint is the memory its load took, gpuFootprint the GPU memory,
	// and loadedAt when (ms since the epoch), measured for loads the
	// placement controller asked for (placement.go); 0 otherwise.
	footprint    atomic.Uint64
	gpuFootprint atomic.Uint64
	loadedAt     atomic.Int64
	sub          *bus.Subscription
	nodeSub      *bus.Subscription
	devSubs      []*bus.Subscription
	// source is the configuration the version was loaded from, before a
	// backend completed it, and stamp the newest modification time of its
	// files then (repository.Stamp): a repository load or a poll compares
	// both to decide whether the version must be reloaded.
	source *inference.ModelConfig
	stamp  int64
	// loadedNs is the version's load stamp in the catalog (busv1
	// ModelVersionState.loaded_unix_ns, Executor.loadStamp): gateways drop
	// the model's cached responses when it changes. A reload changes it
	// once more when the instance it replaced is retired (loadModelFiles).
	loadedNs atomic.Int64
}

// load runs ModelInitialize and InstanceInitialize for every instance,
// runs the model's warmup samples on them, and starts the scheduler. Any
// error fails the whole version (what was made is finalized).
func (mv *modelVersion) load(ctx context.Context) (err error) {
	if isEnsemble(mv.cfg) {
		// Scheduler-only: no backend, no instances (ensemble.go).
		mv.stats = newStats()
		return nil
	}
	b, err := mv.e.backendFor(ctx, mv.cfg, mv.dir, mv.version)
	if err != nil {
		return err
	}
	mv.stats = newStats()
	if mv.states, err = seqstate.Load(mv.cfg, mv.dir); err != nil {
		return err
	}
	if mv.labels, err = infer.ReadLabels(mv.dir, mv.cfg); err != nil {
		return err
	}
	m, err := b.NewModel(ctx, backend.ModelInfo{
		Name: mv.name, Version: mv.version, Dir: mv.dir,
		VersionDir: filepath.Join(mv.dir, mv.vstr), Config: mv.cfg,
	})
	if err != nil {
		return tritonerr.From(err)
	}
	mv.model = m
	// A backend that auto-completed the configuration (TRITONBACKEND_ModelSetConfig)
	// makes it the model's: instances, scheduling, catalog and config endpoint.
	if c, ok := m.(interface{ CompletedConfig() *inference.ModelConfig }); ok {
		if cfg := c.CompletedConfig(); cfg != nil {
			mv.cfg = cfg
		}
	}
	if o, ok := m.(backend.ResponseStatsOwner); ok {
		mv.ownResponseStats = o.ReportsResponseStatistics()
	}
	mv.noGuard = mv.unguarded()
	mv.hostIns = hostInputs(mv.cfg, mv.noGuard)
	if mv.decoupled() {
		mv.stats.first = newHistogram(firstResponseBuckets(mv.cfg))
	}
	defer func() {
		if err != nil {
			mv.unload()
		}
	}()
	samples, err := warmupSamples(mv.cfg, mv.dir)
	if err != nil {
		return err
	}
	for _, info := range backend.Instances(mv.cfg) {
		in := &instance{mv: mv, info: info}
		info.Stats = in
		bi, err := m.NewInstance(ctx, info)
		if err != nil {
			return tritonerr.From(err)
		}
		// With --rate-limit execution_count, its executions wait for their
		// resources (ratelimit.go); needs that cannot be met fail the load.
		if in.inst, err = mv.e.rates.limit(mv, info, bi); err != nil {
			_ = bi.Finalize()
			return err
		}
		mv.instances = append(mv.instances, in)
	}
	// Before the version serves: its instances run model_warmup (warmup.go).
	if err := mv.warmUp(ctx, samples); err != nil {
		return err
	}
	if mv.cfg.GetSequenceBatching() != nil {
		mv.seq, err = startSequence(ctx, mv)
		return err
	}
	mv.sched = newScheduler(ctx, mv)
	return nil
}

// endSequences marks a version leaving for good (unloaded, or no longer
// selected by its version policy), not replaced by a reload: when it
// stops, the sequence router ends the sequences in its slots.
func (mv *modelVersion) endSequences() {
	if mv.seq != nil {
		mv.seq.unloaded.Store(true)
	}
}

// describe names the version and why it is not READY, for a log or an error.
func (mv *modelVersion) describe() string {
	if mv.vstr == "" {
		return fmt.Sprintf("'%s': %s", mv.name, mv.reason)
	}
	return fmt.Sprintf("'%s' version %s: %s", mv.name, mv.vstr, mv.reason)
}

// responseParameter is a backend's response parameter on the wire.
func responseParameter(v any) *inference.InferParameter {
	switch x := v.(type) {
	case bool:
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: x}}
	case int64:
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: x}}
	case float64:
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_DoubleParam{DoubleParam: x}}
	default:
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: fmt.Sprint(x)}}
	}
}

// decoupled reports whether the model uses the decoupled transaction
// policy: any number of responses per request, streamed.
func (mv *modelVersion) decoupled() bool {
	return mv.cfg.GetModelTransactionPolicy().GetDecoupled()
}

// unguarded reports whether the model's backend runs code the fault guard
// of client mappings cannot cover (a C backend): it gets private copies of
// inputs in shared memory.
func (mv *modelVersion) unguarded() bool {
	_, ok := mv.model.(interface{ Unguarded() })
	return ok
}

// native reports whether the model's executions run native code in the
// process (a Triton C backend), whose fault ends the executor with every
// request it holds; a Go backend's panic fails only its batch.
func (mv *modelVersion) native() bool {
	_, ok := mv.model.(interface{ RunsNativeCode() })
	return ok
}

// unload stops the scheduler (requests still queued fail as UNAVAILABLE)
// and finalizes the instances, then the model.
func (mv *modelVersion) unload() {
	if mv.sched != nil {
		mv.sched.stop()
		mv.sched = nil
	}
	if mv.seq != nil {
		mv.seq.stop()
		mv.seq = nil
	}
	log := mv.e.log
	for _, in := range mv.instances {
		if err := in.inst.Finalize(); err != nil {
			log.Warn("instance finalize", "model", mv.name, "instance", in.info.Name, "err", err)
		}
	}
	mv.instances = nil
	mv.e.rates.unregister(mv)
	if mv.model != nil {
		if err := mv.model.Finalize(); err != nil {
			log.Warn("model finalize", "model", mv.name, "err", err)
		}
		mv.model = nil
	}
}

// handleInfer serves one inference request from the bus: validate, queue,
// wait for the execution, answer. A request traced by its gateway gets a
// span of its own here (pkg/tracing); one whose gateway writes Triton's
// trace file gets its timestamps back in its response (requestStamps).
func (mv *modelVersion) handleInfer(ctx context.Context, body bus.Body) (proto.Message, error) {
	mv.inflight.Add(1)
	defer mv.inflight.Add(-1)
	ctx, span := mv.e.tracer.StartChild(ctx, mv.name, mv.name)
	if span == nil {
		if tracing.TimestampsAsked(ctx) {
			return mv.serveStamped(ctx, body)
		}
		return mv.serveInfer(ctx, body, nil, nil)
	}
	span.SetAttributes(tracing.AttrModelVersion.String(strconv.FormatInt(mv.version, 10)), attribute.String("nereid.executor", mv.e.cfg.ID))
	resp, err := mv.serveInfer(ctx, body, span, nil)
	tracing.End(span, err)
	return resp, err
}

// requestStamps are the instants of a request whose gateway asked for
// them (tracing.AskTimestamps), taken with its statistics.
type requestStamps = tracing.Timestamps

// serveStamped serves a request whose gateway asked for its timestamps,
// and returns them in the response (tracing.TimestampsParameter).
func (mv *modelVersion) serveStamped(ctx context.Context, body bus.Body) (proto.Message, error) {
	var ts requestStamps
	resp, err := mv.serveInfer(ctx, body, nil, &ts)
	if out, ok := resp.(*inference.ModelInferResponse); ok && err == nil {
		withStamps(out, tracing.TimestampsParameter, &ts)
	}
	return resp, err
}

// withStamps puts ts, when complete, into out's parameter name.
func withStamps(out *inference.ModelInferResponse, name string, ts *requestStamps) {
	if ts == nil || !ts.Complete() {
		return
	}
	if out.Parameters == nil {
		out.Parameters = map[string]*inference.InferParameter{}
	}
	out.Parameters[name] = &inference.InferParameter{
		ParameterChoice: &inference.InferParameter_StringParam{StringParam: ts.Encode()}}
}

// call is what serving a request from the bus allocates, in one
// allocation: the request's place in the scheduler, the backend's request
// with its lists of one input and requested output and its hand-off, the
// request decoded from the bus with its lists of one input, output and
// raw content, and its reply when encoded directly.
type call struct {
	pending
	r       backend.Request
	inputs  [1]backend.Input // room for r's lists of one
	outputs [1]string
	hand    handoff.Incoming
	req     inference.ModelInferRequest
	room    infercodec.RequestRoom
	enc     infercodec.Encoded
}

func (mv *modelVersion) serveInfer(ctx context.Context, body bus.Body, span trace.Span, stamps *requestStamps) (proto.Message, error) {
	received := time.Now()
	c := &call{pending: pending{received: received, span: span, stamps: stamps}}
	p := &c.pending
	// A gateway in this process hands its request over as it is (bus.Local).
	req, ok := body.Message.(*inference.ModelInferRequest)
	var descriptor string // the hand-off's, taken out of the request's parameters
	if !ok {
		req = &c.req
		var err error
		// Raw inputs alias the body: no copy.
		if descriptor, err = infercodec.UnmarshalRequestTaking(body.Data, req, &c.room, handoff.Param); err != nil {
			mv.stats.failed(received, reasonOther)
			return nil, tritonerr.InvalidArgf("malformed inference request for model '%s': %v", mv.name, err)
		}
	}
	if mv.seq != nil {
		mv.stats.failed(received, reasonOther)
		return nil, mv.seq.errNotDirect()
	}
	hand, err := handoff.AcceptInto(&c.hand, req, descriptor) // large inputs from a gateway of this node
	if err != nil {
		mv.stats.failed(received, reasonOther)
		return nil, err
	}
	defer releaseHandoff(hand, p)
	sh, err := mv.e.shm.attach(req, mv.hostIns) // tensors in registered shared memory (shm.go)
	if err != nil {
		mv.stats.failed(received, reasonOther)
		return nil, err
	}
	defer sh.release(p)
	p.sh = sh
	if mv.noGuard {
		if err := sh.privatize(req); err != nil {
			mv.stats.failed(received, reasonOther)
			return nil, err
		}
	}
	r := backend.InitRequest(&c.r, ctx, p)
	r.Inputs, r.RequestedOutputs = c.inputs[:0], c.outputs[:0] // Normalize fills them
	sh.bindOutputs(r)
	// Validation reads BYTES inputs, which may lie in a client's region.
	if err := sh.guard(func() error { return infer.Normalize(mv.cfg, req, r) }); err != nil {
		mv.stats.failed(received, reasonOther)
		return nil, err
	}
	sh.bindInputDevices(r)
	p.req = r
	p.size = max(1, r.BatchSize)
	p.ask = askOf(req) // priority and timeout (scheduler.go)
	if r.Decoupled = mv.decoupled(); r.Decoupled {
		return mv.serveDecoupled(ctx, req, p, sh)
	}
	if err := mv.sched.enqueue(p); err != nil {
		mv.stats.failed(received, refusal(err))
		return nil, err
	}
	if !p.answered() {
		select {
		case <-p.doneCh():
		case <-ctx.Done():
			// Nobody waits for the answer anymore; a request still queued is
			// dropped, one executing finishes unseen.
			p.giveUp(ctx)
			return nil, tritonerr.Unavailablef("inference request for model '%s' timed out", mv.name)
		}
	}
	if p.resp.Err != nil {
		return nil, p.resp.Err
	}
	// A requester in this process takes the message itself: nothing to
	// encode for it. (Timestamps asked for go into the message.)
	if sh == nil && hand.Passive() && body.Message == nil && stamps == nil {
		if mv.encodeSmall(&c.enc, req, r, p.resp) {
			return &c.enc, nil
		}
	}
	out, err := mv.response(req, r, p.resp)
	if err != nil {
		return nil, err
	}
	if err := sh.finish(out); err != nil { // outputs into their shared-memory regions
		return nil, err
	}
	hand.Reply(ctx, out)
	return out, nil
}

// response builds Triton's reply: only the requested outputs, in the order
// requested (config order when none were named), all data raw. Outputs
// requested with the classification parameter come back as their top
// classes (pkg/infer Classify).
func (mv *modelVersion) response(req *inference.ModelInferRequest, r *backend.Request, resp *backend.Response) (*inference.ModelInferResponse, error) {
	classes, err := infer.ClassificationCounts(req.GetOutputs())
	if err != nil {
		return nil, err
	}
	return mv.responseWith(classes, req, r, resp)
}

// responseWith is response with the request's classification counts
// already read (a decoupled request reads them once for all its
// responses).
func (mv *modelVersion) responseWith(classes map[string]uint64, req *inference.ModelInferRequest, r *backend.Request, resp *backend.Response) (*inference.ModelInferResponse, error) {
	var err error
	out := &inference.ModelInferResponse{ModelName: mv.name, ModelVersion: mv.vstr, Id: req.GetId()}
	for _, name := range r.RequestedOutputs {
		for _, o := range resp.Outputs {
			if o.Name != name {
				continue
			}
			t := &inference.ModelInferResponse_InferOutputTensor{
				Name: o.Name, Datatype: o.DataType.String(), Shape: o.Shape,
			}
			data := o.Data
			if k := classes[o.Name]; k > 0 {
				t.Shape, data, err = infer.Classify(o.Name, o.DataType, o.Shape, o.Data, k, mv.cfg.GetMaxBatchSize() > 0, mv.labels)
				if err != nil {
					return nil, err
				}
				t.Datatype = tensor.Bytes.String()
			}
			if data == nil {
				data = []byte{} // an empty tensor still takes its slot
			}
			out.Outputs = append(out.Outputs, t)
			out.RawOutputContents = append(out.RawOutputContents, data)
			break
		}
	}
	for k, v := range resp.Parameters {
		if out.Parameters == nil {
			out.Parameters = map[string]*inference.InferParameter{}
		}
		out.Parameters[k] = responseParameter(v)
	}
	return out, nil
}
