package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/services/executor"
	"github.com/nereid-io/nereid/services/standalone"
)

// The sequence benchmarks run the standalone server on
// testdata/sequence_repository with a second executor in this process and,
// when redis-server is installed, the router's state in a Redis started for
// the run:
//
//   - a request in the middle of a sequence against a stateless request to
//     a model of the same shape, c=1, alternating (target: p50 <= 1.3x),
//     and its floor: the gRPC chain with one NATS leg more (a forwarder
//     between the proxy and the responder, as the router is between the
//     gateway and the executor) against the chain (reported);
//   - 64 concurrent sequences of 20 requests on the two executors
//     (sequences per second);
//   - Redis commands per request over that run (INFO commandstats before
//     and after; target: well under 1);
//   - a request in the middle of a sequence of a model with a 64-byte
//     implicit state against the same model without state, c=1
//     (target: p50 <= 1.15x);
//   - the same with durable state (state_durability "redis": one Redis
//     write per request, to the run's Redis) against a stateless request
//     of the same shape, c=1 (target: p50 <= 1.6x), and with a 1 MiB state
//     against a stateless 1 MiB request (reported);
//   - the 64-byte durable request against the same sequence request on the
//     model of that shape without state, c=1 (target: p50 <= 1.6x): what
//     durability adds to a sequence request, apart from the router's hop
//     that every sequence request takes;
//   - the floor of any write made before an answer leaves: the stateless
//     request and the sequence request without state each followed by one
//     bare Redis round trip (a 64-byte SET on a connection of its own),
//     against the request alone (reported beside the two durable ratios).

const (
	seqModel       = "seq_bench"
	statelessModel = "stateless_bench"
	seqLength      = 20
	// implicitModel keeps a 64-byte implicit state; implicitPlainModel is
	// the same model without it.
	implicitModel      = "implicit_bench"
	implicitPlainModel = "implicit_plain_bench"
	seqConc            = 64
	// durableModel is implicitModel with durable state, durable1MModel the
	// same with a 1 MiB state; stateless16Model and stateless1MModel are
	// stateless models of their shapes.
	durableModel     = "durable_bench"
	durable1MModel   = "durable_1m_bench"
	stateless16Model = "stateless_16_bench"
	stateless1MModel = "stateless_1m_bench"
	implicit1MModel  = "implicit_1m_bench" // durable1MModel without durability
	elems1M          = 1 << 18             // INT32 in 1 MiB
)

func init() {
	comparisons = append(comparisons,
		comparison{"seq-mid-grpc-unary/c1", "stateless-grpc-unary/c1", latency, 1.30, 0},
		comparison{"routed-chain-grpc-unary/c1", "chain-grpc-unary-vs-routed/c1", latency, 0, 0},
		comparison{"implicit-state-64B-grpc-unary/c1", "seq-no-state-grpc-unary/c1", latency, 1.15, 0},
		comparison{"durable-state-64B-grpc-unary/c1", "stateless-64B-grpc-unary/c1", latency, 1.6, 0},
		comparison{"durable-state-64B-vs-no-state/c1", "seq-no-state-vs-durable/c1", latency, 1.6, 0},
		comparison{"durable-state-1MiB-grpc-unary/c1", "stateless-1MiB-grpc-unary/c1", latency, 0, 0},
		comparison{"durable-state-1MiB-vs-implicit/c1", "implicit-state-1MiB-grpc-unary/c1", latency, 0, 0},
		comparison{"stateless-then-redis-64B/c1", "stateless-64B-vs-redis/c1", latency, 0, 0},
		comparison{"seq-no-state-then-redis/c1", "seq-no-state-vs-redis/c1", latency, 0, 0},
	)
}

type seqFixture struct {
	grpcAddr string
	redis    *redisServer // nil without redis-server
	close    func()
}

var seqOnce struct {
	sync.Mutex
	f   *seqFixture
	err error
}

