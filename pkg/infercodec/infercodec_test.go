package infercodec

import (
	"bytes"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

func big(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*3) ^ seed
	}
	return b
}

func join(parts [][]byte) []byte { return bytes.Join(parts, nil) }

func inside(b, buf []byte) bool {
	if len(b) == 0 {
		return true
	}
	p, s := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&buf[0]))
	return p >= s && p+uintptr(len(b)) <= s+uintptr(len(buf))
}

// TestRoundTrip: the parts join into protobuf's own encoding (so any peer
// reads them), and decoding gives protobuf's own result with the raw
// contents sliced from the buffer, for small and large messages.
func TestRoundTrip(t *testing.T) {
	for _, sizes := range [][]int{{}, {0}, {10, 20}, {MinParts}, {1 << 20, 5, 3 << 20}, {MinParts - 1, 1}} {
		req := &inference.ModelInferRequest{ModelName: "m", ModelVersion: "1", Id: "x",
			Parameters: map[string]*inference.InferParameter{"k": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 3}}}}
		resp := &inference.ModelInferResponse{ModelName: "m", Id: "x"}
		for i, n := range sizes {
			req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: "IN", Datatype: "UINT8", Shape: []int64{int64(n)}})
			req.RawInputContents = append(req.RawInputContents, big(n, byte(i)))
			resp.Outputs = append(resp.Outputs, &inference.ModelInferResponse_InferOutputTensor{Name: "OUT", Datatype: "UINT8", Shape: []int64{int64(n)}})
			resp.RawOutputContents = append(resp.RawOutputContents, big(n, byte(i+1)))
		}
		for _, m := range []proto.Message{req, resp} {
			parts, err := Codec{}.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			b := join(parts)
			back := m.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(b, back); err != nil || !proto.Equal(back, m) {
				t.Fatalf("sizes %v: parts are not a valid encoding of the message: %v", sizes, err)
			}
			if len(b) != len(want) {
				t.Fatalf("sizes %v: %d bytes, protobuf's encoding has %d", sizes, len(b), len(want))
			}
			got := m.ProtoReflect().New().Interface()
			if err := (Codec{}).Unmarshal(b, got); err != nil || !proto.Equal(got, m) {
				t.Fatalf("sizes %v: decoded message differs: %v", sizes, err)
			}
			// Framed into a buffer of its own, and into a lent one, which
			// it uses when large enough.
			lent := make([]byte, 0, 10+len(b)+(len(sizes)%2))
			for _, buf := range [][]byte{nil, lent, lent[: 0 : 9+len(b)]} {
				framed, err := Codec{}.MarshalFramed(m, 10, buf)
				if _, isReq := m.(*inference.ModelInferRequest); !isReq || total(sizes) >= MinParts {
					if framed != nil || err != nil {
						t.Fatalf("sizes %v: %T framed (%v), which goes to Marshal", sizes, m, err)
					}
					continue
				}
				if err != nil || len(framed) != 10+len(b) || !bytes.Equal(framed[10:], b) {
					t.Fatalf("sizes %v: framed encoding differs from Marshal's (%v)", sizes, err)
				}
				if inLent := cap(buf) > 0 && &framed[0] == &buf[:1][0]; inLent != (cap(buf) >= 10+len(b)) {
					t.Fatalf("sizes %v: lent a buffer of %d bytes for %d, used it: %v", sizes, cap(buf), 10+len(b), inLent)
				}
			}
			var raw [][]byte
			switch v := got.(type) {
			case *inference.ModelInferRequest:
				raw = v.RawInputContents
			case *inference.ModelInferResponse:
				raw = v.RawOutputContents
			}
			total := 0
			for _, r := range raw {
				total += len(r)
			}
			for _, r := range raw {
				if total >= MinParts && !inside(r, b) {
					t.Fatalf("sizes %v: a large message's raw contents were copied", sizes)
				}
				if total >= MinParts && cap(r) != len(r) {
					t.Fatalf("sizes %v: raw entry not capped", sizes)
				}
			}
		}
	}
}

func total(sizes []int) int {
	n := 0
	for _, s := range sizes {
		n += s
	}
	return n
}

func TestMalformed(t *testing.T) {
	for _, b := range [][]byte{{0xff}, {0x3a, 0x05, 1}, {0x3a, 0xff, 0xff, 0xff, 0xff, 0x0f}} {
		if err := UnmarshalRequest(b, &inference.ModelInferRequest{}); err == nil {
			t.Errorf("%x accepted", b)
		}
	}
}

func FuzzUnmarshalRequest(f *testing.F) {
	// Small inputs reach the aliasing path with a small threshold (large
	// ones make the fuzzer crawl).
	minParts = 4
	defer func() { minParts = MinParts }()
	parts, _ := Codec{}.Marshal(&inference.ModelInferRequest{ModelName: "m", Id: "i", RawInputContents: [][]byte{big(20, 1), {1, 2}}})
	f.Add(join(parts))
	f.Add([]byte{0x3a, 0x02, 1, 2})
	f.Add([]byte{0x3a, 0x05, 1, 2, 3, 4, 5, 0x0a, 0x01, 'm'})
	// An input's shape as a ten-byte varint that overflows 64 bits (its
	// last byte above 1): protobuf refuses it.
	f.Add([]byte{0x2a, 0x0f, 0x0a, 0x01, 'x', 0x1a, 0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x31})
	f.Fuzz(func(t *testing.T, b []byte) {
		var a, want inference.ModelInferRequest
		errA := UnmarshalRequest(b, &a)
		errW := proto.Unmarshal(b, &want)
		if (errA == nil) != (errW == nil) {
			t.Fatalf("aliasing decoder error %v, protobuf %v", errA, errW)
		}
		if errA == nil && !proto.Equal(&a, &want) {
			t.Fatal("decoders disagree")
		}
		// Decoding into room of the caller's reads the same.
		var c inference.ModelInferRequest
		var room RequestRoom
		errC := UnmarshalRequestIn(b, &c, &room)
		if (errC == nil) != (errW == nil) {
			t.Fatalf("decoder with room: error %v, protobuf %v", errC, errW)
		}
		if errC == nil && !proto.Equal(&c, &want) {
			t.Fatal("decoder with room disagrees")
		}
		if errC == nil && ((c.Inputs == nil) != (want.Inputs == nil) || (c.Outputs == nil) != (want.Outputs == nil) || (c.RawInputContents == nil) != (want.RawInputContents == nil)) {
			t.Fatal("decoder with room leaves lists empty rather than nil")
		}
	})
}

// TestUnmarshalRequestInAllocs: a request of one input and one output
// decoded into room of the caller's costs the input tensor, its shape and
// the output alone.
func TestUnmarshalRequestInAllocs(t *testing.T) {
	b, err := proto.Marshal(&inference.ModelInferRequest{
		ModelName: "m", Id: "1",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "FP32", Shape: []int64{1, 16}}},
		Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUT"}},
		RawInputContents: [][]byte{big(64, 3)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var req inference.ModelInferRequest
	var room RequestRoom
	n := testing.AllocsPerRun(100, func() {
		if err := UnmarshalRequestIn(b, &req, &room); err != nil {
			t.Fatal(err)
		}
	})
	if n > 3 {
		t.Fatalf("%v allocations, want 3 (the input tensor, its shape and the output)", n)
	}
	if len(req.Inputs) != 1 || &req.Inputs[0] != &room.inputs[0] || len(req.Outputs) != 1 || &req.Outputs[0] != &room.outputs[0] || len(req.RawInputContents) != 1 || &req.RawInputContents[0] != &room.raw[0] {
		t.Fatal("the lists are not in the room")
	}
}
