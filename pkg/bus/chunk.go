package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// errProtocol marks a peer that broke the chunk protocol.
var errProtocol = errors.New("bus: chunk protocol violation")

// chunkMargin is slack between our header estimate and the max payload.
const chunkMargin = 16

// chunkSize is how many body bytes go in each chunk of a transfer whose
// first chunk carries first (the largest header of the transfer).
func (c *Conn) chunkSize(first nats.Header) (int, error) {
	n := int(c.nc.MaxPayload()) - headerSize(first) - chunkMargin
	if c.opts.chunkSize > 0 && c.opts.chunkSize < n {
		n = c.opts.chunkSize
	}
	if n < 1 {
		return 0, fmt.Errorf("bus: headers of %d bytes leave no room in the max payload of %d bytes", headerSize(first), c.nc.MaxPayload())
	}
	return n, nil
}

// fits reports whether a body of n bytes and hdr go in one message.
func (c *Conn) fits(n int, hdr nats.Header) bool {
	return int64(n+headerSize(hdr)) <= c.nc.MaxPayload()
}

// sendChunks publishes chunks next, next+1, ... of data (size bytes each) to
// dest with ackTo as their reply subject, keeping at most a window of chunks
// unacknowledged; acknowledgements arrive on in. Chunk 0, if sent here,
// carries first. A message on in that is no acknowledgement (the peer's final
// reply, e.g. an error) ends the transfer early and is returned.
func (c *Conn) sendChunks(ctx context.Context, in *inbox, dest, ackTo string, data *payload, size int, first nats.Header, next, acked int) (*nats.Msg, error) {
	n := (data.Len() + size - 1) / size
	window := max(2, c.opts.windowBytes/size)
	for next < n {
		if next-acked >= window {
			m, err := in.next(ctx, c.opts.idleTimeout)
			if err != nil {
				return nil, err
			}
			switch {
			case isNoResponders(m):
				return nil, errPeerGone
			case m.Header[HeaderAbort] != nil:
				return nil, errAborted
			case m.Header[HeaderAck] != nil:
				a, err := strconv.Atoi(get(m.Header, HeaderAck))
				if err != nil {
					return nil, fmt.Errorf("%w: bad acknowledgement %q", errProtocol, get(m.Header, HeaderAck))
				}
				acked = max(acked, a+1)
				continue
			default:
				return m, nil
			}
		}
		hdr := first
		if next > 0 || hdr == nil {
			hdr = nats.Header{HeaderChunk: []string{strconv.Itoa(next)}}
		}
		end := min(data.Len(), (next+1)*size)
		if err := c.nc.PublishMsg(&nats.Msg{Subject: dest, Reply: ackTo, Header: hdr, Data: data.slice(next*size, end)}); err != nil {
			return nil, err
		}
		next++
	}
	return nil, nil
}

// collect copies chunks seq, seq+1, ... arriving on in into buf[n:] until buf
// is full, acknowledging each to its reply subject. Chunks from one publisher
// arrive in order (NATS keeps per-connection order), so anything else is a
// protocol violation.
func (c *Conn) collect(ctx context.Context, in *inbox, buf []byte, n, seq int) error {
	for n < len(buf) {
		m, err := in.next(ctx, c.opts.idleTimeout)
		if err != nil {
			return err
		}
		if isNoResponders(m) {
			return errPeerGone
		}
		if m.Header[HeaderAbort] != nil {
			return errAborted
		}
		s := m.Header[HeaderChunk]
		if s == nil {
			if m.Header[HeaderAck] != nil || m.Header[HeaderContinue] != nil {
				continue // late control message of an earlier leg
			}
			return fmt.Errorf("%w: expected chunk %d, got a message without %s", errProtocol, seq, HeaderChunk)
		}
		got, err := strconv.Atoi(s[0])
		if err != nil || got != seq {
			return fmt.Errorf("%w: expected chunk %d, got %q", errProtocol, seq, s[0])
		}
		if len(m.Data) > len(buf)-n {
			return fmt.Errorf("%w: chunk %d overruns the declared size of %d bytes", errProtocol, seq, len(buf))
		}
		n += copy(buf[n:], m.Data)
		chunkReceived(len(m.Data))
		if m.Reply != "" {
			if err := c.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{HeaderAck: s}}); err != nil {
				return err
			}
		}
		seq++
	}
	return nil
}

// abort tells the other side of a transfer, reachable at subject, to stop.
func (c *Conn) abort(subject string) {
	if subject != "" {
		_ = c.nc.PublishMsg(&nats.Msg{Subject: subject, Header: nats.Header{HeaderAbort: []string{"1"}}})
	}
}

// parseSize reads a HeaderSize value and checks it against the limit before
// anyone allocates it.
func (c *Conn) parseSize(h nats.Header, first int) (int, error) {
	s := get(h, HeaderSize)
	total, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil || total < 0:
		return 0, fmt.Errorf("%w: bad %s %q", errProtocol, HeaderSize, s)
	case total > c.opts.maxMessageSize:
		return 0, fmt.Errorf("message of %d bytes is larger than the limit of %d bytes", total, c.opts.maxMessageSize)
	case total < int64(first):
		return 0, fmt.Errorf("%w: first chunk of %d bytes is larger than the declared size %d", errProtocol, first, total)
	}
	return int(total), nil
}