func seqNereid(b *testing.B) *seqFixture {
	seqOnce.Lock()
	defer seqOnce.Unlock()
	if seqOnce.f == nil && seqOnce.err == nil {
		seqOnce.f, seqOnce.err = startSeqNereid()
		if seqOnce.f != nil {
			fx.mu.Lock()
			fx.onClose = append(fx.onClose, seqOnce.f.close)
			fx.mu.Unlock()
		}
	}
	if seqOnce.err != nil {
		b.Fatalf("starting the sequence fixture: %v", seqOnce.err)
	}
	return seqOnce.f
}

// startSeqNereid starts Redis (if installed), the standalone server with its
// NATS, and a second executor joining it in this process (connected to the
// embedded NATS as the server's own executor is, so that a sequence request
// and a stateless one take the same kind of connections whichever executor
// runs them).
func startSeqNereid() (f *seqFixture, err error) {
	f = &seqFixture{}
	var closers []func()
	f.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	if _, lerr := exec.LookPath("redis-server"); lerr == nil {
		if f.redis, err = startRedis(); err != nil {
			return nil, err
		}
		closers = append(closers, f.redis.stop)
	}
	repo, err := filepath.Abs(filepath.Join("testdata", "sequence_repository"))
	if err != nil {
		return nil, err
	}
	cfg := standalone.DefaultConfig()
	cfg.ModelRepository = repo
	cfg.Models = []string{seqModel, statelessModel, implicitModel, implicitPlainModel, durableModel, durable1MModel, stateless16Model, stateless1MModel, implicit1MModel}
	cfg.Host = "127.0.0.1"
	cfg.HTTPPort, cfg.GRPCPort = 0, 0
	cfg.AllowMetrics = false
	// Sequence requests go through the router over NATS in any case; the
	// stateless requests they are compared with take the same bus, as
	// between the constellation's services.
	cfg.InProcessBus = false
	cfg.Logger = slog.New(slog.DiscardHandler)
	if f.redis != nil {
		cfg.RedisURL = f.redis.url()
	}
	srv, stop, err := runStandalone(cfg)
	if err != nil {
		return nil, err
	}
	closers = append(closers, stop)
	f.grpcAddr = srv.Gateway().GRPCAddr()

	nc, err := srv.Connect(bus.RoleExecutor)
	if err != nil {
		return nil, err
	}
	closers = append(closers, nc.Close)
	ex, err := executor.New(executor.Config{Conn: nc, RepositoryPath: repo, Models: []string{seqModel}, ID: "bench-exec-2",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	ectx, ecancel := context.WithCancel(context.Background())
	edone := make(chan error, 1)
	go func() { edone <- ex.Run(ectx) }()
	closers = append(closers, func() {
		ecancel()
		select {
		case <-edone:
		case <-time.After(10 * time.Second):
		}
	})
	select {
	case <-ex.Ready():
	case err := <-edone:
		return nil, fmt.Errorf("second executor stopped while starting: %v", err)
	case <-time.After(30 * time.Second):
		return nil, errors.New("second executor not ready after 30s")
	}
	for _, m := range cfg.Models {
		if err := waitReady("http://"+srv.Gateway().HTTPAddr()+"/v2/models/"+m+"/ready", 30*time.Second); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func waitReady(url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (last: %v)", url, limit, statusOr(resp, err))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// int32Request is one INT32 value for model, with sequence parameters when
// id is not 0.
func int32Request(model string, v int32, id uint64, start, end bool) (*inference.ModelInferRequest, []byte) {
	raw := binary.LittleEndian.AppendUint32(nil, uint32(v))
	req := &inference.ModelInferRequest{
		ModelName: model,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{{
			Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 1},
		}},
		RawInputContents: [][]byte{raw},
	}
	if id != 0 {
		req.Parameters = map[string]*inference.InferParameter{
			"sequence_id":    {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(id)}},
			"sequence_start": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: start}},
			"sequence_end":   {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: end}},
		}
	}
	return req, raw
}

