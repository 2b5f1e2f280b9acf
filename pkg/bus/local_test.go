package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// transports are the two ways a request reaches a handler: over NATS, and
// in-process through a Local the requester's and handler's Conns share.
// Every behaviour below must be the same on both.
var transports = []struct {
	name  string
	local bool
}{{"nats", false}, {"local", true}}

// pair connects a requester and a handler Conn, sharing a Local when
// local is set.
func pair(t *testing.T, local bool) (client, srv *Conn, l *Local) {
	t.Helper()
	s := startServer(t, 0)
	if !local {
		return connect(t, s), connect(t, s), nil
	}
	l = NewLocal()
	return connect(t, s, WithLocal(l)), connect(t, s, WithLocal(l)), l
}

func mustHandleBody(t testing.TB, c *Conn, subject, queue string, h BodyFunc) *Subscription {
	t.Helper()
	s, err := c.HandleBody(subject, queue, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Unsubscribe() })
	return s
}

// value is the request's value whichever way it came.
func value(b Body) (*wrapperspb.BytesValue, error) {
	if v, ok := b.Message.(*wrapperspb.BytesValue); ok {
		return v, nil
	}
	return decode(b.Data)
}

// TestLocalRoundTrip: on the in-process path the handler gets the very
// request message and the requester the very reply's contents, with no
// NATS message sent; the Local counts the delivery.
func TestLocalRoundTrip(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			client, srv, l := pair(t, tr.local)
			var got atomic.Pointer[Body]
			var sent atomic.Pointer[wrapperspb.BytesValue]
			mustHandleBody(t, srv, InferSubject("echo", "1"), QueueExecutors, func(ctx context.Context, b Body) (proto.Message, error) {
				got.Store(&b)
				v, err := value(b)
				if err != nil {
					return nil, err
				}
				out := bytesValue(append([]byte("re:"), v.Value...))
				sent.Store(out)
				return out, nil
			})
			req := bytesValue([]byte("hello"))
			before := client.NATS().Stats().OutMsgs
			var resp wrapperspb.BytesValue
			if err := client.Request(context.Background(), InferSubject("echo", "1"), req, &resp); err != nil {
				t.Fatal(err)
			}
			if string(resp.Value) != "re:hello" {
				t.Fatalf("reply %q", resp.Value)
			}
			b := got.Load()
			published := client.NATS().Stats().OutMsgs - before
			if tr.local {
				if b.Message != req || b.Data != nil {
					t.Fatalf("handler got %+v, want the request message itself", b)
				}
				if &resp.Value[0] != &sent.Load().Value[0] {
					t.Fatal("the reply's bytes were copied, not moved")
				}
				if published != 0 {
					t.Fatalf("the requester published %d NATS messages", published)
				}
				if l.Delivered() != 1 {
					t.Fatalf("Delivered = %d, want 1", l.Delivered())
				}
			} else if b.Message != nil || b.Data == nil || published == 0 {
				t.Fatalf("over NATS the handler got %+v after %d messages", b, published)
			}
			// A nil resp takes no reply; the request still runs.
			if err := client.Request(context.Background(), InferSubject("echo", "1"), bytesValue([]byte("x")), nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLocalBytesHandler: a HandlerFunc takes the encoded request on
// either path, and RequestBytes works on both.
func TestLocalBytesHandler(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			client, srv, _ := pair(t, tr.local)
			mustHandle(t, srv, "test.bytes", "q", func(ctx context.Context, req []byte) (proto.Message, error) {
				v, err := decode(req)
				if err != nil {
					return nil, err
				}
				return bytesValue(append(v.Value, '!')), nil
			})
			var resp wrapperspb.BytesValue
			if err := client.Request(context.Background(), "test.bytes", bytesValue([]byte("a")), &resp); err != nil || string(resp.Value) != "a!" {
				t.Fatalf("Request: %q, %v", resp.Value, err)
			}
			in, _ := proto.Marshal(bytesValue([]byte("b")))
			out, err := client.RequestBytes(context.Background(), "test.bytes", in)
			if err != nil {
				t.Fatal(err)
			}
			v, err := decode(out)
			if err != nil || string(v.Value) != "b!" {
				t.Fatalf("RequestBytes: %v, %v", v, err)
			}
		})
	}
}

