package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// A gRPC message must keep arriving at a minimum rate once it has begun,
// as an HTTP body must (intake.go): a client trickling a message a byte a
// second would otherwise hold its call, its connection and the message's
// buffer for as long as it likes, since the stream is active (keepalive and
// --grpc-max-connection-idle do not apply) and grpc-go has no deadline on
// reading a message. grpc-go exposes nothing of a message before it has
// arrived whole, so the rate is kept beneath it: each server connection
// reads the client's HTTP/2 frames as they pass (frame headers, and the
// five-byte gRPC prefix of each message in DATA frames, nothing more) and
// sets a read deadline by the most pressing message in progress. A
// message that falls behind closes its connection.
//
// The clock of a message runs only while its client may send: when the
// stream's flow-control window is spent because the server has not read
// (a stream whose handler is busy with earlier requests), the client is
// not late. The windows are followed from the server's own frames
// (SETTINGS, WINDOW_UPDATE), read as they are written.

// msgRate is the minimum rate: rate bytes/s after grace, from a message's
// first byte. rate <= 0 turns it off.
type msgRate struct {
	rate  int64
	grace time.Duration
}

// due is when a message that has received n bytes over running time
// (its clock running since since, and ran before for ran) must have
// received one more.
func (r msgRate) due(since time.Time, ran time.Duration, n int64) time.Time {
	return since.Add(r.grace - ran + time.Duration(float64(n+1)/float64(r.rate)*float64(time.Second)))
}

