package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/shm"
	"github.com/nereid-io/nereid/services/standalone"
)

// Shared memory: a 64 MiB identity inference whose input and
// output live in registered system shared memory, against a plain memcpy
// of 64 MiB and against the same tensor over HTTP binary and gRPC, each
// pair measured in alternation in the same run. The executor maps the
// regions once (pre-faulted) and keeps them, so a request costs its small
// control messages plus one copy, input region to output region.

const shmSize = 64 << 20

func init() {
	comparisons = append(comparisons,
		// >= 0.5x memcpy's GB/s is <= 2x its time.
		comparison{"nereid-shm-64MiB/vs-memcpy", "memcpy-64MiB-pair", duration, 2.0, 0},
		// >= 6x faster than HTTP binary is <= 1/6 of its time.
		comparison{"nereid-shm-64MiB/vs-http", "nereid-http-binary-64MiB", duration, 1.0 / 6, 0},
		comparison{"nereid-shm-64MiB/vs-grpc", "nereid-grpc-unary-64MiB", duration, 0, 0},
	)
}

// shmServer is a standalone server that lets clients register shared
// memory (the suite's shared one does not), with two regions registered:
// the input (filled with the payload) and the output.
type shmServer struct {
	http, grpc string
	key        string
	obj        *shm.Mapping
	payload    []byte
	close      func()
}

var shmOnce struct {
	sync.Mutex
	s   *shmServer
	err error
}

func startShmServer(size int) (*shmServer, error) {
	repo, err := RepoDir()
	if err != nil {
		return nil, err
	}
	return startShmServerWith(size, repo, []string{Model}, nil)
}

// startShmServerWith is startShmServer over another repository and models,
// with setup changing the server's configuration.
func startShmServerWith(size int, repo string, models []string, setup func(*standalone.Config)) (*shmServer, error) {
	cfg := standalone.DefaultConfig()
	cfg.ModelRepository = repo
	cfg.Models = models
	cfg.Host = "127.0.0.1"
	cfg.HTTPPort, cfg.GRPCPort = 0, 0
	cfg.AllowMetrics = false
	cfg.AllowClientShm = true
	cfg.Logger = slog.New(slog.DiscardHandler)
	if setup != nil {
		setup(&cfg)
	}
	srv, stop, err := runStandalone(cfg, models...)
	if err != nil {
		return nil, err
	}
	s := &shmServer{http: "http://" + srv.Gateway().HTTPAddr(), grpc: srv.Gateway().GRPCAddr(), payload: FP32Payload(size)}
	// The client's object: input region at 0, output region after it.
	// One object per server: the shared-memory and C backend benchmarks
	// each start one of the same size in this process.
	s.key = fmt.Sprintf("/nereid-bench-%d-%d-%d", os.Getpid(), shmObjects.Add(1), size)
	if s.obj, err = shm.Create(s.key, 2*size); err != nil {
		stop()
		return nil, err
	}
	copy(s.obj.Data, s.payload)
	s.close = func() {
		stop()
		_ = s.obj.Close()
		_ = shm.Unlink(s.key)
	}
	for i, name := range []string{"bench_input", "bench_output"} {
		body := fmt.Sprintf(`{"key":%q,"offset":%d,"byte_size":%d}`, s.key, i*size, size)
		resp, err := http.Post(s.http+"/v2/systemsharedmemory/region/"+name+"/register", "application/json", strings.NewReader(body))
		if err != nil {
			s.close()
			return nil, err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			s.close()
			return nil, fmt.Errorf("registering %s: %s", name, resp.Status)
		}
	}
	return s, nil
}

// shmObjects numbers the client objects of this process.
var shmObjects atomic.Int64

func shmFixture(b testing.TB) *shmServer {
	shmOnce.Lock()
	defer shmOnce.Unlock()
	if shmOnce.s == nil && shmOnce.err == nil {
		shmOnce.s, shmOnce.err = startShmServer(shmSize)
		if shmOnce.s != nil {
			fx.mu.Lock()
			fx.onClose = append(fx.onClose, shmOnce.s.close)
			fx.mu.Unlock()
		}
	}
	if shmOnce.err != nil {
		b.Fatalf("starting the standalone server with shared memory: %v", shmOnce.err)
	}
	return shmOnce.s
}

// ShmInfer sends the shared-memory request over gRPC (a few hundred bytes)
// and checks the output region: all of it while warming up, a sample (and
// that the answer carries no tensor bytes) in the timed loop. The output
// region is not cleared between requests: a check that could pass on stale
// bytes would only be a check of the warm-up.
func ShmInfer(c inference.GRPCInferenceServiceClient, s *shmServer) Worker {
	return shmInferModel(c, s, Model)
}

