// Package tracing records OpenTelemetry spans of inference requests as they
// cross the constellation and exports them over OTLP: OTLP/HTTP to a url
// with a path, as Triton's (--trace-config
// opentelemetry,url=localhost:4318/v1/traces), OTLP/gRPC to a bare
// host:port.
//
// The gateway that receives a request decides whether it is traced
// (StartRequest): never when the model's trace level is OFF; always when
// the client sent a valid W3C traceparent (its trace is continued, as
// Triton does); otherwise when the trace extension's rate and count say so
// (pkg/tracesetting). The decision travels with the request in the
// traceparent header of its NATS messages (pkg/bus), and the sequence
// router and the executor add their spans only under a sampled parent
// (StartChild). An untraced request costs one settings lookup at the
// gateway and one context lookup elsewhere: no span, no allocation.
//
// Spans carry Triton's timestamp names: the executor's request span has
// QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START and
// COMPUTE_END as events and queue, compute_input, compute_infer and
// compute_output as child spans over the same instants (Timestamps).
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/nereid-io/nereid/pkg/tracesetting"
)

// Propagator is the W3C trace context, the one format Nereid reads from
// clients and writes into NATS headers.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Attribute keys of request spans.
const (
	AttrModelName    = attribute.Key("triton.model_name")
	AttrModelVersion = attribute.Key("triton.model_version")
	AttrRequestID    = attribute.Key("triton.request_id")
)

// Tracer starts the spans of one service. A nil *Tracer traces nothing.
type Tracer struct {
	settings *tracesetting.Manager
	scope    string
	exp      sdktrace.SpanExporter
	res      *resource.Resource
	bsp      []sdktrace.BatchSpanProcessorOption

	// The provider is made when the first span starts: its batch span
	// processor holds a queue of bsp_max_queue_size spans (2,048 by
	// default), a buffer the garbage collector scans whole at every cycle,
	// which a server whose requests are never traced would otherwise keep
	// in each of its services.
	opened atomic.Pointer[provider]
	mu     sync.Mutex // makes the provider once; guards shut
	shut   bool       // Shutdown ran: no provider is made after it
}

type provider struct {
	tp *sdktrace.TracerProvider
	t  trace.Tracer
}

// New sets up a service's tracer for cfg (--trace-config) with settings
// (the trace extension's, kept in step across the constellation). The
// exporter sends to the opentelemetry url option (exporter), or else where
// the standard OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT and _PROTOCOL
// variables say (OTLP/gRPC to localhost:4317 by default); it connects
// lazily, so a collector that is not there yet costs nothing until a trace
// is sampled. The resource is service.name=nereid-<service> with the
// resource options and OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME added.
// New also installs the W3C propagator globally, which pkg/bus uses for
// NATS headers.
func New(ctx context.Context, cfg tracesetting.Config, service string, settings *tracesetting.Manager) (*Tracer, error) {
	otel.SetTextMapPropagator(Propagator)
	exp, err := exporter(ctx, cfg.Options["url"], os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "nereid-"+service)}
	for _, kv := range splitResource(cfg.Options["resource"]) {
		attrs = append(attrs, kv)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	bsp, err := batchOptions(cfg.Options)
	if err != nil {
		return nil, err
	}
	return &Tracer{settings: settings, scope: "github.com/nereid-io/nereid/" + service, exp: exp, res: res, bsp: bsp}, nil
}

