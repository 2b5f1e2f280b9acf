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
	srv.cancelHandler("_INBOX.x.1")
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