// HTTP/2 frame types and flags read by the tracker (RFC 9113).
const (
	h2Data         = 0x0
	h2Headers      = 0x1
	h2RSTStream    = 0x3
	h2Settings     = 0x4
	h2WindowUpdate = 0x8

	h2EndStream = 0x1
	h2Ack       = 0x1
	h2Padded    = 0x8

	h2SettingInitialWindowSize = 0x4
	h2DefaultWindow            = 65535
	h2ClientPreface            = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// h2Frames splits one direction of an HTTP/2 connection into frames as its
// bytes pass, however they are cut.
type h2Frames struct {
	skip   int // bytes of the client preface still to pass
	hdr    [9]byte
	hn     int // bytes of hdr read
	typ    byte
	flags  byte
	stream uint32
	length int
	left   int    // payload bytes of the frame still to come
	kept   []byte // the payload of a small control frame, collected
	keep   bool
	padLen bool // DATA: the pad length byte comes next
	pad    int  // DATA: padding at the end of the payload
}

// h2Events receives what h2Frames finds.
type h2Events interface {
	// header: a frame begins.
	header(typ, flags byte, stream uint32, length int)
	// data: bytes of a DATA frame's content (padding excluded).
	data(stream uint32, b []byte)
	// end: a frame is over; payload is the whole payload of SETTINGS and
	// WINDOW_UPDATE frames, nil for others.
	end(typ, flags byte, stream uint32, payload []byte)
}

// maxKept bounds a control frame's payload that is collected: larger ones
// (malformed, which grpc-go refuses) are passed over.
const maxKept = 1 << 10

func (f *h2Frames) feed(b []byte, ev h2Events) {
	for len(b) > 0 {
		if f.skip > 0 {
			k := min(f.skip, len(b))
			f.skip -= k
			b = b[k:]
			continue
		}
		if f.hn < len(f.hdr) {
			k := copy(f.hdr[f.hn:], b)
			f.hn += k
			b = b[k:]
			if f.hn < len(f.hdr) {
				return
			}
			f.length = int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
			f.typ, f.flags = f.hdr[3], f.hdr[4]
			f.stream = binary.BigEndian.Uint32(f.hdr[5:]) & 0x7fffffff
			f.left = f.length
			f.keep = (f.typ == h2Settings || f.typ == h2WindowUpdate) && f.length <= maxKept
			f.kept = f.kept[:0]
			f.padLen = f.typ == h2Data && f.flags&h2Padded != 0 && f.length > 0
			f.pad = 0
			ev.header(f.typ, f.flags, f.stream, f.length)
		}
		if f.left > 0 && len(b) > 0 {
			k := min(f.left, len(b))
			p := b[:k]
			b = b[k:]
			f.left -= k
			switch {
			case f.keep:
				f.kept = append(f.kept, p...)
			case f.typ == h2Data:
				if f.padLen {
					f.padLen = false
					f.pad = int(p[0])
					p = p[1:]
				}
				// The content is what comes before the padding.
				if content := len(p) - max(0, f.pad-f.left); content > 0 {
					ev.data(f.stream, p[:content])
				}
			}
		}
		if f.left == 0 {
			var payload []byte
			if f.keep {
				payload = f.kept
			}
			ev.end(f.typ, f.flags, f.stream, payload)
			f.hn = 0
		}
	}
}

// streamMsg is a stream of one connection whose client may still send:
// the message in progress on it and the client's window.
type streamMsg struct {
	win    int64 // bytes the client may send before the server reads
	prefix int   // bytes of the message's 5-byte prefix received; 0: no message in progress
	size   uint32
	left   int64     // bytes of the message after its prefix still to come
	n      int64     // bytes of the message received
	since  time.Time // when its clock last started; zero: stopped
	ran    time.Duration
}

// running reports whether the message's clock should run: one is in
// progress and the client may send.
func (m *streamMsg) running() bool { return m.prefix > 0 && m.win > 0 }

// tick starts or stops the clock as running says.
func (m *streamMsg) tick(now time.Time) {
	switch run := m.running(); {
	case run && m.since.IsZero():
		m.since = now
	case !run && !m.since.IsZero():
		m.ran += now.Sub(m.since)
		m.since = time.Time{}
	}
}

// content counts message bytes b, starting messages as their prefixes
// arrive.
func (m *streamMsg) content(b []byte, now time.Time) {
	for len(b) > 0 {
		if m.prefix == 0 {
			m.size, m.n, m.ran, m.since = 0, 0, 0, time.Time{}
		}
		if m.prefix < 5 {
			if m.prefix > 0 { // byte 0 is the compression flag
				m.size = m.size<<8 | uint32(b[0])
			}
			m.prefix++
			m.n++
			b = b[1:]
			if m.prefix == 5 {
				m.left = int64(m.size)
			}
		} else {
			k := min(int64(len(b)), m.left)
			m.left -= k
			m.n += k
			b = b[k:]
		}
		if m.prefix == 5 && m.left == 0 {
			m.prefix = 0 // complete
		}
		m.tick(now)
	}
}

// rateTracker follows the messages of one server connection: what the
// client sends (fed by reads) and what the server answers (fed by writes).
type rateTracker struct {
	lim     msgRate
	initWin int64 // the server's SETTINGS_INITIAL_WINDOW_SIZE
	streams map[uint32]*streamMsg
	// calls are the streams open (the client's HEADERS seen, the server's
	// end not yet): with none the connection is idle.
	calls   map[uint32]struct{}
	highest uint32 // the highest stream the client opened
	in, out h2Frames
	now     time.Time // of the bytes being fed
}

func newRateTracker(lim msgRate) *rateTracker {
	return &rateTracker{lim: lim, initWin: h2DefaultWindow, streams: map[uint32]*streamMsg{}, calls: map[uint32]struct{}{},
		in: h2Frames{skip: len(h2ClientPreface)}}
}

// received feeds bytes read from the client.
func (t *rateTracker) received(b []byte, now time.Time) {
	t.now = now
	t.in.feed(b, clientEvents{t})
}

// sent feeds bytes the server wrote.
func (t *rateTracker) sent(b []byte, now time.Time) {
	t.now = now
	t.out.feed(b, serverEvents{t})
}

// deadline is when the most pressing message in progress must receive its
// next byte, and its stream's id; zero when none is in progress with its
// clock running.
func (t *rateTracker) deadline() (due time.Time, stream uint32) {
	if t.lim.rate <= 0 {
		return due, 0
	}
	for id, m := range t.streams {
		if m.since.IsZero() {
			continue
		}
		if d := t.lim.due(m.since, m.ran, m.n); due.IsZero() || d.Before(due) {
			due, stream = d, id
		}
	}
	return due, stream
}

// describe says how far the message in progress on stream got.
func (t *rateTracker) describe(stream uint32) string {
	m := t.streams[stream]
	if m == nil || m.prefix < 5 {
		return fmt.Sprintf("stream %d: a message's first bytes", stream)
	}
	return fmt.Sprintf("stream %d: %d of %d bytes of a message received", stream, m.n, int64(m.size)+5)
}

type clientEvents struct{ t *rateTracker }

func (e clientEvents) header(typ, _ byte, stream uint32, length int) {
	t := e.t
	switch typ {
	case h2Headers:
		if stream > t.highest { // a new stream: another's trailers would be lower
			t.highest = stream
			t.streams[stream] = &streamMsg{win: t.initWin}
			t.calls[stream] = struct{}{}
		}
	case h2Data:
		if m := t.streams[stream]; m != nil {
			m.win -= int64(length) // padding included, as flow control counts it
			m.tick(t.now)
		}
	}
}

func (e clientEvents) data(stream uint32, b []byte) {
	if m := e.t.streams[stream]; m != nil {
		m.content(b, e.t.now)
	}
}

func (e clientEvents) end(typ, flags byte, stream uint32, _ []byte) {
	switch {
	case typ == h2RSTStream:
		delete(e.t.streams, stream)
		delete(e.t.calls, stream)
	case (typ == h2Data || typ == h2Headers) && flags&h2EndStream != 0:
		delete(e.t.streams, stream) // the client sends no more on it
	}
}

type serverEvents struct{ t *rateTracker }

func (serverEvents) header(byte, byte, uint32, int) {}
func (serverEvents) data(uint32, []byte)            {}

func (e serverEvents) end(typ, flags byte, stream uint32, payload []byte) {
	t := e.t
	switch {
	case typ == h2RSTStream, typ == h2Headers && flags&h2EndStream != 0:
		delete(t.streams, stream) // the call is over: whatever comes is discarded
		delete(t.calls, stream)
	case typ == h2WindowUpdate && len(payload) == 4 && stream != 0:
		if m := t.streams[stream]; m != nil {
			m.win += int64(binary.BigEndian.Uint32(payload) & 0x7fffffff)
			m.tick(t.now)
		}
	case typ == h2Settings && flags&h2Ack == 0:
		for p := payload; len(p) >= 6; p = p[6:] {
			if binary.BigEndian.Uint16(p) != h2SettingInitialWindowSize {
				continue
			}
			w := int64(binary.BigEndian.Uint32(p[2:]))
			for _, m := range t.streams {
				m.win += w - t.initWin
				m.tick(t.now)
			}
			t.initWin = w
		}
	}
}

// errMessageTooSlow ends a connection on which a message fell behind the
// minimum rate.
var errMessageTooSlow = errors.New("gRPC message too slow")

// rateConn is a gRPC server connection under the minimum message rate,
// which also tells the shedder (conns.go) when it has no call open.
type rateConn struct {
	net.Conn
	onSlow func(c net.Conn, what string)
	shed   *connShedder // told when the connection turns idle or busy; nil: none

	mu  sync.Mutex // taken before the shedder's
	t   *rateTracker
	set time.Time // the read deadline last set
	// late is set once a message fell behind: the connection is done for
	// (reads are one goroutine's, grpc-go's reader).
	late bool
}

// arm makes sure a read wakes by the most pressing message's deadline; c.mu
// is held. A deadline set earlier that is still ahead is left: it wakes the
// read early, which then arms anew (messages arriving at speed move their
// deadline at every read). Writes arm too: a window they reopen restarts a
// clock while a read may be waiting with no deadline.
func (c *rateConn) arm(now time.Time) error {
	due, _ := c.t.deadline()
	past := !c.set.IsZero() && !now.Before(c.set)
	switch {
	case due.IsZero() && !past:
		return nil
	case !due.IsZero() && !past && !c.set.IsZero() && !due.Before(c.set):
		return nil
	}
	c.set = due
	return c.Conn.SetReadDeadline(due)
}

func (c *rateConn) Read(p []byte) (int, error) {
	if c.late {
		return 0, errMessageTooSlow
	}
	for {
		c.mu.Lock()
		err := c.arm(time.Now())
		c.mu.Unlock()
		if err != nil {
			return 0, err
		}
		n, err := c.Conn.Read(p)
		now := time.Now()
		c.mu.Lock()
		if n > 0 {
			busy := len(c.t.calls) > 0
			c.t.received(p[:n], now)
			if c.shed != nil && busy != (len(c.t.calls) > 0) {
				c.shed.setIdle(c, busy) // under c.mu, so that the shedder learns in order
			}
		}
		if n > 0 || err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || c.set.IsZero() || now.Before(c.set) {
			c.mu.Unlock()
			return n, err // a deadline not ours (grpc-go's, on the handshake) is the caller's
		}
		// Our deadline passed: the message is late unless the server's
		// writes have since stopped its clock or ended its stream.
		due, stream := c.t.deadline()
		if !due.IsZero() && !now.Before(due) {
			what := c.t.describe(stream)
			c.mu.Unlock()
			c.late = true
			c.onSlow(c.Conn, what)
			return 0, errMessageTooSlow
		}
		c.mu.Unlock()
	}
}

func (c *rateConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.mu.Lock()
		now := time.Now()
		busy := len(c.t.calls) > 0
		c.t.sent(p[:n], now)
		_ = c.arm(now) // a failure shows on the next read
		if c.shed != nil && busy && len(c.t.calls) == 0 {
			c.shed.setIdle(c, true)
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *rateConn) Close() error {
	if c.shed != nil {
		c.shed.remove(c)
	}
	return c.Conn.Close()
}

// rateCreds puts the server connections of a gRPC server under the minimum
// message rate, beneath TLS when there is TLS (the frames are read in
// clear).
type rateCreds struct {
	credentials.TransportCredentials
	lim    msgRate
	shed   *connShedder // nil: no shedding
	onSlow func(c net.Conn, what string)
}

func (r rateCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := r.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	rc := &rateConn{Conn: c, onSlow: r.onSlow, shed: r.shed, t: newRateTracker(r.lim)}
	if r.shed != nil {
		r.shed.add(rc, true)
	}
	return rc, info, nil
}

func (r rateCreds) Clone() credentials.TransportCredentials {
	return rateCreds{TransportCredentials: r.TransportCredentials.Clone(), lim: r.lim, shed: r.shed, onSlow: r.onSlow}
}

// ClientHandshake is not used by a server.
func (r rateCreds) ClientHandshake(ctx context.Context, addr string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return r.TransportCredentials.ClientHandshake(ctx, addr, raw)
}

// guardGRPC puts the gRPC server's connections, made secure by creds,
// under the minimum message rate (Limits.GRPCMessageMinRate) and in the
// shedding of idle connections (conns.go).
func (g *Gateway) guardGRPC(creds credentials.TransportCredentials) credentials.TransportCredentials {
	lim := msgRate{rate: g.cfg.Limits.GRPCMessageMinRate, grace: g.cfg.Limits.GRPCMessageGrace}
	if lim.rate <= 0 && g.conns.shedder == nil {
		return creds
	}
	slow := g.conns.closed.WithLabelValues("grpc", "min_rate")
	return rateCreds{TransportCredentials: creds, lim: lim, shed: g.conns.shedder, onSlow: func(c net.Conn, what string) {
		slow.Inc()
		g.log.Warn("closed a gRPC connection: a message fell below the minimum rate (--grpc-message-min-rate, --grpc-message-grace)",
			"remote", c.RemoteAddr().String(), "message", what, "min_rate", lim.rate, "grace", lim.grace)
	}}
}