// TestLocalErrors: a handler's errors reach the requester with the same
// kind and message on both paths, and as bare *tritonerr.Error values.
func TestLocalErrors(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantKind tritonerr.Kind
		wantMsg  string
	}{
		{"invalid arg", tritonerr.InvalidArgf("unexpected inference input 'X' for model 'simple'"), tritonerr.InvalidArg, "unexpected inference input 'X' for model 'simple'"},
		{"awkward message", tritonerr.InvalidArgf("%s", " line 1\r\nline 2\t100% done\x00 "), tritonerr.InvalidArg, " line 1\r\nline 2\t100% done\x00 "},
		{"wrapped", fmt.Errorf("loading: %w", tritonerr.NotFoundf("no file")), tritonerr.NotFound, "loading: no file"},
		{"foreign error", errors.New("disk on fire"), tritonerr.Internal, "disk on fire"},
		{"handler's context expired", context.DeadlineExceeded, tritonerr.Unavailable, "request to subject 'test.errors' timed out"},
		{"not taken", NotTaken("draining"), tritonerr.Unavailable, "not taken: draining"},
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			client, srv, _ := pair(t, tr.local)
			var current atomic.Pointer[error]
			mustHandle(t, srv, "test.errors", "q", func(ctx context.Context, req []byte) (proto.Message, error) {
				return nil, *current.Load()
			})
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					current.Store(&tt.err)
					err := client.Request(context.Background(), "test.errors", bytesValue(nil), nil)
					wantErr(t, err, tt.wantKind, tt.wantMsg)
					if tt.name == "wrapped" && errors.Unwrap(err) != nil {
						t.Fatalf("error %v keeps the handler's chain", err)
					}
					if tt.name == "not taken" && !IsNoResponders(err) {
						t.Fatalf("IsNoResponders(%v) = false", err)
					}
				})
			}
		})
	}
}

// TestLocalPanic: a handler's panic is an INTERNAL error on both paths,
// and the handler serves on.
func TestLocalPanic(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			client, srv, _ := pair(t, tr.local)
			mustHandleBody(t, srv, "test.panic", "q", func(ctx context.Context, b Body) (proto.Message, error) {
				v, _ := value(b)
				if string(v.Value) == "panic" {
					var m map[string]int
					m["x"] = 1
				}
				return v, nil
			})
			err := client.Request(context.Background(), "test.panic", bytesValue([]byte("panic")), nil)
			wantErr(t, err, tritonerr.Internal, "internal error: the handler for subject 'test.panic' panicked: assignment to entry in nil map")
			var resp wrapperspb.BytesValue
			if err := client.Request(context.Background(), "test.panic", bytesValue([]byte("fine")), &resp); err != nil || string(resp.Value) != "fine" {
				t.Fatalf("after a panic: %q, %v", resp.Value, err)
			}
		})
	}
}

// TestLocalDeadline: the handler runs under the requester's deadline and
// nothing else of its ctx; a request that runs past it fails as it does
// over NATS.
func TestLocalDeadline(t *testing.T) {
	type key struct{}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			client, srv, _ := pair(t, tr.local)
			type seen struct {
				deadline time.Time
				has      bool
				value    any
			}
			got := make(chan seen, 1)
			mustHandleBody(t, srv, "test.deadline", "q", func(ctx context.Context, b Body) (proto.Message, error) {
				d, ok := ctx.Deadline()
				got <- seen{d, ok, ctx.Value(key{})}
				return nil, nil
			})
			want := time.Now().Add(7 * time.Second)
			ctx, cancel := context.WithDeadline(context.WithValue(context.Background(), key{}, "requester's"), want)
			defer cancel()
			if err := client.Request(ctx, "test.deadline", bytesValue(nil), nil); err != nil {
				t.Fatal(err)
			}
			if s := <-got; !s.has || !s.deadline.Equal(want) || s.value != nil {
				t.Fatalf("handler saw deadline %v (%v), value %v; want %v and no value", s.deadline, s.has, s.value, want)
			}
			if err := client.Request(context.Background(), "test.deadline", bytesValue(nil), nil); err != nil {
				t.Fatal(err)
			}
			if s := <-got; s.has {
				t.Fatal("handler has a deadline the requester never set")
			}

			ended := make(chan error, 1)
			mustHandleBody(t, srv, InferSubject("slow", "1"), QueueExecutors, func(ctx context.Context, b Body) (proto.Message, error) {
				<-ctx.Done()
				ended <- ctx.Err()
				return nil, ctx.Err()
			})
			ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
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

			past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			defer cancel()
			err = client.Request(past, InferSubject("slow", "1"), bytesValue(nil), nil)
			wantErr(t, err, tritonerr.Unavailable, "request to model 'slow' version 1 timed out")
		})
	}
}

