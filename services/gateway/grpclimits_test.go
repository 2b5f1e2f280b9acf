package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/nats-io/nats-server/v2/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
)

// bombMessage is a ModelInferRequest for "simple" whose one raw input is
// size zero bytes, gzip-compressed as it is written (the message itself
// never exists uncompressed): size/1000 bytes or so.
func bombMessage(t testing.TB, size int) []byte {
	t.Helper()
	head, err := proto.Marshal(&inference.ModelInferRequest{ModelName: "simple", Inputs: []*inference.ModelInferRequest_InferInputTensor{
		{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, int64(size / 4)}}}})
	if err != nil {
		t.Fatal(err)
	}
	head = protowire.AppendTag(head, fieldRawInputContents, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(size))
	var out bytes.Buffer
	w, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	w.Write(head)
	zeros := make([]byte, 1<<20)
	for left := size; left > 0; left -= len(zeros) {
		w.Write(zeros[:min(left, len(zeros))])
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// rawCodec sends a message's bytes as they are given ([]byte) and decodes
// answers with protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}
func (rawCodec) Name() string { return "proto" }

// precompressed is a gRPC compressor that sends gzip data prepared ahead
// as the message's compressed form: the client sends exactly the bytes it
// is given, flagged compressed, with grpc-encoding gzip.
type precompressed struct{}

func (precompressed) Do(w io.Writer, p []byte) error { _, err := w.Write(p); return err }
func (precompressed) Type() string                   { return "gzip" }

// sendCompressed calls ModelInfer with msg, already gzip-compressed.
func sendCompressed(t testing.TB, addr string, msg []byte) error {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithCompressor(precompressed{}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var resp inference.ModelInferResponse
	return cc.Invoke(ctx, inference.GRPCInferenceService_ModelInfer_FullMethodName, msg, &resp, grpc.ForceCodecV2(rawCodec{}))
}

// simpleServing starts an executor of "simple" and waits until the
// gateway serves it.
func simpleServing(t *testing.T, ns *server.Server, g *Gateway) inference.GRPCInferenceServiceClient {
	t.Helper()
	ex := newFakeExecutor(t, ns, "ex1", &busv1.ModelVersionState{Name: "simple", Version: "1", State: "READY", Config: simpleConfig("simple")})
	ex.start()
	c, _ := grpcClient(t, g)
	waitFor(t, "simple ready", 5*time.Second, func() bool {
		r, err := c.ModelReady(context.Background(), &inference.ModelReadyRequest{Name: "simple"})
		return err == nil && r.Ready
	})
	return c
}

func simpleRequest() *inference.ModelInferRequest {
	in := make([]byte, 64)
	return &inference.ModelInferRequest{ModelName: "simple",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}}, {Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}}},
		RawInputContents: [][]byte{in, in}}
}

func wantCode(t *testing.T, err error, code codes.Code, contains ...string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Fatalf("got %v %q, want %v", st.Code(), st.Message(), code)
	}
	for _, s := range contains {
		if !strings.Contains(st.Message(), s) {
			t.Fatalf("message %q does not name %q", st.Message(), s)
		}
	}
}

