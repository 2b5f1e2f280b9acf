package bus

import (
	"runtime"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
)

// Codec encodes the messages of Request and the replies of Handle, and
// decodes Request's replies. The default is protobuf's own Marshal and
// Unmarshal. A codec for messages that carry large byte fields can encode
// them in parts that are sent as they are (never joined into one buffer:
// chunks are cut across the parts) and decode them keeping references into
// the received body, which belongs to the caller alone.
type Codec interface {
	// Marshal returns m's encoding as parts whose concatenation is the
	// message.
	Marshal(m proto.Message) ([][]byte, error)
	// Unmarshal decodes b into m; m may keep references into b.
	Unmarshal(b []byte, m proto.Message) error
}

// FramedMarshaler is what a Codec may also implement to encode a small
// message behind room bytes kept free in front of it in the same buffer,
// where Request puts the envelope that carries the deadline (envelope.go):
// the message is then encoded once, into the buffer that is published.
// MarshalFramed returns nil for a message it would encode in parts. It
// encodes into buf when buf's capacity suffices: Request lends a pooled
// buffer, which it takes back once the message is published (NATS copies
// what it publishes), so that a small request's encoding costs no
// allocation.
type FramedMarshaler interface {
	MarshalFramed(m proto.Message, room int, buf []byte) ([]byte, error)
}

// frameSize is the capacity of the buffers Request lends MarshalFramed:
// small requests (a few tensors of up to a few hundred bytes) fit.
const frameSize = 1024

type frameBuf [frameSize]byte

// frames are the buffers Request lends MarshalFramed (pointers to arrays,
// so that putting one back costs nothing).
var frames = sync.Pool{New: func() any { return new(frameBuf) }}

// WithCodec sets the Conn's Codec (default: protobuf).
func WithCodec(c Codec) Option { return func(o *options) { o.codec = c } }

type protoCodec struct{}

func (protoCodec) Marshal(m proto.Message) ([][]byte, error) {
	b, err := proto.Marshal(m)
	return [][]byte{b}, err
}

func (protoCodec) Unmarshal(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }

// payload is a body in parts, sent without joining them: a chunk that lies
// inside one part is a slice of it, one that straddles parts is copied into
// a chunk-sized scratch buffer (NATS copies what it publishes, so the
// buffer is reused).
type payload struct {
	parts   [][]byte
	n       int
	scratch []byte
	// framed, when not nil, is the whole body (parts is nil) behind
	// envelopeLen free bytes of the same buffer (FramedMarshaler).
	framed []byte
}

func newPayload(parts ...[]byte) *payload {
	p := &payload{parts: parts}
	for _, b := range parts {
		p.n += len(b)
	}
	return p
}

// Len is the body's size.
func (p *payload) Len() int { return p.n }

// slice returns bytes [off, end) of the body; a copy is valid until the
// next call.
func (p *payload) slice(off, end int) []byte {
	if p.framed != nil {
		return p.framed[envelopeLen+off : envelopeLen+end]
	}
	start := 0
	for i, b := range p.parts {
		if off < start+len(b) || (off == end && off == start+len(b)) {
			if end <= start+len(b) {
				return b[off-start : end-start]
			}
			if cap(p.scratch) < end-off {
				p.scratch = make([]byte, end-off)
			}
			dst := p.scratch[:end-off]
			k := copy(dst, b[off-start:])
			for _, q := range p.parts[i+1:] {
				if k == len(dst) {
					break
				}
				k += copy(dst[k:], q)
			}
			return dst
		}
		start += len(b)
	}
	return nil
}

// bytes is the whole body, joined only when it has several parts.
func (p *payload) bytes() []byte {
	if p.framed != nil {
		return p.framed[envelopeLen:]
	}
	if len(p.parts) == 1 {
		return p.parts[0]
	}
	return p.slice(0, p.n)
}

// Every chunk arrives in a message nats.go allocated for it, garbage as soon
// as it is copied into place. On a heap that holds a few large tensors, Go's
// pacing lets as much garbage as the live heap pile up before it collects:
// a 256 MiB transfer would leave up to 256 MiB more resident. A collection
// every chunkGarbageGC bytes received (in all transfers together) bounds
// that; tensors are pointer-free memory, so a collection costs little.
const chunkGarbageGC = 64 << 20

var chunkGarbage atomic.Int64

var collecting atomic.Bool

// chunkReceived accounts for a chunk copied into place.
func chunkReceived(n int) {
	if chunkGarbage.Add(int64(n)) < chunkGarbageGC {
		return
	}
	chunkGarbage.Store(0)
	if collecting.CompareAndSwap(false, true) {
		go func() {
			defer collecting.Store(false)
			runtime.GC()
		}()
	}
}
