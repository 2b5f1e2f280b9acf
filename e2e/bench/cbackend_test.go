package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/services/standalone"
)

// Triton C backends: the identity test backend written in C against the
// TRITONBACKEND API (services/executor/internal/cbackend/testdata), compiled
// here with the system compiler, served next to the built-in Go identity
// with the same configuration, doing the same work (the parameter "plain":
// the C backend sets no response parameter and counts no custom metric,
// as the Go identity). 64 B at c=1 compares the two backends; 64 MiB
// in shared memory compares the C path with a memcpy.

func init() {
	comparisons = append(comparisons,
		comparison{"nereid-c-identity-64B/c1", "nereid-go-identity-64B/c1", latency, 1.05, 0},
		// >= 0.5x memcpy's GB/s is <= 2x its time. The C identity's one
		// copy is the C library's memcpy, the baseline here.
		comparison{"nereid-c-shm-64MiB/vs-memcpy", "memcpy-64MiB-c", duration, 2.0, 0},
		// What that memcpy costs against Go's copy on this machine.
		comparison{"memcpy-64MiB-c/vs-go", "memcpy-64MiB-go", duration, 0, 0},
	)
}

const cModelConfig = `name: %q
backend: %q
max_batch_size: 8
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [-1] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [-1] }]
dynamic_batching { }
instance_group [{ count: 2, kind: KIND_CPU }]
parameters { key: "plain" value { string_value: "true" } }
`

var cOnce struct {
	sync.Mutex
	s   *shmServer
	err error
}

// startCBackends builds the stub libtritonserver.so and the C identity
// backend, writes a repository with identity_go (the built-in backend) and
// identity_c (the C one), and starts a standalone server over it with both
// shared-memory regions registered.
func startCBackends(size int) (*shmServer, error) {
	dir, err := os.MkdirTemp("", "nereid-bench-cbackend-")
	if err != nil {
		return nil, err
	}
	libs := dir
	// With NEREID_TEST_BACKENDS set, the libraries are built there once and
	// reused, as the cbackend package's tests do: a run under valgrind then
	// starts no child process (callgrind aborts on its SIGCHLD).
	if d := os.Getenv("NEREID_TEST_BACKENDS"); d != "" {
		libs = filepath.Join(d, "e2e-bench")
	}
	if _, err := os.Stat(filepath.Join(libs, "built")); err != nil {
		if err := buildCIdentity(libs); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	stub := filepath.Join(libs, "lib", "libtritonserver.so")
	repo := filepath.Join(dir, "models")
	for name, backend := range map[string]string{"identity_go": "identity", "identity_c": "nidentity"} {
		if err := os.MkdirAll(filepath.Join(repo, name, "1"), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), fmt.Appendf(nil, cModelConfig, name, backend), 0o644); err != nil {
			return nil, err
		}
	}
	s, err := startShmServerWith(size, repo, []string{"identity_go", "identity_c"}, func(cfg *standalone.Config) {
		cfg.BackendDirectory = filepath.Join(libs, "backends")
		cfg.ServerLibrary = stub
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stop := s.close
	s.close = func() { stop(); os.RemoveAll(dir) }
	return s, nil
}

// buildCIdentity compiles the stub libtritonserver.so and the C identity
// backend into libs (lib/ and backends/nidentity/), marked built.
func buildCIdentity(libs string) error {
	root, err := constellation.Root()
	if err != nil {
		return err
	}
	src := filepath.Join(root, "services", "executor", "internal", "cbackend")
	stub := filepath.Join(libs, "lib", "libtritonserver.so")
	lib := filepath.Join(libs, "backends", "nidentity", "libtriton_nidentity.so")
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-Wl,-soname,libtritonserver.so", "-o", stub, filepath.Join(src, "stub", "tritonserver_stub.c")},
		{"-O2", "-shared", "-fPIC", "-I" + filepath.Join(src, "include"), "-o", lib,
			filepath.Join(src, "testdata", "backends", "identity.c"), "-L" + filepath.Dir(stub), "-ltritonserver"},
	} {
		out := args[slices.Index(args, "-o")+1]
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		if b, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("cc: %v\n%s", err, b)
		}
	}
	return os.WriteFile(filepath.Join(libs, "built"), nil, 0o644)
}

