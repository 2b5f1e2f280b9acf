package executor

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/ensemble"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/infercodec"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tracing"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// An ensemble whose steps' models this executor all serves runs here
// whole: a gateway sends the request to bus.ExecutorEnsembleSubject (it has
// checked it against the ensemble's configuration), and the step graph runs
// with the gateway's core (ensemble.Plan.Drive), each step's request going
// straight to the composing model's handler in this process, as a request
// from a gateway of this process would (bus.Local): the tensors between
// steps never leave the executor. A step whose model is not served here
// (unloaded since the gateway's catalog said it was, or this executor
// drains) goes over the bus as a backend's call (BLS) does.

// handleEnsemble serves bus.ExecutorEnsembleSubject: one request to an
// ensemble this executor holds READY, answered with the ensemble's
// response.
func (e *Executor) handleEnsemble(ctx context.Context, body bus.Body) (proto.Message, error) {
	req, ok := body.Message.(*inference.ModelInferRequest)
	if !ok {
		req = &inference.ModelInferRequest{}
		if err := infercodec.UnmarshalRequest(body.Data, req); err != nil {
			return nil, tritonerr.InvalidArgf("malformed inference request for ensemble: %v", err)
		}
	}
	ens := e.readyVersion(req.GetModelName(), req.GetModelVersion())
	if ens == nil || !isEnsemble(ens.cfg) {
		return nil, tritonerr.Unavailablef("Request for unknown model: '%s' version %s is not an ensemble ready on executor '%s'", req.GetModelName(), req.GetModelVersion(), e.cfg.ID)
	}
	// Large inputs from a gateway of this node (pkg/handoff), mapped
	// where they lie; the steps read them there.
	hand, err := handoff.Accept(req)
	if err != nil {
		return nil, err
	}
	defer hand.Release()
	if w := bus.StreamOf(ctx); w != nil {
		// A decoupled ensemble: each response goes out as it is made; the
		// final flag alone is the stream's end, once this returns.
		_, err = e.ensemblePlan(ens).Drive(ctx, req, ens.vstr, wantedOutputs(req), e.runEnsembleStep, func(resp *inference.ModelInferResponse, final bool) error {
			if resp == nil {
				return nil
			}
			return w.Send(ctx, resp, final)
		})
		return nil, err
	}
	out, _, err := e.runOnce(ctx, ens, req)
	if err != nil {
		return nil, err
	}
	// Large outputs go back to the gateway the same way; those that are
	// inputs (an identity's) named where they lie.
	hand.Reply(ctx, out)
	return out, nil
}

// ensemblePlan is the step graph of ensemble version ens, made once.
func (e *Executor) ensemblePlan(ens *modelVersion) *ensemble.Plan {
	if p, ok := e.ensemblePlans.Load(ens); ok {
		return p.(*ensemble.Plan)
	}
	models := e.snapshot()
	p := ensemble.Compile(ens.cfg, func(model string) bool { return streams(models, model, 0) })
	e.ensemblePlans.Store(ens, p)
	return p
}

// streams reports whether model, READY among models, answers in a stream:
// a decoupled model, or an ensemble with a decoupled step on its outputs'
// path (modelconfig.ValidateComposition says so, nested ensembles
// included), as the gateways' catalogs mark an ensemble's configuration.
func streams(models []*modelVersion, model string, depth int) bool {
	for _, mv := range models {
		if mv.name != model || mv.state != StateReady {
			continue
		}
		if !isEnsemble(mv.cfg) {
			return modelconfig.IsDecoupled(mv.cfg)
		}
		if depth >= maxNesting {
			return false
		}
		local, _ := localComposing(models)
		decoupled, err := modelconfig.ValidateComposition(mv.cfg, func(name string) (modelconfig.Composing, bool) {
			c, ok := local(name)
			if isEnsemble(c.Config) && streams(models, name, depth+1) {
				cfg := proto.Clone(c.Config).(*inference.ModelConfig)
				cfg.ModelTransactionPolicy = &inference.ModelTransactionPolicy{Decoupled: true}
				c.Config = cfg
			}
			return c, ok
		})
		return err == nil && decoupled
	}
	return false
}

// maxNesting bounds how deep streams follows ensembles within ensembles
// (validation refuses cycles; this keeps a bad repository finite).
const maxNesting = 16

// readyVersion is this executor's READY version of name (version "": the
// highest), nil when it has none.
func (e *Executor) readyVersion(name, version string) *modelVersion {
	var best *modelVersion
	for _, mv := range e.snapshot() {
		if mv.name != name || mv.state != StateReady {
			continue
		}
		if version != "" {
			if mv.vstr == version {
				return mv
			}
			continue
		}
		if best == nil || mv.version > best.version {
			best = mv
		}
	}
	return best
}

