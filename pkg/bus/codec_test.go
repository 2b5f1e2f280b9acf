package bus

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestPayloadSlice(t *testing.T) {
	whole := pattern(1000, 3)
	for _, cuts := range [][]int{{}, {0}, {1000}, {10, 10, 500}, {1, 2, 3, 999}, {250, 500, 750}} {
		var parts [][]byte
		prev := 0
		for _, c := range append(cuts, 1000) {
			parts = append(parts, whole[prev:c])
			prev = c
		}
		p := newPayload(parts...)
		if p.Len() != 1000 || !bytes.Equal(p.bytes(), whole) {
			t.Fatalf("cuts %v: bytes differ", cuts)
		}
		for _, size := range []int{1, 7, 100, 333, 1000} {
			for off := 0; off < 1000; off += size {
				end := min(off+size, 1000)
				if got := p.slice(off, end); !bytes.Equal(got, whole[off:end]) {
					t.Fatalf("cuts %v: slice(%d, %d) differs", cuts, off, end)
				}
			}
		}
	}
}

// partsCodec encodes a BytesValue as its tag and length, then the value in
// parts of 100 KiB (as a codec of large tensors would, without copying),
// and decodes keeping a reference into the body.
type partsCodec struct{}

func (partsCodec) Marshal(m proto.Message) ([][]byte, error) {
	v, ok := m.(*wrapperspb.BytesValue)
	if !ok {
		return protoCodec{}.Marshal(m)
	}
	head := protowire.AppendTag(nil, 1, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(v.Value)))
	parts := [][]byte{head}
	for b := v.Value; len(b) > 0; {
		n := min(len(b), 100<<10)
		parts = append(parts, b[:n])
		b = b[n:]
	}
	return parts, nil
}

func (partsCodec) Unmarshal(b []byte, m proto.Message) error {
	v, ok := m.(*wrapperspb.BytesValue)
	if !ok || len(b) == 0 {
		return proto.Unmarshal(b, m)
	}
	_, _, n := protowire.ConsumeTag(b)
	val, k := protowire.ConsumeBytes(b[n:])
	if k < 0 {
		return protowire.ParseError(k)
	}
	v.Value = val // aliases b
	return nil
}

// TestCodecParts: with a codec that encodes in parts, requests and replies
// far larger than the max payload travel chunked, cut across the parts, both
// ways, and arrive intact.
func TestCodecParts(t *testing.T) {
	s := startServer(t, 0)
	client, srv := connect(t, s, WithCodec(partsCodec{})), connect(t, s, WithCodec(partsCodec{}))
	mustHandle(t, srv, "test.parts", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		v := &wrapperspb.BytesValue{}
		if err := (partsCodec{}).Unmarshal(req, v); err != nil {
			return nil, err
		}
		for i := range v.Value {
			v.Value[i] ^= 0xff
		}
		return v, nil
	})
	for _, n := range []int{0, 10, 1 << 20, 5<<20 + 7} {
		in := pattern(n, 5)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out := &wrapperspb.BytesValue{}
		err := client.Request(ctx, "test.parts", bytesValue(bytes.Clone(in)), out)
		cancel()
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		for i := range in {
			in[i] ^= 0xff
		}
		if !bytes.Equal(out.Value, in) {
			t.Fatalf("%d bytes: reply differs", n)
		}
	}
}

// framedCodec is protobuf's codec that encodes behind the room the bus asks
// for (FramedMarshaler), counting the messages it framed.
type framedCodec struct{ framed *atomic.Int64 }

func (framedCodec) Marshal(m proto.Message) ([][]byte, error) { return protoCodec{}.Marshal(m) }
func (framedCodec) Unmarshal(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }

func (c framedCodec) MarshalFramed(m proto.Message, room int, buf []byte) ([]byte, error) {
	b, err := proto.MarshalOptions{}.MarshalAppend(append(buf[:0], bytes.Repeat([]byte{0xee}, room)...), m)
	c.framed.Add(1)
	return b, err
}

// TestCodecFramed: a request encoded behind room for the envelope arrives
// intact with its deadline (the envelope written into the room), without
// one (the room left out), and chunked when larger than the max payload.
func TestCodecFramed(t *testing.T) {
	s := startServer(t, 0)
	var framed atomic.Int64
	client, srv := connect(t, s, WithCodec(framedCodec{&framed})), connect(t, s)
	mustHandle(t, srv, "test.framed", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		v := &wrapperspb.BytesValue{}
		if err := proto.Unmarshal(req, v); err != nil {
			return nil, err
		}
		if _, ok := ctx.Deadline(); ok {
			v.Value = append(v.Value, 'd')
		}
		return v, nil
	})
	for _, n := range []int{0, 10, 1 << 20, 5<<20 + 7} {
		for _, timed := range []bool{true, false} {
			in := pattern(n, 7)
			ctx, cancel := context.Background(), func() {}
			if timed {
				ctx, cancel = context.WithTimeout(ctx, 20*time.Second)
			}
			before := framed.Load()
			out := &wrapperspb.BytesValue{}
			err := client.Request(ctx, "test.framed", bytesValue(in), out)
			cancel()
			if err != nil {
				t.Fatalf("%d bytes, deadline %v: %v", n, timed, err)
			}
			if framed.Load() != before+1 {
				t.Fatalf("%d bytes: not framed", n)
			}
			want := in
			if timed {
				want = append(bytes.Clone(in), 'd')
			}
			if !bytes.Equal(out.Value, want) {
				t.Fatalf("%d bytes, deadline %v: reply differs", n, timed)
			}
		}
	}
}
