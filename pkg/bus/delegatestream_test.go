package bus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A delegated request streamed by another Conn (the sequence router's
// path): the router holds the request past the requester's idle timeout,
// hands its reply subject to an executor's Conn, which streams through
// ReplyStream under the requester's window; the requester's cancellation
// reaches the executor through TrackRequest.
func TestReplyStreamDelegated(t *testing.T) {
	s := startServer(t, 64<<10)
	const idle = 300 * time.Millisecond
	router, exec := connect(t, s), connect(t, s)
	client := connect(t, s, WithIdleTimeout(idle))
	replies := make(chan string, 4)
	sub, err := router.HandleDelegated("test.delegated", "q", func(_ context.Context, _, reply string, _ []byte) {
		replies <- reply
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Drain() })

	t.Run("stream in order under the window", func(t *testing.T) {
		const n, window = 200, 4
		st, err := client.StreamQueued(context.Background(), "test.delegated", wrapperspb.String("req"), window)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		reply := <-replies
		time.Sleep(2 * idle) // queued past the idle timeout: StreamQueued waits
		go func() {
			w := exec.ReplyStream("test.delegated", reply, window)
			defer w.Close()
			for i := range n {
				if err := w.Send(context.Background(), wrapperspb.String(fmt.Sprint(i)), false); err != nil {
					t.Errorf("send %d: %v", i, err)
					return
				}
			}
			if err := w.End(context.Background()); err != nil {
				t.Errorf("end: %v", err)
			}
		}()
		items := recvAll(t, st)
		if len(items) != n+1 {
			t.Fatalf("got %d items, want %d and the end", len(items), n)
		}
		for i, it := range items[:n] {
			var v wrapperspb.StringValue
			if err := st.Unmarshal(it.Data, &v); err != nil || v.Value != fmt.Sprint(i) {
				t.Fatalf("item %d: %q %v", i, v.Value, err)
			}
		}
	})

	t.Run("requester cancels", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := client.StreamQueued(ctx, "test.delegated", wrapperspb.String("req"), 2)
		if err != nil {
			t.Fatal(err)
		}
		reply := <-replies
		tctx, untrack := exec.TrackRequest(context.Background(), reply)
		defer untrack()
		w := exec.ReplyStream("test.delegated", reply, 2)
		defer w.Close()
		if err := w.Send(tctx, wrapperspb.String("first"), false); err != nil {
			t.Fatal(err)
		}
		if it, err := st.Recv(); err != nil || it.Final {
			t.Fatalf("first item: %+v %v", it, err)
		}
		cancel()
		if _, err := st.Recv(); err == nil {
			t.Fatal("Recv after cancel succeeded")
		}
		select {
		case <-tctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the requester's cancellation did not reach the streaming Conn")
		}
	})

	t.Run("without StreamQueued the idle timeout applies", func(t *testing.T) {
		st, err := client.Stream(context.Background(), "test.delegated", wrapperspb.String("req"), 2)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		<-replies
		if _, err := st.Recv(); err == nil {
			t.Fatal("a stream nobody opened did not time out")
		}
	})
}