// runEnsembleStep runs one step's request (ensemble.StepFunc). A traced
// request's step has its span under the request's (a nested ensemble's
// steps under the nested step's), as a gateway running the steps makes
// one per step, Triton's child trace per step; the model's own span goes
// under it.
func (e *Executor) runEnsembleStep(ctx context.Context, s ensemble.Step, sreq *inference.ModelInferRequest, got func(*inference.ModelInferResponse, error)) (*inference.ModelInferResponse, error) {
	ctx, span := e.tracer.StartChild(ctx, s.Model, "InferRequest")
	if span == nil {
		return e.runStep(ctx, s, sreq, got)
	}
	resp, err := e.runStep(ctx, s, sreq, got)
	// The version the step resolved to, as the gateway names it.
	span.SetAttributes(tracing.AttrModelVersion.String(sreq.GetModelVersion()), tracing.AttrRequestID.String(sreq.GetId()))
	tracing.End(span, err)
	return resp, err
}

// runStep runs one step's request: in-process when this executor serves
// the step's version and takes new work, the model not a sequence model (a
// decoupled model's responses go to got as it makes them: stepSink; a
// nested ensemble runs its own steps here: runNested); else over the bus,
// as a backend's call to the model is made (backendServer.Infer).
func (e *Executor) runStep(ctx context.Context, s ensemble.Step, sreq *inference.ModelInferRequest, got func(*inference.ModelInferResponse, error)) (*inference.ModelInferResponse, error) {
	mv := e.readyVersion(s.Model, s.Version)
	if mv != nil && !e.draining.Load() && isEnsemble(mv.cfg) {
		return e.runNested(ctx, mv, s.Decoupled, sreq, got)
	} else if mv != nil && !e.draining.Load() && mv.seq == nil && !isEnsemble(mv.cfg) {
		sreq.ModelVersion = mv.vstr
		if mv.decoupled() {
			_, err := mv.handleInfer(withStepSink(ctx, &stepSink{req: sreq, got: got}), bus.Body{Message: sreq})
			return nil, err
		}
		out, err := mv.handleInfer(ctx, bus.Body{Message: sreq})
		if err != nil {
			return nil, err
		}
		resp, ok := out.(*inference.ModelInferResponse)
		if !ok {
			return nil, tritonerr.Internalf("inference request for model '%s' answered with %T", s.Model, out)
		}
		return resp, nil
	}
	var last *inference.ModelInferResponse
	err := (*backendServer)(e).Infer(ctx, sreq, func(resp *inference.ModelInferResponse, err error, _ bool) error {
		if s.Decoupled {
			if resp != nil || err != nil {
				got(resp, err)
			}
			return nil
		}
		last = resp
		return err
	})
	return last, err
}

// runNested runs a step that is itself an ensemble this executor holds in
// this process, as the request's own steps run, and counts it in the
// nested ensemble's statistics as a gateway counts the ensembles it runs
// (stats.ensembleRun). A decoupled one's responses go to got as its steps
// make them, as a decoupled model's do; one that answers once (its
// decoupled steps, if any, off its outputs' path) returns its response.
func (e *Executor) runNested(ctx context.Context, ens *modelVersion, decoupled bool, sreq *inference.ModelInferRequest, got func(*inference.ModelInferResponse, error)) (*inference.ModelInferResponse, error) {
	start := time.Now()
	sreq.ModelVersion = ens.vstr
	if decoupled {
		compute, err := e.ensemblePlan(ens).Drive(ctx, sreq, ens.vstr, wantedOutputs(sreq), e.runEnsembleStep, func(resp *inference.ModelInferResponse, _ bool) error {
			if resp != nil {
				got(resp, nil)
			}
			return nil
		})
		ens.stats.ensembleRun(start, batchOf(ens.cfg, sreq), compute, err)
		return nil, err
	}
	out, compute, err := e.runOnce(ctx, ens, sreq)
	ens.stats.ensembleRun(start, batchOf(ens.cfg, sreq), compute, err)
	return out, err
}

// runOnce runs req's steps of ensemble ens, which answers once, here and
// returns its response and the time the steps' requests took.
func (e *Executor) runOnce(ctx context.Context, ens *modelVersion, req *inference.ModelInferRequest) (*inference.ModelInferResponse, time.Duration, error) {
	plan := e.ensemblePlan(ens)
	var out *inference.ModelInferResponse
	compute, err := plan.Drive(ctx, req, ens.vstr, wantedOutputs(req), e.runEnsembleStep, func(resp *inference.ModelInferResponse, _ bool) error {
		if resp != nil {
			out = resp
		}
		return nil
	})
	if err == nil && out == nil {
		err = ensemble.ErrDeadlock(plan.Name)
	}
	return out, compute, err
}

// wantedOutputs names the outputs req asks for (none: all of them).
func wantedOutputs(req *inference.ModelInferRequest) []string {
	wanted := make([]string, 0, len(req.GetOutputs()))
	for _, o := range req.GetOutputs() {
		wanted = append(wanted, o.GetName())
	}
	return wanted
}

// batchOf is the batch size of a request to a model of cfg: the first
// input's first dimension when the model batches, else 1.
func batchOf(cfg *inference.ModelConfig, req *inference.ModelInferRequest) int {
	if cfg.GetMaxBatchSize() > 0 && len(req.GetInputs()) > 0 && len(req.GetInputs()[0].GetShape()) > 0 {
		return max(int(req.GetInputs()[0].GetShape()[0]), 1)
	}
	return 1
}
