package binary

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// largeSize is the tensor of the large-tensor tests: 256 MiB of FP32.
const largeSize = 256 << 20

// patternAt is the byte at offset off of the large tensor: it changes with
// the position inside each MiB and with the MiB, so a lost, doubled or
// misplaced chunk shows.
func patternAt(off int) byte { return byte(off*7) ^ byte(off>>20) }

// fillPattern writes the pattern for offsets off.. into b.
func fillPattern(b []byte, off int) {
	for i := range b {
		b[i] = patternAt(off + i)
	}
}

// patternReader streams n bytes of the pattern, so that the test never
// holds the request body.
type patternReader struct{ off, n int }

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off == r.n {
		return 0, io.EOF
	}
	k := min(len(p), r.n-r.off)
	fillPattern(p[:k], r.off)
	r.off += k
	return k, nil
}

// checkPattern reads n bytes from r and compares them with the pattern
// without holding them.
func checkPattern(r io.Reader, n int) error {
	buf := make([]byte, 1<<20)
	want := make([]byte, 1<<20)
	off := 0
	for off < n {
		k, err := io.ReadFull(r, buf[:min(len(buf), n-off)])
		fillPattern(want[:k], off)
		if !bytes.Equal(buf[:k], want[:k]) {
			return fmt.Errorf("data differs in the MiB at offset %d", off)
		}
		off += k
		if err != nil {
			return fmt.Errorf("after %d of %d bytes: %w", off, n, err)
		}
	}
	if k, _ := r.Read(buf[:1]); k > 0 {
		return errors.New("more data than sent")
	}
	return nil
}

// largeHTTP sends the large tensor to model over HTTP binary, streaming
// the request body from the pattern and checking the response as it comes.
func largeHTTP(t *testing.T, base, model string) {
	t.Helper()
	header := fmt.Sprintf(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,%d],"parameters":{"binary_data_size":%d}}],`+
		`"parameters":{"binary_data_output":true}}`, largeSize/4, largeSize)
	req, err := http.NewRequest(http.MethodPost, base+"/v2/models/"+model+"/infer",
		io.MultiReader(strings.NewReader(header), &patternReader{n: largeSize}))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(header) + largeSize)
	req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(len(header)))
	// Go's client asks for gzip by default, and the server, as Triton,
	// would compress 256 MiB for it.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	hl, _ := strconv.Atoi(resp.Header.Get("Inference-Header-Content-Length"))
	if resp.StatusCode != 200 || hl <= 0 || hl > 4096 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		t.Fatalf("%d (header %d): %s", resp.StatusCode, hl, b)
	}
	js := make([]byte, hl)
	if _, err := io.ReadFull(resp.Body, js); err != nil {
		t.Fatal(err)
	}
	var m struct {
		Outputs []struct {
			Shape      []int64        `json:"shape"`
			Parameters map[string]int `json:"parameters"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(js, &m); err != nil || len(m.Outputs) != 1 || m.Outputs[0].Parameters["binary_data_size"] != largeSize {
		t.Fatalf("response header %s: %v", js, err)
	}
	if err := checkPattern(resp.Body, largeSize); err != nil {
		t.Fatal(err)
	}
}

// streamingCodec is the test client's gRPC codec: it sends a request's raw
// inputs from their own memory and checks a response's raw outputs against
// the pattern as it parses them, putting "ok" or the error in their place,
// so the client holds the large tensor once instead of four times.
type streamingCodec struct{ proto encoding.CodecV2 }

func (c streamingCodec) Name() string { return "proto" }

func (c streamingCodec) Marshal(v any) (mem.BufferSlice, error) {
	req, ok := v.(*inference.ModelInferRequest)
	if !ok {
		return c.proto.Marshal(v)
	}
	raw := req.RawInputContents
	req.RawInputContents = nil
	head, err := proto.Marshal(req)
	req.RawInputContents = raw
	if err != nil {
		return nil, err
	}
	var out mem.BufferSlice
	for _, b := range raw {
		head = protowire.AppendTag(head, 7, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(len(b)))
		out = append(out, mem.SliceBuffer(head), mem.SliceBuffer(b))
		head = nil
	}
	return out, nil
}