// midSequence is a worker whose sequence starts when the worker does and
// ends at cleanup: every timed request is one in the middle of a sequence
// (the model echoes it).
func midSequence(c inference.GRPCInferenceServiceClient, base uint64) Worker {
	return func(id int) (Op, func(), error) {
		seq := base + uint64(id)
		start, _ := int32Request(seqModel, 7, seq, true, false)
		if _, err := c.ModelInfer(context.Background(), start); err != nil {
			return nil, nil, fmt.Errorf("sequence start: %w", err)
		}
		req, want := int32Request(seqModel, 7, seq, false, false)
		end, _ := int32Request(seqModel, 7, seq, false, true)
		return func(full bool) error {
				resp, err := c.ModelInfer(context.Background(), req)
				if err != nil {
					return err
				}
				return checkInferResponse(resp, want, full)
			}, func() {
				_, _ = c.ModelInfer(context.Background(), end)
			}, nil
	}
}

// implicitMid is midSequence for the implicit-state models: n INT32 zeros
// in, so the accumulated state, and the answer, stay zeros while the
// state still travels into every request and out of it.
func implicitMid(c inference.GRPCInferenceServiceClient, model string, base uint64, n int) Worker {
	mk := func(seq uint64, start, end bool) *inference.ModelInferRequest {
		return &inference.ModelInferRequest{
			ModelName:        model,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, int64(n)}}},
			RawInputContents: [][]byte{make([]byte, 4*n)},
			Parameters: map[string]*inference.InferParameter{
				"sequence_id":    {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(seq)}},
				"sequence_start": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: start}},
				"sequence_end":   {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: end}},
			},
		}
	}
	return func(id int) (Op, func(), error) {
		seq := base + uint64(id)
		if _, err := c.ModelInfer(context.Background(), mk(seq, true, false)); err != nil {
			return nil, nil, fmt.Errorf("sequence start: %w", err)
		}
		req, want := mk(seq, false, false), make([]byte, 4*n)
		return func(full bool) error {
				resp, err := c.ModelInfer(context.Background(), req)
				if err != nil {
					return err
				}
				return checkInferResponse(resp, want, full)
			}, func() {
				_, _ = c.ModelInfer(context.Background(), mk(seq, false, true))
			}, nil
	}
}

// sequences is a worker that runs whole sequences of seqLength requests one
// after the other (START, middles, END), each with a new id.
func sequences(c inference.GRPCInferenceServiceClient, base uint64) Worker {
	return func(id int) (Op, func(), error) {
		var k uint64
		seq := func() uint64 { return base + uint64(id)<<24 + k/seqLength + 1 }
		return func(full bool) error {
				pos := k % seqLength
				v := int32(pos + 1)
				req, _ := int32Request(seqModel, v, seq(), pos == 0, pos == seqLength-1)
				k++
				resp, err := c.ModelInfer(context.Background(), req)
				if err != nil {
					return err
				}
				want := v
				if pos == 0 {
					want++ // START adds 1
				}
				return checkInferResponse(resp, binary.LittleEndian.AppendUint32(nil, uint32(want)), full)
			}, func() {
				if pos := k % seqLength; pos != 0 { // end the open sequence
					req, _ := int32Request(seqModel, 1, seq(), false, true)
					_, _ = c.ModelInfer(context.Background(), req)
				}
			}, nil
	}
}

// seqBase gives each benchmark run its own range of sequence ids.
var seqBase struct {
	sync.Mutex
	next uint64
}

func nextBase() uint64 {
	seqBase.Lock()
	defer seqBase.Unlock()
	seqBase.next += 1 << 40
	return seqBase.next
}