// TestLocalCancel: the requester's cancellation cancels the handler's ctx
// with the requester as the cause, and the requester gets CANCELLED.
func TestLocalCancel(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			client, srv, _ := pair(t, tr.local)
			started := make(chan struct{})
			cause := make(chan error, 1)
			mustHandleBody(t, srv, "test.cancel", "q", func(ctx context.Context, b Body) (proto.Message, error) {
				close(started)
				select {
				case <-ctx.Done():
					cause <- context.Cause(ctx)
				case <-time.After(10 * time.Second):
					cause <- nil
				}
				return nil, ctx.Err()
			})
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-started; cancel() }()
			err := client.Request(ctx, "test.cancel", bytesValue(nil), nil)
			wantErr(t, err, tritonerr.Cancelled, "request to subject 'test.cancel' was cancelled")
			select {
			case got := <-cause:
				// Over NATS the cause names the requester; in-process the
				// handler's ctx ends with the requester's own.
				if !errors.Is(got, context.Canceled) && !errors.Is(got, errRequesterCancelled) || !tr.local && !errors.Is(got, errRequesterCancelled) {
					t.Fatalf("handler ctx ended with %v, want the requester's cancellation", got)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the handler never saw the cancellation")
			}
			err = client.Request(ctx, "test.cancel", bytesValue(nil), nil)
			wantErr(t, err, tritonerr.Cancelled, "request to subject 'test.cancel' was cancelled")
		})
	}
}

// TestLocalTraceContext: the handler sees the requester's span as a
// remote one, as it would after the headers.
func TestLocalTraceContext(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			client, srv, _ := pair(t, tr.local)
			got := make(chan trace.SpanContext, 1)
			mustHandleBody(t, srv, "test.trace", "q", func(ctx context.Context, b Body) (proto.Message, error) {
				got <- trace.SpanContextFromContext(ctx)
				return nil, nil
			})
			sc := trace.NewSpanContext(trace.SpanContextConfig{
				TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
				SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
				TraceFlags: trace.FlagsSampled,
			})
			if err := client.Request(trace.ContextWithSpanContext(context.Background(), sc), "test.trace", bytesValue(nil), nil); err != nil {
				t.Fatal(err)
			}
			rsc := <-got
			if rsc.TraceID() != sc.TraceID() || rsc.SpanID() != sc.SpanID() || !rsc.IsSampled() || !rsc.IsRemote() {
				t.Fatalf("handler saw span context %v, want %v (remote)", rsc, sc)
			}
		})
	}
}

// TestLocalOnlyQueueGroups: a handler outside a queue group (every
// subscriber gets each request) is reached over NATS only.
func TestLocalOnlyQueueGroups(t *testing.T) {
	client, srv, l := pair(t, true)
	mustHandle(t, srv, "test.broadcast", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		return bytesValue([]byte("ok")), nil
	})
	if err := srv.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	var resp wrapperspb.BytesValue
	if err := client.Request(context.Background(), "test.broadcast", bytesValue(nil), &resp); err != nil || string(resp.Value) != "ok" {
		t.Fatalf("%q, %v", resp.Value, err)
	}
	if l.Delivered() != 0 {
		t.Fatalf("Delivered = %d for a subject outside a queue group", l.Delivered())
	}
}

