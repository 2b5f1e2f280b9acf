package gateway

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
)

// h2Frame encodes one HTTP/2 frame.
func h2Frame(typ, flags byte, stream uint32, payload []byte) []byte {
	b := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[5:], stream)
	return append(b, payload...)
}

// grpcPrefix is the 5-byte prefix of an uncompressed message of n bytes.
func grpcPrefix(n int) []byte {
	b := make([]byte, 5)
	binary.BigEndian.PutUint32(b[1:], uint32(n))
	return b
}

func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// TestRateTracker drives a connection's tracker with frames and a clock:
// the deadline follows the message in progress, stops while the client's
// window is spent, restarts with the server's WINDOW_UPDATE and SETTINGS,
// and goes with the message's end or its stream's.
func TestRateTracker(t *testing.T) {
	lim := msgRate{rate: 10, grace: time.Second}
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	due := func(tr *rateTracker) time.Time { d, _ := tr.deadline(); return d }

	t.Run("a message in progress, cut anywhere", func(t *testing.T) {
		tr := newRateTracker(lim)
		msg := append(grpcPrefix(20), make([]byte, 3)...)
		in := append([]byte(h2ClientPreface), h2Frame(h2Settings, 0, 0, nil)...)
		in = append(in, h2Frame(h2Headers, 0x4, 1, []byte{0x82})...)
		in = append(in, h2Frame(h2Data, 0, 1, msg)...)
		for _, b := range in { // one byte at a time
			tr.received([]byte{b}, t0)
		}
		// 8 bytes received: the 9th is due 1 s + 0.9 s after the first.
		if got, want := due(tr), at(1900*time.Millisecond); !got.Equal(want) {
			t.Fatalf("due %v, want %v", got.Sub(t0), want.Sub(t0))
		}
		tr.received(h2Frame(h2Data, 0, 1, make([]byte, 17)), at(time.Second))
		if !due(tr).IsZero() {
			t.Fatal("a complete message still has a deadline")
		}
		// The next message's clock starts with its first byte.
		tr.received(h2Frame(h2Data, 0, 1, grpcPrefix(100)), at(5*time.Second))
		if got, want := due(tr), at(6600*time.Millisecond); !got.Equal(want) {
			t.Fatalf("second message due %v, want %v", got.Sub(t0), want.Sub(t0))
		}
		// The server ends the call (trailers): no deadline.
		tr.sent(h2Frame(h2Headers, h2EndStream|0x4, 1, []byte{0x88}), at(6*time.Second))
		if !due(tr).IsZero() {
			t.Fatal("a stream the server ended still has a deadline")
		}
	})

	t.Run("padded DATA", func(t *testing.T) {
		tr := newRateTracker(lim)
		tr.received([]byte(h2ClientPreface), t0)
		tr.received(h2Frame(h2Headers, 0x4, 3, nil), t0)
		payload := append(append([]byte{4}, grpcPrefix(2)...), 1, 2, 0, 0, 0, 0) // a whole message, 4 bytes of padding
		tr.received(h2Frame(h2Data, h2Padded, 3, payload), t0)
		if !due(tr).IsZero() {
			t.Fatal("padding was counted as a message")
		}
	})

	t.Run("the client's window spent", func(t *testing.T) {
		tr := newRateTracker(lim)
		tr.received([]byte(h2ClientPreface), t0)
		// The server's initial window: 10 bytes.
		tr.sent(h2Frame(h2Settings, 0, 0, append([]byte{0, h2SettingInitialWindowSize}, u32(10)...)), t0)
		tr.received(h2Frame(h2Headers, 0x4, 1, nil), t0)
		tr.received(h2Frame(h2Data, 0, 1, append(grpcPrefix(50), make([]byte, 5)...)), t0)
		if !due(tr).IsZero() {
			t.Fatal("a client that may not send is late")
		}
		// The server reads: the window reopens, the clock runs on from
		// where it stopped.
		tr.sent(h2Frame(h2WindowUpdate, 0, 1, u32(30)), at(time.Minute))
		if got, want := due(tr), at(time.Minute+2100*time.Millisecond); !got.Equal(want) { // 10 bytes received: grace + 1.1 s
			t.Fatalf("due %v, want %v", got.Sub(t0), want.Sub(t0))
		}
		// A larger initial window applies to open streams too.
		tr.received(h2Frame(h2Data, 0, 1, make([]byte, 30)), at(time.Minute))
		if !due(tr).IsZero() {
			t.Fatal("window spent again, yet a deadline")
		}
		tr.sent(h2Frame(h2Settings, 0, 0, append([]byte{0, h2SettingInitialWindowSize}, u32(65535)...)), at(2*time.Minute))
		if due(tr).IsZero() {
			t.Fatal("SETTINGS reopened the window, yet no deadline")
		}
		tr.received(h2Frame(h2RSTStream, 0, 1, u32(8)), at(2*time.Minute))
		if !due(tr).IsZero() {
			t.Fatal("a reset stream still has a deadline")
		}
	})
}

// hpackLiteral encodes a header field as an HPACK literal without
// indexing (name and value shorter than 127 bytes).
func hpackLiteral(name, value string) []byte {
	b := []byte{0, byte(len(name))}
	b = append(b, name...)
	b = append(b, byte(len(value)))
	return append(b, value...)
}

