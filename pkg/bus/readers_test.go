package bus

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestReadersConcurrency: a Handle subscription serves as many requests at
// once as arrive, however many readers it had waiting: n handlers block
// until all n are running, and n more requests are answered meanwhile.
func TestReadersConcurrency(t *testing.T) {
	const n = 64
	s := startServer(t, 0)
	client, srv := connect(t, s), connect(t, s)
	var running sync.WaitGroup
	running.Add(n)
	release := make(chan struct{})
	var served atomic.Int32
	sub := mustHandle(t, srv, "test.readers", QueueExecutors, func(ctx context.Context, req []byte) (proto.Message, error) {
		if v, _ := decode(req); string(v.GetValue()) == "first" {
			running.Done()
			<-release
		}
		served.Add(1)
		return nil, nil
	})
	errc := make(chan error, 2*n)
	for range n {
		go func() { errc <- client.Request(context.Background(), "test.readers", bytesValue([]byte("first")), nil) }()
	}
	running.Wait() // all n handlers at once
	for range n {
		go func() { errc <- client.Request(context.Background(), "test.readers", bytesValue([]byte("then")), nil) }()
	}
	// The second wave is answered while every handler of the first blocks.
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if got := served.Load(); got != n {
		t.Fatalf("%d requests served while the first wave blocks, want %d", got, n)
	}
	close(release)
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if err := sub.Drain(); err != nil {
		t.Fatal(err)
	}
	idle(t, client, srv)
}

// TestHandleChanLen: an inference subject (HandleBody) keeps room for a
// burst of requests waiting for readers; a control subject (Handle) a
// small channel, whose buffer every garbage collection scans.
func TestHandleChanLen(t *testing.T) {
	s := startServer(t, 0)
	c := connect(t, s)
	control := mustHandle(t, c, "test.chanlen.control", "", func(context.Context, []byte) (proto.Message, error) { return nil, nil })
	infer := mustHandleBody(t, c, "test.chanlen.infer", "", func(context.Context, Body) (proto.Message, error) { return nil, nil })
	if got := cap(control.reading.ch); got != controlChanLen {
		t.Fatalf("Handle's channel holds %d requests, want %d", got, controlChanLen)
	}
	if got := cap(infer.reading.ch); got != handleChanLen {
		t.Fatalf("HandleBody's channel holds %d requests, want %d", got, handleChanLen)
	}
}
