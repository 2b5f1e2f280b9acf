package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// startServer runs an embedded nats-server on a random port; maxPayload 0
// keeps the server's default (1 MiB).
func startServer(t testing.TB, maxPayload int32) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// connect opens a NATS connection and a bus Conn on it; asynchronous NATS
// errors (slow consumers above all) fail the test.
func connect(t testing.TB, s *server.Server, opts ...Option) *Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		t.Errorf("nats async error on %v: %v", sub.Subject, err)
	}))
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := New(nc, append([]Option{WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); nc.Close() })
	return c
}

// pattern is n bytes that differ with seed and position, so misplaced or
// missing chunks show.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i>>13) ^ seed
	}
	return b
}

func bytesValue(b []byte) *wrapperspb.BytesValue { return &wrapperspb.BytesValue{Value: b} }

// decode is the usual first line of a handler.
func decode(req []byte) (*wrapperspb.BytesValue, error) {
	var v wrapperspb.BytesValue
	if err := proto.Unmarshal(req, &v); err != nil {
		return nil, tritonerr.InvalidArgf("bad request: %v", err)
	}
	return &v, nil
}

func mustHandle(t testing.TB, c *Conn, subject, queue string, h HandlerFunc) *Subscription {
	t.Helper()
	s, err := c.Handle(subject, queue, h)
	if err != nil {
		t.Fatal(err)
	}
	// Make sure the server knows the subscription before anyone requests.
	if err := c.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Unsubscribe() })
	return s
}

func wantErr(t *testing.T, err error, kind tritonerr.Kind, msg string) {
	t.Helper()
	var te *tritonerr.Error
	if !errors.As(err, &te) {
		t.Fatalf("error = %v (%T), want a *tritonerr.Error", err, err)
	}
	if te.Kind != kind || (msg != "" && te.Msg != msg) {
		t.Fatalf("error = %v %q, want %v %q", te.Kind, te.Msg, kind, msg)
	}
}

// idle waits until neither conn has an open inbox, proving that finished
// and abandoned transfers are cleaned up.
func idle(t *testing.T, conns ...*Conn) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		open := 0
		for _, c := range conns {
			c.mu.Lock()
			open += len(c.inboxes)
			c.mu.Unlock()
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d inboxes still open", open)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRoundTrip(t *testing.T) {
	const max = 64 << 10
	s := startServer(t, max)
	client, srv := connect(t, s), connect(t, s)
	tests := []struct {
		name          string
		req, reply    int
		chunkReq      bool
		chunkReply    bool
		clientOptions []Option
	}{
		{name: "empty", req: 0, reply: 0},
		{name: "small", req: 64, reply: 64},
		{name: "just fits", req: max - 200, reply: max - 200},
		{name: "request 3x max payload", req: 3 * max, reply: 16, chunkReq: true},
		{name: "reply 3x max payload", req: 16, reply: 3 * max, chunkReply: true},
		{name: "both 3x max payload", req: 3*max + 1, reply: 3*max - 1, chunkReq: true, chunkReply: true},
		{name: "both 20x max payload", req: 20 * max, reply: 20 * max, chunkReq: true, chunkReply: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			subject := fmt.Sprintf("test.roundtrip.%d", i)
			var gotChunked atomic.Bool
			mustHandle(t, srv, subject, "", func(ctx context.Context, req []byte) (proto.Message, error) {
				v, err := decode(req)
				if err != nil {
					return nil, err
				}
				if !bytes.Equal(v.Value, pattern(tt.req, 1)) {
					return nil, tritonerr.InvalidArgf("request of %d bytes arrived damaged", len(v.Value))
				}
				gotChunked.Store(len(req) > max)
				return bytesValue(pattern(tt.reply, 2)), nil
			})
			var resp wrapperspb.BytesValue
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := client.Request(ctx, subject, bytesValue(pattern(tt.req, 1)), &resp); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(resp.Value, pattern(tt.reply, 2)) {
				t.Fatalf("reply of %d bytes arrived damaged (want %d bytes)", len(resp.Value), tt.reply)
			}
			if gotChunked.Load() != tt.chunkReq {
				t.Fatalf("request chunked = %v, want %v", gotChunked.Load(), tt.chunkReq)
			}
			idle(t, client, srv)
		})
	}
}

