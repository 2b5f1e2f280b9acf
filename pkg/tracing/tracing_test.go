package tracing

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tracesetting"
)

func newTracer(t *testing.T) *Tracer {
	t.Helper()
	cfg := tracesetting.DefaultConfig()
	cfg.Options = map[string]string{"url": "127.0.0.1:1"} // nothing is exported in these tests
	tr, err := New(context.Background(), cfg, "test", tracesetting.New(cfg, "test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = tr.Shutdown(ctx) // no collector: the spans are dropped
	})
	return tr
}

// TestOffCostsNoAllocation: with tracing off, what every request goes
// through (the gateway's decision, the other services' check of the
// incoming context, the trace context written into and read from NATS
// headers) allocates nothing.
func TestOffCostsNoAllocation(t *testing.T) {
	tr := newTracer(t)
	ctx := context.Background()
	hdr := http.Header{"Content-Type": {"application/json"}}
	carrier := propagation.HeaderCarrier(hdr)
	nh := nats.Header{"Nereid-Deadline": {"1"}}
	cases := map[string]func(){
		"StartRequest": func() {
			_, s := tr.StartRequest(ctx, "simple", carrier, "InferRequest")
			End(s, nil)
		},
		"StartChild": func() {
			_, s := tr.StartChild(ctx, "simple", "simple")
			End(s, nil)
		},
		"Inject":     func() { Propagator.Inject(ctx, bus.HeaderCarrier(nh)) },
		"Extract":    func() { _ = Propagator.Extract(ctx, bus.HeaderCarrier(nh)) },
		"Inject map": func() { _ = Inject(ctx) },
		"nil tracer": func() {
			var nt *Tracer
			_, s := nt.StartRequest(ctx, "simple", carrier, "InferRequest")
			End(s, nil)
		},
	}
	for name, fn := range cases {
		if n := testing.AllocsPerRun(1000, fn); n != 0 {
			t.Errorf("%s allocates %v times per request with tracing off", name, n)
		}
	}
}

func TestStartRequestDecides(t *testing.T) {
	tr := newTracer(t)
	st := tr.Settings()
	ctx := context.Background()
	client := propagation.HeaderCarrier(http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}})
	if _, s := tr.StartRequest(ctx, "simple", client, "InferRequest"); s != nil {
		t.Fatal("traced with level OFF")
	}
	lvl, rate, count := tracesetting.LevelTimestamps, uint32(2), int32(1)
	if _, err := st.Update("", tracesetting.Update{Level: &lvl, Rate: &rate, Count: &count}); err != nil {
		t.Fatal(err)
	}
	// The client's context is continued whatever the rate and count.
	for range 3 {
		c, s := tr.StartRequest(ctx, "simple", client, "InferRequest")
		if s == nil {
			t.Fatal("client's traceparent not continued")
		}
		if got := trace.SpanContextFromContext(c).TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Fatalf("trace id %s, want the client's", got)
		}
		s.End()
	}
	// Without one: every 2nd request, once.
	var sampled []int
	for i := 1; i <= 6; i++ {
		if _, s := tr.StartRequest(ctx, "simple", nil, "InferRequest"); s != nil {
			sampled = append(sampled, i)
			s.End()
		}
	}
	if len(sampled) != 1 || sampled[0] != 2 {
		t.Fatalf("sampled %v, want [2]", sampled)
	}
	// Children only under a sampled parent.
	c, s := tr.StartRequest(ctx, "simple", client, "InferRequest")
	if _, child := tr.StartChild(c, "simple", "simple"); child == nil {
		t.Fatal("no child span under a sampled parent")
	}
	s.End()
	m := Inject(c)
	if _, child := tr.StartChild(Extract(ctx, m), "simple", "simple"); child == nil {
		t.Fatal("no child span under a parent carried in a map")
	}
}

// TestProviderMadeWithFirstSpan: the tracer provider, whose batch span
// processor keeps a queue the garbage collector scans at every cycle, is
// made when a span first starts, whenever the settings turn tracing on;
// none is made after Shutdown.
func TestProviderMadeWithFirstSpan(t *testing.T) {
	tr := newTracer(t)
	ctx := context.Background()
	client := propagation.HeaderCarrier(http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	if _, s := tr.StartRequest(ctx, "simple", client, "InferRequest"); s != nil {
		t.Fatal("traced with level OFF")
	}
	if _, s := tr.StartChild(Extract(ctx, map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}), "simple", "simple"); s != nil {
		t.Fatal("child span under an unsampled parent")
	}
	if tr.opened.Load() != nil {
		t.Fatal("provider made before any span started")
	}
	if err := tr.ForceFlush(ctx); err != nil {
		t.Fatalf("ForceFlush without a provider: %v", err)
	}
	lvl := tracesetting.LevelTimestamps
	if _, err := tr.Settings().Update("", tracesetting.Update{Level: &lvl}); err != nil {
		t.Fatal(err)
	}
	_, s := tr.StartRequest(ctx, "simple", client, "InferRequest")
	if s == nil {
		t.Fatal("not traced once the level is TIMESTAMPS")
	}
	s.End()
	p := tr.opened.Load()
	if p == nil {
		t.Fatal("no provider after a span started")
	}
	if _, s := tr.StartChild(Extract(ctx, map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}), "simple", "simple"); s == nil {
		t.Fatal("no child span under a sampled parent")
	} else {
		s.End()
	}
	if tr.opened.Load() != p {
		t.Fatal("a second provider made")
	}
}

// TestShutdownWithoutSpans: a tracer that started no span stops its
// exporter and makes no provider afterwards.
func TestShutdownWithoutSpans(t *testing.T) {
	tr := newTracer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	sampled := Extract(context.Background(), map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	if _, s := tr.StartChild(sampled, "simple", "simple"); s != nil {
		t.Fatal("span started after Shutdown")
	}
	if tr.opened.Load() != nil {
		t.Fatal("provider made after Shutdown")
	}
}
