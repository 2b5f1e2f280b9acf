//go:build cgo

package cbackend

/*
#define NEREID_TYPES_ONLY
#include <stdlib.h>
#include "abi.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tracing"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Triton's trace objects, backed by the executor's OpenTelemetry spans. A
// request traced by its gateway (its context carries a sampled span) has a
// TRITONSERVER_InferenceTrace whose context is the span's, as Triton's
// OpenTelemetry mode gives it ({"traceparent": ...}); one not traced has
// none (null), as in Triton. Activities a backend reports become events
// of the span (a name ending in _START opens a child span named for the
// rest of it, one ending in _END closes the innermost: Triton's
// OpenTelemetry rules). A trace spawned from it (SpawnChildTrace) and
// handed to TRITONSERVER_ServerInferAsync becomes a span of its own,
// named for the model the BLS request calls, the parent of every span of
// that request in the constellation.

const tracerName = "github.com/nereid-io/nereid/executor"

// traceIDs numbers traces as Triton does: from 1 (0 means no parent).
var traceIDs atomic.Uint64

type cTrace struct {
	c *C.TRITONSERVER_InferenceTrace
	h uintptr

	owned bool // by its request: freed with it, never by the backend
	made  bool // by the backend (TRITONSERVER_InferenceTraceNew): its callbacks hear of the requests that carry it

	mu      sync.Mutex
	ctx     context.Context // holds the span activities and children hang from
	span    trace.Span      // a spawned trace's own span, once it runs
	open    []trace.Span    // spans opened by *_START activities
	running bool            // handed to the server
	freed   bool
}

func newTrace(ctx context.Context, parent uint64, owned bool) *cTrace {
	t := &cTrace{ctx: ctx, owned: owned}
	t.c = (*C.TRITONSERVER_InferenceTrace)(C.calloc(1, C.sizeof_struct_TRITONSERVER_InferenceTrace))
	t.h = register(t)
	t.c.h = C.uintptr_t(t.h)
	t.c.id = C.uint64_t(traceIDs.Add(1))
	t.c.parent_id = C.uint64_t(parent)
	return t
}

// describe sets what the trace's accessors return; t.mu held or t not
// yet shared.
func (t *cTrace) describe(model string, version int64, requestID string) {
	C.free(unsafe.Pointer(t.c.model_name))
	C.free(unsafe.Pointer(t.c.request_id))
	C.free(unsafe.Pointer(t.c.context))
	t.c.model_name = C.CString(model)
	t.c.model_version = C.int64_t(version)
	t.c.request_id = C.CString(requestID)
	t.c.context = C.CString(traceContextJSON(t.ctx))
}

// traceContextJSON is the W3C trace context of ctx's span as a JSON
// object, Triton's form of TRITONSERVER_InferenceTraceContext.
func traceContextJSON(ctx context.Context) string {
	m := map[string]string{}
	for k, v := range tracing.Inject(ctx) {
		if k == "traceparent" || k == "tracestate" {
			m[k] = v
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// free ends the spans the backend left open and frees the C side.
func (t *cTrace) free() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.freed {
		return
	}
	t.freed = true
	for i := len(t.open) - 1; i >= 0; i-- {
		t.open[i].End()
	}
	t.open = nil
	unregister(t.h)
	C.free(unsafe.Pointer(t.c.model_name))
	C.free(unsafe.Pointer(t.c.request_id))
	C.free(unsafe.Pointer(t.c.context))
	C.free(unsafe.Pointer(t.c))
}

// requestTrace returns the request's trace, made on first use; nil when
// the request is not traced.
func (cr *cRequest) requestTrace() *cTrace {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.trace != nil || cr.gone {
		return cr.trace
	}
	ctx := cr.r.Context()
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return nil
	}
	t := newTrace(ctx, 0, true)
	t.describe(cr.in.m.info.Name, cr.in.m.info.Version, cr.r.ID)
	cr.trace = t
	return t
}

// report is TRITONSERVER_InferenceTraceReportActivity.
func (t *cTrace) report(name string, at C.uint64_t) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.freed {
		return
	}
	base := trace.SpanFromContext(t.ctx)
	if n := len(t.open); n > 0 {
		base = t.open[n-1]
	}
	if !base.SpanContext().IsValid() {
		// A trace the backend made itself has no span to report to.
		logger.Load().Debug("trace activity dropped: no tracing is on for this trace (a trace made with TRITONSERVER_InferenceTraceNew reports to its own callbacks only)",
			"trace_id", uint64(t.c.id), "activity", name)
		return
	}
	ts := trace.WithTimestamp(steady(at))
	switch {
	case len(name) > len("_START") && strings.HasSuffix(name, "_START"):
		_, s := base.TracerProvider().Tracer(tracerName).Start(trace.ContextWithSpan(context.Background(), base),
			strings.TrimSuffix(name, "_START"), trace.WithTimestamp(steady(at)))
		s.AddEvent(name, ts)
		t.open = append(t.open, s)
	case len(name) > len("_END") && strings.HasSuffix(name, "_END"):
		base.AddEvent(name, ts)
		if n := len(t.open); n > 0 {
			t.open[n-1].End(trace.WithTimestamp(steady(at)))
			t.open = t.open[:n-1]
		}
	default:
		base.AddEvent(name, ts)
	}
}

// run makes ctx carry the trace for a BLS request (ServerInferAsync): a
// spawned trace starts its span, child of the span it was spawned from,
// and is the server's until finish, which ends the span and frees the
// trace. The request's own trace stays the request's: the BLS request's
// spans hang from the request's span.
func (t *cTrace) run(ctx context.Context, req *inference.ModelInferRequest) (context.Context, func(error), error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.freed:
		return nil, nil, tritonerr.InvalidArgf("trace is no longer valid")
	case t.owned:
		return trace.ContextWithSpanContext(ctx, trace.SpanContextFromContext(t.ctx)), nil, nil
	case t.running:
		return nil, nil, tritonerr.InvalidArgf("trace %d is already in use by another inference request", uint64(t.c.id))
	}
	t.running = true
	parent := trace.SpanFromContext(t.ctx)
	sctx, span := parent.TracerProvider().Tracer(tracerName).Start(t.ctx, req.GetModelName(),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tracing.AttrModelName.String(req.GetModelName()), tracing.AttrModelVersion.String(req.GetModelVersion()),
			attribute.Int64("triton.trace_id", int64(t.c.id)), attribute.Int64("triton.trace_parent_id", int64(t.c.parent_id))))
	t.span, t.ctx = span, sctx
	version := int64(-1)
	if v, err := strconv.ParseInt(req.GetModelVersion(), 10, 64); err == nil {
		version = v
	}
	t.describe(req.GetModelName(), version, req.GetId())
	return trace.ContextWithSpan(ctx, span), func(err error) {
		tracing.End(span, err)
		if t.made {
			// The backend's own trace is the backend's: it hears the end
			// and its release, and deletes it (as in Triton, from the
			// release callback or after it).
			t.activity(C.TRITONSERVER_TRACE_REQUEST_END)
			t.mu.Lock()
			t.running = false
			t.mu.Unlock()
			C.nereid_trace_release(t.c)
			return
		}
		t.free()
	}, nil
}

func traceOf(p *C.TRITONSERVER_InferenceTrace) (*cTrace, *C.TRITONSERVER_Error) {
	if p == nil {
		return nil, newError(tritonerr.InvalidArgf("trace must not be null"))
	}
	t := lookup[*cTrace](p.h)
	if t == nil {
		return nil, newError(tritonerr.InvalidArgf("trace is no longer valid"))
	}
	return t, nil
}

//export TRITONBACKEND_RequestTrace
func TRITONBACKEND_RequestTrace(r *C.TRITONBACKEND_Request, out **C.TRITONSERVER_InferenceTrace) *C.TRITONSERVER_Error {
	cr, e := request(r)
	if e != nil {
		return e
	}
	if r.released {
		return newError(tritonerr.InvalidArgf("request has been released"))
	}
	if out == nil {
		return newError(tritonerr.InvalidArgf("trace must not be null"))
	}
	var c *C.TRITONSERVER_InferenceTrace
	if t := cr.requestTrace(); t != nil {
		c = t.c
	}
	setOut(out, c)
	return nil
}

//export TRITONSERVER_InferenceTraceSpawnChildTrace
func TRITONSERVER_InferenceTraceSpawnChildTrace(p *C.TRITONSERVER_InferenceTrace, out **C.TRITONSERVER_InferenceTrace) *C.TRITONSERVER_Error {
	t, e := traceOf(p)
	if e != nil {
		return e
	}
	if out == nil {
		return newError(tritonerr.InvalidArgf("child trace must not be null"))
	}
	t.mu.Lock()
	ctx := t.ctx
	if n := len(t.open); n > 0 {
		ctx = trace.ContextWithSpan(ctx, t.open[n-1])
	}
	t.mu.Unlock()
	child := newTrace(ctx, uint64(p.id), false)
	setOut(out, child.c)
	return nil
}

//export TRITONSERVER_InferenceTraceDelete
func TRITONSERVER_InferenceTraceDelete(p *C.TRITONSERVER_InferenceTrace) *C.TRITONSERVER_Error {
	t, e := traceOf(p)
	if e != nil {
		return e
	}
	t.mu.Lock()
	owned, running := t.owned, t.running
	t.mu.Unlock()
	switch {
	case owned:
		return newError(tritonerr.InvalidArgf("trace %d belongs to its request and is released with it", uint64(p.id)))
	case running:
		return newError(tritonerr.InvalidArgf("trace %d belongs to the inference request it was given to", uint64(p.id)))
	}
	t.free()
	return nil
}

//export TRITONSERVER_InferenceTraceReportActivity
func TRITONSERVER_InferenceTraceReportActivity(p *C.TRITONSERVER_InferenceTrace, timestamp C.uint64_t, name *C.char) *C.TRITONSERVER_Error {
	t, e := traceOf(p)
	if e != nil {
		return e
	}
	if name == nil {
		return newError(tritonerr.InvalidArgf("activity name must not be null"))
	}
	t.report(C.GoString(name), timestamp)
	return nil
}
