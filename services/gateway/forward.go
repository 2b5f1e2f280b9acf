package gateway

import (
	"context"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/infer"
	"github.com/nereid-io/nereid/pkg/infercodec"
	"github.com/nereid-io/nereid/pkg/tracing"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// forwardInfer sends a request, its tensors all in raw_input_contents, to
// the executors serving the resolved version (one of them answers: they
// share a queue group) and returns the executor's response. A request the
// trace settings select is traced (tracing.go); with log_verbose_level > 0
// the request and its outcome are logged with its trace and request ids.
// With passOn the answer may come as enc instead: the executor's encoding
// of the response, exactly what encoding resp would give, which a gRPC
// client gets as it is and an HTTP client's response is written from. fw,
// when not nil, is a fresh forwarding the caller allocated with the
// request (a gRPC request's, grpcRequest); nil: one is allocated.
func (g *Gateway) forwardInfer(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, passOn bool, fw *forwarding) (resp *inference.ModelInferResponse, enc *encodedResponse, err error) {
	ctx, span := g.startRequestSpan(ctx, vv, req)
	ctx, file := g.startFileTrace(ctx, vv, req) // Triton's trace file (tritontrace.go)
	ctx, verbose := g.logRequest(ctx, vv, req)
	if vv.plan != nil { // an ensemble: its steps run from here (ensemble.go)
		resp, enc, err = g.forwardEnsemble(ctx, vv, req, passOn && file == nil, fw)
	} else {
		resp, enc, err = g.forward(ctx, vv, req, passOn && file == nil, fw)
	}
	if verbose {
		g.logOutcome(ctx, req, err)
	}
	if span != nil {
		tracing.End(span, err)
	}
	g.endFileTrace(ctx, file, resp)
	return resp, enc, err
}

func (g *Gateway) forward(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, passOn bool, fw *forwarding) (*inference.ModelInferResponse, *encodedResponse, error) {
	// A string that is not UTF-8 could not be encoded for the bus: the
	// client's mistake, said as such before anything is sent.
	if fw == nil || !fw.utf8Valid {
		if err := infer.CheckUTF8(req); err != nil {
			return nil, nil, err
		}
	}
	if fw == nil {
		fw = new(forwarding)
	}
	if vv.cached && g.cache != nil { // response_cache: respcache.go
		return g.forwardCached(ctx, vv, req, passOn, fw, g.forwardUncached)
	}
	return g.forwardUncached(ctx, vv, req, passOn, fw)
}

// forwardEnsemble answers a request to an ensemble that is not decoupled:
// with response_cache in its configuration, from the cache under the
// ensemble's own key when it holds the response (no step runs), else by
// running its steps, whose final response is then stored (forwardCached);
// without it, by running its steps (inferEnsemble). Its composing models
// keep their own caches either way, as Triton's do.
func (g *Gateway) forwardEnsemble(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, passOn bool, fw *forwarding) (*inference.ModelInferResponse, *encodedResponse, error) {
	if vv.cached && g.cache != nil {
		if fw == nil {
			fw = new(forwarding)
		}
		return g.forwardCached(ctx, vv, req, passOn, fw, g.produceEnsemble)
	}
	return g.produceEnsemble(ctx, vv, req, passOn, fw)
}

// produceEnsemble is inferEnsemble as forwardCached's producer.
func (g *Gateway) produceEnsemble(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, passOn bool, fw *forwarding) (*inference.ModelInferResponse, *encodedResponse, error) {
	if passOn && fw == nil {
		fw = new(forwarding)
	}
	return g.inferEnsemble(ctx, vv, req, passOn, fw)
}

// forwardUncached is forward without the response cache.
func (g *Gateway) forwardUncached(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, passOn bool, fw *forwarding) (*inference.ModelInferResponse, *encodedResponse, error) {
	g.boundInference(&fw.ctx, ctx)
	defer fw.ctx.Cancel()
	ctx = &fw.ctx
	req.ModelVersion = vv.versionString()
	if resp, ok, err := g.routeSequence(ctx, vv, req); ok { // sequence models: the sequence router
		return resp, nil, err
	}
	subject, hs, err := g.prepareHandoff(vv, req, &fw.out) // large tensors to an executor of this node: pkg/handoff
	if err != nil {
		return nil, nil, err
	}
	if hs.out != nil && ctx.Value(ensembleStepKey{}) != nil {
		// An ensemble's later steps name this step's output file rather
		// than copy its tensors (ensemble.go, stepFiles).
		hs.out.KeepOutputs()
	}
	subject, release, err := g.shmRoute(ctx, req, subject) // tensors in registered shm regions: their node (shm.go)
	if err != nil {
		return nil, nil, hs.finish(nil, err)
	}
	defer release()
	if g.bus.Encodes() {
		// The request went out encoded once the bus request returns: the
		// parameters map the hand-off made serves the next one.
		defer hs.out.Unset(req)
	}
	if passOn && !g.bus.InProcess(subject) {
		return g.forwardEncoded(ctx, vv, subject, &hs, req, fw)
	}
	resp := &fw.resp
	err = hs.finish(resp, g.send(ctx, &hs, vv, subject, req, resp))
	g.countHandoff(hs.out)
	if err != nil {
		return nil, nil, err
	}
	return resp, nil, nil
}

// forwarding is what of a forwarded request outlives forward's frame, in
// one allocation: the context it is forwarded in, its hand-off's Outgoing
// (when it has one), and its response, decoded or as the executor encoded
// it (forwardEncoded). It serves one request: the Outgoing's descriptor
// lies in it.
type forwarding struct {
	ctx  bus.Bounded
	out  handoff.Outgoing
	resp inference.ModelInferResponse
	enc  encodedResponse
	// utf8Valid: the request's strings are UTF-8, checked as it was
	// decoded (a small unary gRPC request, grpcRequest).
	utf8Valid bool
}

// encoded is fw's encodedResponse made of b, a response encoding the
// client gets as it is.
func (fw *forwarding) encoded(b []byte) *encodedResponse {
	e := &fw.enc
	e.reply.Bytes, e.enc = b, b
	e.bufs[0] = &e.enc
	return e
}

// forwardEncoded sends req over the bus and returns the executor's
// encoding of the response when it can go to the client as it is (it is
// what encoding the decoded response gives, and no output was handed off
// to be put into it), else the response decoded. (A request to an executor
// of this process (bus.Local) gets the executor's message itself, which is
// cheaper than its encoding.)
func (g *Gateway) forwardEncoded(ctx context.Context, vv *versionView, subject string, hs *handoffState, req *inference.ModelInferRequest, fw *forwarding) (*inference.ModelInferResponse, *encodedResponse, error) {
	r := &fw.enc.reply
	err := g.send(ctx, hs, vv, subject, req, r)
	if err == nil && r.Bytes != nil && !hs.out.OutputsHandedOver() && !infercodec.HasParameter(r.Bytes, handoff.Param) {
		err = hs.finishEncoded()
		g.countHandoff(hs.out)
		if err != nil {
			return nil, nil, err
		}
		return nil, fw.encoded(r.Bytes), nil
	}
	resp := r.ModelInferResponse
	if err == nil && resp == nil {
		resp = &fw.resp
		if derr := infercodec.UnmarshalResponse(r.Bytes, resp); derr != nil {
			err = tritonerr.Internalf("gateway: cannot decode the reply from %s: %v", subject, derr)
		}
	}
	err = hs.finish(resp, err)
	g.countHandoff(hs.out)
	if err != nil {
		return nil, nil, err
	}
	return resp, nil, nil
}