func TestErrors(t *testing.T) {
	s := startServer(t, 0)
	client, srv := connect(t, s), connect(t, s)
	tests := []struct {
		name     string
		err      error
		wantKind tritonerr.Kind
		wantMsg  string
	}{
		{"invalid arg", tritonerr.InvalidArgf("unexpected inference input 'X' for model 'simple'"), tritonerr.InvalidArg, "unexpected inference input 'X' for model 'simple'"},
		{"not found", tritonerr.NotFoundf("Request for unknown model: 'x' is not found"), tritonerr.NotFound, "Request for unknown model: 'x' is not found"},
		{"unavailable", tritonerr.Unavailablef("model 'simple' is not ready"), tritonerr.Unavailable, "model 'simple' is not ready"},
		{"unsupported", tritonerr.Unsupportedf("not supported"), tritonerr.Unsupported, "not supported"},
		{"internal", tritonerr.Internalf("boom"), tritonerr.Internal, "boom"},
		{"already exists", tritonerr.New(tritonerr.AlreadyExists, "region 'r' exists"), tritonerr.AlreadyExists, "region 'r' exists"},
		{"cancelled", tritonerr.New(tritonerr.Cancelled, "cancelled"), tritonerr.Cancelled, "cancelled"},
		{"unknown", tritonerr.New(tritonerr.Unknown, "who knows"), tritonerr.Unknown, "who knows"},
		{"awkward message", tritonerr.InvalidArgf("%s", " line 1\r\nline 2\t100% done\x00 "), tritonerr.InvalidArg, " line 1\r\nline 2\t100% done\x00 "},
		{"unicode", tritonerr.InvalidArgf("modèle 'ü' ✓"), tritonerr.InvalidArg, "modèle 'ü' ✓"},
		{"wrapped", fmt.Errorf("loading: %w", tritonerr.NotFoundf("no file")), tritonerr.NotFound, "loading: no file"},
		{"foreign error", errors.New("disk on fire"), tritonerr.Internal, "disk on fire"},
		{"handler's context expired", context.DeadlineExceeded, tritonerr.Unavailable, "request to subject 'test.errors' timed out"},
	}
	var current atomic.Pointer[error]
	mustHandle(t, srv, "test.errors", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		return nil, *current.Load()
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			current.Store(&tt.err)
			err := client.Request(context.Background(), "test.errors", bytesValue(nil), nil)
			wantErr(t, err, tt.wantKind, tt.wantMsg)
		})
	}
}

func TestEscapeValue(t *testing.T) {
	for _, s := range []string{"", "plain message", " lead", "trail ", "%", "%41", "a\r\nb", "\x7f", "  "} {
		e := escapeValue(s)
		if got := unescapeValue(e); got != s {
			t.Errorf("unescape(escape(%q)) = %q (escaped %q)", s, got, e)
		}
	}
}

func TestDeadline(t *testing.T) {
	s := startServer(t, 0)
	client, srv := connect(t, s), connect(t, s)

	t.Run("propagated", func(t *testing.T) {
		got := make(chan time.Time, 1)
		mustHandle(t, srv, "test.deadline", "", func(ctx context.Context, req []byte) (proto.Message, error) {
			d, _ := ctx.Deadline()
			got <- d
			return nil, nil
		})
		want := time.Now().Add(7 * time.Second)
		ctx, cancel := context.WithDeadline(context.Background(), want)
		defer cancel()
		if err := client.Request(ctx, "test.deadline", bytesValue(nil), nil); err != nil {
			t.Fatal(err)
		}
		if d := <-got; !d.Equal(want) {
			t.Fatalf("handler deadline %v, want %v", d, want)
		}
	})

	t.Run("none", func(t *testing.T) {
		got := make(chan bool, 1)
		mustHandle(t, srv, "test.nodeadline", "", func(ctx context.Context, req []byte) (proto.Message, error) {
			_, ok := ctx.Deadline()
			got <- ok
			return nil, nil
		})
		if err := client.Request(context.Background(), "test.nodeadline", bytesValue(nil), nil); err != nil {
			t.Fatal(err)
		}
		if <-got {
			t.Fatal("handler has a deadline the requester never set")
		}
	})

	t.Run("expired", func(t *testing.T) {
		ended := make(chan error, 1)
		mustHandle(t, srv, InferSubject("slow", "1"), QueueExecutors, func(ctx context.Context, req []byte) (proto.Message, error) {
			<-ctx.Done()
			ended <- ctx.Err()
			return nil, ctx.Err()
		})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		err := client.Request(ctx, InferSubject("slow", "1"), bytesValue(nil), nil)
		wantErr(t, err, tritonerr.Unavailable, "request to model 'slow' version 1 timed out")
		select {
		case err := <-ended:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("handler's context ended with %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("handler's context never expired")
		}
	})

	t.Run("already past", func(t *testing.T) {
		var ran atomic.Int32
		mustHandle(t, srv, "test.late", "", func(ctx context.Context, req []byte) (proto.Message, error) {
			ran.Add(1)
			return nil, nil
		})
		m := nats.NewMsg("test.late")
		setDeadline(m.Header, time.Now().Add(-time.Second))
		reply, err := client.NATS().RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wantErr(t, remoteError(reply.Header), tritonerr.Unavailable, "request to subject 'test.late' timed out before it was handled")
		if ran.Load() != 0 {
			t.Fatal("handler ran for a request whose deadline had passed")
		}
	})
}

func TestNoResponders(t *testing.T) {
	s := startServer(t, 64<<10)
	client := connect(t, s)
	tests := []struct {
		name    string
		subject string
		size    int
		msg     string
	}{
		{"infer", InferSubject("simple", "1"), 64, "no executor is serving model 'simple' version 1"},
		{"infer chunked", InferSubject("simple", "1"), 200 << 10, "no executor is serving model 'simple' version 1"},
		{"executor", ExecutorCatalogSubject("e1"), 0, "executor 'e1' (catalog) is not reachable: no responders on nereid.v1.exec.e1.catalog"},
		{"other", "test.nobody", 0, "no responders on subject 'test.nobody'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := client.Request(context.Background(), tt.subject, bytesValue(pattern(tt.size, 0)), nil)
			wantErr(t, err, tritonerr.Unavailable, tt.msg)
			idle(t, client)
		})
	}
}

