package gateway

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/shm"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// The gateway's own checks of shared-memory calls: the ones made before
// the registry is asked (these tests run without one). The whole flow, with
// the registry and executors, is tested in e2e/sharedmemory.
func TestShmHTTPChecks(t *testing.T) {
	ns := startNATS(t)
	on := startGateway(t, ns, func(c *Config) { c.AllowClientShm = true })
	off := startGateway(t, ns)
	small := startGateway(t, ns, func(c *Config) { c.AllowClientShm = true; c.HTTPMaxInputSize = 1 << 20 })
	sys := "/v2/systemsharedmemory"
	cuda := "/v2/cudasharedmemory"
	for _, tc := range []struct {
		name         string
		g            *Gateway
		method, path string
		body         string
		status       int
		msg          string
	}{
		{"register disabled", off, "POST", sys + "/region/r/register", `{"key":"/k","byte_size":64}`, 501,
			"Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."},
		{"unregister disabled", off, "POST", sys + "/unregister", "", 501, "Client shared memory is disabled."},
		{"cuda unregister disabled", off, "POST", cuda + "/region/r/unregister", "", 501, "Client shared memory is disabled."},
		{"status wrong method", on, "POST", sys + "/status", "", 405, "Method Not Allowed"},
		{"register wrong method", on, "GET", sys + "/region/r/register", "", 405, "Method Not Allowed"},
		{"unknown action", on, "GET", sys + "/region/r/nothing", "", 404, "Not Found"},
		{"register without a name", on, "POST", sys + "/register", `{"key":"/k","byte_size":64}`, 400,
			"'region name' is necessary to register system shared memory region"},
		{"cuda register without a name", on, "POST", cuda + "/register", `{}`, 400,
			"'region name' is necessary to register cuda shared memory region"},
		{"malformed JSON", on, "POST", sys + "/region/r/register", `{"key":`, 400, "failed to parse the request JSON buffer"},
		{"no key", on, "POST", sys + "/region/r/register", `{"byte_size":64}`, 400, "Shared memory register request has no 'key' field"},
		{"no byte_size", on, "POST", sys + "/region/r/register", `{"key":"/k"}`, 400, "Shared memory register request has no 'byte_size' field"},
		{"key not a string", on, "POST", sys + "/region/r/register", `{"key":1,"byte_size":64}`, 500, "attempt to access JSON non-string as string"},
		{"negative byte_size", on, "POST", sys + "/region/r/register", `{"key":"/k","byte_size":-1}`, 400,
			"Shared memory register request field 'byte_size' must be a non-negative integer, got -1"},
		{"negative offset", on, "POST", sys + "/region/r/register", `{"key":"/k","offset":-4096,"byte_size":64}`, 400,
			"Shared memory register request field 'offset' must be a non-negative integer, got -4096"},
		{"huge negative offset", on, "POST", sys + "/region/r/register", `{"key":"/k","offset":-99999999999999999999,"byte_size":64}`, 400,
			"field 'offset' must be a non-negative integer, got -99999999999999999999"},
		{"cuda negative device_id", on, "POST", cuda + "/region/r/register", `{"raw_handle":{"b64":""},"device_id":-1,"byte_size":64}`, 400,
			"field 'device_id' must be a non-negative integer, got -1"},
		{"byte_size null", on, "POST", sys + "/region/r/register", `{"key":"/k","byte_size":null}`, 500,
			"attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{"offset not an integer", on, "POST", sys + "/region/r/register", `{"key":"/k","offset":1.5,"byte_size":64}`, 500,
			"attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{"all slashes", on, "POST", sys + "/region/r/register", `{"key":"///","byte_size":64}`, 400,
			"cannot register shared memory region 'r' - invalid shm key '///'"},
		{"escape", on, "POST", sys + "/region/r/register", `{"key":"/../../etc/passwd","byte_size":64}`, 400,
			"cannot register shared memory region 'r' - invalid shm key '/../../etc/passwd'"},
		{"NUL", on, "POST", sys + "/region/r/register", `{"key":"/a\u0000b","byte_size":64}`, 400, "invalid shm key"},
		{"reserved prefix", on, "POST", sys + "/region/r/register", `{"key":"/triton_python_backend_shm_region_1","byte_size":64}`, 400,
			"as the key contains the reserved prefix 'triton_python_backend_shm_region_'"},
		{"no raw_handle", on, "POST", cuda + "/region/r/register", `{"device_id":0,"byte_size":64}`, 400,
			"Shared memory register request has no 'raw_handle' field"},
		{"no b64", on, "POST", cuda + "/region/r/register", `{"raw_handle":{},"device_id":0,"byte_size":64}`, 500,
			"attempt to access non-existing object member 'b64'"},
		{"no device_id", on, "POST", cuda + "/region/r/register", `{"raw_handle":{"b64":"AAAA"},"byte_size":64}`, 500,
			"attempt to access non-existing object member 'device_id'"},
		{"small handle", on, "POST", cuda + "/region/r/register", `{"raw_handle":{"b64":"AAAA"},"device_id":0,"byte_size":64}`, 400,
			"'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"},
		{"not base64", on, "POST", cuda + "/region/r/register", `{"raw_handle":{"b64":"!!"},"device_id":0,"byte_size":64}`, 400,
			"'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"},
		{"body over the input limit", small, "POST", cuda + "/region/r/register", `{"raw_handle":{"b64":"` + strings.Repeat("A", 2<<20) + `"}}`, 400,
			"request JSON size of 2097177 bytes exceeds the maximum allowed input size of 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.method, "http://"+tc.g.HTTPAddr()+tc.path, []byte(tc.body), nil)
			if r.status != tc.status || !strings.Contains(string(r.body), tc.msg) {
				t.Fatalf("%d %s, want %d %q", r.status, r.body, tc.status, tc.msg)
			}
		})
	}
}