// BenchmarkSequence measures the sequence paths (see the top of this file).
func BenchmarkSequence(b *testing.B) {
	b.Run("mid-vs-stateless/c=1", func(b *testing.B) {
		f := seqNereid(b)
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, f.grpcAddr))
		stateless, _ := int32Request(statelessModel, 7, 0, false, false)
		measurePair(b, "stateless-grpc-unary/c1", "seq-mid-grpc-unary/c1", 1, warmSmall,
			InferUnary(c, stateless), midSequence(c, nextBase()))
	})
	// The floor under that ratio: the gRPC chain with the sequence path's
	// extra NATS leg (Baselines.RoutedGRPCAddr) against the chain.
	b.Run("routed-chain-vs-chain/c=1", func(b *testing.B) {
		bs := fx.baselines(b)
		req := InferRequest(FP32Payload(small))
		measurePair(b, "chain-grpc-unary-vs-routed/c1", "routed-chain-grpc-unary/c1", 1, warmSmall,
			InferUnary(inference.NewGRPCInferenceServiceClient(fx.conn(b, bs.ChainGRPCAddr)), req),
			InferUnary(inference.NewGRPCInferenceServiceClient(fx.conn(b, bs.RoutedGRPCAddr)), req))
	})
	b.Run("implicit-state-vs-none/c=1", func(b *testing.B) {
		f := seqNereid(b)
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, f.grpcAddr))
		measurePair(b, "seq-no-state-grpc-unary/c1", "implicit-state-64B-grpc-unary/c1", 1, warmSmall,
			implicitMid(c, implicitPlainModel, nextBase(), 16), implicitMid(c, implicitModel, nextBase(), 16))
	})
	// Durable state: the run's Redis is loopback, without persistence.
	durableClient := func(b *testing.B) inference.GRPCInferenceServiceClient {
		f := seqNereid(b)
		if f.redis == nil {
			b.Skip("redis-server is not installed: durable state would stay in memory")
		}
		return inference.NewGRPCInferenceServiceClient(fx.conn(b, f.grpcAddr))
	}
	// durable measures a durable request against a stateless request of
	// its shape.
	durable := func(b *testing.B, baseKey, key, durableModel, statelessModel string, n, warmup int) {
		c := durableClient(b)
		stateless := &inference.ModelInferRequest{ModelName: statelessModel,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, int64(n)}}},
			RawInputContents: [][]byte{make([]byte, 4*n)}}
		measurePair(b, baseKey, key, 1, warmup, InferUnary(c, stateless), implicitMid(c, durableModel, nextBase(), n))
	}
	// durableVsSequence measures a durable request against the same
	// sequence request to a model without durability: both take the
	// router's hop, so the ratio is durability's own cost.
	durableVsSequence := func(b *testing.B, baseKey, key, plainModel, durableModel string, n, warmup int) {
		c := durableClient(b)
		measurePair(b, baseKey, key, 1, warmup,
			implicitMid(c, plainModel, nextBase(), n), implicitMid(c, durableModel, nextBase(), n))
	}
	b.Run("durable-state-vs-stateless/c=1", func(b *testing.B) {
		durable(b, "stateless-64B-grpc-unary/c1", "durable-state-64B-grpc-unary/c1", durableModel, stateless16Model, 16, warmSmall)
	})
	// Against the model of the same shape without state.
	b.Run("durable-state-vs-no-state/c=1", func(b *testing.B) {
		durableVsSequence(b, "seq-no-state-vs-durable/c1", "durable-state-64B-vs-no-state/c1", implicitPlainModel, durableModel, 16, warmSmall)
	})
	b.Run("durable-state-1MiB-vs-stateless/c=1", func(b *testing.B) {
		durable(b, "stateless-1MiB-grpc-unary/c1", "durable-state-1MiB-grpc-unary/c1", durable1MModel, stateless1MModel, elems1M, warmLarge)
	})
	// What durability adds at 1 MiB: the same sequence without it (the
	// megabyte rides NATS through the router either way).
	b.Run("durable-state-1MiB-vs-implicit/c=1", func(b *testing.B) {
		durableVsSequence(b, "implicit-state-1MiB-grpc-unary/c1", "durable-state-1MiB-vs-implicit/c1", implicit1MModel, durable1MModel, elems1M, warmLarge)
	})
	// The floor under the durable ratios: each request followed by one
	// Redis round trip (a 64-byte SET, Redis idle in between as it is
	// between durable writes), against the request alone.
	b.Run("redis-floor-vs-stateless/c=1", func(b *testing.B) {
		c := durableClient(b)
		stateless := &inference.ModelInferRequest{ModelName: stateless16Model,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}}},
			RawInputContents: [][]byte{make([]byte, 64)}}
		measurePair(b, "stateless-64B-vs-redis/c1", "stateless-then-redis-64B/c1", 1, warmSmall,
			InferUnary(c, stateless), thenRedisSet(InferUnary(c, stateless), seqNereid(b).redis.addr(), 64))
	})
	b.Run("redis-floor-vs-no-state/c=1", func(b *testing.B) {
		c := durableClient(b)
		measurePair(b, "seq-no-state-vs-redis/c1", "seq-no-state-then-redis/c1", 1, warmSmall,
			implicitMid(c, implicitPlainModel, nextBase(), 16), thenRedisSet(implicitMid(c, implicitPlainModel, nextBase(), 16), seqNereid(b).redis.addr(), 64))
	})
	b.Run(fmt.Sprintf("%dx%d-on-2-executors", seqConc, seqLength), func(b *testing.B) {
		f := seqNereid(b)
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, f.grpcAddr))
		// Whole sequences: round b.N up to every worker's share ending
		// a sequence, give or take the workers' uneven shares.
		n := max(b.N, seqConc*seqLength)
		before, err := f.redis.commands()
		if err != nil {
			b.Fatal(err)
		}
		res, err := Drive(b, n, seqConc, seqLength, sequences(c, nextBase()))
		if err != nil {
			b.Fatalf("sequences: %v", err)
		}
		after, err := f.redis.commands()
		if err != nil {
			b.Fatal(err)
		}
		key := fmt.Sprintf("seq-%dx%d-2exec/c%d", seqConc, seqLength, seqConc)
		report(b, key, res, false)
		seqPerSec := res.PerSec / seqLength
		b.ReportMetric(seqPerSec, "sequences/s")
		requests := n + seqConc*seqLength // timed + warm-up
		note := fmt.Sprintf("%s: %.0f sequences/s (%.0f req/s, p50 %s, p99 %s)", key, seqPerSec, res.PerSec, dur(res.P50), dur(res.P99))
		if f.redis != nil {
			total, scripts := after.total-before.total, after.scripts-before.scripts
			perReq, scriptsPerReq := float64(total)/float64(requests), float64(scripts)/float64(requests)
			b.ReportMetric(perReq, "redis-cmds/req")
			b.ReportMetric(scriptsPerReq, "redis-roundtrips/req")
			note += fmt.Sprintf("; Redis over %d requests: %d commands (%.3f per request, Lua-internal commands included), %d scripts/round trips (%.3f per request; target well under 1)",
				requests, total, perReq, scripts, scriptsPerReq)
		} else {
			note += "; Redis not measured (redis-server not installed: memory store)"
		}
		setNote(key, note)
	})
}