func shmInferModel(c inference.GRPCInferenceServiceClient, s *shmServer, model string) Worker {
	size := len(s.payload)
	params := func(region string) map[string]*inference.InferParameter {
		return shm.Params(shm.Ref{Region: region, ByteSize: uint64(size)})
	}
	req := &inference.ModelInferRequest{
		ModelName: model,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{{
			Name: "INPUT0", Datatype: "FP32", Shape: []int64{1, int64(size / 4)}, Parameters: params("bench_input")}},
		Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0", Parameters: params("bench_output")}},
	}
	out := s.obj.Data[size : 2*size]
	return func(int) (Op, func(), error) {
		return func(full bool) error {
			if full {
				clear(out)
			}
			resp, err := c.ModelInfer(context.Background(), req)
			if err != nil {
				return err
			}
			if raw := resp.GetRawOutputContents(); len(raw) != 1 || len(raw[0]) != 0 {
				return fmt.Errorf("answer carries tensor bytes for an output in shared memory")
			}
			return sameBytes(out, s.payload, full)
		}, nil, nil
	}
}

// Memcpy copies 64 MiB between two buffers faulted in beforehand: the
// baseline of the shared-memory path, measured in alternation with it.
func Memcpy(size int) Worker { return copying(size, func(dst, src []byte) { copy(dst, src) }) }

// BenchmarkSharedMemory measures the 64 MiB identity inference in shared
// memory against memcpy, HTTP binary and gRPC.
func BenchmarkSharedMemory(b *testing.B) {
	// Each pair records its own shared-memory number: the path runs a
	// little slower beside 64 MiB HTTP or gRPC transfers (they evict the
	// caches it uses), and a ratio must compare what ran together.
	report := func(b *testing.B, key string) {
		if r, ok := lookup(key); ok && r.P50 > 0 {
			b.ReportMetric(float64(shmSize)/r.P50.Seconds()/1e9, "shm-GB/s")
		}
	}
	b.Run("64MiB/shm-vs-memcpy", func(b *testing.B) {
		s := shmFixture(b)
		b.SetBytes(shmSize)
		measurePair(b, "memcpy-64MiB-pair", "nereid-shm-64MiB/vs-memcpy", 1, warmLarge,
			Memcpy(shmSize), ShmInfer(inference.NewGRPCInferenceServiceClient(fx.conn(b, s.grpc)), s))
		if r, ok := lookup("memcpy-64MiB-pair"); ok && r.P50 > 0 {
			b.ReportMetric(float64(shmSize)/r.P50.Seconds()/1e9, "memcpy-GB/s")
		}
		report(b, "nereid-shm-64MiB/vs-memcpy")
	})
	b.Run("64MiB/shm-vs-http-binary", func(b *testing.B) {
		s := shmFixture(b)
		b.SetBytes(shmSize)
		body, header := HTTPBinaryRequest(s.payload)
		measurePair(b, "nereid-http-binary-64MiB", "nereid-shm-64MiB/vs-http", 1, warmLarge,
			HTTPPost(fx.httpClient(), s.http+InferPath, header, body, BinaryInferCheck(s.payload)),
			ShmInfer(inference.NewGRPCInferenceServiceClient(fx.conn(b, s.grpc)), s))
		report(b, "nereid-shm-64MiB/vs-http")
	})
	b.Run("64MiB/shm-vs-grpc", func(b *testing.B) {
		s := shmFixture(b)
		b.SetBytes(shmSize)
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, s.grpc))
		measurePair(b, "nereid-grpc-unary-64MiB", "nereid-shm-64MiB/vs-grpc", 1, warmLarge,
			InferUnary(c, InferRequest(s.payload)), ShmInfer(c, s))
		report(b, "nereid-shm-64MiB/vs-grpc")
	})
}

// TestSharedMemoryPath checks the benchmark's shared-memory worker against
// a real server with a small tensor, so that `go test` keeps the path
// working between benchmark runs.
func TestSharedMemoryPath(t *testing.T) {
	s, err := startShmServer(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	cc, err := DialGRPC(s.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := Drive(nil, 5, 1, 2, ShmInfer(inference.NewGRPCInferenceServiceClient(cc), s)); err != nil {
		t.Fatal(err)
	}
	if _, err := Drive(nil, 2, 1, 1, Memcpy(1<<20)); err != nil {
		t.Fatal(err)
	}
}