// provider returns the tracer provider, made on the first call; nil once
// Shutdown ran without one.
func (t *Tracer) provider() *provider {
	if p := t.opened.Load(); p != nil {
		return p
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.opened.Load(); p != nil || t.shut {
		return p
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(t.res),
		// WithBatcher makes the processor and its queue: only here.
		sdktrace.WithBatcher(t.exp, t.bsp...),
		// The decision is made before a span starts (StartRequest,
		// StartChild): every span started is recorded.
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
	)
	p := &provider{tp: tp, t: tp.Tracer(t.scope)}
	t.opened.Store(p)
	return p
}

// Protocol is how spans travel to the collector.
type Protocol string

// The OTLP protocols, named as OTEL_EXPORTER_OTLP_PROTOCOL names them.
const (
	ProtocolGRPC Protocol = "grpc"
	ProtocolHTTP Protocol = "http/protobuf"
)

// Endpoint is where and how the exporter sends: the collector's URL with
// its scheme (http: no TLS) and, for OTLP/HTTP, its path.
type Endpoint struct {
	Protocol Protocol
	URL      string
}

// ParseURL reads the opentelemetry url option. Triton's form, a URL with a
// path (localhost:4318/v1/traces, http://collector:4318/v1/traces), is
// OTLP/HTTP posted to that path; a bare host:port (collector:4317, or
// with a scheme and no path) is OTLP/gRPC. Without a scheme the collector
// is reached without TLS, as Triton's http default; https:// uses TLS.
func ParseURL(raw string) (Endpoint, error) {
	u := raw
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	parsed, err := url.Parse(u)
	if err != nil {
		return Endpoint{}, fmt.Errorf("--trace-config opentelemetry,url=%s: %w", raw, err)
	}
	if parsed.Scheme != "http" && parsed.Scheme != "https" {
		return Endpoint{}, fmt.Errorf("--trace-config opentelemetry,url=%s: scheme %q (want http or https)", raw, parsed.Scheme)
	}
	if parsed.Host == "" {
		return Endpoint{}, fmt.Errorf("--trace-config opentelemetry,url=%s: no host", raw)
	}
	if parsed.Path == "" || parsed.Path == "/" {
		return Endpoint{Protocol: ProtocolGRPC, URL: parsed.Scheme + "://" + parsed.Host}, nil
	}
	return Endpoint{Protocol: ProtocolHTTP, URL: parsed.String()}, nil
}

// exporter makes the span exporter for the url option (empty: the
// standard OTEL_* variables, read through getenv).
func exporter(ctx context.Context, raw string, getenv func(string) string) (sdktrace.SpanExporter, error) {
	if raw == "" {
		proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		if Protocol(proto) == ProtocolHTTP {
			return otlptracehttp.New(ctx) // endpoint, TLS and headers from the variables
		}
		var opts []otlptracegrpc.Option
		if getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	ep, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	if ep.Protocol == ProtocolHTTP {
		// WithEndpointURL takes host, port, path and, from the scheme,
		// whether to use TLS.
		return otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(ep.URL))
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(ep.URL)}
	if strings.HasPrefix(ep.URL, "http://") {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	return otlptracegrpc.New(ctx, opts...)
}

func splitResource(s string) []attribute.KeyValue {
	var out []attribute.KeyValue
	for _, kv := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			out = append(out, attribute.String(k, v))
		}
	}
	return out
}

// batchOptions reads Triton's bsp_* options: bsp_max_queue_size,
// bsp_schedule_delay (milliseconds), bsp_max_export_batch_size.
func batchOptions(o map[string]string) ([]sdktrace.BatchSpanProcessorOption, error) {
	var out []sdktrace.BatchSpanProcessorOption
	for key, set := range map[string]func(int) sdktrace.BatchSpanProcessorOption{
		"bsp_max_queue_size": sdktrace.WithMaxQueueSize,
		"bsp_schedule_delay": func(n int) sdktrace.BatchSpanProcessorOption {
			return sdktrace.WithBatchTimeout(time.Duration(n) * time.Millisecond)
		},
		"bsp_max_export_batch_size": sdktrace.WithMaxExportBatchSize,
	} {
		v, ok := o[key]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--trace-config opentelemetry,%s=%s: want a positive integer", key, v)
		}
		out = append(out, set(n))
	}
	return out, nil
}

// Shutdown exports what is left and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	t.shut = true
	p := t.opened.Load()
	t.mu.Unlock()
	if p == nil {
		// No span was started: the exporter is all there is to stop.
		if err := t.exp.Shutdown(ctx); err != nil {
			return fmt.Errorf("tracing: shutting the exporter down: %w", err)
		}
		return nil
	}
	return p.tp.Shutdown(ctx)
}

