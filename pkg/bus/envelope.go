package bus

import (
	"encoding/binary"
	"time"

	"github.com/nats-io/nats.go"
)

// A request that fits in one message and carries nothing in NATS headers
// but its deadline and cancellation key carries them in front of its body
// instead, in an envelope: no headers to write, send and parse (textproto,
// a map and its strings on both ends) on every request. The envelope is
//
//	0x00 0x02 <deadline: Unix nanoseconds, 8 bytes big-endian; 0 = none> <key: 8 bytes>
//
// (0x00 0x01 and the deadline alone, as earlier versions send, is read
// too) and a request has one only when it has no headers. No protobuf
// encoding starts with 0x00 (field number 0 does not exist), so a body
// without an envelope is never read as one.
const (
	envelopeMark     = 0x00
	envelopeDeadline = 0x01
	envelopeKeyed    = 0x02
	envelopeLen      = 18
	envelopeLenV1    = 10
)

// enveloped returns body behind an envelope carrying deadline d (zero for
// none) and the request's cancellation key.
func enveloped(d time.Time, key uint64, body *payload) []byte {
	if body.framed != nil {
		putEnvelope(body.framed, d, key)
		return body.framed
	}
	buf := make([]byte, envelopeLen, envelopeLen+body.Len())
	putEnvelope(buf, d, key)
	for _, p := range body.parts {
		buf = append(buf, p...)
	}
	return buf
}

func putEnvelope(buf []byte, d time.Time, key uint64) {
	buf[0], buf[1] = envelopeMark, envelopeKeyed
	var ns int64
	if !d.IsZero() {
		ns = d.UnixNano()
	}
	binary.BigEndian.PutUint64(buf[2:10], uint64(ns))
	binary.BigEndian.PutUint64(buf[10:envelopeLen], key)
}

// unwrap takes the envelope off request m's body, if it has one, and
// returns the request's deadline and cancellation key (0 for none), from
// the envelope or the headers.
func unwrap(m *nats.Msg) (d time.Time, timed bool, key uint64) {
	if len(m.Header) > 0 {
		d, timed = deadline(m.Header)
		return d, timed, cancelKey(m.Header)
	}
	if len(m.Data) < envelopeLenV1 || m.Data[0] != envelopeMark {
		return time.Time{}, false, 0
	}
	switch {
	case m.Data[1] == envelopeDeadline:
		d = time.Unix(0, int64(binary.BigEndian.Uint64(m.Data[2:10])))
		m.Data = m.Data[envelopeLenV1:]
		return d, true, 0
	case m.Data[1] == envelopeKeyed && len(m.Data) >= envelopeLen:
		ns := int64(binary.BigEndian.Uint64(m.Data[2:10]))
		key = binary.BigEndian.Uint64(m.Data[10:envelopeLen])
		m.Data = m.Data[envelopeLen:]
		if ns == 0 {
			return time.Time{}, false, key
		}
		return time.Unix(0, ns), true, key
	}
	return time.Time{}, false, 0
}
