package bus

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// streamHandler sends n numbered messages, an error at index failAt (-1:
// none), and returns last (nil: the end alone).
func streamHandler(n, failAt int, last proto.Message) HandlerFunc {
	return func(ctx context.Context, req []byte) (proto.Message, error) {
		w := StreamOf(ctx)
		if w == nil {
			return nil, tritonerr.InvalidArgf("not a stream")
		}
		for i := range n {
			var err error
			if i == failAt {
				err = w.SendError(ctx, tritonerr.InvalidArgf("element %d is bad", i), false)
			} else {
				err = w.Send(ctx, wrapperspb.String(fmt.Sprint(i)), false)
			}
			if err != nil {
				return nil, err
			}
		}
		return last, nil
	}
}

func recvAll(t *testing.T, s *Stream) []StreamItem {
	t.Helper()
	var items []StreamItem
	for {
		it, err := s.Recv()
		if err != nil {
			t.Fatalf("after %d items: %v", len(items), err)
		}
		items = append(items, it)
		if it.Final {
			return items
		}
	}
}

func TestStream(t *testing.T) {
	s := startServer(t, 64<<10)
	server, client := connect(t, s), connect(t, s)
	tests := []struct {
		name    string
		n       int
		failAt  int
		last    proto.Message
		window  int
		request int // request body size: large ones travel in chunks
	}{
		{"many, end alone", 1000, -1, nil, 4, 10},
		{"many, last is a message", 50, -1, wrapperspb.String("last"), 1, 10},
		{"none", 0, -1, nil, 0, 10},
		{"error mid-stream", 5, 2, nil, 2, 10},
		{"chunked request", 20, -1, nil, 3, 300 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			subject := "test.stream." + fmt.Sprint(tt.n)
			mustHandle(t, server, subject, "q", streamHandler(tt.n, tt.failAt, tt.last))
			st, err := client.Stream(context.Background(), subject, bytesValue(make([]byte, tt.request)), tt.window)
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
				// The window bounds the stream's messages waiting here,
				// read or not. Control messages are outside it: an abort
				// the responder's Conn sends for a credit that reached it
				// after its writer ended (and after the end it sent) may
				// queue behind the end.
				st.in.mu.Lock()
				queued := 0
				for _, m := range st.in.q {
					if m.Header[HeaderSeq] != nil {
						queued++
					}
				}
				st.in.mu.Unlock()
				if w := max(tt.window, 1); tt.window > 0 && queued > w+1 {
					t.Fatalf("%d messages queued with a window of %d", queued, w)
				}
				if it.Final {
					break
				}
			}
			want := tt.n + 1
			if len(items) != want {
				t.Fatalf("%d items, want %d", len(items), want)
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
			if tt.last == nil && (len(end.Data) != 0 || end.Err != nil) {
				t.Errorf("end alone carries %q %v", end.Data, end.Err)
			}
			if tt.last != nil {
				var v wrapperspb.StringValue
				if err := proto.Unmarshal(end.Data, &v); err != nil || v.Value != "last" {
					t.Errorf("last message %q %v", v.Value, err)
				}
			}
			if _, err := st.Recv(); err == nil {
				t.Error("Recv after the end succeeded")
			}
			idle(t, server, client)
		})
	}
}

