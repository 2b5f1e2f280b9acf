// Package sharedmemory holds the end-to-end tests of Triton's shared memory
// extension: Triton's L0_shared_memory scenarios over HTTP and gRPC against
// the standalone server (gateway, executor, shm-registry in one process),
// deferred unregister while requests are in flight, register/unregister
// racing inference, and the constellation of separate processes with the
// registry on Redis, restarted.
package sharedmemory

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/shm"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/standalone"
)

var (
	page    = uint64(os.Getpagesize())
	objects atomic.Int64
)

// server is the standalone composition running in this test process.
type server struct {
	http, grpc string
	srv        *standalone.Server
}

func startServer(t *testing.T, allowShm bool) *server {
	t.Helper()
	repo, err := filepath.Abs("testdata/models")
	if err != nil {
		t.Fatal(err)
	}
	cfg := standalone.DefaultConfig()
	cfg.ModelRepository = repo
	cfg.Host = "127.0.0.1"
	cfg.HTTPPort, cfg.GRPCPort = 0, 0
	cfg.AllowMetrics = false
	cfg.AllowClientShm = allowShm
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv, err := standalone.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("standalone server did not stop")
		}
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("standalone server stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("standalone server not ready")
	}
	s := &server{http: "http://" + srv.Gateway().HTTPAddr(), grpc: srv.Gateway().GRPCAddr(), srv: srv}
	waitReady(t, s.http, "simple", "identity", "slow")
	return s
}

func waitReady(t *testing.T, base string, models ...string) {
	t.Helper()
	for _, m := range models {
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := http.Get(base + "/v2/models/" + m + "/ready")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("model %s not ready", m)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (s *server) clients(t *testing.T) []client {
	return []client{&httpClient{base: s.http}, newGRPCClient(t, s.grpc)}
}

// object is a client's shared-memory object, removed when the test ends.
func object(t *testing.T, size uint64) (string, *shm.Mapping) {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if len(name) > 180 {
		name = name[:180]
	}
	key := fmt.Sprintf("/nereid-e2e-%d-%d-%s", os.Getpid(), objects.Add(1), name)
	m, err := shm.Create(key, int(size))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(); _ = shm.Unlink(key) })
	return key, m
}

func ints(f func(i int) int32) []byte {
	b := make([]byte, 0, 64)
	for i := range 16 {
		b = binary.LittleEndian.AppendUint32(b, uint32(f(i)))
	}
	return b
}

var (
	in0  = ints(func(i int) int32 { return int32(i) })
	in1  = ints(func(i int) int32 { return 1 })
	sum  = ints(func(i int) int32 { return int32(i) + 1 })
	diff = ints(func(i int) int32 { return int32(i) - 1 })
)

func slowIn(r *shm.Ref) tensorIn {
	return tensorIn{name: "INPUT0", dt: "INT32", shape: []int64{16}, shm: r}
}

func ref(region string, offset, size uint64) *shm.Ref {
	return &shm.Ref{Region: region, Offset: offset, ByteSize: size}
}

func simpleIn(name string, r *shm.Ref, data []byte) tensorIn {
	return tensorIn{name: name, dt: "INT32", shape: []int64{1, 16}, shm: r, data: data}
}

// regions registers input0_data, input1_data, output0_data, output1_data
// (64 bytes each, one page apart) in one object holding the inputs, as
// Triton's simple shm client does, and returns the object.
func simpleRegions(t *testing.T, c client) *shm.Mapping {
	t.Helper()
	key, m := object(t, 4*page)
	copy(m.Data, in0)
	copy(m.Data[page:], in1)
	for i, name := range []string{"input0_data", "input1_data", "output0_data", "output1_data"} {
		must(t, c.register(name, key, uint64(i)*page, 64))
	}
	return m
}