func cFixture(b testing.TB) *shmServer {
	cOnce.Lock()
	defer cOnce.Unlock()
	if cOnce.s == nil && cOnce.err == nil {
		cOnce.s, cOnce.err = startCBackends(shmSize)
		if cOnce.s != nil {
			fx.mu.Lock()
			fx.onClose = append(fx.onClose, cOnce.s.close)
			fx.mu.Unlock()
		}
	}
	if cOnce.err != nil {
		b.Fatalf("starting the server with C backends: %v", cOnce.err)
	}
	return cOnce.s
}

func modelRequest(model string, payload []byte) *inference.ModelInferRequest {
	r := InferRequest(payload)
	r.ModelName = model
	return r
}

// BenchmarkCBackend measures the C identity backend against the built-in
// Go identity (64 B, gRPC unary, c=1) and, in shared memory, against the C
// library's memcpy (the copy the C identity makes), and that memcpy against
// Go's copy.
func BenchmarkCBackend(b *testing.B) {
	b.Run("64B/c-vs-go", func(b *testing.B) {
		s := cFixture(b)
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, s.grpc))
		payload := FP32Payload(small)
		measurePair(b, "nereid-go-identity-64B/c1", "nereid-c-identity-64B/c1", 1, warmSmall,
			InferUnary(c, modelRequest("identity_go", payload)), InferUnary(c, modelRequest("identity_c", payload)))
	})
	b.Run("64MiB/c-shm-vs-memcpy", func(b *testing.B) {
		s := cFixture(b)
		b.SetBytes(shmSize)
		measurePair(b, "memcpy-64MiB-c", "nereid-c-shm-64MiB/vs-memcpy", 1, warmLarge,
			CMemcpy(shmSize), shmInferModel(inference.NewGRPCInferenceServiceClient(fx.conn(b, s.grpc)), s, "identity_c"))
		if r, ok := lookup("nereid-c-shm-64MiB/vs-memcpy"); ok && r.P50 > 0 {
			b.ReportMetric(float64(shmSize)/r.P50.Seconds()/1e9, "shm-GB/s")
		}
	})
	b.Run("64MiB/c-memcpy-vs-go-copy", func(b *testing.B) {
		b.SetBytes(shmSize)
		measurePair(b, "memcpy-64MiB-go", "memcpy-64MiB-c/vs-go", 1, warmLarge, Memcpy(shmSize), CMemcpy(shmSize))
	})
}

// TestCBackendPaths keeps the benchmark's workers working between runs.
func TestCBackendPaths(t *testing.T) {
	s, err := startCBackends(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	cc, err := DialGRPC(s.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := inference.NewGRPCInferenceServiceClient(cc)
	payload := FP32Payload(small)
	for _, m := range []string{"identity_go", "identity_c"} {
		if _, err := Drive(nil, 5, 1, 2, InferUnary(c, modelRequest(m, payload))); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	if _, err := Drive(nil, 5, 1, 2, shmInferModel(c, s, "identity_c")); err != nil {
		t.Fatal(err)
	}
	// The C library's memcpy baseline copies every byte (its full runs
	// compare them).
	if _, err := Drive(nil, 2, 1, 1, CMemcpy(1<<20)); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCBackendAlone drives the two identities of BenchmarkCBackend's
// 64-byte pair each on its own, one request at a time, so that the whole
// process's costs per request (client, gateway and executor together)
// compare between them: allocations (-benchmem), goroutine wake-ups (the
// scheduler's runnable-to-running transitions), calls into C, and under
// callgrind instructions (a run of N minus a run of M requests).
func BenchmarkCBackendAlone(b *testing.B) {
	for _, model := range []string{"identity_go", "identity_c"} {
		b.Run(model, func(b *testing.B) {
			s := cFixture(b)
			c := inference.NewGRPCInferenceServiceClient(fx.conn(b, s.grpc))
			op, _, err := InferUnary(c, modelRequest(model, FP32Payload(small)))(0)
			if err != nil {
				b.Fatal(err)
			}
			for range warmSmall {
				if err := op(true); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			before, calls := readSched(), runtime.NumCgoCall()
			for range b.N {
				if err := op(false); err != nil {
					b.Fatal(err)
				}
			}
			after := readSched()
			b.ReportMetric(float64(after.wakeups-before.wakeups)/float64(b.N), "wakeups/op")
			b.ReportMetric(float64(runtime.NumCgoCall()-calls)/float64(b.N), "cgo-calls/op")
		})
	}
}
