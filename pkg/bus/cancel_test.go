package bus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// TestCancelReachesHandler: a requester's cancellation cancels the ctx of
// the handler serving the request, with the requester as the cause, both
// for one-message requests and for chunked ones; a request that times out
// instead sends nothing (the handler has the deadline itself).
func TestCancelReachesHandler(t *testing.T) {
	s := startServer(t, 0)
	for _, tc := range []struct {
		name string
		size int
	}{
		{"inline", 16},
		{"chunked", 3 << 20}, // above the 1 MiB max payload
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, srv := connect(t, s), connect(t, s)
			started := make(chan struct{})
			cause := make(chan error, 1)
			mustHandle(t, srv, "test.cancel."+tc.name, "q", func(ctx context.Context, req []byte) (proto.Message, error) {
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
			err := client.Request(ctx, "test.cancel."+tc.name, bytesValue(pattern(tc.size, 1)), nil)
			wantErr(t, err, tritonerr.Cancelled, "")
			select {
			case got := <-cause:
				if !errors.Is(got, errRequesterCancelled) {
					t.Fatalf("handler ctx ended with %v, want the requester's cancellation", got)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the handler never saw the cancellation")
			}
		})
	}
}

// TestCancelBeforeRequest: a cancellation that overtakes its request is
// applied when the request arrives.
func TestCancelBeforeRequest(t *testing.T) {
	s := startServer(t, 0)
	srv := connect(t, s)
	if err := srv.listenCancels(); err != nil {
		t.Fatal(err)
	}
	srv.cancelHandler("_INBOX.x.1", 0)
	ctx, done := srv.trackHandler(context.Background(), "_INBOX.x.1")
	defer done()
	if !errors.Is(context.Cause(ctx), errRequesterCancelled) {
		t.Fatalf("early cancellation not applied: %v", context.Cause(ctx))
	}
	ctx2, done2 := srv.trackHandler(context.Background(), "_INBOX.x.2")
	defer done2()
	if ctx2.Err() != nil {
		t.Fatal("an unrelated request was cancelled")
	}
	// Applied once: a later request reusing the name is not affected.
	ctx3, done3 := srv.trackHandler(context.Background(), "_INBOX.x.1")
	defer done3()
	if ctx3.Err() != nil {
		t.Fatal("a tombstone was applied twice")
	}
}

// TestCancelNotSentOnSuccessOrTimeout: only a cancelled ctx publishes on
// CancelSubject.
func TestCancelNotSentOnSuccessOrTimeout(t *testing.T) {
	s := startServer(t, 0)
	client, srv := connect(t, s), connect(t, s)
	mustHandle(t, srv, "test.nocancel", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		v, _ := decode(req)
		if string(v.Value) == "slow" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return v, nil
	})
	seen := make(chan string, 4)
	sub, err := client.NATS().Subscribe(CancelSubject, func(m *nats.Msg) { seen <- string(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = client.NATS().Flush()
	if err := client.Request(context.Background(), "test.nocancel", bytesValue([]byte("x")), nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = client.Request(ctx, "test.nocancel", bytesValue([]byte("slow")), nil)
	wantErr(t, err, tritonerr.Unavailable, "")
	_ = client.NATS().Flush()
	select {
	case r := <-seen:
		t.Fatalf("a cancellation was published for %s", r)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestCancelNeedsTheKey: a cancellation naming a request's reply subject
// without the key the requester put in the request (what another Conn of
// the requester's role, which may read its role's inboxes, can forge) does
// not cancel it; the requester's own does. Plain, chunked and streamed
// requests alike.
func TestCancelNeedsTheKey(t *testing.T) {
	s := startServer(t, 0)
	client := connect(t, s, WithChunkSize(1024))
	srv := connect(t, s, WithChunkSize(1024))
	spy, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	for _, tc := range []struct {
		name   string
		size   int
		stream bool
	}{{"plain", 16, false}, {"chunked", 8 << 10, false}, {"stream", 16, true}} {
		t.Run(tc.name, func(t *testing.T) {
			subject := "test.cancelkey." + tc.name
			replies := make(chan string, 1)
			sub, err := spy.Subscribe(subject, func(m *nats.Msg) {
				if m.Header.Get(HeaderChunk) == "" || m.Header.Get(HeaderChunk) == "0" {
					replies <- m.Reply
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			_ = spy.Flush()
			cause := make(chan error, 1)
			started := make(chan struct{})
			mustHandle(t, srv, subject, "", func(ctx context.Context, req []byte) (proto.Message, error) {
				close(started)
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return nil, ctx.Err()
			})
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				if tc.stream {
					st, err := client.Stream(ctx, subject, bytesValue(pattern(tc.size, 1)), 0)
					if err == nil {
						_, err = st.Recv()
						st.Close()
					}
					errc <- err
					return
				}
				errc <- client.Request(ctx, subject, bytesValue(pattern(tc.size, 1)), nil)
			}()
			<-started
			reply := <-replies
			for _, forged := range []string{reply, reply + " 0", reply + " 1", reply + " ffffffffffffffff"} {
				if err := spy.Publish(CancelSubject, []byte(forged)); err != nil {
					t.Fatal(err)
				}
			}
			_ = spy.Flush()
			select {
			case got := <-cause:
				t.Fatalf("a cancellation without the request's key ended the handler: %v", got)
			case <-time.After(300 * time.Millisecond):
			}
			cancel()
			wantErr(t, <-errc, tritonerr.Cancelled, "")
			select {
			case got := <-cause:
				if !errors.Is(got, errRequesterCancelled) {
					t.Fatalf("handler ctx ended with %v, want the requester's cancellation", got)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the requester's own cancellation never reached the handler")
			}
		})
	}
}

// TestCancelKeyTombstone: a forged cancellation that overtakes a request
// is not applied to it; the requester's own, or a keyless one for a
// request tracked without a key (TrackRequest of a request received
// elsewhere), is.
func TestCancelKeyTombstone(t *testing.T) {
	s := startServer(t, 0)
	srv := connect(t, s)
	if err := srv.listenCancels(); err != nil {
		t.Fatal(err)
	}
	srv.cancelHandler("_INBOX.x.1", 7)
	var cancelled error
	srv.trackCancel("_INBOX.x.1", 8, causeFunc(func(err error) { cancelled = err }))
	if cancelled != nil {
		t.Fatal("a cancellation with another key was applied")
	}
	srv.untrack("_INBOX.x.1")
	srv.cancelHandler("_INBOX.x.2", 9)
	srv.trackCancel("_INBOX.x.2", 9, causeFunc(func(err error) { cancelled = err }))
	if !errors.Is(cancelled, errRequesterCancelled) {
		t.Fatal("the requester's early cancellation was not applied")
	}
	srv.untrack("_INBOX.x.2")
	ctx, done := srv.TrackRequest(context.Background(), "_INBOX.x.3")
	defer done()
	srv.cancelHandler("_INBOX.x.3", 0)
	if !errors.Is(context.Cause(ctx), errRequesterCancelled) {
		t.Fatal("a forwarded cancellation of a request tracked without a key was not applied")
	}
}

// TestTrackRequestKey: a request received elsewhere and tracked with the
// key its first receiver passed on (an executor running the sequence
// router's batch) follows only cancellations with that key, from
// ForwardCancel as from its requester, early or not.
func TestTrackRequestKey(t *testing.T) {
	s := startServer(t, 0)
	srv, other := connect(t, s), connect(t, s)
	ctx, done := srv.TrackRequestKey(context.Background(), "_INBOX.x.4", 0xabc)
	defer done()
	if err := srv.nc.Flush(); err != nil { // the cancellation subscription is in place
		t.Fatal(err)
	}
	srv.cancelHandler("_INBOX.x.4", 0)
	srv.cancelHandler("_INBOX.x.4", 0xabd)
	if ctx.Err() != nil {
		t.Fatal("a cancellation without the request's key was applied")
	}
	other.ForwardCancel("_INBOX.x.4", 0xabc)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the forwarded cancellation with the key was not applied")
	}
	srv.cancelHandler("_INBOX.x.5", 0)
	ctx5, done5 := srv.TrackRequestKey(context.Background(), "_INBOX.x.5", 0xdef)
	defer done5()
	if ctx5.Err() != nil {
		t.Fatal("an early cancellation without the request's key was applied")
	}
}
