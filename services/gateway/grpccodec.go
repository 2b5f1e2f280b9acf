package gateway

import (
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // the fallback codec
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/infer"
	"github.com/nereid-io/nereid/pkg/infercodec"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// codec is the gRPC server codec: protobuf, except for the two messages
// that carry large tensors, which it handles without the copies of the
// generic one (it would gather a request into one buffer, then copy every
// tensor out of it, and marshal a response into one more buffer):
//
//   - ModelInferRequest with at least threshold bytes of raw_input_contents
//     is decoded with every raw input copied once, from the received frames
//     straight into one buffer: a Region (a /dev/shm file) attached to the
//     request for forwardInfer when an executor of this node in another
//     process serves the model, the heap for one of this process, else an
//     anonymous mapping released as soon as the request is sent;
//   - ModelInferResponse (alone or in a ModelStreamInferResponse) with large
//     raw outputs is written as the encoded small fields followed by the
//     outputs' own memory; the hand-off memory they lie in is released when
//     the transport has sent them.
type codec struct {
	proto     encoding.CodecV2
	threshold int
	// route says where a request for model/version goes; nil: always
	// decode into a shared Region.
	route func(model, version string) handoff.Route
}

func newCodec(threshold int) *codec {
	return &codec{proto: encoding.GetCodecV2("proto"), threshold: threshold}
}

// grpcCodec is the gateway's codec, which decodes large inputs into shared
// memory only for requests bound for another process of this node.
func (g *Gateway) grpcCodec() *codec {
	c := newCodec(g.handoffThreshold())
	c.route = func(model, version string) handoff.Route {
		vv, err := g.resolveRequest(model, version)
		if err != nil {
			return handoff.RouteBus
		}
		return g.handoffRoute(model, vv)
	}
	return c
}

func (c *codec) Name() string { return "proto" }

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	// An infer request that does not decode is the client's mistake, kept
	// for its handler to answer: grpc-go answers an error of the codec
	// itself with INTERNAL, and ends a stream with it.
	switch t := v.(type) {
	case *grpcRequest:
		if err := c.unmarshalUnary(data, t); err != nil {
			t.bad = badRequest(data, err)
		}
		return nil
	case *streamRequest:
		if err := c.unmarshal(data, &t.req); err != nil {
			t.bad = badRequest(data, err)
		}
		return nil
	}
	return c.unmarshal(data, v)
}

// unmarshalUnary decodes a unary infer request (modelInferHandler): a
// small one is copied into r and decoded with its lists in r's room.
func (c *codec) unmarshalUnary(data mem.BufferSlice, r *grpcRequest) error {
	if n := data.Len(); n <= len(r.body) && n < c.threshold {
		b := r.body[:n]
		data.CopyTo(b)
		err := infercodec.UnmarshalRequestIn(b, &r.req, &r.room)
		r.fw.utf8Valid = err == nil // the decoder checked every string
		return err
	}
	return c.unmarshal(data, &r.req)
}

// streamRequest is what ModelStreamInfer receives a request into, so that
// a request that does not decode is answered as the client's mistake, in
// its turn, and the stream goes on.
type streamRequest struct {
	req inference.ModelInferRequest
	bad error // set when req did not decode: badRequest's answer
}

// badRequest is the answer to an infer request whose message did not
// decode (err, protobuf's words): INVALID_ARGUMENT, naming the string when
// one that is not UTF-8 is why (protobuf refuses those in proto3 strings,
// and names only the field's type).
func badRequest(data mem.BufferSlice, err error) error {
	var req inference.ModelInferRequest
	if req.UnmarshalVT(data.Materialize()) == nil {
		if bad := infer.CheckUTF8(&req); bad != nil {
			return bad
		}
	}
	return tritonerr.InvalidArgf("malformed ModelInferRequest message: %v", err)
}

func (c *codec) unmarshal(data mem.BufferSlice, v any) error {
	if req, ok := v.(*inference.ModelInferRequest); ok {
		if data.Len() >= c.threshold {
			if done, err := c.unmarshalRequest(data, req); done {
				return err
			}
			return c.unmarshalProto(data, v)
		}
		// A small request: one copy of the message (gRPC reuses its
		// buffers), which the request's strings and bytes alias rather
		// than each being copied out of it; the generated decoder rather
		// than protobuf's reflection (infercodec leaves to protobuf what
		// the two would read differently, malformed messages included).
		return infercodec.UnmarshalRequest(data.Materialize(), req)
	}
	return c.unmarshalProto(data, v)
}

// grpcPooledMax is the size of the largest message the generic codec
// gathers or encodes into a buffer of grpc-go's default pool, which would
// keep a larger one (an anonymous sync.Pool) after the message is done
// with; larger messages get buffers of their own, left to the collector.
const grpcPooledMax = 1 << 20