func TestCancel(t *testing.T) {
	s := startServer(t, 0)
	client, srv := connect(t, s), connect(t, s)
	started := make(chan struct{})
	mustHandle(t, srv, "test.cancel", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		close(started)
		time.Sleep(200 * time.Millisecond)
		return nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	err := client.Request(ctx, "test.cancel", bytesValue(nil), nil)
	wantErr(t, err, tritonerr.Cancelled, "request to subject 'test.cancel' was cancelled")

	err = client.Request(ctx, "test.cancel", bytesValue(nil), nil)
	wantErr(t, err, tritonerr.Cancelled, "")
}

func TestPanic(t *testing.T) {
	s := startServer(t, 0)
	client, srv := connect(t, s), connect(t, s)
	mustHandle(t, srv, "test.panic", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		v, _ := decode(req)
		if string(v.Value) == "panic" {
			var m map[string]int
			m["x"] = 1 // a real runtime panic
		}
		return v, nil
	})
	err := client.Request(context.Background(), "test.panic", bytesValue([]byte("panic")), nil)
	wantErr(t, err, tritonerr.Internal, "internal error: the handler for subject 'test.panic' panicked: assignment to entry in nil map")
	var resp wrapperspb.BytesValue
	if err := client.Request(context.Background(), "test.panic", bytesValue([]byte("fine")), &resp); err != nil || string(resp.Value) != "fine" {
		t.Fatalf("after a panic: %q, %v", resp.Value, err)
	}
}