// ForceFlush exports the spans ended so far.
func (t *Tracer) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	p := t.opened.Load()
	if p == nil {
		return nil // no span was started
	}
	return p.tp.ForceFlush(ctx)
}

// Settings returns the trace settings the tracer follows.
func (t *Tracer) Settings() *tracesetting.Manager {
	if t == nil {
		return nil
	}
	return t.settings
}

// StartRequest decides whether a request for model that just reached the
// constellation is traced and, if so, starts its root span named name,
// under the client's trace context read from carrier (HTTP headers, gRPC
// metadata) when it sent one. The span is nil when the request is not
// traced.
func (t *Tracer) StartRequest(ctx context.Context, model string, carrier propagation.TextMapCarrier, name string) (context.Context, trace.Span) {
	if t == nil || t.settings.Level(model) == tracesetting.LevelOff {
		return ctx, nil
	}
	if carrier != nil && carrier.Get("traceparent") != "" {
		pctx := Propagator.Extract(ctx, carrier)
		if trace.SpanContextFromContext(pctx).IsValid() {
			return t.start(pctx, model, name, trace.SpanKindServer)
		}
	}
	if !t.settings.Sample(model) {
		return ctx, nil
	}
	return t.start(ctx, model, name, trace.SpanKindServer)
}

// StartChild starts a span named name for work on model when ctx carries a
// sampled trace (from the NATS headers of the request); nil otherwise.
func (t *Tracer) StartChild(ctx context.Context, model, name string) (context.Context, trace.Span) {
	if t == nil || !trace.SpanContextFromContext(ctx).IsSampled() {
		return ctx, nil
	}
	return t.start(ctx, model, name, trace.SpanKindServer)
}

func (t *Tracer) start(ctx context.Context, model, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	p := t.provider()
	if p == nil {
		return ctx, nil // shut down
	}
	return p.t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(AttrModelName.String(model)))
}

// End ends span (nil: nothing), marking it failed with err.
func End(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Inject writes ctx's trace context into a map (to carry it inside a
// message rather than in headers); nil when ctx is not traced.
func Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	m := map[string]string{}
	Propagator.Inject(ctx, propagation.MapCarrier(m))
	return m
}

// Extract is Inject's inverse.
func Extract(ctx context.Context, m map[string]string) context.Context {
	if len(m) == 0 {
		return ctx
	}
	return Propagator.Extract(ctx, propagation.MapCarrier(m))
}

// Timestamps are the instants of one request's execution, as the
// executor's statistics take them.
type Timestamps struct {
	QueueStart, ExecStart, ComputeStart, ComputeEnd, ExecEnd time.Time
}

// RecordTimestamps adds Triton's timestamp events and the queue and
// compute phases as child spans of span (nil: nothing).
func RecordTimestamps(span trace.Span, ts Timestamps) {
	if span == nil || !span.IsRecording() {
		return
	}
	for _, e := range []struct {
		name string
		at   time.Time
	}{
		{"QUEUE_START", ts.QueueStart}, {"COMPUTE_START", ts.ExecStart}, {"COMPUTE_INPUT_END", ts.ComputeStart},
		{"COMPUTE_OUTPUT_START", ts.ComputeEnd}, {"COMPUTE_END", ts.ExecEnd},
	} {
		span.AddEvent(e.name, trace.WithTimestamp(e.at))
	}
	tr := span.TracerProvider().Tracer("github.com/nereid-io/nereid/executor")
	ctx := trace.ContextWithSpan(context.Background(), span)
	for _, p := range []struct {
		name       string
		start, end time.Time
	}{
		{"queue", ts.QueueStart, ts.ExecStart}, {"compute_input", ts.ExecStart, ts.ComputeStart},
		{"compute_infer", ts.ComputeStart, ts.ComputeEnd}, {"compute_output", ts.ComputeEnd, ts.ExecEnd},
	} {
		_, s := tr.Start(ctx, p.name, trace.WithTimestamp(p.start))
		s.End(trace.WithTimestamp(p.end))
	}
}