// notes are extra summary lines, by key (the last run of a benchmark wins).
var notes = struct {
	sync.Mutex
	m     map[string]string
	order []string
}{m: map[string]string{}}

func setNote(key, line string) {
	notes.Lock()
	defer notes.Unlock()
	if _, ok := notes.m[key]; !ok {
		notes.order = append(notes.order, key)
	}
	notes.m[key] = line
}

// summaryNotes returns the notes in the order first set (printSummary
// prints them after the ratios).
func summaryNotes() []string {
	notes.Lock()
	defer notes.Unlock()
	out := make([]string, 0, len(notes.order))
	for _, k := range notes.order {
		out = append(out, notes.m[k])
	}
	return out
}

// redisServer is a redis-server started for the run, without persistence.
type redisServer struct {
	port int
	cmd  *exec.Cmd
}

func startRedis() (*redisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "nereid-bench-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &redisServer{port: port, cmd: cmd}
	for i := 0; ; i++ {
		out, err := exec.Command("redis-cli", "-p", strconv.Itoa(port), "ping").Output()
		if err == nil && strings.TrimSpace(string(out)) == "PONG" {
			return r, nil
		}
		if i > 100 {
			r.stop()
			return nil, fmt.Errorf("redis-server did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

func (r *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

func (r *redisServer) stop() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// commandCount is what INFO commandstats says so far: every command's
// calls (commands run by Lua scripts included), and the script calls
// (EVAL, EVALSHA: one round trip each), INFO itself left out.
type commandCount struct{ total, scripts int64 }

func (r *redisServer) commands() (commandCount, error) {
	var c commandCount
	if r == nil {
		return c, nil
	}
	out, err := exec.Command("redis-cli", "-p", strconv.Itoa(r.port), "INFO", "commandstats").Output()
	if err != nil {
		return c, fmt.Errorf("redis-cli INFO commandstats: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			continue
		}
		switch cmd := strings.TrimPrefix(name, "cmdstat_"); cmd {
		case "info":
		case "eval", "evalsha":
			c.scripts += n
			c.total += n
		default:
			c.total += n
		}
	}
	return c, nil
}

// thenRedisSet is w followed, in each op, by one Redis round trip: a SET
// of a size-byte value over a TCP connection of the worker's own (RESP by
// hand), its answer checked; full runs read the value back.
func thenRedisSet(w Worker, addr string, size int) Worker {
	return func(id int) (Op, func(), error) {
		op, cleanup, err := w(id)
		if err != nil {
			return nil, nil, err
		}
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			if cleanup != nil {
				cleanup()
			}
			return nil, nil, fmt.Errorf("dialing Redis: %w", err)
		}
		key := fmt.Sprintf("nereid-bench-rtt-%d", id)
		val := strings.Repeat("v", size)
		set := []byte(fmt.Sprintf("*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, size, val))
		get := []byte(fmt.Sprintf("*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(key), key))
		want := fmt.Sprintf("$%d\r\n%s\r\n", size, val)
		rd := bufio.NewReader(nc)
		return func(full bool) error {
				if err := op(full); err != nil {
					return err
				}
				if _, err := nc.Write(set); err != nil {
					return err
				}
				line, err := rd.ReadSlice('\n')
				if err != nil {
					return err
				}
				if string(line) != "+OK\r\n" {
					return fmt.Errorf("redis SET answered %q", line)
				}
				if !full {
					return nil
				}
				if _, err := nc.Write(get); err != nil {
					return err
				}
				got := make([]byte, len(want))
				if _, err := io.ReadFull(rd, got); err != nil {
					return err
				}
				if string(got) != want {
					return fmt.Errorf("redis GET answered %q", got)
				}
				return nil
			}, func() {
				_ = nc.Close()
				if cleanup != nil {
					cleanup()
				}
			}, nil
	}
}

// TestThenRedisSet drives the durable floor's worker against a real
// redis-server: the inner op runs once per op, and full ops read the value
// back.
func TestThenRedisSet(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed")
	}
	r, err := startRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer r.stop()
	var inner int
	count := func(int) (Op, func(), error) {
		return func(bool) error { inner++; return nil }, nil, nil
	}
	if _, err := Drive(nil, 5, 1, 2, thenRedisSet(count, r.addr(), 64)); err != nil {
		t.Fatal(err)
	}
	if inner != 7 {
		t.Errorf("inner op ran %d times, want 7 (2 warm-up, 5 timed)", inner)
	}
	out, err := exec.Command("redis-cli", "-p", strconv.Itoa(r.port), "STRLEN", "nereid-bench-rtt-0").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "64" {
		t.Errorf("the worker's key holds %s bytes, want 64", got)
	}
}
