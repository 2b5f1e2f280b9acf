package bus

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
)

// TestEnvelope: a small request whose only header would be its deadline
// goes without headers, the deadline in an envelope in front of its body,
// and its handler gets the body and the deadline as sent. A chunked one
// keeps its deadline in headers.
func TestEnvelope(t *testing.T) {
	s := startServer(t, 64<<10)
	client, srv := connect(t, s), connect(t, s)
	type seen struct {
		body     []byte
		deadline time.Time
	}
	got := make(chan seen, 1)
	mustHandle(t, srv, "test.envelope", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		d, _ := ctx.Deadline()
		got <- seen{bytes.Clone(req), d}
		return nil, nil
	})
	raw := make(chan *nats.Msg, 1)
	rawSub, err := client.NATS().Subscribe("test.envelope", func(m *nats.Msg) {
		select {
		case raw <- m:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rawSub.Unsubscribe()
	if err := client.NATS().Flush(); err != nil {
		t.Fatal(err)
	}

	for _, size := range []int{0, 100, 200 << 10} {
		body := pattern(size, 7)
		want := time.Now().Add(time.Minute)
		ctx, cancel := context.WithDeadline(context.Background(), want)
		if _, err := client.RequestBytes(ctx, "test.envelope", body); err != nil {
			t.Fatal(err)
		}
		cancel()
		h := <-got
		if !bytes.Equal(h.body, body) || !h.deadline.Equal(want) {
			t.Fatalf("%d bytes: handler got %d bytes (equal: %v), deadline %v, want %v", size, len(h.body), bytes.Equal(h.body, body), h.deadline, want)
		}
		m := <-raw
		chunked := m.Header[HeaderSize] != nil
		if chunked != (size > 64<<10) {
			t.Fatalf("%d bytes: chunked %v", size, chunked)
		}
		if chunked {
			if d, ok := deadline(m.Header); !ok || !d.Equal(want) {
				t.Fatalf("chunked request's deadline header %v", m.Header)
			}
			continue
		}
		if len(m.Header) != 0 || len(m.Data) != envelopeLen+size || m.Data[0] != envelopeMark {
			t.Fatalf("%d bytes: sent with headers %v and %d bytes", size, m.Header, len(m.Data))
		}
	}
}
