package bus

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// A router-like middle hands each request, reply subject and all, to a
// worker on another connection; the worker answers the requester directly,
// small and chunked, success and error, and the requester cannot tell.
func TestDelegatedReply(t *testing.T) {
	s := startServer(t, 64<<10)
	requester := connect(t, s)
	middle := connect(t, s)
	worker := connect(t, s)

	type job struct {
		reply    string
		data     []byte
		deadline time.Time
	}
	jobs := make(chan job, 8)
	sub, err := middle.HandleDelegated("mid", "q", func(ctx context.Context, _, reply string, data []byte) {
		d, _ := ctx.Deadline()
		jobs <- job{reply, data, d}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	go func() {
		for j := range jobs {
			v, _ := decode(j.data)
			if string(v.GetValue()) == "fail" {
				worker.ReplyError(j.reply, tritonerr.InvalidArgf("worker says no"))
				continue
			}
			if j.deadline.IsZero() {
				worker.ReplyError(j.reply, tritonerr.Internalf("deadline lost"))
				continue
			}
			_ = worker.Reply(context.Background(), j.reply, bytesValue(bytes.Repeat(v.GetValue(), 2)))
		}
	}()
	defer close(jobs)

	for _, n := range []int{1, 1000, 300 << 10} { // the last is chunked both ways
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		in := pattern(n, byte(n))
		var out = bytesValue(nil)
		if err := requester.Request(ctx, "mid", bytesValue(in), out); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		cancel()
		if !bytes.Equal(out.GetValue(), bytes.Repeat(in, 2)) {
			t.Fatalf("%d bytes: reply differs", n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = requester.Request(ctx, "mid", bytesValue([]byte("fail")), nil)
	wantErr(t, err, tritonerr.InvalidArg, "worker says no")

	err = requester.Request(ctx, "nobody", bytesValue(nil), nil)
	if !IsNoResponders(err) {
		t.Fatalf("IsNoResponders(%v) = false", err)
	}
	if IsNoResponders(tritonerr.Unavailablef("request to x timed out")) {
		t.Fatal("a timeout is not 'no responders'")
	}
}

func TestParseSequenceSubject(t *testing.T) {
	for _, tc := range []struct{ model, version string }{{"simple_sequence", "1"}, {"a.b c", ""}, {"m", "12"}} {
		for _, s := range []string{SequenceInferSubject(tc.model, tc.version), SequencePullSubject(tc.model, tc.version)} {
			m, v, k, ok := ParseSequenceSubject(s)
			if !ok || m != tc.model || v != tc.version || (k != "infer" && k != "pull") {
				t.Fatalf("ParseSequenceSubject(%q) = %q %q %q %v", s, m, v, k, ok)
			}
		}
	}
	for _, s := range []string{"nereid.v1.seq.a.b", "nereid.v1.seq.a.b.c.d", "nereid.v1.infer.a.b.c", "nereid.v1.seq.a~ZZ.b.infer"} {
		if _, _, _, ok := ParseSequenceSubject(s); ok {
			t.Fatalf("ParseSequenceSubject(%q) accepted", s)
		}
	}
}