// inferSimple runs simple with both inputs and outputs in shared memory and
// checks the outputs written there.
func inferSimple(t *testing.T, c client, m *shm.Mapping) {
	t.Helper()
	clear(m.Data[2*page : 4*page])
	r, err := c.infer("simple",
		[]tensorIn{simpleIn("INPUT0", ref("input0_data", 0, 64), nil), simpleIn("INPUT1", ref("input1_data", 0, 64), nil)},
		[]tensorOut{{name: "OUTPUT0", shm: ref("output0_data", 0, 64)}, {name: "OUTPUT1", shm: ref("output1_data", 0, 64)}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Data[2*page:2*page+64], sum) || !bytes.Equal(m.Data[3*page:3*page+64], diff) {
		t.Fatalf("outputs in shared memory: %v / %v", m.Data[2*page:2*page+64], m.Data[3*page:3*page+64])
	}
	for _, o := range []string{"OUTPUT0", "OUTPUT1"} {
		if len(r.data[o]) != 0 {
			t.Fatalf("%s in shared memory came back with %d bytes of data", o, len(r.data[o]))
		}
	}
	if c.proto() == "http" {
		// As Triton answers: no parameters on an output in shared memory
		// (the client parsed the response as Triton's C++ client does).
		for _, o := range []string{"OUTPUT0", "OUTPUT1"} {
			if p := r.params[o]; p != nil {
				t.Fatalf("%s parameters: %v", o, p)
			}
		}
	}
}

func names(rs []region) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

func wantRegions(t *testing.T, c client, want ...string) {
	t.Helper()
	rs, err := c.status("")
	must(t, err)
	if got := names(rs); fmt.Sprint(got) != fmt.Sprint(want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("regions %v, want %v", got, want)
	}
}

// TestDisabledByDefault is test_client_shm_disabled_by_default: without
// --allow-client-shm register and unregister fail, status answers empty.
func TestDisabledByDefault(t *testing.T) {
	s := startServer(t, false)
	for _, c := range s.clients(t) {
		t.Run(c.proto(), func(t *testing.T) {
			key, _ := object(t, page)
			wantErr(t, c, c.register("r", key, 0, 64), tritonerr.Unsupported,
				"Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.")
			wantErr(t, c, c.unregister("r"), tritonerr.Unsupported, "Client shared memory is disabled.")
			wantErr(t, c, c.registerCuda("c", make([]byte, 64), 0, 64), tritonerr.Unsupported, "Client shared memory is disabled.")
			wantErr(t, c, c.unregisterCuda(""), tritonerr.Unsupported, "Client shared memory is disabled.")
			wantRegions(t, c)
			cs, err := c.cudaStatus("")
			must(t, err)
			if len(cs) != 0 {
				t.Fatalf("cuda status: %v", cs)
			}
			exts, err := c.extensions()
			must(t, err)
			if !slices.Contains(exts, "system_shared_memory") || !slices.Contains(exts, "cuda_shared_memory") {
				t.Fatalf("extensions %v", exts)
			}
		})
	}
}

// TestSharedMemory ports L0_shared_memory's tests, each over HTTP and gRPC.
func TestSharedMemory(t *testing.T) {
	s := startServer(t, true)
	for _, c := range s.clients(t) {
		t.Run(c.proto(), func(t *testing.T) {
			// Every test starts and ends with no region registered.
			run := func(name string, body func(t *testing.T)) {
				t.Run(name, func(t *testing.T) {
					defer func() { must(t, c.unregister("")) }()
					body(t)
				})
			}
			run("test_invalid_create_shm", func(t *testing.T) {
				wantErr(t, c, c.register("dummy_data", "/nereid-no-such-key", 0, 64), tritonerr.Internal,
					"Unable to open shared memory region: '/nereid-no-such-key'")
				wantRegions(t, c)
			})
			if c.proto() == "grpc" {
				// Triton's gRPC front end checks no name: its manager's
				// checks apply (python_grpc_aio_test.py), and a region that
				// passes them is refused, as no region can have the empty
				// name here.
				run("register without a name", func(t *testing.T) {
					wantErr(t, c, c.register("", "/nereid-no-such-key", 0, 64), tritonerr.Internal,
						"Unable to open shared memory region: '/nereid-no-such-key'")
					key, _ := object(t, page)
					wantErr(t, c, c.register("", key, 0, 8), tritonerr.InvalidArg,
						"failed to register shared memory region '': invalid args")
					wantRegions(t, c)
				})
			}
			run("test_valid_create_set_register", func(t *testing.T) {
				key, _ := object(t, page)
				must(t, c.register("dummy_data", key, 0, 8))
				rs, err := c.status("")
				must(t, err)
				if len(rs) != 1 || rs[0] != (region{Name: "dummy_data", Key: key, Offset: 0, ByteSize: 8}) {
					t.Fatalf("status %+v", rs)
				}
				one, err := c.status("dummy_data")
				must(t, err)
				if len(one) != 1 || one[0].Name != "dummy_data" {
					t.Fatalf("status of one region: %+v", one)
				}
			})
			run("test_unregister_before_register", func(t *testing.T) {
				must(t, c.unregister("dummy_data"))
				wantRegions(t, c)
			})
			run("test_unregister_after_register", func(t *testing.T) {
				key, _ := object(t, page)
				must(t, c.register("dummy_data", key, 0, 8))
				must(t, c.unregister("dummy_data"))
				wantRegions(t, c)
			})
			run("test_reregister_after_register", func(t *testing.T) {
				key, _ := object(t, page)
				must(t, c.register("dummy_data", key, 0, 8))
				wantErr(t, c, c.register("dummy_data", key, 0, 8), tritonerr.AlreadyExists,
					"shared memory region 'dummy_data' already in manager")
				wantRegions(t, c, "dummy_data")
			})
			run("test_unregister_after_inference", func(t *testing.T) {
				m := simpleRegions(t, c)
				inferSimple(t, c, m)
				must(t, c.unregister("output0_data"))
				wantRegions(t, c, "input0_data", "input1_data", "output1_data")
			})
			run("test_register_after_inference", func(t *testing.T) {
				m := simpleRegions(t, c)
				inferSimple(t, c, m)
				key, _ := object(t, page)
				must(t, c.register("dummy_data", key, 0, 8))
				wantRegions(t, c, "dummy_data", "input0_data", "input1_data", "output0_data", "output1_data")
				inferSimple(t, c, m)
			})
			run("test_too_big_shm", func(t *testing.T) {
				m := simpleRegions(t, c)
				key, big := object(t, page)
				copy(big.Data, in1)
				must(t, c.register("input1_data_big", key, 0, 128))
				_, err := c.infer("simple",
					[]tensorIn{simpleIn("INPUT0", ref("input0_data", 0, 64), nil), simpleIn("INPUT1", ref("input1_data_big", 0, 128), nil)},
					[]tensorOut{{name: "OUTPUT0", shm: ref("output0_data", 0, 64)}})
				wantErr(t, c, err, tritonerr.InvalidArg, "input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 128")
				_ = m
			})
			run("test_large_shm_register_offset", func(t *testing.T) {
				// Regions far into a large object, at page-aligned offsets.
				key, m := object(t, 64*page)
				copy(m.Data[40*page:], in0)
				copy(m.Data[41*page:], in1)
				must(t, c.register("input0_data", key, 40*page, 64))
				must(t, c.register("input1_data", key, 41*page, 64))
				must(t, c.register("output0_data", key, 63*page, 64))
				_, err := c.infer("simple",
					[]tensorIn{simpleIn("INPUT0", ref("input0_data", 0, 64), nil), simpleIn("INPUT1", ref("input1_data", 0, 64), nil)},
					[]tensorOut{{name: "OUTPUT0", shm: ref("output0_data", 0, 64)}})
				must(t, err)
				if !bytes.Equal(m.Data[63*page:63*page+64], sum) {
					t.Fatal("OUTPUT0 not written at the region's offset")
				}
				wantErr(t, c, c.register("unaligned", key, 8, 64), tritonerr.InvalidArg,
					"failed to register shared memory region 'unaligned': unable to process address spaceInvalid argument")
			})
			run("test_mixed_raw_shm", func(t *testing.T) {
				m := simpleRegions(t, c)
				clear(m.Data[2*page:])
				r, err := c.infer("simple",
					[]tensorIn{simpleIn("INPUT0", ref("input0_data", 0, 64), nil), simpleIn("INPUT1", nil, in1)},
					[]tensorOut{{name: "OUTPUT0", shm: ref("output0_data", 0, 64)}, {name: "OUTPUT1"}})
				must(t, err)
				if !bytes.Equal(m.Data[2*page:2*page+64], sum) {
					t.Fatal("OUTPUT0 not in shared memory")
				}
				if !bytes.Equal(r.data["OUTPUT1"], diff) {
					t.Fatalf("OUTPUT1 in the response: %v", r.data["OUTPUT1"])
				}
			})
			run("test_unregisterall", func(t *testing.T) {
				simpleRegions(t, c)
				wantRegions(t, c, "input0_data", "input1_data", "output0_data", "output1_data")
				must(t, c.unregister(""))
				wantRegions(t, c)
			})
			run("test_infer_offset_out_of_bound", func(t *testing.T) {
				simpleRegions(t, c)
				offset := uint64(64)
				if c.proto() == "http" {
					offset = math.MaxUint64 - 31 // Triton's HTTP test: 2^64-32
				}
				_, err := c.infer("simple",
					[]tensorIn{simpleIn("INPUT0", ref("input0_data", offset, 64), nil), simpleIn("INPUT1", ref("input1_data", 0, 64), nil)}, nil)
				wantErr(t, c, err, tritonerr.InvalidArg, "Invalid offset for shared memory region: 'input0_data'")
			})
			run("test_infer_byte_size_out_of_bound", func(t *testing.T) {
				simpleRegions(t, c)
				_, err := c.infer("simple",
					[]tensorIn{simpleIn("INPUT0", ref("input0_data", 32, 64), nil), simpleIn("INPUT1", ref("input1_data", 0, 64), nil)}, nil)
				wantErr(t, c, err, tritonerr.InvalidArg, "Invalid offset + byte size for shared memory region: 'input0_data'")
			})
			run("test_infer_integer_overflow", func(t *testing.T) {
				simpleRegions(t, c)
				_, err := c.infer("simple",
					[]tensorIn{simpleIn("INPUT0", ref("input0_data", 32, math.MaxUint64-16), nil), simpleIn("INPUT1", ref("input1_data", 0, 64), nil)}, nil)
				wantErr(t, c, err, tritonerr.InvalidArg,
					"Integer overflow detected: byte_size (18446744073709551599) + offset (32) exceeds maximum value (18446744073709551615) for region 'input0_data'")
			})
			run("test_register_out_of_bound", func(t *testing.T) {
				key, _ := object(t, page)
				for _, tc := range []struct{ offset, size uint64 }{{0, page + 1}, {1, page}, {page, 1}, {page + 1, 0}} {
					wantErr(t, c, c.register("dummy_data", key, tc.offset, tc.size), tritonerr.InvalidArg,
						"failed to register shared memory region 'dummy_data': invalid args")
				}
				wantRegions(t, c)
			})
			run("test_register_reserved_names", func(t *testing.T) {
				key := "/triton_python_backend_shm_region_e2e"
				wantErr(t, c, c.register("dummy_data", key, 0, 64), tritonerr.InvalidArg,
					"cannot register shared memory region 'dummy_data' with key '"+key+"' as the key contains the reserved prefix 'triton_python_backend_shm_region_'")
			})
			run("test_register_invalid_shm_key", func(t *testing.T) {
				for _, key := range []string{"/", "///", "", "/../../etc/passwd", "/a/b", "/..", "/x\x00y"} {
					wantErr(t, c, c.register("dummy_data", key, 0, 64), tritonerr.InvalidArg,
						"cannot register shared memory region 'dummy_data' - invalid shm key '"+key+"'")
				}
				wantRegions(t, c)
			})
			run("test_python_client_leak", func(t *testing.T) {
				// The Go equivalent: register, infer and unregister many
				// times; the server's open files do not grow.
				m := simpleRegions(t, c)
				inferSimple(t, c, m)
				must(t, c.unregister(""))
				before := openFiles(t)
				for range 20 {
					m := simpleRegions(t, c)
					inferSimple(t, c, m)
					must(t, c.unregister(""))
					must(t, m.Close()) // the client's own descriptor
				}
				time.Sleep(100 * time.Millisecond) // removals reach the executor
				if after := openFiles(t); after > before+4 {
					t.Fatalf("open files grew from %d to %d", before, after)
				}
			})
			run("output region too small", func(t *testing.T) {
				m := simpleRegions(t, c)
				key, small := object(t, page)
				sentinel := bytes.Repeat([]byte{0xAB}, 32)
				copy(small.Data, sentinel)
				must(t, c.register("output0_small", key, 0, 32))
				_, err := c.infer("simple",
					[]tensorIn{simpleIn("INPUT0", ref("input0_data", 0, 64), nil), simpleIn("INPUT1", ref("input1_data", 0, 64), nil)},
					[]tensorOut{{name: "OUTPUT0", shm: ref("output0_small", 0, 32)}, {name: "OUTPUT1", shm: ref("output1_data", 0, 64)}})
				wantErr(t, c, err, tritonerr.Internal,
					"shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should be at least 64 bytes to hold the results")
				if !bytes.Equal(small.Data[:32], sentinel) || !bytes.Equal(m.Data[3*page:3*page+64], make([]byte, 64)) {
					t.Fatal("a failed request wrote into a client's region")
				}
			})
			run("an output region larger than the output", func(t *testing.T) {
				m := simpleRegions(t, c)
				key, _ := object(t, page)
				must(t, c.register("output0_big", key, 0, page))
				_, err := c.infer("simple",
					[]tensorIn{simpleIn("INPUT0", ref("input0_data", 0, 64), nil), simpleIn("INPUT1", ref("input1_data", 0, 64), nil)},
					[]tensorOut{{name: "OUTPUT0", shm: ref("output0_big", 128, 256)}})
				must(t, err)
				_ = m
			})
			run("unknown region", func(t *testing.T) {
				simpleRegions(t, c)
				_, err := c.infer("simple",
					[]tensorIn{simpleIn("INPUT0", ref("input0_data", 0, 64), nil), simpleIn("INPUT1", ref("nope", 0, 64), nil)}, nil)
				wantErr(t, c, err, tritonerr.NotFound, "Unable to find shared memory region: 'nope'")
				_, err = c.infer("simple",
					[]tensorIn{simpleIn("INPUT0", ref("input0_data", 0, 64), nil), simpleIn("INPUT1", nil, in1)},
					[]tensorOut{{name: "OUTPUT0", shm: ref("nope_out", 0, 64)}})
				wantErr(t, c, err, tritonerr.NotFound, "Unable to find shared memory region: 'nope_out'")
			})
			run("status errors", func(t *testing.T) {
				simpleRegions(t, c)
				_, err := c.status("nope")
				wantErr(t, c, err, tritonerr.NotFound, "Unable to find system shared memory region: 'nope'")
				_, err = c.cudaStatus("nope")
				wantErr(t, c, err, tritonerr.NotFound, "Unable to find cuda shared memory region: 'nope'")
				_, err = c.cudaStatus("input0_data")
				wantErr(t, c, err, tritonerr.NotFound, "The region named 'input0_data' is registered as system shared memory, not CUDA shared memory")
				// Unregistering as the other kind leaves the region alone.
				must(t, c.unregisterCuda("input0_data"))
				must(t, c.unregisterCuda(""))
				wantRegions(t, c, "input0_data", "input1_data", "output0_data", "output1_data")
			})
			run("cuda without a GPU", func(t *testing.T) {
				simpleRegions(t, c)
				handle := make([]byte, 64)
				wantErr(t, c, c.registerCuda("input0_data", handle, 0, 64), tritonerr.AlreadyExists,
					"shared memory region 'input0_data' already in manager")
				wantErr(t, c, c.registerCuda("cuda_data", handle, 0, 64), tritonerr.InvalidArg,
					"failed to register CUDA shared memory region: 'cuda_data', GPUs not supported")
				if c.proto() == "http" {
					wantErr(t, c, c.registerCuda("cuda_data", handle[:10], 0, 64), tritonerr.InvalidArg,
						"'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
				} else {
					// Triton's gRPC front end checks neither the handle's
					// size nor the name (python_grpc_aio_test.py registers
					// "" with an empty handle): a Triton without GPUs
					// answers as for any CUDA region.
					wantErr(t, c, c.registerCuda("cuda_data", handle[:10], 0, 64), tritonerr.InvalidArg,
						"failed to register CUDA shared memory region: 'cuda_data', GPUs not supported")
					wantErr(t, c, c.registerCuda("", nil, 0, 0), tritonerr.InvalidArg,
						"failed to register CUDA shared memory region: '', GPUs not supported")
				}
				cs, err := c.cudaStatus("")
				must(t, err)
				if len(cs) != 0 {
					t.Fatalf("cuda status %v", cs)
				}
			})
			run("data together with shared memory", func(t *testing.T) {
				simpleRegions(t, c)
				in := simpleIn("INPUT0", ref("input0_data", 0, 64), in0)
				if c.proto() == "http" {
					in.jsonData = true
				} else {
					in.contents = true
				}
				_, err := c.infer("simple", []tensorIn{in, simpleIn("INPUT1", nil, in1)}, nil)
				if c.proto() == "http" {
					wantErr(t, c, err, tritonerr.InvalidArg,
						"Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But set 'data' 'shared_memory_region'")
				} else {
					wantErr(t, c, err, tritonerr.InvalidArg,
						"unexpected 'content' provided when using shared memory for input tensor 'INPUT0' for model 'simple'")
				}
			})
			if c.proto() == "http" {
				run("binary_data together with shared memory", func(t *testing.T) {
					simpleRegions(t, c)
					_, err := c.infer("simple",
						[]tensorIn{simpleIn("INPUT0", ref("input0_data", 0, 64), nil), simpleIn("INPUT1", nil, in1)},
						[]tensorOut{{name: "OUTPUT0", shm: ref("output0_data", 0, 64), binary: true}})
					wantErr(t, c, err, tritonerr.InvalidArg, "Output can't set both 'shared_memory_region' and 'binary_data'")
				})
			}
		})
	}
}

// openFiles counts this process's open file descriptors (the server runs
// in it).
func openFiles(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestUnregisterDuringInference ports TestSharedMemoryUnregister: a region
// unregistered while requests use it stays registered (and usable) until
// the last of them completes, then goes; the requests succeed.
func TestUnregisterDuringInference(t *testing.T) {
	s := startServer(t, true)
	for _, c := range s.clients(t) {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/test_unregister_shm_during_inference_%d_req", c.proto(), n), func(t *testing.T) {
				defer func() { must(t, c.unregister("")) }()
				key, m := object(t, 2*page)
				copy(m.Data, in0)
				must(t, c.register("in", key, 0, 64))
				must(t, c.register("out", key, page, page))
				var wg sync.WaitGroup
				errs := make(chan error, n)
				for i := range n {
					wg.Go(func() {
						_, err := c.infer("slow", []tensorIn{slowIn(ref("in", 0, 64))},
							[]tensorOut{{name: "OUTPUT0", shm: ref("out", uint64(i)*64, 64)}})
						errs <- err
					})
				}
				time.Sleep(150 * time.Millisecond) // the requests hold their regions now
				must(t, c.unregister("in"))
				must(t, c.unregister(""))
				// Deferred: still listed while the requests run.
				wantRegions(t, c, "in", "out")
				wg.Wait()
				close(errs)
				for err := range errs {
					must(t, err)
				}
				for i := range n {
					if got := m.Data[page+uint64(i)*64 : page+uint64(i+1)*64]; !bytes.Equal(got, in0) {
						t.Fatalf("request %d's output: %v", i, got)
					}
				}
				wantRegions(t, c)
				// The names are free again.
				must(t, c.register("in", key, 0, 64))
			})
		}
		t.Run(c.proto()+"/test_unregister_shm_after_inference", func(t *testing.T) {
			defer func() { must(t, c.unregister("")) }()
			key, m := object(t, 2*page)
			copy(m.Data, in0)
			must(t, c.register("in", key, 0, 64))
			must(t, c.register("out", key, page, 64))
			_, err := c.infer("slow", []tensorIn{slowIn(ref("in", 0, 64))}, []tensorOut{{name: "OUTPUT0", shm: ref("out", 0, 64)}})
			must(t, err)
			must(t, c.unregister("in"))
			wantRegions(t, c, "out")
		})
	}
}