func TestShmGRPCChecks(t *testing.T) {
	ns := startNATS(t)
	off := startGateway(t, ns)
	c, _ := grpcClient(t, off)
	ctx := context.Background()
	_, err := c.SystemSharedMemoryRegister(ctx, &inference.SystemSharedMemoryRegisterRequest{Name: "r", Key: "/k", ByteSize: 64})
	if s := status.Convert(err); s.Code() != codes.Unimplemented || !strings.Contains(s.Message(), "Client shared memory is disabled") {
		t.Fatalf("register while disabled: %v", err)
	}
	_, err = c.CudaSharedMemoryUnregister(ctx, &inference.CudaSharedMemoryUnregisterRequest{})
	if s := status.Convert(err); s.Code() != codes.Unimplemented {
		t.Fatalf("unregister while disabled: %v", err)
	}
	on := startGateway(t, ns, func(c *Config) { c.AllowClientShm = true })
	c, _ = grpcClient(t, on)
	// Triton's gRPC front end checks no name (its HTTP one does): a region
	// without one goes through its manager's checks (qa/L0_grpc
	// python_grpc_aio_test.py: an empty name and key fail to open, an
	// empty name and handle as any handle that does not open, here with
	// no GPU as a Triton built without GPUs).
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"system register without a name", func() error {
			_, err := c.SystemSharedMemoryRegister(ctx, &inference.SystemSharedMemoryRegisterRequest{Key: "/nereid-no-such-key", ByteSize: 64})
			return err
		}, codes.Internal, "Unable to open shared memory region: '/nereid-no-such-key'"},
		{"system register without a name or key", func() error {
			_, err := c.SystemSharedMemoryRegister(ctx, &inference.SystemSharedMemoryRegisterRequest{})
			return err
		}, codes.InvalidArgument, "cannot register shared memory region '' - invalid shm key ''"},
		{"invalid key", func() error {
			_, err := c.SystemSharedMemoryRegister(ctx, &inference.SystemSharedMemoryRegisterRequest{Name: "r", Key: "/a/b", ByteSize: 64})
			return err
		}, codes.InvalidArgument, "cannot register shared memory region 'r' - invalid shm key '/a/b'"},
		{"cuda register without a name", func() error {
			_, err := c.CudaSharedMemoryRegister(ctx, &inference.CudaSharedMemoryRegisterRequest{})
			return err
		}, codes.InvalidArgument, "failed to register CUDA shared memory region: '', GPUs not supported"},
		{"cuda register without a name, handle of the wrong size", func() error {
			_, err := c.CudaSharedMemoryRegister(ctx, &inference.CudaSharedMemoryRegisterRequest{RawHandle: []byte{1, 2}, ByteSize: 64})
			return err
		}, codes.InvalidArgument, "failed to register CUDA shared memory region: '', GPUs not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := status.Convert(tc.call())
			if s.Code() != tc.code || s.Message() != tc.msg {
				t.Fatalf("got %s %q, want %s %q", s.Code(), s.Message(), tc.code, tc.msg)
			}
		})
	}
}