// TestLocalFallsBackToNATS: once the in-process handler drains (or its
// Conn closes), requests go over NATS to the other members of the queue
// group; Drain waits for the in-process requests in flight.
func TestLocalFallsBackToNATS(t *testing.T) {
	s := startServer(t, 0)
	l := NewLocal()
	client, near, far := connect(t, s, WithLocal(l)), connect(t, s, WithLocal(l)), connect(t, s)
	subject := InferSubject("m", "1")
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	nearSub := mustHandleBody(t, near, subject, QueueExecutors, func(ctx context.Context, b Body) (proto.Message, error) {
		if v, _ := value(b); string(v.Value) == "hold" {
			entered <- struct{}{}
			<-release
		}
		return bytesValue([]byte("near")), nil
	})
	mustHandle(t, far, subject, QueueExecutors, func(ctx context.Context, req []byte) (proto.Message, error) {
		return bytesValue([]byte("far")), nil
	})
	if err := far.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	ask := func(v string) (string, error) {
		var resp wrapperspb.BytesValue
		err := client.Request(context.Background(), subject, bytesValue([]byte(v)), &resp)
		return string(resp.Value), err
	}
	for range 20 {
		if got, err := ask("x"); err != nil || got != "near" {
			t.Fatalf("with a handler in this process: %q, %v", got, err)
		}
	}

	held := make(chan error, 1)
	go func() {
		got, err := ask("hold")
		if err == nil && got != "near" {
			err = fmt.Errorf("held request answered %q", got)
		}
		held <- err
	}()
	<-entered
	drained := make(chan error, 1)
	go func() { drained <- nearSub.Drain() }()
	// Drain has removed the in-process handler before waiting, so new
	// requests reach the other member.
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := ask("x")
		if err != nil {
			t.Fatal(err)
		}
		if got == "far" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("requests still reach the draining handler")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) with an in-process request in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
}

// TestLocalConcurrent: many requesters at once, each getting its own
// reply (run with -race).
func TestLocalConcurrent(t *testing.T) {
	client, srv, l := pair(t, true)
	mustHandleBody(t, srv, "test.concurrent", "q", func(ctx context.Context, b Body) (proto.Message, error) {
		v, err := value(b)
		if err != nil {
			return nil, err
		}
		return bytesValue(append([]byte("re:"), v.Value...)), nil
	})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			for j := range 50 {
				want := fmt.Sprintf("%d-%d", i, j)
				var resp wrapperspb.BytesValue
				if err := client.Request(context.Background(), "test.concurrent", bytesValue([]byte(want)), &resp); err != nil {
					errs <- err
					return
				}
				if string(resp.Value) != "re:"+want {
					errs <- fmt.Errorf("got %q, want %q", resp.Value, "re:"+want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if l.Delivered() != 16*50 {
		t.Fatalf("Delivered = %d, want %d", l.Delivered(), 16*50)
	}
}

// TestLocalStream: a streamed reply brings the same items on both paths;
// in-process, no NATS message is sent and at most the window waits
// unread.
func TestLocalStream(t *testing.T) {
	tests := []struct {
		name   string
		n      int
		failAt int
		last   proto.Message
		window int
	}{
		{"many, end alone", 300, -1, nil, 4},
		{"many, last is a message", 50, -1, wrapperspb.String("last"), 1},
		{"none", 0, -1, nil, 0},
		{"error mid-stream", 5, 2, nil, 2},
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			client, srv, l := pair(t, tr.local)
			for i, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					subject := fmt.Sprintf("test.stream.%d", i)
					mustHandle(t, srv, subject, "q", streamHandler(tt.n, tt.failAt, tt.last))
					if err := srv.NATS().Flush(); err != nil {
						t.Fatal(err)
					}
					before, delivered := client.NATS().Stats().OutMsgs, uint64(0)
					if l != nil {
						delivered = l.Delivered()
					}
					st, err := client.Stream(context.Background(), subject, bytesValue([]byte("go")), tt.window)
					if err != nil {
						t.Fatal(err)
					}
					var items []StreamItem
					for {
						it, err := st.Recv()
						if err != nil {
							t.Fatalf("after %d items: %v", len(items), err)
						}
						items = append(items, it)
						if st.local != nil {
							// The end may always go (as on the wire), so
							// the window bounds the items before it.
							st.local.mu.Lock()
							queued := 0
							for _, q := range st.local.q {
								if !q.Final {
									queued++
								}
							}
							st.local.mu.Unlock()
							if w := max(tt.window, 1); tt.window > 0 && queued > w {
								t.Fatalf("%d items queued with a window of %d", queued, w)
							}
						}
						if it.Final {
							break
						}
					}
					if len(items) != tt.n+1 {
						t.Fatalf("%d items, want %d", len(items), tt.n+1)
					}
					for i, it := range items[:tt.n] {
						if i == tt.failAt {
							wantErr(t, it.Err, tritonerr.InvalidArg, fmt.Sprintf("element %d is bad", i))
							continue
						}
						var v wrapperspb.StringValue
						if err := proto.Unmarshal(it.Data, &v); err != nil || v.Value != fmt.Sprint(i) || it.Err != nil {
							t.Fatalf("item %d: %q %v %v", i, v.Value, err, it.Err)
						}
					}
					end := items[tt.n]
					var v wrapperspb.StringValue
					if tt.last == nil && (len(end.Data) != 0 || end.Err != nil) ||
						tt.last != nil && (proto.Unmarshal(end.Data, &v) != nil || v.Value != "last") {
						t.Errorf("last item %q %v", end.Data, end.Err)
					}
					if _, err := st.Recv(); err == nil {
						t.Error("Recv after the end succeeded")
					}
					if tr.local {
						if sent := client.NATS().Stats().OutMsgs - before; sent != 0 {
							t.Errorf("the requester published %d NATS messages", sent)
						}
						if l.Delivered() != delivered+1 {
							t.Errorf("Delivered went from %d to %d", delivered, l.Delivered())
						}
					}
				})
			}
		})
	}
}