// TestGRPCMessageMinRate: a client trickling a ModelInfer message far
// below --grpc-message-min-rate has its connection closed within the grace
// and the time the rate allows what it sent; other clients are served
// throughout, a large message sent at speed included.
func TestGRPCMessageMinRate(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns, func(c *Config) {
		c.Limits.GRPCMessageMinRate = 1000
		c.Limits.GRPCMessageGrace = 500 * time.Millisecond
	})
	c := simpleServing(t, ns, g)

	conn, err := net.Dial("tcp", g.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var hdr []byte
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", inference.GRPCInferenceService_ModelInfer_FullMethodName},
		{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		hdr = append(hdr, hpackLiteral(f[0], f[1])...)
	}
	msg, _ := proto.Marshal(simpleRequest())
	start := append([]byte(h2ClientPreface), h2Frame(h2Settings, 0, 0, nil)...)
	start = append(start, h2Frame(h2Headers, 0x4, 1, hdr)...)
	start = append(start, h2Frame(h2Data, 0, 1, grpcPrefix(len(msg)))...)
	if _, err := conn.Write(start); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	closed := make(chan time.Duration, 1)
	go func() {
		_, _ = io.Copy(io.Discard, conn) // the server's frames, until it closes
		closed <- time.Since(began)
	}()
	// A byte every 100 ms: 10 bytes/s against 1000.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := 0; i < len(msg); i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write(h2Frame(h2Data, 0, 1, msg[i:i+1])); err != nil {
				return
			}
		}
	}()
	// Others are served while the trickle lasts.
	big := simpleRequest()
	big.RawInputContents[0] = make([]byte, 4<<20)
	// "simple" refuses 4 MiB of INPUT0 for its shape, once the message
	// has arrived whole.
	if _, err := c.ModelInfer(context.Background(), big); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a large message sent at speed: %v", err)
	}
	if _, err := c.ModelInfer(context.Background(), simpleRequest()); err != nil {
		t.Fatalf("another client during the trickle: %v", err)
	}
	select {
	case d := <-closed:
		// Due: 0.5 s of grace plus the bytes sent at 1000/s, plus a read's
		// scheduling.
		if d > 3*time.Second {
			t.Fatalf("closed after %v", d)
		}
		t.Logf("the trickling connection closed after %v", d)
	case <-time.After(10 * time.Second):
		t.Fatal("the trickling connection is still open after 10 s")
	}
	if n := testutil.ToFloat64(g.conns.closed.WithLabelValues("grpc", "min_rate")); n != 1 {
		t.Fatalf("%v connections counted closed for their rate", n)
	}
	if _, err := c.ModelInfer(context.Background(), simpleRequest()); err != nil {
		t.Fatalf("a request after the trickler was closed: %v", err)
	}
}

// TestGRPCMessageMinRateStalled: a stream message held back by flow
// control, because the server is not reading (its window of requests in
// flight is full), is not late however long it waits; once the server
// reads on, it arrives and every request is answered on the same
// connection.
func TestGRPCMessageMinRateStalled(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns, func(c *Config) {
		c.Limits.GRPCMessageMinRate = 1 << 20
		c.Limits.GRPCMessageGrace = 200 * time.Millisecond
	})
	release := make(chan struct{})
	ex := newFakeExecutor(t, ns, "ex1", &busv1.ModelVersionState{Name: "simple", Version: "1", State: "READY", Config: simpleConfig("simple")})
	ex.hold = func(ctx context.Context) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ex.start()
	c, _ := grpcClient(t, g)
	waitFor(t, "simple ready", 5*time.Second, func() bool {
		r, err := c.ModelReady(context.Background(), &inference.ModelReadyRequest{Name: "simple"})
		return err == nil && r.Ready
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A window of requests held by the executor, one more received and
	// waiting for room, then a large one the server does not read yet.
	for range streamWindow + 1 {
		if err := st.Send(simpleRequest()); err != nil {
			t.Fatal(err)
		}
	}
	big := simpleRequest()
	big.Id = "big"
	big.RawInputContents[0] = make([]byte, 4<<20)
	sent := make(chan error, 1)
	go func() {
		err := st.Send(big)
		if err == nil {
			err = st.CloseSend()
		}
		sent <- err
	}()
	// Far longer than the grace and the rate allow what the window let
	// through.
	time.Sleep(2 * time.Second)
	close(release)
	for i := range streamWindow + 2 {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if r.GetInferResponse().GetId() == "big" {
			if r.ErrorMessage == "" {
				t.Fatal("4 MiB of INPUT0 for a shape of 16 was accepted")
			}
		} else if r.ErrorMessage != "" {
			t.Fatalf("answer %d: %s", i, r.ErrorMessage)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(g.conns.closed.WithLabelValues("grpc", "min_rate")); n != 0 {
		t.Fatalf("%v connections closed for their rate", n)
	}
}

// BenchmarkRateTracker: what following a connection costs per 32 KiB
// read of a large message in 16 KiB DATA frames (grpc-go's), with the
// deadline looked up after each read.
func BenchmarkRateTracker(b *testing.B) {
	frame := h2Frame(h2Data, 0, 1, make([]byte, 16<<10))
	chunk := append(append([]byte(nil), frame...), frame...)
	tr := newRateTracker(msgRate{rate: 4096, grace: 30 * time.Second})
	now := time.Now()
	tr.received([]byte(h2ClientPreface), now)
	tr.received(h2Frame(h2Headers, 0x4, 1, nil), now)
	tr.received(h2Frame(h2Data, 0, 1, grpcPrefix(1<<31-1)), now)
	update := h2Frame(h2WindowUpdate, 0, 1, u32(uint32(len(chunk))))
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		tr.sent(update, now)
		tr.received(chunk, now)
		if d, _ := tr.deadline(); d.IsZero() { // the message is over (2 GiB): the next
			tr.received(h2Frame(h2Data, 0, 1, grpcPrefix(1<<31-1)), now)
		}
	}
}
