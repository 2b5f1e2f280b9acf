package hostile

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the client's compressor
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

// rawCodec sends a message's bytes as given and decodes answers with
// protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}
func (rawCodec) Name() string { return "proto" }

// precompressed sends gzip data prepared ahead as a message's compressed
// form, flagged compressed with grpc-encoding gzip.
type precompressed struct{}

func (precompressed) Do(w io.Writer, p []byte) error { _, err := w.Write(p); return err }
func (precompressed) Type() string                   { return "gzip" }

// gzipBomb is a ModelInferRequest for simple with one raw input of size
// zero bytes, compressed as it is written: about size/1000 bytes.
func gzipBomb(t *testing.T, size int) []byte {
	t.Helper()
	head, err := proto.Marshal(&inference.ModelInferRequest{ModelName: "simple", Inputs: []*inference.ModelInferRequest_InferInputTensor{
		{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, int64(size / 4)}}}})
	if err != nil {
		t.Fatal(err)
	}
	head = protowire.AppendTag(head, 7, protowire.BytesType) // raw_input_contents
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

// peakRSS is the process's VmHWM, its peak resident memory, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// TestGRPCCompressionBomb: a gzip-compressed ModelInfer of half a megabyte
// that inflates to 512 MiB is refused once --grpc-max-input-size (64 MiB by
// default, as --http-max-input-size) is inflated, three at once too: the
// server's peak resident memory stays far below what the messages inflate
// to, and it serves on.
func TestGRPCCompressionBomb(t *testing.T) {
	g := standalone(t)
	bomb := gzipBomb(t, 512<<20)
	cc, err := grpc.NewClient(g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithCompressor(precompressed{}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	before := peakRSS(t, g.Pid())
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var resp inference.ModelInferResponse
			errs <- cc.Invoke(ctx, inference.GRPCInferenceService_ModelInfer_FullMethodName, bomb, &resp, grpc.ForceCodecV2(rawCodec{}))
		}()
	}
	for range 3 {
		err := <-errs
		if st := status.Convert(err); st.Code() == codes.OK || !strings.Contains(st.Message(), "--grpc-max-input-size") && !strings.Contains(st.Message(), "--http-max-inflight-body-size") {
			t.Fatalf("bomb answered %v %q", st.Code(), st.Message())
		}
	}
	alive(t, g)
	peak := peakRSS(t, g.Pid())
	t.Logf("peak resident memory %d MiB before the bombs, %d MiB after", before>>20, peak>>20)
	if peak > before+384<<20 {
		t.Fatalf("three 512 MiB bombs raised the server's peak resident memory from %d MiB to %d MiB", before>>20, peak>>20)
	}

	// The server answers everyone else, compressed requests included.
	in := make([]byte, 64)
	req := &inference.ModelInferRequest{ModelName: "simple",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}}, {Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}}},
		RawInputContents: [][]byte{in, in}}
	plain, err := grpc.NewClient(g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	c := inference.NewGRPCInferenceServiceClient(plain)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.ModelInfer(ctx, req, grpc.UseCompressor("gzip")); err != nil {
		t.Fatalf("compressed request after the bombs: %v", err)
	}
}