func TestTraceContext(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })

	s := startServer(t, 64<<10)
	client, srv := connect(t, s), connect(t, s)
	got := make(chan trace.SpanContext, 1)
	mustHandle(t, srv, "test.trace", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		got <- trace.SpanContextFromContext(ctx)
		return nil, nil
	})
	raw := make(chan nats.Header, 1)
	rawSub, err := client.NATS().Subscribe("test.trace", func(m *nats.Msg) {
		select {
		case raw <- m.Header:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rawSub.Unsubscribe()

	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	for _, size := range []int{16, 200 << 10} { // one message, and chunked
		if err := client.Request(ctx, "test.trace", bytesValue(pattern(size, 0)), nil); err != nil {
			t.Fatal(err)
		}
		rsc := <-got
		if rsc.TraceID() != sc.TraceID() || rsc.SpanID() != sc.SpanID() || !rsc.IsSampled() || !rsc.IsRemote() {
			t.Fatalf("handler saw span context %v, want %v (remote)", rsc, sc)
		}
	}
	h := <-raw
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; h.Get("traceparent") != want {
		t.Fatalf("traceparent header = %q (header %v), want %q", h.Get("traceparent"), h, want)
	}
}

func TestQueueGroupLargeTransfer(t *testing.T) {
	s := startServer(t, 0) // 1 MiB max payload
	client := connect(t, s)
	const size = 32 << 20
	subject := InferSubject("big.model", "1")
	var served [2]atomic.Int32
	for i := range served {
		srv := connect(t, s)
		mustHandle(t, srv, subject, QueueExecutors, func(ctx context.Context, req []byte) (proto.Message, error) {
			served[i].Add(1)
			v, err := decode(req)
			if err != nil {
				return nil, err
			}
			if !bytes.Equal(v.Value, pattern(size, v.Value[0])) {
				return nil, tritonerr.InvalidArgf("request arrived damaged")
			}
			return v, nil // echo: the reply is chunked too
		})
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seed := byte(i)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var resp wrapperspb.BytesValue
			if err := client.Request(ctx, subject, bytesValue(pattern(size, seed)), &resp); err != nil {
				t.Error(err)
				return
			}
			if !bytes.Equal(resp.Value, pattern(size, seed)) {
				t.Error("reply arrived damaged")
			}
		}()
	}
	wg.Wait()
	if n := served[0].Load() + served[1].Load(); n != 4 {
		t.Fatalf("served %d requests, want 4", n)
	}
	t.Logf("responders served %d and %d", served[0].Load(), served[1].Load())
	idle(t, client)
}

func TestConcurrent(t *testing.T) {
	s := startServer(t, 64<<10)
	client, srv := connect(t, s), connect(t, s)
	mustHandle(t, srv, "test.echo", "q", func(ctx context.Context, req []byte) (proto.Message, error) {
		return decode(req)
	})
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			size := 100 + i
			if i%10 == 0 {
				size = 150 << 10 // some chunked both ways
			}
			want := pattern(size, byte(i))
			var resp wrapperspb.BytesValue
			if err := client.Request(context.Background(), "test.echo", bytesValue(want), &resp); err != nil {
				t.Error(err)
				return
			}
			if !bytes.Equal(resp.Value, want) {
				t.Errorf("request %d: reply damaged", i)
			}
		}()
	}
	wg.Wait()
	idle(t, client, srv)
}

func TestLimits(t *testing.T) {
	s := startServer(t, 64<<10)
	small := WithMaxMessageSize(100 << 10)
	client, srv := connect(t, s, small), connect(t, s, small)
	mustHandle(t, srv, "test.limit", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		v, err := decode(req)
		if err != nil {
			return nil, err
		}
		return bytesValue(make([]byte, 200<<10-len(v.Value))), nil
	})
	err := client.Request(context.Background(), "test.limit", bytesValue(make([]byte, 150<<10)), nil)
	wantErr(t, err, tritonerr.InvalidArg, "bus: request to subject 'test.limit': message of 153604 bytes is larger than the limit of 102400 bytes")
	err = client.Request(context.Background(), "test.limit", bytesValue(make([]byte, 10)), nil)
	wantErr(t, err, tritonerr.Internal, "bus: reply from subject 'test.limit': message of 204794 bytes is larger than the limit of 102400 bytes")
	idle(t, client, srv)
}

// TestAbandoned gives up on transfers half way and checks both sides let go
// of them: no inbox left open, no handler left running.
func TestAbandoned(t *testing.T) {
	s := startServer(t, 64<<10)
	client := connect(t, s, WithWindow(128<<10))
	srv := connect(t, s, WithWindow(128<<10), WithIdleTimeout(300*time.Millisecond))
	release := make(chan struct{})
	var ran atomic.Int32
	sub := mustHandle(t, srv, "test.abandon", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		ran.Add(1)
		<-release
		return bytesValue(make([]byte, 8<<20)), nil // a big reply nobody waits for
	})
	before := runtime.NumGoroutine()

	// The requester stops part way through a chunked request.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(time.Millisecond); cancel() }()
	err := client.Request(ctx, "test.abandon", bytesValue(make([]byte, 64<<20)), nil)
	wantErr(t, err, tritonerr.Cancelled, "")

	// The requester times out before a large reply is sent.
	ctx, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	err = client.Request(ctx, "test.abandon", bytesValue(nil), nil)
	wantErr(t, err, tritonerr.Unavailable, "")
	close(release)

	// A requester without a deadline vanishes mid-reply: the responder's
	// idle timeout or the no-responders notice ends the transfer.
	go func() {
		time.Sleep(20 * time.Millisecond)
		client.NATS().Close()
	}()
	_ = client.Request(context.Background(), "test.abandon", bytesValue(nil), nil)

	if err := sub.Drain(); err != nil {
		t.Fatal(err)
	}
	idle(t, client, srv)
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines, %d before the abandoned transfers", n, before)
	}
	t.Logf("handler ran %d times", ran.Load())
}