func (c streamingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	resp, ok := v.(*inference.ModelInferResponse)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	r := data.Reader()
	defer r.Close()
	var rest [][]byte
	var checks [][]byte
	for r.Remaining() > 0 {
		tag, err := binaryUvarint(r)
		if err != nil {
			return err
		}
		num, typ := protowire.DecodeTag(tag)
		if typ != protowire.BytesType {
			return fmt.Errorf("unexpected wire type %d", typ)
		}
		n, err := binaryUvarint(r)
		if err != nil {
			return err
		}
		if num == 6 { // raw_output_contents
			res := "ok"
			if err := checkPattern(io.LimitReader(r, int64(n)), int(n)); err != nil {
				res = err.Error()
			}
			checks = append(checks, []byte(res))
			continue
		}
		field := protowire.AppendTag(nil, num, typ)
		field = protowire.AppendVarint(field, n)
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		rest = append(rest, append(field, body...))
	}
	if err := proto.Unmarshal(bytes.Join(rest, nil), resp); err != nil {
		return err
	}
	resp.RawOutputContents = checks
	return nil
}

func binaryUvarint(r io.ByteReader) (uint64, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		b, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, errors.New("varint overflow")
}

// largeGRPC sends the large tensor to model with ModelInfer.
func largeGRPC(t *testing.T, target, model string) {
	t.Helper()
	client := grpcClient(t, target, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(streamingCodec{encoding.GetCodecV2("proto")})))
	data := make([]byte, largeSize)
	fillPattern(data, 0)
	resp, err := client.ModelInfer(timeout(t, 2*time.Minute), &inference.ModelInferRequest{ModelName: model, Id: "large",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1, largeSize / 4}}},
		RawInputContents: [][]byte{data}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetId() != "large" || len(resp.GetRawOutputContents()) != 1 || string(resp.GetRawOutputContents()[0]) != "ok" {
		t.Fatalf("response %q: %q", resp.GetId(), resp.GetRawOutputContents())
	}
}

// TestLargeTensors sends 256 MiB through the gateway and back, over HTTP
// binary and gRPC, to an executor on the gateway's node (hand-off through
// /dev/shm: the bus carries only control) and to one on another node (the
// bus carries it in chunks), and reports each process's peak RSS. Every
// case runs on fresh processes, so that each peak is that case's own.
func TestLargeTensors(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		grpc, far   bool
	}{
		{"HTTP binary, same node", "identity_fp32", false, false},
		{"gRPC, same node", "identity_fp32", true, false},
		{"HTTP binary, other node (chunked bus)", "identity_far", false, true},
		{"gRPC, other node (chunked bus)", "identity_far", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t)
			exec := c.local
			if tc.far {
				exec = c.far
			}
			procs := []*constellation.Proc{c.gw.Proc, exec}
			before := make([]memory, len(procs))
			for i, p := range procs {
				resetPeak(t, p.Pid())
				before[i] = readMemory(t, p.Pid())
			}
			busBefore := c.natsInBytes(t)
			start := time.Now()
			if tc.grpc {
				largeGRPC(t, c.gw.GRPC(), tc.model)
			} else {
				largeHTTP(t, c.gw.HTTP(), tc.model)
			}
			elapsed := time.Since(start)
			bus := c.natsInBytes(t) - busBefore
			if tc.far != (bus > 2*largeSize) || !tc.far && bus > 1<<20 {
				t.Errorf("the bus carried %d bytes", bus)
			}
			for i, p := range procs {
				m := readMemory(t, p.Pid())
				grew := m.peak - before[i].rss
				t.Logf("%s: %s, %.2f payloads above its RSS before (%d MiB)", p.Name, m, float64(grew)/largeSize, before[i].rss>>20)
				// About two copies at most: what arrives and what leaves.
				if grew > 5*largeSize/2 {
					t.Errorf("%s held %.2f copies of the payload at its peak", p.Name, float64(grew)/largeSize)
				}
			}
			t.Logf("round trip %v, %d MiB over NATS", elapsed, bus>>20)
		})
	}
}
