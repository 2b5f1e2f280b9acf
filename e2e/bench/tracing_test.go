package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tracesetting"
	"github.com/nereid-io/nereid/services/standalone"
)

// Tracing: what an OpenTelemetry trace of every request costs, and what
// tracing configured but off costs. One standalone server exports to an
// OTLP/gRPC collector in this process (the real protocol; it counts the
// spans and keeps nothing), with --trace-config mode=opentelemetry,
// level=TIMESTAMPS, rate=1 for identity_traced and the model setting
// trace_level OFF for identity_untraced, the same identity model:
//
//   - 64 B identity, gRPC unary, c=1: traced (three spans: gateway,
//     executor, and the executor's compute events) against untraced on the
//     same server (reported);
//   - the untraced model against the benchmarks' standalone server (both
//     with the in-process bus off: the constellation's path), which has no
//     --trace-config (tracing off: nothing to measure, target
//     p50 <= 1.05x).

const (
	tracedModel   = "identity_traced"
	untracedModel = "identity_untraced"
)

func init() {
	comparisons = append(comparisons,
		comparison{"tracing-100pct-64B-grpc-unary/c1", "tracing-off-64B-grpc-unary/c1", latency, 0, 0},
		comparison{"tracing-model-off-64B-grpc-unary/c1", "no-trace-config-64B-grpc-unary/c1", latency, 1.05, 0},
	)
}

// spanSink is an OTLP/gRPC trace collector that counts what it is sent.
type spanSink struct {
	collectortrace.UnimplementedTraceServiceServer
	spans atomic.Int64
}

func (s *spanSink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			s.spans.Add(int64(len(ss.GetSpans())))
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// settle waits until no span has arrived for a while (the exporter sends
// in batches, every 100 ms here) and returns the count.
func (s *spanSink) settle() int64 {
	n := s.spans.Load()
	for quiet := 0; quiet < 5; {
		time.Sleep(100 * time.Millisecond)
		if m := s.spans.Load(); m != n {
			n, quiet = m, 0
		} else {
			quiet++
		}
	}
	return n
}

type tracingServer struct {
	grpcAddr string
	sink     *spanSink
}

var traceOnce struct {
	sync.Mutex
	s   *tracingServer
	err error
}

func tracingNereid(b *testing.B) *tracingServer {
	traceOnce.Lock()
	defer traceOnce.Unlock()
	if traceOnce.s == nil && traceOnce.err == nil {
		var stop func()
		traceOnce.s, stop, traceOnce.err = startTracingNereid()
		if stop != nil {
			fx.mu.Lock()
			fx.onClose = append(fx.onClose, stop)
			fx.mu.Unlock()
		}
	}
	if traceOnce.err != nil {
		b.Fatalf("starting the tracing server: %v", traceOnce.err)
	}
	return traceOnce.s
}

// startTracingNereid starts the collector and a standalone server over a
// repository holding the benchmarks' identity model twice, the untraced
// copy switched off through the model trace setting endpoint.
func startTracingNereid() (_ *tracingServer, stop func(), err error) {
	var closers []func()
	stop = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
			stop = nil
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	sink := &spanSink{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, sink)
	go func() { _ = srv.Serve(ln) }()
	closers = append(closers, srv.Stop)

	src, err := RepoDir()
	if err != nil {
		return nil, nil, err
	}
	cfgText, err := os.ReadFile(filepath.Join(src, Model, "config.pbtxt"))
	if err != nil {
		return nil, nil, err
	}
	repo, err := os.MkdirTemp("", "nereid-bench-tracing-")
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, func() { os.RemoveAll(repo) })
	for _, name := range []string{tracedModel, untracedModel} {
		if err := os.MkdirAll(filepath.Join(repo, name, "1"), 0o755); err != nil {
			return nil, nil, err
		}
		text := strings.Replace(string(cfgText), fmt.Sprintf("name: %q", Model), fmt.Sprintf("name: %q", name), 1)
		if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(text), 0o644); err != nil {
			return nil, nil, err
		}
	}

	var trace tracesetting.Flag
	for _, v := range []string{"mode=opentelemetry", "level=TIMESTAMPS", "rate=1", "count=-1",
		"opentelemetry,url=" + ln.Addr().String(), "opentelemetry,bsp_schedule_delay=100"} {
		if err := trace.Set(v); err != nil {
			return nil, nil, err
		}
	}
	cfg := standalone.DefaultConfig()
	cfg.ModelRepository = repo
	cfg.Models = []string{tracedModel, untracedModel}
	cfg.Host = "127.0.0.1"
	cfg.HTTPPort, cfg.GRPCPort = 0, 0
	cfg.AllowMetrics = false
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Trace = trace.Config()
	// The constellation's path, as the baseline's (nereid): spans cross
	// NATS from the gateway to the executor.
	cfg.InProcessBus = false
	s, stopServer, err := runStandalone(cfg, tracedModel, untracedModel)
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, stopServer)
	n := &Nereid{HTTPAddr: s.Gateway().HTTPAddr()}
	body := strings.NewReader(`{"trace_level":["OFF"]}`)
	resp, err := http.Post("http://"+n.HTTPAddr+"/v2/models/"+untracedModel+"/trace/setting", "application/json", body)
	if err != nil {
		return nil, nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("model trace setting: %s", resp.Status)
	}
	return &tracingServer{grpcAddr: s.Gateway().GRPCAddr(), sink: sink}, stop, nil
}

// BenchmarkTracing measures the tracing cases (see the top of this file).
func BenchmarkTracing(b *testing.B) {
	payload := FP32Payload(small)
	b.Run("on-vs-off/c=1", func(b *testing.B) {
		t := tracingNereid(b)
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, t.grpcAddr))
		before := t.sink.spans.Load()
		measurePair(b, "tracing-off-64B-grpc-unary/c1", "tracing-100pct-64B-grpc-unary/c1", 1, warmSmall,
			InferUnary(c, modelRequest(untracedModel, payload)), InferUnary(c, modelRequest(tracedModel, payload)))
		// The traced side's spans reach the collector in batches; a run
		// that exported nothing measured no tracing.
		deadline := time.Now().Add(10 * time.Second)
		for t.sink.spans.Load() == before && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if t.sink.spans.Load() == before {
			b.Fatal("the collector received no span: the traced model was not traced")
		}
	})
	b.Run("off-vs-no-config/c=1", func(b *testing.B) {
		t := tracingNereid(b)
		n := nereid(b)
		plain := inference.NewGRPCInferenceServiceClient(fx.conn(b, n.GRPCAddr))
		off := inference.NewGRPCInferenceServiceClient(fx.conn(b, t.grpcAddr))
		before := t.sink.settle()
		measurePair(b, "no-trace-config-64B-grpc-unary/c1", "tracing-model-off-64B-grpc-unary/c1", 1, warmSmall,
			InferUnary(plain, InferRequest(payload)), InferUnary(off, modelRequest(untracedModel, payload)))
		if got := t.sink.settle(); got != before {
			b.Fatalf("the collector received %d spans for the untraced model", got-before)
		}
	})
}