func TestDrainWaitsForHandlers(t *testing.T) {
	s := startServer(t, 0)
	client, srv := connect(t, s), connect(t, s)
	var done atomic.Bool
	started := make(chan struct{})
	sub := mustHandle(t, srv, "test.drain", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		close(started)
		time.Sleep(100 * time.Millisecond)
		done.Store(true)
		return bytesValue([]byte("ok")), nil
	})
	errc := make(chan error, 1)
	go func() { errc <- client.Request(context.Background(), "test.drain", bytesValue(nil), nil) }()
	<-started
	if err := sub.Drain(); err != nil {
		t.Fatal(err)
	}
	if !done.Load() {
		t.Fatal("Drain returned before the handler finished")
	}
	if err := <-errc; err != nil {
		t.Fatalf("request in flight during Drain: %v", err)
	}
	err := client.Request(context.Background(), "test.drain", bytesValue(nil), nil)
	wantErr(t, err, tritonerr.Unavailable, "no responders on subject 'test.drain'")
}

func TestPublishSubscribe(t *testing.T) {
	s := startServer(t, 0)
	a, b := connect(t, s), connect(t, s)
	got := make(chan string, 10)
	sub, err := b.Subscribe(HeartbeatSubject, func(ctx context.Context, data []byte) {
		var v wrapperspb.StringValue
		if err := proto.Unmarshal(data, &v); err != nil {
			t.Error(err)
		}
		got <- v.Value
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	b.NATS().Flush()
	for _, v := range []string{"one", "two", "three"} {
		if err := a.Publish(HeartbeatSubject, wrapperspb.String(v)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"one", "two", "three"} {
		select {
		case v := <-got:
			if v != want {
				t.Fatalf("got %q, want %q (in order)", v, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("heartbeat not delivered")
		}
	}
}

func TestClose(t *testing.T) {
	s := startServer(t, 0)
	client, srv := connect(t, s), connect(t, s)
	mustHandle(t, srv, "test.close", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		time.Sleep(time.Second)
		return nil, nil
	})
	go func() { time.Sleep(50 * time.Millisecond); client.Close() }()
	err := client.Request(context.Background(), "test.close", bytesValue(nil), nil)
	wantErr(t, err, tritonerr.Unavailable, "request to subject 'test.close' failed: the bus connection is closed")
}

// TestHuge moves 256 MiB each way at the default 1 MiB max payload: flow
// control must keep every subscription far from NATS's slow-consumer limits
// (any async NATS error fails the test, see connect).
func TestHuge(t *testing.T) {
	if testing.Short() {
		t.Skip("256 MiB each way")
	}
	s := startServer(t, 0)
	client, srv := connect(t, s), connect(t, s)
	const size = 256 << 20
	body := pattern(size, 3)
	mustHandle(t, srv, "test.huge", QueueExecutors, func(ctx context.Context, req []byte) (proto.Message, error) {
		if !bytes.Equal(req, body) {
			return nil, tritonerr.InvalidArgf("request arrived damaged")
		}
		return bytesValue(req[:size-16]), nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := client.RequestBytes(ctx, "test.huge", body)
	if err != nil {
		t.Fatal(err)
	}
	var resp wrapperspb.BytesValue
	if err := proto.Unmarshal(out, &resp); err != nil || !bytes.Equal(resp.Value, body[:size-16]) {
		t.Fatalf("reply damaged (%v)", err)
	}
	t.Logf("256 MiB each way in %v", time.Since(start))
	idle(t, client, srv)
}

// TestResponderGone: the responder that took the first chunk names a
// continuation subject nobody listens on (as if its connection had dropped);
// NATS's no-responders notice on the next chunk ends the request.
func TestResponderGone(t *testing.T) {
	s := startServer(t, 64<<10)
	client := connect(t, s)
	sub, err := client.NATS().Subscribe("test.gone", func(m *nats.Msg) {
		m.RespondMsg(&nats.Msg{Header: nats.Header{HeaderContinue: []string{"_INBOX.nobody.1"}}})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	client.NATS().Flush()
	err = client.Request(context.Background(), "test.gone", bytesValue(make([]byte, 1<<20)), nil)
	wantErr(t, err, tritonerr.Unavailable, "request to subject 'test.gone' failed: the responder went away during a chunked transfer")
	idle(t, client)
}
