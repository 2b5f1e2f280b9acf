package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/metadata"

	"github.com/nereid-io/nereid/pkg/tracesetting"
)

// tracing reports whether requests for model may be traced at all: the
// one check an untraced request pays.
func (g *Gateway) tracing(model string) bool {
	return g.tracer != nil && g.trace.Level(model) != tracesetting.LevelOff
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
