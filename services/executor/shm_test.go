package executor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/shm"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// shmObject makes a client's shared-memory object for the test.
func shmObject(t *testing.T, size int) (string, *shm.Mapping) {
	t.Helper()
	key := fmt.Sprintf("/nereid-exec-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_"))
	m, err := shm.Create(key, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(); _ = shm.Unlink(key) })
	return key, m
}

func sysRegion(name, key string, offset, size uint64) *busv1.ShmRegion {
	return &busv1.ShmRegion{Name: name, Kind: busv1.ShmKind_SHM_KIND_SYSTEM, Node: "node-a", Id: "id-" + name, Key: key, Offset: offset, ByteSize: size}
}

// otherNode is r registered on node-b.
func otherNode(r *busv1.ShmRegion) *busv1.ShmRegion {
	c := proto.Clone(r).(*busv1.ShmRegion)
	c.Node = "node-b"
	return c
}

// shmInfer sends req as a gateway would: on the node's subject with a lease.
func (h *harness) shmInfer(model string, req *inference.ModelInferRequest, regions ...*busv1.ShmRegion) (*inference.ModelInferResponse, error) {
	req.ModelName, req.ModelVersion = model, "1"
	if regions != nil {
		if err := shm.SetLease(req, &busv1.ShmLease{Holder: "test", Regions: regions}); err != nil {
			h.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := &inference.ModelInferResponse{}
	err := h.client.Request(ctx, bus.InferNodeSubject(model, "1", "node-a"), req, resp)
	return resp, err
}

func shmInput(name string, ref shm.Ref) *inference.ModelInferRequest_InferInputTensor {
	return &inference.ModelInferRequest_InferInputTensor{Name: name, Datatype: "INT32", Shape: []int64{1, 16}, Parameters: shm.Params(ref)}
}

func shmOutput(name string, ref shm.Ref) *inference.ModelInferRequest_InferRequestedOutputTensor {
	return &inference.ModelInferRequest_InferRequestedOutputTensor{Name: name, Parameters: shm.Params(ref)}
}

func wantKind(t *testing.T, err error, kind tritonerr.Kind, msg string) {
	t.Helper()
	te := tritonerr.From(err)
	if err == nil || te.Kind != kind || !strings.Contains(te.Msg, msg) {
		t.Fatalf("got %v, want %s %q", err, kind, msg)
	}
}

func TestShmInPlace(t *testing.T) {
	h := start(t, exampleRepo, "simple", "identity_fp32")
	page := os.Getpagesize()
	key, client := shmObject(t, 2*page)
	in0 := int32s(func(i int) int32 { return int32(i) })
	in1 := int32s(func(i int) int32 { return 10 })
	copy(client.Data, in0)
	regIn := sysRegion("in", key, 0, uint64(page))
	regOut := sysRegion("out", key, uint64(page), uint64(page))
	sentinel := bytes.Repeat([]byte{0xEE}, page)

	t.Run("inputs and outputs in shm, mixed with raw", func(t *testing.T) {
		copy(client.Data[page:], sentinel)
		req := &inference.ModelInferRequest{
			Inputs: []*inference.ModelInferRequest_InferInputTensor{
				shmInput("INPUT0", shm.Ref{Region: "in", ByteSize: 64}),
				{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}},
			},
			RawInputContents: [][]byte{nil, in1},
			Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{
				shmOutput("OUTPUT0", shm.Ref{Region: "out", Offset: 64, ByteSize: 128}), // a larger region is fine
				{Name: "OUTPUT1"},
			},
		}
		resp, err := h.shmInfer("simple", req, regIn, regOut)
		if err != nil {
			t.Fatal(err)
		}
		o0, d0 := outputData(t, resp, "OUTPUT0")
		if len(d0) != 0 || o0.GetDatatype() != "INT32" {
			t.Fatalf("OUTPUT0 in shm came back with %d bytes of data", len(d0))
		}
		want0 := int32s(func(i int) int32 { return int32(i) + 10 })
		if got := client.Data[page+64 : page+128]; !bytes.Equal(got, want0) {
			t.Fatalf("OUTPUT0 in the client's region: %v", got)
		}
		if !bytes.Equal(client.Data[page:page+64], sentinel[:64]) || !bytes.Equal(client.Data[page+128:2*page], sentinel[128:]) {
			t.Fatal("bytes outside the output's place were written")
		}
		_, d1 := outputData(t, resp, "OUTPUT1")
		if !bytes.Equal(d1, int32s(func(i int) int32 { return int32(i) - 10 })) {
			t.Fatalf("OUTPUT1: %v", d1)
		}
	})

	// Errors never write the client's region.
	for _, tc := range []struct {
		name    string
		in0     shm.Ref
		out0    shm.Ref
		regions []*busv1.ShmRegion
		kind    tritonerr.Kind
		msg     string
	}{
		{"input larger than the tensor", shm.Ref{Region: "in", ByteSize: 128}, shm.Ref{Region: "out", ByteSize: 64}, []*busv1.ShmRegion{regIn, regOut},
			tritonerr.InvalidArg, "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 128"},
		{"output region too small", shm.Ref{Region: "in", ByteSize: 64}, shm.Ref{Region: "out", ByteSize: 32}, []*busv1.ShmRegion{regIn, regOut},
			tritonerr.Internal, "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should be at least 64 bytes to hold the results"},
		{"region not in the lease", shm.Ref{Region: "in", ByteSize: 64}, shm.Ref{Region: "nope", ByteSize: 64}, []*busv1.ShmRegion{regIn, regOut},
			tritonerr.NotFound, "Unable to find shared memory region: 'nope'"},
		// Sequence requests go wherever the router's batch goes; a region
		// of another node cannot be mapped here.
		{"region on another node", shm.Ref{Region: "in", ByteSize: 64}, shm.Ref{Region: "out", ByteSize: 64}, []*busv1.ShmRegion{regIn, otherNode(regOut)},
			tritonerr.Unavailable, "shared memory region 'out' is on node 'node-b', but the executor that got the request"},
		{"offset past the region", shm.Ref{Region: "in", Offset: uint64(page), ByteSize: 64}, shm.Ref{Region: "out", ByteSize: 64}, []*busv1.ShmRegion{regIn, regOut},
			tritonerr.InvalidArg, "Invalid offset for shared memory region: 'in'"},
		{"no lease", shm.Ref{Region: "in", ByteSize: 64}, shm.Ref{Region: "out", ByteSize: 64}, nil,
			tritonerr.InvalidArg, "carries no lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			copy(client.Data[page:], sentinel)
			req := &inference.ModelInferRequest{
				Inputs:           []*inference.ModelInferRequest_InferInputTensor{shmInput("INPUT0", tc.in0), shmInput("INPUT1", shm.Ref{Region: "in", ByteSize: 64})},
				RawInputContents: [][]byte{nil, nil},
				Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{shmOutput("OUTPUT0", tc.out0), shmOutput("OUTPUT1", shm.Ref{Region: "out", Offset: 256, ByteSize: 64})},
			}
			_, err := h.shmInfer("simple", req, tc.regions...)
			wantKind(t, err, tc.kind, tc.msg)
			if !bytes.Equal(client.Data[page:], sentinel) {
				t.Fatal("a failed request wrote into the client's region")
			}
		})
	}

	t.Run("identity output aliasing the input mapping outlives the region", func(t *testing.T) {
		fp := make([]byte, 0, 64)
		for i := range 16 {
			fp = tensor.AppendFloat32s(fp, float32(i)+0.5)
		}
		copy(client.Data, fp)
		reg := sysRegion("once", key, 0, uint64(page))
		reg.Id = "id-once"
		req := &inference.ModelInferRequest{
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1, 16}, Parameters: shm.Params(shm.Ref{Region: "once", ByteSize: 64})}},
			RawInputContents: [][]byte{nil},
		}
		resp, err := h.shmInfer("identity_fp32", req, reg)
		if err != nil {
			t.Fatal(err)
		}
		// The registry removes the region: the executor unmaps it.
		removed(t, h, reg)
		copy(client.Data, make([]byte, 64))
		if _, d := outputData(t, resp, "OUTPUT0"); !bytes.Equal(d, fp) {
			t.Fatalf("identity output: %v", d)
		}
	})

	t.Run("truncated object", func(t *testing.T) {
		k2, _ := shmObject(t, page)
		reg := sysRegion("trunc", k2, 0, uint64(page))
		reg.Id = "id-trunc"
		req := func() *inference.ModelInferRequest {
			return &inference.ModelInferRequest{
				Inputs:           []*inference.ModelInferRequest_InferInputTensor{shmInput("INPUT0", shm.Ref{Region: "trunc", ByteSize: 64}), shmInput("INPUT1", shm.Ref{Region: "trunc", ByteSize: 64})},
				RawInputContents: [][]byte{nil, nil},
			}
		}
		if _, err := h.shmInfer("simple", req(), reg); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(shm.Dir+k2, 0); err != nil {
			t.Fatal(err)
		}
		_, err := h.shmInfer("simple", req(), reg)
		wantKind(t, err, tritonerr.InvalidArg, "shared memory object '"+k2+"' was truncated by its owner")
	})
}

