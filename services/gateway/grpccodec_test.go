package gateway

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/internal/testutil/racebuild"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// pieces cuts b into buffers of step bytes (the last shorter), as gRPC
// hands a message over frame by frame.
func pieces(b []byte, step int) mem.BufferSlice {
	var out mem.BufferSlice
	for step = max(step, 1); len(b) > 0; {
		n := min(step, len(b))
		out = append(out, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return out
}

func inferRequest(sizes ...int) *inference.ModelInferRequest {
	req := &inference.ModelInferRequest{ModelName: "m", ModelVersion: "1", Id: "x",
		Parameters: map[string]*inference.InferParameter{"p": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}}
	for i, n := range sizes {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i + j*5)
		}
		req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: "IN", Datatype: "UINT8", Shape: []int64{int64(n)}})
		req.RawInputContents = append(req.RawInputContents, b)
	}
	return req
}

// TestCodecRequest: a request decoded from frames of any size equals
// protobuf's decoding, with its raw inputs in one region attached to it.
func TestCodecRequest(t *testing.T) {
	c := newCodec(1000)
	for _, sizes := range [][]int{{10}, {600, 600}, {5000}, {0, 3000, 1}} {
		want := inferRequest(sizes...)
		b, _ := proto.Marshal(want)
		for _, step := range []int{1, 7, 100, 4096, len(b)} {
			got := &inference.ModelInferRequest{}
			if err := c.Unmarshal(pieces(b, step), got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("sizes %v step %d: decoded request differs", sizes, step)
			}
			r := handoff.TakeRegion(got)
			total := 0
			for _, n := range sizes {
				total += n
			}
			if (total >= 1000) != (r != nil) {
				t.Fatalf("sizes %v: region %v", sizes, r)
			}
			if r != nil {
				for _, raw := range got.RawInputContents {
					if _, ok := r.Offset(raw); !ok && len(raw) > 0 {
						t.Fatal("a raw input outside the region")
					}
				}
				r.Release()
			}
		}
	}
}

// TestCodecUnaryRequest: a unary request (modelInferHandler's grpcRequest)
// decodes as protobuf does, a small one from its own bytes with its lists
// in its room, at the cost of its input tensor and shape; a large one as
// any request, its raw inputs in a region.
func TestCodecUnaryRequest(t *testing.T) {
	c := newCodec(1000)
	for _, sizes := range [][]int{{10}, {}, {10, 20}, {200}, {600, 600}, {5000}} {
		want := inferRequest(sizes...)
		b, _ := proto.Marshal(want)
		for _, step := range []int{1, 7, len(b)} {
			r := new(grpcRequest)
			if err := c.Unmarshal(pieces(b, step), r); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&r.req, want) {
				t.Fatalf("sizes %v step %d: decoded request differs", sizes, step)
			}
			if len(b) <= len(r.body) && len(sizes) > 0 {
				// A small request's raw input aliases its own bytes.
				raw := r.req.RawInputContents[0]
				i := bytes.Index(r.body[:len(b)], raw)
				if i < 0 {
					t.Fatalf("sizes %v: raw input not in the request's bytes", sizes)
				}
				r.body[i] ^= 0xff
				if raw[0] != r.body[i] {
					t.Fatalf("sizes %v: the raw input is a copy", sizes)
				}
			}
			if reg := handoff.TakeRegion(&r.req); (reg != nil) != (len(b) >= 1000) {
				t.Fatalf("sizes %v: region %v", sizes, reg)
			} else {
				reg.Release()
			}
		}
	}
	if racebuild.Enabled {
		return
	}
	small := inferRequest(64)
	small.Parameters = nil // a map costs its own
	b, _ := proto.Marshal(small)
	data := pieces(b, len(b))
	n := testing.AllocsPerRun(100, func() {
		if err := c.Unmarshal(data, new(grpcRequest)); err != nil {
			t.Fatal(err)
		}
	})
	if n > 3 {
		t.Fatalf("a small unary request: %v allocations, want 3 (the request, its tensor and shape)", n)
	}
}

// TestCodecResponse: a response written without copying its large outputs,
// alone or in a stream response, is protobuf's encoding of it.
func TestCodecResponse(t *testing.T) {
	c := newCodec(1000)
	resp := &inference.ModelInferResponse{ModelName: "m", Id: "x",
		Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "A"}, {Name: "B"}, {Name: "C"}},
		RawOutputContents: [][]byte{bytes.Repeat([]byte{1}, 4000), {2, 3}, bytes.Repeat([]byte{4}, 9000)}}
	for _, msg := range []proto.Message{resp, &inference.ModelStreamInferResponse{ErrorMessage: "e", InferResponse: resp}} {
		bs, err := c.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) < 3 {
			t.Fatalf("%T: %d buffers: the outputs were copied", msg, len(bs))
		}
		back := msg.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(bs.Materialize(), back); err != nil || !proto.Equal(back, msg) {
			t.Fatalf("%T: not protobuf's encoding: %v", msg, err)
		}
		bs.Free()
	}
}

// FuzzCodecUnmarshalRequest: whatever the bytes and however they are cut
// into frames, the codec decodes a ModelInferRequest exactly as protobuf
// does, or fails where protobuf fails.
func FuzzCodecUnmarshalRequest(f *testing.F) {
	b, _ := proto.Marshal(inferRequest(40, 0, 20))
	f.Add(b, uint16(3))
	f.Add([]byte{0x3a, 0x80, 0x80, 0x80, 0x80, 0x10}, uint16(1))
	f.Add([]byte{0x3a, 0x05, 1, 2}, uint16(2))
	c := newCodec(16)
	f.Fuzz(func(t *testing.T, b []byte, step uint16) {
		var want inference.ModelInferRequest
		errWant := proto.Unmarshal(b, &want)
		got := &inference.ModelInferRequest{}
		err := c.Unmarshal(pieces(b, int(step)), got)
		defer handoff.TakeRegion(got).Release() // the raw inputs live in it
		if (err == nil) != (errWant == nil) {
			t.Fatalf("codec error %v, protobuf %v", err, errWant)
		}
		if err == nil && !proto.Equal(got, &want) {
			t.Fatal("codec and protobuf disagree")
		}
		// Received by a handler, a message protobuf refuses is the
		// client's mistake: INVALID_ARGUMENT, never a codec error (which
		// grpc-go would answer with INTERNAL).
		for _, target := range []any{new(streamRequest), new(grpcRequest)} {
			if err := c.Unmarshal(pieces(b, int(step)), target); err != nil {
				t.Fatalf("%T: codec error %v", target, err)
			}
			var bad error
			switch r := target.(type) {
			case *streamRequest:
				bad = r.bad
				handoff.TakeRegion(&r.req).Release()
			case *grpcRequest:
				bad = r.bad
				handoff.TakeRegion(&r.req).Release()
			}
			if (bad == nil) != (errWant == nil) {
				t.Fatalf("%T: answer %v, protobuf %v", target, bad, errWant)
			}
			if bad != nil && tritonerr.From(bad).Kind != tritonerr.InvalidArg {
				t.Fatalf("%T: answer %v is not INVALID_ARG", target, bad)
			}
		}
	})
}
