package gateway

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/infer"
	"github.com/nereid-io/nereid/pkg/tracing"
)

// forwardInfer sends a request, its tensors all in raw_input_contents, to
// the executors serving the resolved version (one of them answers: they
// share a queue group) and returns the executor's response. A request the
// trace settings select is traced (tracing.go); with log_verbose_level > 0
// the request and its outcome are logged with its trace and request ids.
func (g *Gateway) forwardInfer(ctx context.Context, vv *versionView, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	var span trace.Span
	if g.tracing(req.GetModelName()) {
		ctx, span = g.tracer.StartRequest(ctx, req.GetModelName(), clientCarrier(ctx), "InferRequest")
		if span != nil {
			span.SetAttributes(tracing.AttrModelVersion.String(vv.versionString()), tracing.AttrRequestID.String(req.GetId()))
		}
	}
	ctx, verbose := g.logRequest(ctx, vv, req)
	resp, err := g.forward(ctx, vv, req)
	if verbose {
		g.logOutcome(ctx, req, err)
	}
	if span != nil {
		tracing.End(span, err)
	}
	return resp, err
}

func (g *Gateway) forward(ctx context.Context, vv *versionView, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	// A string that is not UTF-8 could not be encoded for the bus: the
	// client's mistake, said as such before anything is sent.
	if err := infer.CheckUTF8(req); err != nil {
		return nil, err
	}
	ctx, cancel := g.inferContext(ctx)
	defer cancel()
	req.ModelVersion = vv.versionString()
	if resp, ok, err := g.routeSequence(ctx, vv, req); ok { // sequence models: the sequence router
		return resp, err
	}
	subject, hs, err := g.prepareHandoff(vv, req) // large tensors to an executor of this node: pkg/handoff
	if err != nil {
		return nil, err
	}
	subject, release, err := g.shmRoute(ctx, req, subject) // tensors in registered shm regions: their node (shm.go)
	if err != nil {
		return nil, hs.finish(nil, err)
	}
	defer release()
	var resp inference.ModelInferResponse
	err = hs.finish(&resp, hs.request(ctx, g.bus, subject, req, &resp))
	g.countHandoff(hs.out)
	if err != nil {
		return nil, err
	}
	return &resp, nil
}