// unmarshalProto is the generic codec's Unmarshal, gathering a large
// message into a buffer of its own.
func (c *codec) unmarshalProto(data mem.BufferSlice, v any) error {
	if data.Len() <= grpcPooledMax {
		return c.proto.Unmarshal(data, v)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	return proto.Unmarshal(data.Materialize(), m)
}

// marshalProto is the generic codec's Marshal, encoding a large message
// into a buffer of its own.
func (c *codec) marshalProto(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok || proto.Size(m) <= grpcPooledMax {
		return c.proto.Marshal(v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	switch e := v.(type) {
	case *tracedReply:
		start := time.Now()
		bs, err := c.Marshal(e.msg)
		e.g.sent(e.front, start)
		return bs, err
	case *encodedStreamResponse:
		return e.buffers(), nil
	case *encodedResponse:
		return e.bufs[:], nil
	}
	var resp *inference.ModelInferResponse
	var wrap protowire.Number
	var errMsg string
	switch m := v.(type) {
	case *inference.ModelInferResponse:
		resp = m
	case *inference.ModelStreamInferResponse:
		resp, wrap, errMsg = m.GetInferResponse(), 2, m.GetErrorMessage()
	}
	if resp == nil {
		return c.marshalProto(v)
	}
	// The hand-off memory the outputs may lie in: released once the
	// transport is done with buffers that point into it, or at once when
	// the response is copied into one buffer below.
	out := handoff.TakeResponse(resp)
	if bs, ok := c.marshalResponse(resp, wrap, errMsg, out); ok {
		return bs, nil
	}
	defer out.Release()
	return c.marshalProto(v)
}

// frames reads a BufferSlice without gathering it.
type frames struct {
	bufs [][]byte
	i    int // current buffer
	off  int // offset in it
}

var errTruncated = errors.New("truncated message")

func (f *frames) byte() (byte, error) {
	for f.i < len(f.bufs) && f.off == len(f.bufs[f.i]) {
		f.i, f.off = f.i+1, 0
	}
	if f.i == len(f.bufs) {
		return 0, errTruncated
	}
	b := f.bufs[f.i][f.off]
	f.off++
	return b, nil
}

func (f *frames) varint() (uint64, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		b, err := f.byte()
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

// read copies len(dst) bytes into dst, or skips them when dst is nil and
// n is given.
func (f *frames) read(dst []byte, n int) error {
	if dst != nil {
		n = len(dst)
	}
	for n > 0 {
		if f.i == len(f.bufs) {
			return errTruncated
		}
		b := f.bufs[f.i][f.off:]
		k := min(n, len(b))
		if dst != nil {
			copy(dst, b[:k])
			dst = dst[k:]
		}
		n -= k
		f.off += k
		if f.off == len(f.bufs[f.i]) {
			f.i, f.off = f.i+1, 0
		}
	}
	return nil
}

func (f *frames) done() bool {
	for f.i < len(f.bufs) && f.off == len(f.bufs[f.i]) {
		f.i, f.off = f.i+1, 0
	}
	return f.i == len(f.bufs)
}

const fieldRawInputContents = 7 // ModelInferRequest.raw_input_contents

// walk visits the top-level fields of a message. For length-delimited
// fields it passes the length; fn consumes the payload itself.
func walk(f *frames, fn func(num protowire.Number, typ protowire.Type, v uint64) error) error {
	for !f.done() {
		tag, err := f.varint()
		if err != nil {
			return err
		}
		num, typ := protowire.DecodeTag(tag)
		if num <= 0 {
			return errors.New("invalid field number")
		}
		var v uint64
		switch typ {
		case protowire.VarintType, protowire.BytesType:
			if v, err = f.varint(); err != nil {
				return err
			}
		case protowire.Fixed32Type, protowire.Fixed64Type:
		default:
			return errors.New("groups are not supported")
		}
		if err := fn(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

// unmarshalRequest decodes req from data in two passes over the frames: one
// that copies the small fields into a buffer for proto.Unmarshal and sizes
// the raw inputs, one that copies the raw inputs into a single buffer,
// which is a shared Region when their executor is on this node (it maps
// the file: no further copy), the heap when it is in this process, else an
// anonymous mapping that goes back to the system as soon as the request
// has been sent over the bus. done is false when the message
// is better left to the generic codec (small raw inputs, or a form it does
// not expect), which then reports any error.
func (c *codec) unmarshalRequest(data mem.BufferSlice, req *inference.ModelInferRequest) (done bool, err error) {
	bufs := make([][]byte, len(data))
	for i, b := range data {
		bufs[i] = b.ReadOnlyData()
	}
	rawTotal, count := 0, 0
	var rest []byte
	f := &frames{bufs: bufs}
	err = walk(f, func(num protowire.Number, typ protowire.Type, v uint64) error {
		if typ == protowire.BytesType && v > uint64(data.Len()) {
			return errTruncated
		}
		if num == fieldRawInputContents && typ == protowire.BytesType {
			rawTotal += int(v)
			count++
			return f.read(nil, int(v))
		}
		rest = protowire.AppendTag(rest, num, typ)
		switch typ {
		case protowire.VarintType:
			rest = protowire.AppendVarint(rest, v)
			return nil
		case protowire.BytesType:
			rest = protowire.AppendVarint(rest, v)
		case protowire.Fixed32Type:
			v = 4
		default:
			v = 8
		}
		n := len(rest)
		rest = append(rest, make([]byte, v)...)
		return f.read(rest[n:], 0)
	})
	if err != nil || rawTotal < c.threshold {
		return false, nil
	}
	if err := proto.Unmarshal(rest, req); err != nil {
		return false, nil
	}

	var region *handoff.Region
	route := handoff.RouteNode
	if c.route != nil {
		route = c.route(req.GetModelName(), req.GetModelVersion())
	}
	switch route {
	case handoff.RouteNode:
		region, _ = handoff.Create(rawTotal, true)
	case handoff.RouteBus:
		region, _ = handoff.NewAnon(rawTotal)
	}
	if region == nil {
		region = handoff.NewHeap(rawTotal)
	}
	raw := make([][]byte, 0, count)
	pos := 0
	dst := region.Bytes()
	f = &frames{bufs: bufs}
	err = walk(f, func(num protowire.Number, typ protowire.Type, v uint64) error {
		switch {
		case num == fieldRawInputContents && typ == protowire.BytesType:
			b := dst[pos : pos+int(v) : pos+int(v)]
			pos += int(v)
			raw = append(raw, b)
			return f.read(b, 0)
		case typ == protowire.BytesType:
			return f.read(nil, int(v))
		case typ == protowire.Fixed32Type:
			return f.read(nil, 4)
		case typ == protowire.Fixed64Type:
			return f.read(nil, 8)
		}
		return nil
	})
	if err != nil {
		region.Release()
		return false, nil
	}
	req.RawInputContents = raw
	handoff.AttachRegion(req, region) // released once forwarded
	return true, nil
}

const (
	fieldRawOutputContents = 6 // ModelInferResponse.raw_output_contents
	fieldStreamError       = 1 // ModelStreamInferResponse.error_message
)

// releasePool is the mem.BufferPool of the buffers that point into a
// response's outputs: when the transport has released the last of them,
// the memory they point into is released.
type releasePool struct {
	left    atomic.Int32
	release func()
}

func (p *releasePool) Get(int) *[]byte { panic("gateway: releasePool hands out nothing") }

func (p *releasePool) Put(*[]byte) {
	if p.left.Add(-1) == 0 && p.release != nil {
		p.release()
	}
}

// marshalResponse writes resp (wrapped as field wrap of a
// ModelStreamInferResponse with errMsg, when wrap is not 0) as buffers
// that point into its large raw outputs instead of copying them; out is
// released when the transport has released them. ok is false for
// responses without large outputs: the generic codec does those.
func (c *codec) marshalResponse(resp *inference.ModelInferResponse, wrap protowire.Number, errMsg string, out *handoff.Outgoing) (mem.BufferSlice, bool) {
	raw := resp.GetRawOutputContents()
	large := 0
	for _, b := range raw {
		if !mem.IsBelowBufferPoolingThreshold(len(b)) && len(b) >= c.threshold/4 {
			large++
		}
	}
	if large == 0 {
		return nil, false
	}
	resp.RawOutputContents = nil
	small, err := proto.MarshalOptions{}.Marshal(resp)
	resp.RawOutputContents = raw
	if err != nil {
		return nil, false
	}
	size := len(small)
	for _, b := range raw {
		size += protowire.SizeTag(fieldRawOutputContents) + protowire.SizeBytes(len(b))
	}
	var head []byte
	if wrap != 0 {
		if errMsg != "" {
			head = protowire.AppendTag(head, fieldStreamError, protowire.BytesType)
			head = protowire.AppendString(head, errMsg)
		}
		head = protowire.AppendTag(head, wrap, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(size))
	}
	head = append(head, small...)

	pool := &releasePool{}
	if out != nil {
		pool.release = out.Release
	}
	pool.left.Store(int32(large) + 1) // +1: ours, dropped below
	var bs mem.BufferSlice
	for _, b := range raw {
		head = protowire.AppendTag(head, fieldRawOutputContents, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(len(b)))
		if mem.IsBelowBufferPoolingThreshold(len(b)) || len(b) < c.threshold/4 {
			head = append(head, b...) // small: copied, so nothing else points into the outputs
			continue
		}
		bs = append(bs, mem.SliceBuffer(head))
		head = nil
		data := b
		bs = append(bs, mem.NewBuffer(&data, pool))
	}
	if len(head) > 0 {
		bs = append(bs, mem.SliceBuffer(head))
	}
	pool.Put(nil)
	return bs, true
}
