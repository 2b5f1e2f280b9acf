package bus

import (
	"encoding/binary"
	"time"

	"github.com/nats-io/nats.go"
)

// A request that fits in one message and carries nothing in NATS headers
// but its deadline carries that deadline in front of its body instead, in
// an envelope: no headers to write, send and parse (textproto, a map and
// its strings on both ends) on every request. The envelope is
//
//	0x00 0x01 <deadline: Unix nanoseconds, 8 bytes big-endian> <body>
//
// and a request has one only when it has no headers. No protobuf
// encoding starts with 0x00 (field number 0 does not exist), so a body
// without an envelope is never read as one.
const (
	envelopeMark     = 0x00
	envelopeDeadline = 0x01
	envelopeLen      = 10
)

// enveloped returns body behind an envelope carrying deadline d.
func enveloped(d time.Time, body *payload) []byte {
	if body.framed != nil {
		putEnvelope(body.framed, d)
		return body.framed
	}
	buf := make([]byte, envelopeLen, envelopeLen+body.Len())
	putEnvelope(buf, d)
	for _, p := range body.parts {
		buf = append(buf, p...)
	}
	return buf
}

func putEnvelope(buf []byte, d time.Time) {
	buf[0], buf[1] = envelopeMark, envelopeDeadline
	binary.BigEndian.PutUint64(buf[2:envelopeLen], uint64(d.UnixNano()))
}

// unwrap takes the envelope off request m's body, if it has one, and
// returns the request's deadline, from the envelope or the headers.
func unwrap(m *nats.Msg) (time.Time, bool) {
	if len(m.Header) > 0 {
		return deadline(m.Header)
	}
	if len(m.Data) < envelopeLen || m.Data[0] != envelopeMark || m.Data[1] != envelopeDeadline {
		return time.Time{}, false
	}
	d := time.Unix(0, int64(binary.BigEndian.Uint64(m.Data[2:envelopeLen])))
	m.Data = m.Data[envelopeLen:]
	return d, true
}
