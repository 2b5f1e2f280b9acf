package gateway

import (
	"context"
	"log/slog"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/logsetting"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// logRequest logs an inference request as it leaves for the executors when
// log_verbose_level is above 0, and returns the context its later lines
// use: the request's span (trace_id, span_id) and its id (request_id).
// Without verbose logging the request pays one level check.
func (g *Gateway) logRequest(ctx context.Context, vv *versionView, req *inference.ModelInferRequest) (context.Context, bool) {
	if !g.log.Enabled(ctx, slog.LevelDebug) {
		return ctx, false
	}
	ctx = logsetting.WithRequestID(ctx, req.GetId())
	g.log.DebugContext(ctx, "infer request", "model", req.GetModelName(), "version", vv.versionString())
	return ctx, true
}

// logOutcome logs how a request logged by logRequest ended.
func (g *Gateway) logOutcome(ctx context.Context, req *inference.ModelInferRequest, err error) {
	if err == nil {
		g.log.DebugContext(ctx, "infer request done", "model", req.GetModelName())
		return
	}
	g.log.DebugContext(ctx, "infer request failed", "model", req.GetModelName(), "status", tritonerr.From(err).Kind.String(), "err", err)
}
