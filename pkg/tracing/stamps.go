package tracing

import (
	"context"
	"crypto/rand"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// A gateway writing Triton's trace file (trace mode triton) sees a request
// from its receipt to its answer; the queue and compute instants are the
// executor's. It asks for them by sending the request under an unsampled
// span context whose tracestate holds stampsKey=stampsValue (so that no
// service starts a span for it), and the executor returns them in the
// response parameter TimestampsParameter, which the gateway takes out
// before the client sees the response. Requests not traced carry neither.
const (
	stampsKey   = "nereid"
	stampsValue = "stamps"
)

// TimestampsParameter is the response parameter in which an executor
// returns a request's Timestamps to the gateway that asked for them
// (AskTimestamps): the five instants, Unix nanoseconds in decimal,
// separated by spaces, in the order of Timestamps' fields.
const TimestampsParameter = "nereid_trace_timestamps"

// TimestampsAloneParameter is TimestampsParameter on a decoupled model's
// final message when the model ended with the final flag alone: a
// response that holds nothing but this parameter is no response, only the
// flag and the timestamps. (A decoupled request's timestamps are known
// once its execution has returned; the executor holds its final message
// until then.)
const TimestampsAloneParameter = "nereid_trace_timestamps_alone"

// UsePropagator installs Propagator as the global propagator, through
// which pkg/bus writes and reads the trace context of NATS messages (and
// of requests handed over in-process). tracing.New does it for
// OpenTelemetry; a service that does not export spans calls it so that a
// gateway's AskTimestamps still reaches the executor.
func UsePropagator() { otel.SetTextMapPropagator(Propagator) }

// AskTimestamps returns ctx marked so that the executor that serves the
// request sent under it returns its Timestamps (TimestampsParameter).
func AskTimestamps(ctx context.Context) context.Context {
	var tid trace.TraceID
	var sid trace.SpanID
	_, _ = rand.Read(tid[:])
	_, _ = rand.Read(sid[:])
	ts, _ := trace.TraceState{}.Insert(stampsKey, stampsValue)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceState: ts, Remote: true})
	return trace.ContextWithSpanContext(ctx, sc)
}

// TimestampsAsked reports whether the request served under ctx asks for
// its Timestamps. Without a trace context it is one context lookup.
func TimestampsAsked(ctx context.Context) bool {
	sc := trace.SpanContextFromContext(ctx)
	return sc.IsValid() && sc.TraceState().Get(stampsKey) == stampsValue
}

// Complete reports whether ts holds every instant.
func (ts Timestamps) Complete() bool {
	return !ts.QueueStart.IsZero() && !ts.ExecStart.IsZero() && !ts.ComputeStart.IsZero() &&
		!ts.ComputeEnd.IsZero() && !ts.ExecEnd.IsZero()
}

// Encode is ts as TimestampsParameter's value.
func (ts Timestamps) Encode() string {
	b := make([]byte, 0, 5*20)
	for i, t := range [...]time.Time{ts.QueueStart, ts.ExecStart, ts.ComputeStart, ts.ComputeEnd, ts.ExecEnd} {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, t.UnixNano(), 10)
	}
	return string(b)
}

// DecodeTimestamps reads TimestampsParameter's value.
func DecodeTimestamps(s string) (Timestamps, bool) {
	f := strings.Fields(s)
	if len(f) != 5 {
		return Timestamps{}, false
	}
	var at [5]time.Time
	for i, v := range f {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return Timestamps{}, false
		}
		at[i] = time.Unix(0, n)
	}
	return Timestamps{QueueStart: at[0], ExecStart: at[1], ComputeStart: at[2], ComputeEnd: at[3], ExecEnd: at[4]}, true
}
