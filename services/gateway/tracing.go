package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tracesetting"
	"github.com/nereid-io/nereid/pkg/tracing"
)

// tracing reports whether requests for model may be traced at all: the
// one check an untraced request pays.
func (g *Gateway) tracing(model string) bool {
	return g.tracer != nil && g.trace.Level(model) != tracesetting.LevelOff
}

// startRequestSpan starts the span of a request the trace settings select:
// under the client's trace context when it sends one. A step of an
// ensemble request (ensembleStep) is traced when the ensemble's request
// is, whatever the step model's settings, with its span under the
// request's, as Triton spawns a child trace per step. nil: not traced.
func (g *Gateway) startRequestSpan(ctx context.Context, vv *versionView, req *inference.ModelInferRequest) (context.Context, trace.Span) {
	var span trace.Span
	switch {
	case ctx.Value(ensembleStepKey{}) != nil:
		ctx, span = g.tracer.StartChild(ctx, req.GetModelName(), "InferRequest")
	case g.tracing(req.GetModelName()):
		ctx, span = g.tracer.StartRequest(ctx, req.GetModelName(), clientCarrier(ctx), "InferRequest")
	}
	if span != nil {
		span.SetAttributes(tracing.AttrModelVersion.String(vv.versionString()), tracing.AttrRequestID.String(req.GetId()))
	}
	return ctx, span
}

// ensembleStepKey marks the context of an ensemble's step request
// (ensembleStep).
type ensembleStepKey struct{}

// ensembleStep is ctx for the requests of an ensemble's steps.
func ensembleStep(ctx context.Context) context.Context {
	return context.WithValue(ctx, ensembleStepKey{}, true)
}

type httpHeaderKey struct{}

// withClientHeaders keeps an HTTP request's headers in ctx, where
// clientCarrier finds the client's traceparent. Only for a model that may
// be traced: the other requests do not pay for the context.
func (g *Gateway) withClientHeaders(ctx context.Context, model string, h http.Header) context.Context {
	if !g.tracing(model) {
		return ctx
	}
	return context.WithValue(ctx, httpHeaderKey{}, h)
}

// clientCarrier reads the client's trace context: HTTP headers kept by
// withClientHeaders, or the gRPC call's metadata.
func clientCarrier(ctx context.Context) propagation.TextMapCarrier {
	if h, ok := ctx.Value(httpHeaderKey{}).(http.Header); ok {
		return propagation.HeaderCarrier(h)
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		return mdCarrier(md)
	}
	return nil
}

// mdCarrier reads gRPC metadata, whose keys are lower case.
type mdCarrier metadata.MD

func (m mdCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m mdCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

func (m mdCarrier) Keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