func TestStreamRefused(t *testing.T) {
	s := startServer(t, 0)
	server, client := connect(t, s), connect(t, s)
	mustHandle(t, server, "test.refuse", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		return nil, tritonerr.Unsupportedf("no streams here")
	})
	st, err := client.Stream(context.Background(), "test.refuse", bytesValue(nil), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	wantErr(t, err, tritonerr.Unsupported, "no streams here")

	st, err = client.Stream(context.Background(), "test.nobody", bytesValue(nil), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	wantErr(t, err, tritonerr.Unavailable, "no responders on subject 'test.nobody'")
	idle(t, server, client)
}

// A requester that stops reading and closes the stream cancels the
// handler, whose sends then fail instead of blocking.
func TestStreamCancel(t *testing.T) {
	s := startServer(t, 0)
	server, client := connect(t, s), connect(t, s)
	sendErr := make(chan error, 1)
	mustHandle(t, server, "test.cancel", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		w := StreamOf(ctx)
		for {
			if err := w.Send(ctx, wrapperspb.String("x"), false); err != nil {
				<-ctx.Done() // the handler's ctx ends with the stream
				sendErr <- err
				return nil, err
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := client.Stream(ctx, "test.cancel", bytesValue(nil), 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := <-sendErr; err == nil {
		t.Fatal("send after cancel succeeded")
	}
	idle(t, server, client)
}

// A responder whose connection dies mid-stream ends the stream with a
// clear error, not a hang.
func TestStreamResponderGone(t *testing.T) {
	s := startServer(t, 0)
	server, client := connect(t, s), connect(t, s)
	sent := make(chan struct{})
	mustHandle(t, server, "test.gone", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		w := StreamOf(ctx)
		_ = w.Send(ctx, wrapperspb.String("x"), false)
		close(sent)
		<-ctx.Done()
		return nil, nil
	})
	st, err := client.Stream(context.Background(), "test.gone", bytesValue(nil), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	<-sent
	server.NATS().Close()
	_, err = st.Recv()
	wantErr(t, err, tritonerr.Unavailable, "stream from subject 'test.gone' ended: the responder went away before its last response")
	idle(t, client)
}

// A requester whose connection dies makes the handler's next send fail and
// cancels its ctx.
func TestStreamRequesterGone(t *testing.T) {
	s := startServer(t, 0)
	server, client := connect(t, s), connect(t, s)
	done := make(chan error, 1)
	first := make(chan struct{})
	mustHandle(t, server, "test.reqgone", "", func(ctx context.Context, req []byte) (proto.Message, error) {
		w := StreamOf(ctx)
		for i := 0; ; i++ {
			if err := w.Send(ctx, wrapperspb.String("x"), false); err != nil {
				<-ctx.Done()
				done <- err
				return nil, err
			}
			if i == 0 {
				close(first)
			}
		}
	})
	st, err := client.Stream(context.Background(), "test.reqgone", bytesValue(nil), 4)
	if err != nil {
		t.Fatal(err)
	}
	<-first
	_ = st
	client.NATS().Close()
	err = <-done
	if tritonerr.KindOf(err) != tritonerr.Cancelled {
		t.Fatalf("send to a gone requester: %v", err)
	}
}

func batchMsg(n string, items ...[]byte) *nats.Msg {
	var body []byte
	for _, it := range items {
		body = binary.LittleEndian.AppendUint32(body, uint32(len(it)))
		body = append(body, it...)
	}
	return &nats.Msg{Header: nats.Header{HeaderBatch: []string{n}}, Data: body}
}

func TestSplitBatch(t *testing.T) {
	tests := []struct {
		name string
		m    *nats.Msg
		want []string
		err  bool
	}{
		{"two", batchMsg("2", []byte("ab"), []byte("c")), []string{"ab", "c"}, false},
		{"empty items", batchMsg("3", nil, []byte("x"), nil), []string{"", "x", ""}, false},
		{"count too high", batchMsg("3", []byte("ab"), []byte("c")), nil, true},
		{"count zero", batchMsg("0"), nil, true},
		{"count not a number", batchMsg("x", []byte("a")), nil, true},
		{"trailing bytes", &nats.Msg{Header: nats.Header{HeaderBatch: []string{"1"}}, Data: []byte{1, 0, 0, 0, 'a', 'b'}}, nil, true},
		{"item overruns", &nats.Msg{Header: nats.Header{HeaderBatch: []string{"1"}}, Data: []byte{9, 0, 0, 0, 'a'}}, nil, true},
		{"length cut short", &nats.Msg{Header: nats.Header{HeaderBatch: []string{"2"}}, Data: []byte{1, 0, 0, 0, 'a', 1, 0, 0}}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, err := splitBatch(tt.m)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if err != nil {
				if !errors.Is(err, errProtocol) {
					t.Errorf("error %v is not a protocol error", err)
				}
				return
			}
			var got []string
			for _, it := range items {
				got = append(got, string(it.Data))
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// FuzzSplitBatch: any body and count either splits into items that
// re-encode to exactly the body, or is a protocol error; never a panic.
func FuzzSplitBatch(f *testing.F) {
	f.Add("2", batchMsg("2", []byte("ab"), []byte("c")).Data)
	f.Add("1", []byte{9, 0, 0, 0, 'a'})
	f.Add("4294967295", []byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, n string, body []byte) {
		items, err := splitBatch(&nats.Msg{Header: nats.Header{HeaderBatch: []string{n}}, Data: body})
		if err != nil {
			if !errors.Is(err, errProtocol) {
				t.Fatalf("error %v is not a protocol error", err)
			}
			return
		}
		var again []byte
		for _, it := range items {
			again = binary.LittleEndian.AppendUint32(again, uint32(len(it.Data)))
			again = append(again, it.Data...)
		}
		if count, _ := strconv.Atoi(n); !bytes.Equal(again, body) || count != len(items) {
			t.Fatalf("%q items of %q re-encode to %q", n, body, again)
		}
	})
}

// A stream whose responder no longer knows it (its Conn is alive but the
// stream's subject is gone) ends with an error instead of a wait for ever:
// the Conn answers the requester's credit with an abort.
func TestStreamForgotten(t *testing.T) {
	s := startServer(t, 0)
	server, client := connect(t, s), connect(t, s)
	sub, err := server.NATS().Subscribe("test.forgotten", func(m *nats.Msg) {
		_ = server.NATS().PublishMsg(&nats.Msg{Subject: m.Reply, Reply: server.prefix + "gone",
			Header: nats.Header{HeaderStream: []string{streamOpen}}})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	server.NATS().Flush()
	st, err := client.Stream(context.Background(), "test.forgotten", bytesValue(nil), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	wantErr(t, err, tritonerr.Unavailable, "stream from subject 'test.forgotten' ended: the responder gave it up before its last response")
	idle(t, client)
}

// A producer faster than its consumer: with HeaderAsk answered, what it
// sends while two messages are in flight gathers into batches, so 1,000
// items cross in a handful of messages; a requester that does not answer
// HeaderAsk gets one message per item until the window is full. Order and
// content are the same either way. Every item is sent before anything is
// read, which neither case blocks.
func TestStreamAskBatching(t *testing.T) {
	s := startServer(t, 1<<20)
	server, client := connect(t, s), connect(t, s)
	const window = 64
	for _, tc := range []struct {
		name          string
		ask           bool
		n             int
		minMsgs, msgs int
	}{
		{"ask answered", true, 1000, 2, 12},
		{"ask not answered", false, window, window, window},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answerAsk = tc.ask
			defer func() { answerAsk = true }()
			sent := make(chan struct{})
			subject := "test.ask." + fmt.Sprint(tc.ask)
			mustHandle(t, server, subject, "", func(ctx context.Context, _ []byte) (proto.Message, error) {
				w := StreamOf(ctx)
				defer close(sent)
				for i := range tc.n {
					if err := w.Send(ctx, wrapperspb.String(fmt.Sprint(i)), false); err != nil {
						return nil, err
					}
				}
				return nil, nil
			})
			st, err := client.Stream(context.Background(), subject, wrapperspb.String(""), window)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			<-sent
			items := recvAll(t, st)
			if len(items) != tc.n+1 {
				t.Fatalf("got %d items, want %d and the end", len(items), tc.n)
			}
			for i, it := range items[:tc.n] {
				var v wrapperspb.StringValue
				if err := st.Unmarshal(it.Data, &v); err != nil || v.Value != fmt.Sprint(i) {
					t.Fatalf("item %d: %q %v", i, v.Value, err)
				}
			}
			st.mu.Lock()
			msgs := st.consumed
			st.mu.Unlock()
			if msgs < tc.minMsgs || msgs > tc.msgs {
				t.Errorf("%d items took %d messages, want %d to %d", tc.n, msgs, tc.minMsgs, tc.msgs)
			}
		})
	}
}
