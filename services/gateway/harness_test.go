package gateway

import (
	"context"
	"encoding/binary"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/internal/testutil/leakcheck"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startNATS runs an embedded nats-server on a random port.
func startNATS(t testing.TB) *server.Server {
	t.Helper()
	leakcheck.Check(t) // every test starts here: it must end with its goroutines gone
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

func connect(t testing.TB, ns *server.Server, name string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), nats.Name(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// startGateway runs a gateway on 127.0.0.1 random ports until the test ends.
func startGateway(t testing.TB, ns *server.Server, mutate ...func(*Config)) *Gateway {
	t.Helper()
	cfg := Config{
		Conn:        connect(t, ns, "gateway"),
		HTTPAddr:    "127.0.0.1:0",
		GRPCAddr:    "127.0.0.1:0",
		MetricsAddr: "127.0.0.1:0",
		Version:     "test",
		Logger:      discardLogger(),
	}
	for _, m := range mutate {
		m(&cfg)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway Run: %v", err)
		}
	})
	select {
	case <-g.Ready():
	case err := <-done:
		t.Fatalf("gateway ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("gateway not ready")
	}
	return g
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fakeExecutor is a real NATS responder speaking the executor's side of the
// bus contract for a tiny "simple"-like model (OUTPUT0 = INPUT0 + INPUT1,
// OUTPUT1 = INPUT0 - INPUT1, INT32). It stands in for services/executor in
// tests that need to control heartbeats precisely.
type fakeExecutor struct {
	t      testing.TB
	id     string
	nc     *nats.Conn
	bc     *bus.Conn
	models []*busv1.ModelVersionState

	// catalogAsked and catalogGate, when set, make the catalog request
	// announce itself and wait for the gate before it is answered with
	// the catalog as it was when the request came (set them under mu).
	catalogAsked, catalogGate chan struct{}
	// hold, when set, runs in each infer request's handler, with its
	// context, before the request is computed; an error is the answer.
	hold func(ctx context.Context) error

	mu    sync.Mutex
	gen   uint64
	rev   uint64
	subs  []*bus.Subscription
	stop  chan struct{}
	stats map[string]*inference.ModelStatistics
}

func simpleConfig(name string) *inference.ModelConfig {
	io := func(n string) *inference.ModelInput {
		return &inference.ModelInput{Name: n, DataType: inference.DataType_TYPE_INT32, Dims: []int64{16}}
	}
	out := func(n string) *inference.ModelOutput {
		return &inference.ModelOutput{Name: n, DataType: inference.DataType_TYPE_INT32, Dims: []int64{16}}
	}
	return &inference.ModelConfig{
		Name: name, Backend: "simple", MaxBatchSize: 8,
		Input:  []*inference.ModelInput{io("INPUT0"), io("INPUT1")},
		Output: []*inference.ModelOutput{out("OUTPUT0"), out("OUTPUT1")},
	}
}

func newFakeExecutor(t testing.TB, ns *server.Server, id string, models ...*busv1.ModelVersionState) *fakeExecutor {
	nc := connect(t, ns, "fake-executor-"+id)
	bc, err := bus.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeExecutor{t: t, id: id, nc: nc, bc: bc, models: models, gen: 1, stats: map[string]*inference.ModelStatistics{}}
}

func (f *fakeExecutor) heartbeat(withdraw bool) {
	f.mu.Lock()
	hb := &busv1.ExecutorHeartbeat{ExecutorId: f.id, Node: "test", Generation: f.gen, Revision: f.rev, Withdraw: withdraw}
	f.mu.Unlock()
	_ = f.bc.Publish(bus.HeartbeatSubject, hb)
}

// start serves the catalog, statistics and infer subjects and heartbeats.
func (f *fakeExecutor) start() {
	f.t.Helper()
	handle := func(subject, queue string, h bus.HandlerFunc) {
		s, err := f.bc.Handle(subject, queue, h)
		if err != nil {
			f.t.Fatal(err)
		}
		f.subs = append(f.subs, s)
	}
	handle(bus.ExecutorCatalogSubject(f.id), "", func(context.Context, []byte) (proto.Message, error) {
		f.mu.Lock()
		cat := &busv1.ExecutorCatalog{ExecutorId: f.id, Node: "test", Generation: f.gen, Revision: f.rev, Models: slices.Clone(f.models)}
		asked, gate := f.catalogAsked, f.catalogGate
		f.mu.Unlock()
		if gate != nil {
			select {
			case asked <- struct{}{}:
			default:
			}
			<-gate
		}
		return cat, nil
	})
	// Model control as an executor in mode none answers it.
	handle(bus.ModelControlSubject, "", func(context.Context, []byte) (proto.Message, error) {
		return &busv1.ModelControlReply{ExecutorId: f.id, ErrorKind: "UNAVAILABLE",
			Error: "explicit model load / unload is not allowed if polling is enabled"}, nil
	})
	handle(bus.ExecutorStatsSubject(f.id), "", func(_ context.Context, b []byte) (proto.Message, error) {
		var req busv1.StatisticsRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			return nil, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		resp := &inference.ModelStatisticsResponse{}
		for _, m := range f.models {
			if m.State != "READY" || (req.Name != "" && m.Name != req.Name) || (req.Version != "" && m.Version != req.Version) {
				continue
			}
			s := f.stats[m.Name+"/"+m.Version]
			if s == nil {
				s = &inference.ModelStatistics{Name: m.Name, Version: m.Version, InferenceStats: &inference.InferStatistics{}}
			}
			resp.ModelStats = append(resp.ModelStats, proto.Clone(s).(*inference.ModelStatistics))
		}
		return resp, nil
	})
	for _, m := range f.models {
		if m.State != "READY" {
			continue
		}
		handle(bus.InferSubject(m.Name, m.Version), bus.QueueExecutors, func(ctx context.Context, b []byte) (proto.Message, error) {
			if f.hold != nil {
				if err := f.hold(ctx); err != nil {
					return nil, err
				}
			}
			var req inference.ModelInferRequest
			if err := proto.Unmarshal(b, &req); err != nil {
				return nil, err
			}
			return f.infer(m, &req)
		})
	}
	sol, err := f.bc.Subscribe(bus.SolicitSubject, func(context.Context, []byte) { f.heartbeat(false) })
	if err != nil {
		f.t.Fatal(err)
	}
	f.subs = append(f.subs, sol)
	f.stop = make(chan struct{})
	stop := f.stop
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			f.heartbeat(false)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	f.t.Cleanup(f.kill)
}

// quiet stops the periodic heartbeats; the executor answers as before,
// and heartbeats only when the test calls heartbeat.
func (f *fakeExecutor) quiet() {
	if f.stop != nil {
		close(f.stop)
		f.stop = nil
	}
}

// kill stops answering and heartbeating without a withdraw, as a crashed
// process would.
func (f *fakeExecutor) kill() {
	f.quiet()
	for _, s := range f.subs {
		_ = s.Unsubscribe()
	}
	f.subs = nil
}

// infer computes the simple model: sum and difference of two INT32 inputs.
func (f *fakeExecutor) infer(m *busv1.ModelVersionState, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	if len(req.Inputs) != 2 || len(req.RawInputContents) != 2 {
		return nil, tritonerr.InvalidArgf("expected 2 inputs but got %d inputs for model '%s'", len(req.Inputs), m.Name)
	}
	a, b := req.RawInputContents[0], req.RawInputContents[1]
	if len(a) != len(b) || len(a)%4 != 0 {
		return nil, tritonerr.InvalidArgf("input byte size mismatch for model '%s'", m.Name)
	}
	sum, diff := make([]byte, len(a)), make([]byte, len(a))
	for i := 0; i < len(a); i += 4 {
		x, y := int32(binary.LittleEndian.Uint32(a[i:])), int32(binary.LittleEndian.Uint32(b[i:]))
		binary.LittleEndian.PutUint32(sum[i:], uint32(x+y))
		binary.LittleEndian.PutUint32(diff[i:], uint32(x-y))
	}
	f.mu.Lock()
	s := f.stats[m.Name+"/"+m.Version]
	if s == nil {
		s = &inference.ModelStatistics{Name: m.Name, Version: m.Version, InferenceStats: &inference.InferStatistics{
			Success: &inference.StatisticDuration{}, Queue: &inference.StatisticDuration{}}}
		f.stats[m.Name+"/"+m.Version] = s
	}
	s.InferenceCount++
	s.ExecutionCount++
	s.LastInference = uint64(time.Now().UnixMilli())
	s.InferenceStats.Success.Count++
	s.InferenceStats.Success.Ns += 1000
	f.mu.Unlock()
	shape := req.Inputs[0].Shape
	return &inference.ModelInferResponse{
		ModelName: m.Name, ModelVersion: m.Version, Id: req.Id,
		Outputs: []*inference.ModelInferResponse_InferOutputTensor{
			{Name: "OUTPUT0", Datatype: "INT32", Shape: shape},
			{Name: "OUTPUT1", Datatype: "INT32", Shape: shape},
		},
		RawOutputContents: [][]byte{sum, diff},
	}, nil
}
