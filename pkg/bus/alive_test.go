package bus

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// fastLiveness makes lost responders show quickly. Only tests that expect
// a failure use it: a live responder has two intervals to answer a probe,
// which a loaded machine should not be asked to meet in a fraction of the
// real interval.
const fastLiveness = 200 * time.Millisecond

// wantLost checks that err is the failure of a request whose responder was
// lost, well before its deadline.
func wantLost(t *testing.T, err error, subject string, took, deadline time.Duration) {
	t.Helper()
	wantErr(t, err, tritonerr.Unavailable, responderLostMessage(subject))
	if !IsResponderLost(err) || IsResponderLost(tritonerr.Unavailablef("request to %s timed out", target(subject))) {
		t.Fatalf("IsResponderLost does not tell %q", err)
	}
	if !strings.Contains(err.Error(), "may or may not have run") {
		t.Fatalf("error %q does not say the request may have run", err)
	}
	if took >= deadline/2 {
		t.Fatalf("the request failed after %v, deadline %v: the probes did not end it", took, deadline)
	}
}

// liveness counts the liveness traffic of client's requests: the probes
// it publishes and the answers and heartbeats that reach its reply
// subjects. Each is a sign that a request was held through a sweep.
func liveness(t *testing.T, s *server.Server, client *Conn) *atomic.Int64 {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var n atomic.Int64
	if _, err := nc.Subscribe(AliveSubject, func(*nats.Msg) { n.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe(client.prefix+">", func(m *nats.Msg) {
		if m.Header[HeaderAlive] != nil {
			n.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestAliveResponderLost: a request whose responder took it and then lost
// its connection (kill -9), or that reached a subscriber which holds
// nothing and never answers (a responder cut off by a partition looks so
// to the requester), fails with UNAVAILABLE saying that the responder was
// lost and the request may or may not have run, long before its deadline.
// Plain requests, chunked ones and streams alike.
func TestAliveResponderLost(t *testing.T) {
	s := startServer(t, 0)
	const deadline = 60 * time.Second
	for _, tc := range []struct {
		name   string
		size   int
		stream bool
		silent bool // a raw subscriber that never answers, its connection up
	}{
		{name: "dropped", size: 16},
		{name: "dropped-chunked", size: 3 << 20},
		{name: "silent", size: 16, silent: true},
		{name: "stream-silent", size: 16, stream: true, silent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := connect(t, s, WithLiveness(fastLiveness))
			subject := InferSubject("lost-"+tc.name, "1")
			if tc.silent {
				nc, err := nats.Connect(s.ClientURL())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(nc.Close)
				if _, err := nc.QueueSubscribe(subject, QueueExecutors, func(m *nats.Msg) {
					if m.Header[HeaderSize] != nil { // take the chunks, then say nothing
						_ = nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{HeaderAck: []string{"0"}}})
					}
				}); err != nil {
					t.Fatal(err)
				}
				if err := nc.Flush(); err != nil {
					t.Fatal(err)
				}
			} else {
				srv := connect(t, s)
				mustHandle(t, srv, subject, QueueExecutors, func(ctx context.Context, _ []byte) (proto.Message, error) {
					srv.NATS().Close() // the process dies holding the request
					<-ctx.Done()
					return nil, ctx.Err()
				})
			}
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			var err error
			if tc.stream {
				var st *Stream
				if st, err = client.StreamQueued(ctx, subject, bytesValue(pattern(tc.size, 2)), 0); err == nil {
					_, err = st.Recv()
					st.Close()
				}
			} else {
				err = client.Request(ctx, subject, bytesValue(pattern(tc.size, 2)), nil)
			}
			wantLost(t, err, subject, time.Since(start), deadline)
		})
	}
}

// TestAliveSlowResponder: a responder that holds a request through several
// sweeps (a slow model, a request queued behind others, a decoupled model
// that takes its time before its first response) answers the probes or
// speaks unasked, and its request succeeds. The default interval: the responder's answers must not
// race a short one on a loaded machine.
func TestAliveSlowResponder(t *testing.T) {
	s := startServer(t, 0)
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "request", true: "stream"}[stream]
		t.Run(name, func(t *testing.T) {
			client, srv := connect(t, s), connect(t, s)
			seen := liveness(t, s, client)
			subject := InferSubject("slow-"+name, "1")
			mustHandle(t, srv, subject, QueueExecutors, func(ctx context.Context, req []byte) (proto.Message, error) {
				// Held through three sweeps' probes or heartbeats.
				for seen.Load() < 3 {
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-time.After(20 * time.Millisecond):
					}
				}
				return decode(req)
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			in := pattern(64, 3)
			var out []byte
			if stream {
				st, err := client.Stream(ctx, subject, bytesValue(in), 0)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				item, err := st.Recv()
				if err != nil {
					t.Fatal(err)
				}
				if !item.Final {
					t.Fatal("the reply is not the stream's last message")
				}
				var v = bytesValue(nil)
				if err := st.Unmarshal(item.Data, v); err != nil {
					t.Fatal(err)
				}
				out = v.Value
			} else {
				v := bytesValue(nil)
				if err := client.Request(ctx, subject, bytesValue(in), v); err != nil {
					t.Fatalf("a live responder's request failed after %d probes: %v", seen.Load(), err)
				}
				out = v.Value
			}
			if string(out) != string(in) {
				t.Fatal("wrong reply")
			}
			if seen.Load() < 3 {
				t.Fatalf("%d probes", seen.Load())
			}
		})
	}
}

// TestAliveDelegated: a delegated request (the sequence router's) is held by
// the Conn that received it until it answers or releases it, and by a Conn
// that Holds it. Handed on and released, it lives while its holder does and
// fails once the holder is lost; kept by the delegating Conn, it survives
// the loss of the process it was handed to, and gets the delegating Conn's
// answer (the router's own decision: an error, or a run elsewhere).
func TestAliveDelegated(t *testing.T) {
	s := startServer(t, 0)
	for _, tc := range []struct {
		name      string
		release   bool // the delegating Conn releases the request once handed on
		holderDie bool // the holder loses its connection
	}{
		{name: "held-then-answered"},
		{name: "released-holder-lost", release: true, holderDie: true},
		{name: "kept-holder-lost", holderDie: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []Option{}
			if tc.holderDie {
				opts = append(opts, WithLiveness(fastLiveness))
			}
			client, router, holder := connect(t, s, opts...), connect(t, s), connect(t, s)
			seen := liveness(t, s, client)
			subject := SequenceInferSubject("deleg-"+tc.name, "1")
			handed := make(chan string, 1)
			sub, err := router.HandleDelegated(subject, QueueRouters, func(_ context.Context, _, reply string, _ []byte) {
				handed <- reply
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sub.Unsubscribe() })
			router.confirm()
			routerAnswer := tritonerr.Unavailablef("executor 'e1' running sequence 7 lost before answering")
			go func() {
				reply := <-handed
				release := holder.Hold(reply)
				if tc.release {
					router.Release(reply)
				}
				for seen.Load() < 3 {
					time.Sleep(20 * time.Millisecond)
				}
				if tc.holderDie {
					holder.NATS().Close()
					if !tc.release {
						// The router learns of the loss (heartbeats) some
						// sweeps later, and answers itself.
						n := seen.Load()
						for seen.Load() < n+4 {
							time.Sleep(20 * time.Millisecond)
						}
						router.ReplyError(reply, routerAnswer)
					}
					return
				}
				defer release()
				_ = holder.Reply(context.Background(), reply, bytesValue([]byte("done")))
			}()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			v := bytesValue(nil)
			err = client.Request(ctx, subject, bytesValue([]byte("x")), v)
			switch {
			case !tc.holderDie:
				if err != nil || string(v.Value) != "done" {
					t.Fatalf("held request: %v %q", err, v.Value)
				}
			case tc.release:
				wantLost(t, err, subject, time.Since(start), time.Minute)
			default:
				wantErr(t, err, tritonerr.Unavailable, routerAnswer.Msg)
			}
		})
	}
}

// TestAliveHoldsEnd: holds end with the answer, the release or the
// deadline, so that a process answers no probe for a request it no longer
// holds.
func TestAliveHoldsEnd(t *testing.T) {
	s := startServer(t, 0)
	c := connect(t, s)
	release := c.Hold("_INBOX.x.1")
	release2 := c.Hold("_INBOX.x.1")
	release()
	release() // once only
	if !c.holds("_INBOX.x.1") {
		t.Fatal("a request held twice and released once is not held")
	}
	release2()
	if c.holds("_INBOX.x.1") {
		t.Fatal("released request still held")
	}
	c.hold("_INBOX.x.2", time.Now().Add(time.Hour), true, 0)
	c.ReplyError("_INBOX.x.2", tritonerr.Internalf("no"))
	if c.holds("_INBOX.x.2") {
		t.Fatal("answered delegated request still held")
	}
	c.hold("_INBOX.x.3", time.Now().Add(-time.Second), true, 0)
	if c.holds("_INBOX.x.3") {
		t.Fatal("a request past its deadline still held")
	}
	c.hold("_INBOX.x.4", time.Time{}, true, 0)
	c.Release("_INBOX.x.4")
	if c.holds("_INBOX.x.4") {
		t.Fatal("released delegated request still held")
	}
}

// TestAliveHeartbeats: a responder whose probes reach it too late (they
// queue behind the uploads its connection is still reading; here they do
// not reach it at all) keeps its request alive by answering unasked, once
// per sweep, for what it has held through a whole interval.
func TestAliveHeartbeats(t *testing.T) {
	s := startServer(t, 0)
	client := connect(t, s, WithLiveness(fastLiveness))
	srv := connect(t, s, WithLiveness(fastLiveness))
	seen := liveness(t, s, client)
	subject := InferSubject("heartbeats", "1")
	mustHandle(t, srv, subject, QueueExecutors, func(ctx context.Context, req []byte) (proto.Message, error) {
		for seen.Load() < 10 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		return decode(req)
	})
	// The responder hears no probe.
	if err := srv.cancels.alive.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	srv.confirm()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := bytesValue(nil)
	if err := client.Request(ctx, subject, bytesValue([]byte("x")), v); err != nil {
		t.Fatalf("a live responder that hears no probes lost its request: %v", err)
	}
	if string(v.Value) != "x" {
		t.Fatalf("reply %q", v.Value)
	}
}

// TestAliveCongestedRequester: a requester whose own connection delivers
// late (here every byte from the server arrives 1.5 s after it was sent,
// where a sweep is 200 ms) does not take the silence for a lost responder:
// sweeps count only once the round trip to the server has come back.
func TestAliveCongestedRequester(t *testing.T) {
	s := startServer(t, 0)
	p := newDelayProxy(t, s.Addr().String())
	nc, err := nats.Connect("nats://"+p.addr(), nats.Timeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	client, err := New(nc, WithLogger(quiet), WithLiveness(fastLiveness))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	srv := connect(t, s)
	subject := InferSubject("congested", "1")
	mustHandle(t, srv, subject, QueueExecutors, func(ctx context.Context, req []byte) (proto.Message, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
		return decode(req)
	})
	p.delay.Store(int64(1500 * time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := bytesValue(nil)
	if err := client.Request(ctx, subject, bytesValue([]byte("y")), v); err != nil {
		t.Fatalf("a request on a slow connection failed: %v", err)
	}
	if string(v.Value) != "y" {
		t.Fatalf("reply %q", v.Value)
	}
}

// delayProxy relays TCP connections to a NATS server, holding back what
// the server sends by delay (a congested or distant link).
type delayProxy struct {
	ln    net.Listener
	to    string
	delay atomic.Int64 // nanoseconds
}

func newDelayProxy(t *testing.T, to string) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln, to: to}
	t.Cleanup(func() { ln.Close() })
	go p.serve(t)
	return p
}

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) serve(t *testing.T) {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.to)
		if err != nil {
			in.Close()
			continue
		}
		t.Cleanup(func() { in.Close(); out.Close() })
		go func() { _, _ = io.Copy(out, in) }()
		go p.late(in, out)
	}
}

// late copies from src to dst, each read written delay after it arrived.
func (p *delayProxy) late(dst, src net.Conn) {
	type chunk struct {
		at   time.Time
		data []byte
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{time.Now().Add(time.Duration(p.delay.Load())), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}
