package bus

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Header names of the wire format (see doc.go). NATS header keys are
// case-sensitive; these are sent exactly as written.
const (
	// HeaderDeadline is the requester's deadline in Unix nanoseconds (decimal).
	HeaderDeadline = "Nereid-Deadline"
	// HeaderKey is a request's cancellation key (hexadecimal): a random
	// number only the requester and the responder know, which a
	// cancellation must carry (cancel.go).
	HeaderKey = "Nereid-Key"
	// HeaderErrorKind is Triton's error kind of a failed request ("INVALID_ARG").
	HeaderErrorKind = "Nereid-Error-Kind"
	// HeaderError is the error message, percent-escaped (see escapeValue).
	HeaderError = "Nereid-Error"
	// HeaderSize is the total size in bytes of a chunked body; it marks the
	// first chunk of a request or reply.
	HeaderSize = "Nereid-Size"
	// HeaderChunk is the sequence number of a chunk, from 0.
	HeaderChunk = "Nereid-Chunk"
	// HeaderContinue, sent by a responder to a chunked request's reply
	// subject, names the private subject the remaining chunks go to. It also
	// acknowledges chunk 0.
	HeaderContinue = "Nereid-Continue"
	// HeaderAck acknowledges every chunk up to and including its value.
	HeaderAck = "Nereid-Ack"
	// HeaderAbort tells the other side of a chunked transfer to give up.
	HeaderAbort = "Nereid-Abort"
)

// NATS's own status header, set on the "no responders" message (status 503).
const (
	natsStatus       = "Status"
	natsNoResponders = "503"
)

// HeaderCarrier adapts nats.Header to OpenTelemetry's TextMapCarrier. NATS
// keys are case-sensitive, so "traceparent" stays "traceparent" (an
// http.Header carrier would canonicalise it to "Traceparent").
type HeaderCarrier nats.Header

// Get returns the first value of key.
func (h HeaderCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key.
func (h HeaderCarrier) Set(key, value string) { h[key] = []string{value} }

// Keys lists the keys present.
func (h HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

func get(h nats.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func isNoResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && get(m.Header, natsStatus) == natsNoResponders
}

func setDeadline(h nats.Header, d time.Time) {
	h[HeaderDeadline] = []string{strconv.FormatInt(d.UnixNano(), 10)}
}

// setCancelKey writes the request's cancellation key (HeaderKey).
func setCancelKey(h nats.Header, key uint64) {
	h[HeaderKey] = []string{strconv.FormatUint(key, 16)}
}

// cancelKey reads HeaderKey; 0 when absent or malformed.
func cancelKey(h nats.Header) uint64 {
	s := get(h, HeaderKey)
	if s == "" {
		return 0
	}
	k, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0
	}
	return k
}

func deadline(h nats.Header) (time.Time, bool) {
	s := get(h, HeaderDeadline)
	if s == "" {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// maxErrorLen bounds the error message carried in a header, so an error reply
// always fits in one message.
const maxErrorLen = 16 << 10

// errorHeader encodes err as reply headers.
func errorHeader(err error) nats.Header {
	te := tritonerr.From(err)
	msg := te.Msg
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen] + "..."
	}
	return nats.Header{
		HeaderErrorKind: []string{te.Kind.String()},
		HeaderError:     []string{escapeValue(msg)},
	}
}

// remoteError rebuilds the error carried in h, or returns nil.
func remoteError(h nats.Header) *tritonerr.Error {
	kind, hasKind := h[HeaderErrorKind]
	msg, hasMsg := h[HeaderError]
	if !hasKind && !hasMsg {
		return nil
	}
	e := &tritonerr.Error{Kind: tritonerr.Unknown}
	if len(kind) > 0 {
		e.Kind = tritonerr.ParseKind(kind[0])
	}
	if len(msg) > 0 {
		e.Msg = unescapeValue(msg[0])
	}
	return e
}

// escapeValue makes s survive as a NATS header value: nats.go trims leading
// and trailing white space and turns CR and LF into spaces, so '%', control
// characters and edge spaces are written as %XX. Ordinary messages pass
// unchanged.
func escapeValue(s string) string {
	need := false
	for i := 0; i < len(s); i++ {
		if mustEscape(s, i) {
			need = true
			break
		}
	}
	if !need {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if mustEscape(s, i) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xF])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func mustEscape(s string, i int) bool {
	c := s[i]
	if c == '%' || c < ' ' || c == 0x7f {
		return true
	}
	return c == ' ' && (i == 0 || i == len(s)-1)
}

func unescapeValue(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) {
			hi, lo := unhexAny(s[i+1]), unhexAny(s[i+2])
			if hi >= 0 && lo >= 0 {
				b = append(b, byte(hi<<4|lo))
				i += 2
				continue
			}
		}
		b = append(b, c)
	}
	return string(b)
}

func unhexAny(c byte) int {
	if 'a' <= c && c <= 'f' {
		return int(c-'a') + 10
	}
	return unhex(c)
}

// headerSize is an upper bound of the encoded size of h, as nats.go writes
// it ("NATS/1.0\r\n", "key: value\r\n" per value, "\r\n").
func headerSize(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}
