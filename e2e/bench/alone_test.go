package bench

import (
	"fmt"
	"runtime/metrics"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
)

// BenchmarkAlone drives the 64-byte infer paths of the standalone server
// and of their chains each on its own, so that -cpuprofile and -memprofile
// (with -memprofilerate=1) show one path's costs per request, and
// callgrind counts its instructions without the other side mixed in.
// Besides -benchmem's allocations it reports, per request, goroutines
// started and goroutine wake-ups (the scheduler's runnable-to-running
// transitions: each hand-off between goroutines is one), for the whole
// process: client, server and NATS together.
func BenchmarkAlone(b *testing.B) {
	payload := FP32Payload(small)
	binBody, binHeader := HTTPBinaryRequest(payload)
	jsonBody, jsonHeader := HTTPJSONRequest(payload)
	req := InferRequest(payload)
	grpcAt := func(addr string) inference.GRPCInferenceServiceClient {
		return inference.NewGRPCInferenceServiceClient(fx.conn(b, addr))
	}
	paths := []struct {
		key    string
		worker func(b *testing.B) Worker
	}{
		{"nereid-grpc-unary", func(b *testing.B) Worker { return InferUnary(grpcAt(nereid(b).GRPCAddr), req) }},
		{"chain-grpc-unary", func(b *testing.B) Worker { return InferUnary(grpcAt(fx.baselines(b).ChainGRPCAddr), req) }},
		{"nereid-fast-grpc-unary", func(b *testing.B) Worker { return InferUnary(grpcAt(fastNereid(b).GRPCAddr), req) }},
		{"grpc-echo-unary", func(b *testing.B) Worker { return GRPCEchoUnary(fx.conn(b, fx.baselines(b).GRPCEchoAddr), payload) }},
		{"nereid-grpc-stream", func(b *testing.B) Worker { return InferStream(grpcAt(nereid(b).GRPCAddr), req) }},
		{"chain-grpc-stream", func(b *testing.B) Worker { return InferStream(grpcAt(fx.baselines(b).ChainGRPCAddr), req) }},
		{"nereid-http-binary", func(b *testing.B) Worker {
			return HTTPPost(fx.httpClient(), "http://"+nereid(b).HTTPAddr+InferPath, binHeader, binBody, BinaryInferCheck(payload))
		}},
		{"nereid-fast-http-binary", func(b *testing.B) Worker {
			return HTTPPost(fx.httpClient(), "http://"+fastNereid(b).HTTPAddr+InferPath, binHeader, binBody, BinaryInferCheck(payload))
		}},
		{"http-echo", func(b *testing.B) Worker {
			return HTTPPost(fx.httpClient(), "http://"+fx.baselines(b).HTTPEchoAddr+"/", nil, payload, EchoCheck(payload))
		}},
		{"chain-http-binary", func(b *testing.B) Worker {
			return HTTPPost(fx.httpClient(), "http://"+fx.baselines(b).ChainHTTPAddr+InferPath, binHeader, binBody, EchoCheck(binBody))
		}},
		{"nereid-http-json", func(b *testing.B) Worker {
			return HTTPPost(fx.httpClient(), "http://"+nereid(b).HTTPAddr+InferPath, jsonHeader, jsonBody, JSONInferCheck(payload))
		}},
		{"chain-http-json", func(b *testing.B) Worker {
			return HTTPPost(fx.httpClient(), "http://"+fx.baselines(b).ChainHTTPAddr+InferPath, jsonHeader, jsonBody, EchoCheck(jsonBody))
		}},
	}
	for _, p := range paths {
		for _, c := range concurrencies {
			b.Run(fmt.Sprintf("%s/c=%d", p.key, c), func(b *testing.B) {
				w := p.worker(b)
				before := readSched()
				measure(b, fmt.Sprintf("alone-%s/c%d", p.key, c), c, warmSmall, w)
				after := readSched()
				n := float64(b.N + c*warmSmall)
				b.ReportMetric(float64(after.created-before.created)/n, "goroutines/op")
				b.ReportMetric(float64(after.wakeups-before.wakeups)/n, "wakeups/op")
			})
		}
	}
}

type sched struct{ created, wakeups uint64 }

// readSched reads the goroutines created so far and the scheduling
// events: every time a goroutine went from runnable to running.
func readSched() sched {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}, {Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	var out sched
	if s[0].Value.Kind() == metrics.KindUint64 {
		out.created = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindFloat64Histogram {
		for _, c := range s[1].Value.Float64Histogram().Counts {
			out.wakeups += c
		}
	}
	return out
}