// TestShmGRPCRegisterWithoutName: a region without a name whose memory
// passes every check Triton's manager makes (a system object that opens
// and holds the region, a CUDA handle the device's executor opens) is
// refused with Triton's "invalid args", as no region can have the empty
// name in a cluster; a CUDA handle longer than a cudaIpcMemHandle_t is
// read, as Triton reads it, for its first 64 bytes.
func TestShmGRPCRegisterWithoutName(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns, func(c *Config) { c.AllowClientShm = true; c.Node = "node-a" })
	c, _ := grpcClient(t, g)
	ctx := context.Background()

	f, err := os.CreateTemp(shm.Dir, "nereid-gateway-test-")
	if err != nil {
		t.Skipf("no %s: %v", shm.Dir, err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if err := f.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = c.SystemSharedMemoryRegister(ctx, &inference.SystemSharedMemoryRegisterRequest{Key: "/" + filepath.Base(f.Name()), ByteSize: 64})
	if s := status.Convert(err); s.Code() != codes.InvalidArgument || s.Message() != "failed to register shared memory region '': invalid args" {
		t.Fatalf("system region without a name: %v", err)
	}

	// The executor owning device 0 on this node, which opens the handle.
	bc, err := bus.New(connect(t, ns, "gpu-executor"))
	if err != nil {
		t.Fatal(err)
	}
	handles := make(chan []byte, 1)
	sub, err := bc.Handle(bus.ShmCudaSubject("node-a", 0), "", func(_ context.Context, data []byte) (proto.Message, error) {
		var req busv1.ShmCudaCheckRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return nil, err
		}
		handles <- req.GetRegion().GetRawHandle()
		return &busv1.ShmCudaCheckResponse{AllocationSize: 4096}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	handle := bytes.Repeat([]byte{7}, 80)
	_, err = c.CudaSharedMemoryRegister(ctx, &inference.CudaSharedMemoryRegisterRequest{RawHandle: handle, ByteSize: 64})
	if s := status.Convert(err); s.Code() != codes.InvalidArgument || s.Message() != "failed to register shared memory region '': invalid args" {
		t.Fatalf("CUDA region without a name: %v", err)
	}
	if got := <-handles; !bytes.Equal(got, handle[:64]) {
		t.Fatalf("the executor was given a handle of %d bytes, want the first 64", len(got))
	}
}

func TestCheckGRPCShm(t *testing.T) {
	type P = map[string]*inference.InferParameter
	i64 := func(v int64) *inference.InferParameter {
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: v}}
	}
	str := func(v string) *inference.InferParameter {
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: v}}
	}
	for _, tc := range []struct {
		name    string
		in, out P
		msg     string
	}{
		{"fine", P{shm.ParamRegion: str("r"), shm.ParamByteSize: i64(64)}, P{shm.ParamRegion: str("o"), shm.ParamByteSize: i64(64)}, ""},
		{"input without byte size", P{shm.ParamRegion: str("r")}, nil,
			"'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'IN'"},
		{"output byte size without region", nil, P{shm.ParamByteSize: i64(64)},
			"'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor 'OUT'"},
		{"input offset as a string", P{shm.ParamRegion: str("r"), shm.ParamOffset: str("0"), shm.ParamByteSize: i64(64)}, nil,
			"invalid value type for 'shared_memory_offset' parameter for tensor 'IN', expected int64_param."},
		{"output with classification", nil, P{shm.ParamRegion: str("o"), shm.ParamByteSize: i64(64), "classification": i64(2)},
			"output can't set both 'shared_memory_region' and 'classification'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &inference.ModelInferRequest{
				Inputs:  []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Parameters: tc.in}},
				Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUT", Parameters: tc.out}},
			}
			err := checkGRPCShm(req)
			if tc.msg == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if te := tritonerr.From(err); err == nil || te.Kind != tritonerr.InvalidArg || te.Msg != tc.msg {
				t.Fatalf("got %v, want %q", err, tc.msg)
			}
		})
	}
}