// TestLocalStreamEnds: a refusal before streaming is Recv's error; a
// requester's Close, cancellation or deadline before the end cancels the
// handler, whose sends then fail; the requester's error is the wire's.
func TestLocalStreamEnds(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			client, srv, _ := pair(t, tr.local)
			mustHandle(t, srv, "test.refuse", "q", func(ctx context.Context, req []byte) (proto.Message, error) {
				return nil, tritonerr.Unsupportedf("no streams here")
			})
			sendErr := make(chan error, 1)
			mustHandle(t, srv, "test.endless", "q", func(ctx context.Context, req []byte) (proto.Message, error) {
				w := StreamOf(ctx)
				for {
					if err := w.Send(ctx, wrapperspb.String("x"), false); err != nil {
						<-ctx.Done() // the handler's ctx ends with the stream
						sendErr <- err
						return nil, err
					}
				}
			})
			if err := srv.NATS().Flush(); err != nil {
				t.Fatal(err)
			}
			st, err := client.Stream(context.Background(), "test.refuse", bytesValue(nil), 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = st.Recv()
			wantErr(t, err, tritonerr.Unsupported, "no streams here")

			open := func(ctx context.Context) *Stream {
				st, err := client.Stream(ctx, "test.endless", bytesValue(nil), 2)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := st.Recv(); err != nil {
					t.Fatal(err)
				}
				return st
			}
			waitSendErr := func() {
				t.Helper()
				select {
				case err := <-sendErr:
					if err == nil {
						t.Fatal("send after the requester left succeeded")
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the handler kept sending")
				}
			}

			open(context.Background()).Close()
			waitSendErr()

			ctx, cancel := context.WithCancel(context.Background())
			st = open(ctx)
			cancel()
			for {
				if _, err = st.Recv(); err != nil {
					break
				}
			}
			wantErr(t, err, tritonerr.Cancelled, "request to subject 'test.endless' was cancelled")
			waitSendErr()

			ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			st = open(ctx)
			<-ctx.Done()
			for {
				if _, err = st.Recv(); err != nil {
					break
				}
			}
			// Over NATS the handler's own deadline may end the stream first
			// ("the responder gave it up"): UNAVAILABLE either way.
			wantErr(t, err, tritonerr.Unavailable, "")
			if tr.local {
				wantErr(t, err, tritonerr.Unavailable, "request to subject 'test.endless' timed out")
			}
			waitSendErr()
		})
	}
}