// removed announces a region's removal as the registry does and waits for
// the executor to drop its mapping.
func removed(t *testing.T, h *harness, r *busv1.ShmRegion) {
	t.Helper()
	if err := h.client.Publish(bus.ShmRemovedSubject("node-a"), &busv1.ShmRegionRemoved{Region: r}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.ex.shm.mu.Lock()
		ok := h.ex.shm.sys.has(r.GetId())
		h.ex.shm.mu.Unlock()
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("mapping not dropped after the region was removed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestShmMappingKeptWhileInUse: removal while requests use the mapping
// leaves it in place until they are done; under -race with concurrent
// requests and removals nothing faults.
func TestShmMappingKeptWhileInUse(t *testing.T) {
	h := start(t, exampleRepo, "simple")
	page := os.Getpagesize()
	key, client := shmObject(t, page)
	copy(client.Data, int32s(func(i int) int32 { return int32(i) }))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20 {
				reg := sysRegion("r", key, 0, uint64(page))
				reg.Id = fmt.Sprintf("gen-%d-%d", g, i)
				req := &inference.ModelInferRequest{
					Inputs:           []*inference.ModelInferRequest_InferInputTensor{shmInput("INPUT0", shm.Ref{Region: "r", ByteSize: 64}), shmInput("INPUT1", shm.Ref{Region: "r", ByteSize: 64})},
					RawInputContents: [][]byte{nil, nil},
					Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0"}},
				}
				done := make(chan struct{})
				go func() {
					defer close(done)
					_ = h.client.Publish(bus.ShmRemovedSubject("node-a"), &busv1.ShmRegionRemoved{Region: reg})
				}()
				resp, err := h.shmInfer("simple", req, reg)
				<-done
				if err != nil {
					t.Error(err)
					return
				}
				if _, d := outputData(t, resp, "OUTPUT0"); !bytes.Equal(d, int32s(func(i int) int32 { return 2 * int32(i) })) {
					t.Errorf("OUTPUT0: %v", d)
				}
			}
		})
	}
	wg.Wait()
	// Every generation was announced removed; once idle, nothing is mapped.
	for _, g := range []string{"gen-0-19", "gen-3-19"} {
		removed(t, h, &busv1.ShmRegion{Id: g, Node: "node-a"})
	}
	h.ex.shm.reconcile(context.Background()) // no registry: nothing changes, nothing breaks
}