// TestGRPCCompressionBomb: a gzip message of a quarter of a megabyte that
// inflates to 256 MiB is refused with an error naming the limit and its
// flag once 4 MiB (--grpc-max-input-size) are inflated, without the
// gateway inflating the rest (grpc-go sends the status of a message it
// could not receive itself, INTERNAL for a decompression that failed); a
// plain message beyond --grpc-max-message-size is refused with grpc-go's
// RESOURCE_EXHAUSTED naming the limit; the gateway serves on.
func TestGRPCCompressionBomb(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns, func(c *Config) {
		c.Limits.GRPCMaxInputSize = 4 << 20
		c.Limits.GRPCMaxMessageSize = 8 << 20
	})
	c := simpleServing(t, ns, g)
	bomb := bombMessage(t, 256<<20)
	if len(bomb) > 1<<20 {
		t.Fatalf("the bomb is %d bytes compressed", len(bomb))
	}

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := sendCompressed(t, g.GRPCAddr(), bomb)
	runtime.ReadMemStats(&after)
	wantCode(t, err, codes.Internal, "4194304", "--grpc-max-input-size")
	t.Logf("a refused bomb: %d KiB sent, %d MiB allocated", len(bomb)>>10, (after.TotalAlloc-before.TotalAlloc)>>20)
	// The whole process (client, gateway, NATS) allocated a few times the
	// limit at most, not the 256 MiB the message inflates to.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Fatalf("the refused bomb cost %d MiB of allocations", alloc>>20)
	}

	// Plain: 9 MiB of message, beyond the 8 MiB --grpc-max-message-size.
	big := simpleRequest()
	big.RawInputContents = [][]byte{make([]byte, 9<<20)}
	_, err = c.ModelInfer(context.Background(), big)
	wantCode(t, err, codes.ResourceExhausted, "8388608")

	// A compressed message within the limits is served, and so is everyone
	// else.
	if _, err := c.ModelInfer(context.Background(), simpleRequest(), grpc.UseCompressor("gzip")); err != nil {
		t.Fatalf("compressed request after the bomb: %v", err)
	}
	if _, err := c.ModelInfer(context.Background(), simpleRequest()); err != nil {
		t.Fatalf("request after the bomb: %v", err)
	}

	// Over a stream, the bomb ends the stream with the same status.
	cc, err := grpc.NewClient(g.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithCompressor(precompressed{}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, inference.GRPCInferenceService_ModelStreamInfer_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(bomb); err != nil {
		t.Fatal(err)
	}
	err = st.RecvMsg(new(inference.ModelStreamInferResponse))
	wantCode(t, err, codes.Internal, "--grpc-max-input-size")
}

// holdBudget starts an HTTP body announcing 10 MiB and sends its first
// 128 KiB: the intake reserves the 10 MiB in the in-flight budget
// (intake.go) and keeps them while the body waits for the rest, until the
// returned function closes its connection.
func holdBudget(t *testing.T, g *Gateway) (release func()) {
	t.Helper()
	conn, err := net.Dial("tcp", g.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 10<<20)
	if _, err := conn.Write(make([]byte, 128<<10)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the budget held", 5*time.Second, func() bool { return g.inflight.used.Load() >= 10<<20 })
	return func() {
		conn.Close()
		waitFor(t, "the budget given back", 5*time.Second, func() bool { return g.inflight.used.Load() == 0 })
	}
}

// TestCompressedCountInBudget: while other bodies hold most of the
// in-flight budget, a compressed gRPC message or HTTP body that inflates
// beyond what is left is refused (UNAVAILABLE over HTTP, as an
// uncompressed body of that size is; INTERNAL from grpc-go's decompression
// over gRPC), instead of being inflated unaccounted for; once the
// budget is free again the same messages are served (the budget counts
// their inflation only while it lasts).
func TestCompressedCountInBudget(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns, func(c *Config) { c.Limits.HTTPMaxInflightBodySize = 12 << 20 })
	simpleServing(t, ns, g)
	// 4 MiB once inflated, a few KiB sent.
	bomb := bombMessage(t, 4<<20)
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(bytes.Repeat([]byte(" "), 4<<20))
	w.Close()
	post := func() httpResult {
		return do(t, "POST", "http://"+g.HTTPAddr()+"/v2/models/simple/infer", gz.Bytes(), map[string]string{"Content-Encoding": "gzip"})
	}

	release := holdBudget(t, g)
	wantCode(t, sendCompressed(t, g.GRPCAddr(), bomb), codes.Internal, "--http-max-inflight-body-size")
	if r := post(); r.status != 503 || !strings.Contains(string(r.body), "--http-max-inflight-body-size") {
		t.Fatalf("gzip body over the budget: %d %s", r.status, r.body)
	}
	waitFor(t, "the refused bodies' bytes given back", 5*time.Second, func() bool { return g.inflight.used.Load() == 10<<20 })

	// Alone, the same message goes through to the model (which refuses its
	// input) and the body to the decoder (which refuses the spaces).
	release()
	if code := status.Code(sendCompressed(t, g.GRPCAddr(), bomb)); code != codes.InvalidArgument {
		t.Fatalf("compressed message alone: %v", code)
	}
	if r := post(); r.status != 400 {
		t.Fatalf("gzip body alone: %d %s", r.status, r.body)
	}
	waitFor(t, "the bodies' bytes given back", 5*time.Second, func() bool { return g.inflight.used.Load() == 0 })
}

// TestHTTPGzipBodiesStopAtLimit: concurrent gzip bodies that inflate far
// beyond --http-max-input-size stop inflating at the limit: each is refused
// having cost about the limit, not what it inflates to.
func TestHTTPGzipBodiesStopAtLimit(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns, func(c *Config) { c.HTTPMaxInputSize = 4 << 20 })
	simpleServing(t, ns, g)
	var gz bytes.Buffer
	w, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zeros := make([]byte, 1<<20)
	for range 128 {
		w.Write(zeros)
	}
	w.Close()

	const n = 8
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	results := make([]httpResult, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = do(t, "POST", "http://"+g.HTTPAddr()+"/v2/models/simple/infer", gz.Bytes(), map[string]string{"Content-Encoding": "gzip"})
		}()
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	t.Logf("%d gzip bombs of %d KiB: %d MiB allocated", n, gz.Len()>>10, (after.TotalAlloc-before.TotalAlloc)>>20)
	for _, r := range results {
		if r.status != 400 || !strings.Contains(string(r.body), "4194304") {
			t.Fatalf("gzip bomb: %d %s", r.status, r.body)
		}
	}
	// Eight bodies of 128 MiB inflated: a buffer doubling up to the limit
	// each (twice the limit allocated in all), not 128 MiB, nor io.ReadAll's
	// 1.25-fold growth (five times the limit).
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > n*10<<20 {
		t.Fatalf("%d refused gzip bombs cost %d MiB of allocations", n, alloc>>20)
	}
	waitFor(t, "the bodies' bytes given back", 5*time.Second, func() bool { return g.inflight.used.Load() == 0 })
}

