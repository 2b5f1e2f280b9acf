package bus

import (
	"context"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The bare NATS benchmarks measure the transport with nothing of ours on
// top, in the same run, so the bus's overhead reads as a ratio.

func benchPair(b *testing.B, maxPayload int32) (client, srv *Conn) {
	s := startServer(b, maxPayload)
	return connect(b, s), connect(b, s)
}

func benchRequest(b *testing.B, size int, maxPayload int32, parallel bool) {
	client, srv := benchPair(b, maxPayload)
	mustHandle(b, srv, "bench.echo", QueueExecutors, func(ctx context.Context, req []byte) (proto.Message, error) {
		return decode(req)
	})
	req := bytesValue(pattern(size, 0))
	one := func(resp *wrapperspb.BytesValue) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := client.Request(ctx, "bench.echo", req, resp); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(2 * size))
	b.ResetTimer()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			var resp wrapperspb.BytesValue
			for pb.Next() {
				one(&resp)
			}
		})
		return
	}
	var resp wrapperspb.BytesValue
	w := wakeups()
	for b.Loop() {
		one(&resp)
	}
	reportWakeups(b, w)
}

// wakeups counts the goroutine wake-ups of the process so far, as the
// runtime samples them: one in eight of each goroutine's transitions from
// runnable to running (the runtime's gTrackingPeriod). Each hand-off
// between goroutines on a request's path (NATS server, requester and
// responder, all in this process) is one wake-up.
func wakeups() uint64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	var n uint64
	if s[0].Value.Kind() == metrics.KindFloat64Histogram {
		for _, c := range s[0].Value.Float64Histogram().Counts {
			n += c
		}
	}
	return n
}

// reportWakeups reports the sampled wake-ups per request since before.
func reportWakeups(b *testing.B, before uint64) {
	b.ReportMetric(float64(wakeups()-before)/float64(b.N), "sampled-wakeups/op")
}

func benchBare(b *testing.B, size int, maxPayload int32, parallel bool) {
	s := startServer(b, maxPayload)
	client, srv := connect(b, s), connect(b, s)
	sub, err := srv.NATS().QueueSubscribe("bench.echo", QueueExecutors, func(m *nats.Msg) { m.Respond(m.Data) })
	if err != nil {
		b.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	defer sub.Unsubscribe()
	srv.NATS().Flush()
	body, _ := proto.Marshal(bytesValue(pattern(size, 0)))
	b.SetBytes(int64(2 * size))
	b.ResetTimer()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := client.NATS().Request("bench.echo", body, 10*time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
		return
	}
	w := wakeups()
	for b.Loop() {
		if _, err := client.NATS().Request("bench.echo", body, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	reportWakeups(b, w)
}

func BenchmarkRequest64B(b *testing.B)                 { benchRequest(b, 64, 0, false) }
func BenchmarkBareNATSRequest64B(b *testing.B)         { benchBare(b, 64, 0, false) }
func BenchmarkRequest64BParallel(b *testing.B)         { benchRequest(b, 64, 0, true) }
func BenchmarkBareNATSRequest64BParallel(b *testing.B) { benchBare(b, 64, 0, true) }

// 16 MiB: chunked at the default 1 MiB max payload, against bare NATS with a
// max payload raised to fit the body in one message.
func BenchmarkRequest16MiB(b *testing.B)         { benchRequest(b, 16<<20, 0, false) }
func BenchmarkBareNATSRequest16MiB(b *testing.B) { benchBare(b, 16<<20, 32<<20, false) }