// TestShmWithoutGPU: on a machine without a GPU (this one), CUDA regions
// get Triton's "GPUs not supported", register-time checks find nobody to
// answer, and no CUDA call is made.
func TestShmWithoutGPU(t *testing.T) {
	h := start(t, exampleRepo, "simple")
	if h.ex.shm.drv != nil {
		t.Skip("this machine has a GPU")
	}
	cuda := &busv1.ShmRegion{Name: "c", Kind: busv1.ShmKind_SHM_KIND_CUDA, Node: "node-a", Id: "id-c", DeviceId: 0, RawHandle: make([]byte, 64), ByteSize: 64}
	req := &inference.ModelInferRequest{
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{shmInput("INPUT0", shm.Ref{Region: "c", ByteSize: 64}), shmInput("INPUT1", shm.Ref{Region: "c", ByteSize: 64})},
		RawInputContents: [][]byte{nil, nil},
	}
	_, err := h.shmInfer("simple", req, cuda)
	wantKind(t, err, tritonerr.InvalidArg, "failed to use CUDA shared memory region: 'c', GPUs not supported")

	// The executor calls its own check handler too: same answer.
	_, err = h.ex.shm.handleCudaCheck(context.Background(), mustMarshal(t, &busv1.ShmCudaCheckRequest{Region: cuda}))
	wantKind(t, err, tritonerr.InvalidArg, "failed to register CUDA shared memory region: 'c', GPUs not supported")

	// Nothing listens for device 0's checks or device-routed requests.
	nc := connect(t, h.url)
	for _, subject := range []string{bus.ShmCudaSubject("node-a", 0), bus.InferDeviceSubject("simple", "1", "node-a", 0)} {
		if _, err := nc.Request(subject, nil, time.Second); err != nats.ErrNoResponders {
			t.Fatalf("%s: %v, want no responders", subject, err)
		}
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