// TestGRPCBufferPool: the gRPC server's pool keeps a bounded number of
// buffers of each size class and none larger than its largest class.
func TestGRPCBufferPool(t *testing.T) {
	p := newGRPCBufferPool()
	large := p.Get(4 << 20)
	if len(*large) != 4<<20 {
		t.Fatalf("Get(4 MiB) gave %d bytes", len(*large))
	}
	p.Put(large)
	if again := p.Get(4 << 20); &(*again)[0] == &(*large)[0] {
		t.Fatal("a 4 MiB buffer was kept")
	}
	// A 512 MiB message's worth of 16 KiB frames comes back: the pool keeps
	// grpcPoolClassBytes of them.
	frames := make([]*[]byte, 0, 4096)
	for range cap(frames) {
		frames = append(frames, p.Get(16<<10))
	}
	for _, b := range frames {
		p.Put(b)
	}
	kept := 0
	for _, c := range p.classes {
		kept += len(c.free) * c.size
	}
	if kept > grpcPoolClassBytes {
		t.Fatalf("the pool keeps %d bytes", kept)
	}
	// What it keeps it hands out again, at the length asked.
	b := p.Get(100 << 10 / 8)
	if len(*b) != 100<<10/8 || cap(*b) != 16<<10 {
		t.Fatalf("Get: len %d cap %d", len(*b), cap(*b))
	}
	// A buffer that is not of a class's size is not kept.
	odd := make([]byte, 20<<10)
	p.Put(&odd)
	for _, c := range p.classes {
		for range len(c.free) {
			if x := <-c.free; cap(*x) != c.size {
				t.Fatalf("class %d keeps a buffer of %d", c.size, cap(*x))
			}
		}
	}
}

// TestGRPCLargeRequestReleased: once a large gRPC request is done with,
// one collection returns the heap to about where it was: gRPC's buffers
// of it are not kept (grpc-go's default pool kept its 16 KiB frames in a
// sync.Pool through the collection).
func TestGRPCLargeRequestReleased(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	// The client sends from buffers of its own, kept by nothing.
	cc, err := grpc.NewClient(g.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	req := simpleRequest()
	req.ModelName = "absent" // refused once received: no executor in the way (nor one at all)
	req.RawInputContents = [][]byte{make([]byte, 48<<20)}
	msg, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	req = nil
	call := func() error {
		var resp inference.ModelInferResponse
		return cc.Invoke(context.Background(), inference.GRPCInferenceService_ModelInfer_FullMethodName, msg, &resp, grpc.ForceCodecV2(rawCodec{}))
	}
	if call() == nil { // connection and pools warmed up
		t.Fatal("a request for an absent model was served")
	}
	runtime.GC()
	runtime.GC()
	var base, after runtime.MemStats
	runtime.ReadMemStats(&base)
	if call() == nil {
		t.Fatal("a request for an absent model was served")
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("heap after one collection: %d MiB, %d MiB before the request", after.HeapAlloc>>20, base.HeapAlloc>>20)
	if grown := int64(after.HeapAlloc) - int64(base.HeapAlloc); grown > 16<<20 {
		t.Fatalf("a 48 MiB request left %d MiB on the heap after a collection", grown>>20)
	}
	runtime.KeepAlive(msg)
}