// TestRegisterRacesInference: while clients infer with a region, another
// keeps unregistering and registering it again (under -race in CI's run of
// this package). Every request either succeeds with the right output or
// fails because the region was not registered at that moment; nothing
// else, and nothing crashes.
func TestRegisterRacesInference(t *testing.T) {
	s := startServer(t, true)
	c := &httpClient{base: s.http}
	g := newGRPCClient(t, s.grpc)
	key, m := object(t, 2*page)
	copy(m.Data, in0)
	copy(m.Data[64:], in1)
	must(t, c.register("in", key, 0, 128))
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = c.unregister("in")
			time.Sleep(time.Millisecond)
			if err := c.register("in", key, 0, 128); err != nil && !strings.Contains(err.Error(), "already in manager") {
				t.Errorf("register: %v", err)
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	var ok, notFound atomic.Int32
	var wg sync.WaitGroup
	for w := range 4 {
		var cl client = c
		if w%2 == 1 {
			cl = g
		}
		wg.Go(func() {
			for range 40 {
				r, err := cl.infer("simple",
					[]tensorIn{simpleIn("INPUT0", ref("in", 0, 64), nil), simpleIn("INPUT1", ref("in", 64, 64), nil)},
					[]tensorOut{{name: "OUTPUT0"}})
				switch {
				case err == nil:
					if !bytes.Equal(r.data["OUTPUT0"], sum) {
						t.Errorf("OUTPUT0 %v", r.data["OUTPUT0"])
					}
					ok.Add(1)
				case strings.Contains(err.Error(), "Unable to find shared memory region: 'in'"):
					notFound.Add(1)
				default:
					t.Errorf("infer: %v", err)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	t.Logf("%d succeeded, %d found the region unregistered", ok.Load(), notFound.Load())
	if ok.Load() == 0 {
		t.Fatal("no request succeeded")
	}
	must(t, c.unregister(""))
	wantRegions(t, c)
}
