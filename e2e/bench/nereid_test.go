package bench

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
)

var nereidOnce struct {
	sync.Mutex
	n   map[bool]*Nereid
	err map[bool]error
}

// nereid starts the standalone server with its in-process bus off once
// per run: the constellation's path (gateway -> NATS -> executor) in one
// process. A server that cannot start fails every benchmark using it.
func nereid(b *testing.B) *Nereid { return startOnce(b, false) }

// fastNereid starts the standalone server as `make run` does, its
// in-process bus on, once per run.
func fastNereid(b *testing.B) *Nereid { return startOnce(b, true) }

func startOnce(b *testing.B, inProcess bool) *Nereid {
	nereidOnce.Lock()
	defer nereidOnce.Unlock()
	if nereidOnce.n == nil {
		nereidOnce.n, nereidOnce.err = map[bool]*Nereid{}, map[bool]error{}
	}
	if nereidOnce.n[inProcess] == nil && nereidOnce.err[inProcess] == nil {
		n, err := StartNereid(inProcess)
		nereidOnce.n[inProcess], nereidOnce.err[inProcess] = n, err
		if n != nil {
			fx.mu.Lock()
			fx.onClose = append(fx.onClose, n.Close)
			fx.mu.Unlock()
		}
	}
	if err := nereidOnce.err[inProcess]; err != nil {
		b.Fatalf("starting the standalone server (in-process bus %v): %v", inProcess, err)
	}
	return nereidOnce.n[inProcess]
}

// BenchmarkInfer measures the constellation's infer paths (the standalone
// server with its in-process bus off) for a 64-byte tensor — client ->
// gateway -> NATS (in-process) -> executor -> identity backend and back —
// each in alternation with its chain, the same client
// and request against the architecture's floor, so that the two sides of
// each ratio are seconds apart rather than minutes.
//
// The chains: gRPC unary and stream go through a GRPCInferenceService proxy
// that decodes the request, re-encodes it for NATS, and a responder that
// answers as an identity model (the messages the gateway and executor
// exchange, with no validation, scheduling or backend). HTTP goes through
// an HTTP proxy that carries the very request body (JSON or binary) over
// NATS to an echo responder: measured as one chain, not as the HTTP echo
// plus the NATS leg, since the sum of two separately measured round trips
// counts scheduling twice and misses their overlap.
func BenchmarkInfer(b *testing.B) {
	payload := FP32Payload(small)
	binBody, binHeader := HTTPBinaryRequest(payload)
	jsonBody, jsonHeader := HTTPJSONRequest(payload)
	req := InferRequest(payload)
	paths := []struct {
		key           string
		chain, nereid func(b *testing.B) Worker
	}{
		{"grpc-unary",
			func(b *testing.B) Worker {
				return InferUnary(inference.NewGRPCInferenceServiceClient(fx.conn(b, fx.baselines(b).ChainGRPCAddr)), req)
			},
			func(b *testing.B) Worker {
				return InferUnary(inference.NewGRPCInferenceServiceClient(fx.conn(b, nereid(b).GRPCAddr)), req)
			}},
		{"grpc-stream",
			func(b *testing.B) Worker {
				return InferStream(inference.NewGRPCInferenceServiceClient(fx.conn(b, fx.baselines(b).ChainGRPCAddr)), req)
			},
			func(b *testing.B) Worker {
				return InferStream(inference.NewGRPCInferenceServiceClient(fx.conn(b, nereid(b).GRPCAddr)), req)
			}},
		{"http-binary",
			func(b *testing.B) Worker {
				return HTTPPost(fx.httpClient(), "http://"+fx.baselines(b).ChainHTTPAddr+InferPath, binHeader, binBody, EchoCheck(binBody))
			},
			func(b *testing.B) Worker {
				return HTTPPost(fx.httpClient(), "http://"+nereid(b).HTTPAddr+InferPath, binHeader, binBody, BinaryInferCheck(payload))
			}},
		{"http-json",
			func(b *testing.B) Worker {
				return HTTPPost(fx.httpClient(), "http://"+fx.baselines(b).ChainHTTPAddr+InferPath, jsonHeader, jsonBody, EchoCheck(jsonBody))
			},
			func(b *testing.B) Worker {
				return HTTPPost(fx.httpClient(), "http://"+nereid(b).HTTPAddr+InferPath, jsonHeader, jsonBody, JSONInferCheck(payload))
			}},
	}
	for _, p := range paths {
		for _, c := range concurrencies {
			b.Run(fmt.Sprintf("%s/c=%d", p.key, c), func(b *testing.B) {
				measurePair(b, fmt.Sprintf("chain-%s/c%d", p.key, c), fmt.Sprintf("nereid-%s/c%d", p.key, c), c, warmSmall, p.chain(b), p.nereid(b))
			})
		}
	}
	// The HTTP paths against the protocol chain (Baselines.ProtocolHTTPAddr),
	// and that chain against the HTTP chain.
	protocol := []struct {
		key          string
		body         []byte
		header       http.Header
		check, chain func() HTTPCheck
	}{
		{"http-binary", binBody, binHeader, BinaryInferCheck(payload), EchoCheck(binBody)},
		{"http-json", jsonBody, jsonHeader, JSONInferCheck(payload), EchoCheck(jsonBody)},
	}
	for _, p := range protocol {
		proto := func(b *testing.B) Worker {
			return HTTPPost(fx.httpClient(), "http://"+fx.baselines(b).ProtocolHTTPAddr+InferPath, p.header, p.body, p.check)
		}
		b.Run(fmt.Sprintf("%s/protocol-vs-chain/c=1", p.key), func(b *testing.B) {
			measurePair(b, fmt.Sprintf("chain-%s-vs-protocol/c1", p.key), fmt.Sprintf("protocol-chain-%s/c1", p.key), 1, warmSmall,
				HTTPPost(fx.httpClient(), "http://"+fx.baselines(b).ChainHTTPAddr+InferPath, p.header, p.body, p.chain), proto(b))
		})
		for _, c := range concurrencies {
			b.Run(fmt.Sprintf("%s/vs-protocol/c=%d", p.key, c), func(b *testing.B) {
				measurePair(b, fmt.Sprintf("protocol-%s/c%d", p.key, c), fmt.Sprintf("nereid-%s-vs-protocol/c%d", p.key, c), c, warmSmall,
					proto(b), HTTPPost(fx.httpClient(), "http://"+nereid(b).HTTPAddr+InferPath, p.header, p.body, p.check))
			})
		}
	}
}

// BenchmarkLarge measures large tensors at c=1, each against its baseline
// in alternation: 1 MiB over HTTP binary against HTTP JSON, then 16 MiB
// (and 256 MiB with NEREID_BENCH_256MIB=1) over HTTP binary and gRPC
// against the bare echo of the same payload, through the constellation's
// path (in-process bus off: the tensors handed off beside NATS) and the
// in-process bus, and NATS alone for scale.
func BenchmarkLarge(b *testing.B) {
	mid := FP32Payload(medium)
	midJSON, midJSONHeader := HTTPJSONRequest(mid)
	midBin, midBinHeader := HTTPBinaryRequest(mid)
	b.Run("1MiB/http-binary-vs-json", func(b *testing.B) {
		b.SetBytes(medium)
		url := "http://" + nereid(b).HTTPAddr + InferPath
		measurePair(b, "nereid-http-json-1MiB", "nereid-http-binary-1MiB", 1, warmLarge,
			HTTPPost(fx.httpClient(), url, midJSONHeader, midJSON, JSONInferCheck(mid)),
			HTTPPost(fx.httpClient(), url, midBinHeader, midBin, BinaryInferCheck(mid)))
	})

	for _, size := range largeSizes() {
		data := FP32Payload(size)
		name := sizeName(size)
		body, header := HTTPBinaryRequest(data)
		b.Run(name+"/http-binary", func(b *testing.B) {
			b.SetBytes(int64(size))
			measurePair(b, "http-echo-"+name, "nereid-http-binary-"+name, 1, warmLarge,
				HTTPPost(fx.httpClient(), "http://"+fx.baselines(b).HTTPEchoAddr+"/", nil, data, EchoCheck(data)),
				HTTPPost(fx.httpClient(), "http://"+nereid(b).HTTPAddr+InferPath, header, body, BinaryInferCheck(data)))
		})
		b.Run(name+"/http-binary-in-process", func(b *testing.B) {
			b.SetBytes(int64(size))
			measurePair(b, "echo-for-fast-http-binary-"+name, "nereid-fast-http-binary-"+name, 1, warmLarge,
				HTTPPost(fx.httpClient(), "http://"+fx.baselines(b).HTTPEchoAddr+"/", nil, data, EchoCheck(data)),
				HTTPPost(fx.httpClient(), "http://"+fastNereid(b).HTTPAddr+InferPath, header, body, BinaryInferCheck(data)))
		})
		b.Run(name+"/grpc-unary-in-process", func(b *testing.B) {
			b.SetBytes(int64(size))
			measurePair(b, "echo-for-fast-grpc-unary-"+name, "nereid-fast-grpc-unary-"+name, 1, warmLarge,
				GRPCEchoUnary(fx.conn(b, fx.baselines(b).GRPCEchoAddr), data),
				InferUnary(inference.NewGRPCInferenceServiceClient(fx.conn(b, fastNereid(b).GRPCAddr)), InferRequest(data)))
		})
		b.Run(name+"/grpc-unary", func(b *testing.B) {
			b.SetBytes(int64(size))
			measurePair(b, "grpc-echo-"+name, "nereid-grpc-unary-"+name, 1, warmLarge,
				GRPCEchoUnary(fx.conn(b, fx.baselines(b).GRPCEchoAddr), data),
				InferUnary(inference.NewGRPCInferenceServiceClient(fx.conn(b, nereid(b).GRPCAddr)), InferRequest(data)))
		})
		if size <= 32<<20 { // one message on the baselines' NATS server
			b.Run(name+"/nats-echo", func(b *testing.B) {
				b.SetBytes(int64(size))
				measure(b, "nats-inproc-"+name, 1, warmLarge, NATSRequest(fx.baselines(b).NATSInproc, SubjectEchoInproc, data))
			})
		}
	}
}

// BenchmarkInferInProcess measures the standalone server as `make run`
// starts it, its in-process bus on (client -> gateway -> executor ->
// identity backend and back, no NATS, no encoding between gateway and
// executor), for a 64-byte tensor, each path in alternation with the bare
// echo of its transport: what the server adds to the transport alone. It
// fails when a request took NATS instead.
func BenchmarkInferInProcess(b *testing.B) {
	payload := FP32Payload(small)
	binBody, binHeader := HTTPBinaryRequest(payload)
	jsonBody, jsonHeader := HTTPJSONRequest(payload)
	req := InferRequest(payload)
	paths := []struct {
		key        string
		echo, fast func(b *testing.B) Worker
	}{
		{"grpc-unary",
			func(b *testing.B) Worker { return GRPCEchoUnary(fx.conn(b, fx.baselines(b).GRPCEchoAddr), payload) },
			func(b *testing.B) Worker {
				return InferUnary(inference.NewGRPCInferenceServiceClient(fx.conn(b, fastNereid(b).GRPCAddr)), req)
			}},
		{"grpc-stream",
			func(b *testing.B) Worker { return GRPCEchoStream(fx.conn(b, fx.baselines(b).GRPCEchoAddr), payload) },
			func(b *testing.B) Worker {
				return InferStream(inference.NewGRPCInferenceServiceClient(fx.conn(b, fastNereid(b).GRPCAddr)), req)
			}},
		{"http-binary",
			func(b *testing.B) Worker {
				return HTTPPost(fx.httpClient(), "http://"+fx.baselines(b).HTTPEchoAddr+"/", nil, payload, EchoCheck(payload))
			},
			func(b *testing.B) Worker {
				return HTTPPost(fx.httpClient(), "http://"+fastNereid(b).HTTPAddr+InferPath, binHeader, binBody, BinaryInferCheck(payload))
			}},
		{"http-json",
			func(b *testing.B) Worker {
				return HTTPPost(fx.httpClient(), "http://"+fx.baselines(b).HTTPEchoAddr+"/", nil, payload, EchoCheck(payload))
			},
			func(b *testing.B) Worker {
				return HTTPPost(fx.httpClient(), "http://"+fastNereid(b).HTTPAddr+InferPath, jsonHeader, jsonBody, JSONInferCheck(payload))
			}},
	}
	for _, p := range paths {
		for _, c := range concurrencies {
			b.Run(fmt.Sprintf("%s/c=%d", p.key, c), func(b *testing.B) {
				n := fastNereid(b)
				before := n.InProcess()
				measurePair(b, fmt.Sprintf("echo-for-fast-%s/c%d", p.key, c), fmt.Sprintf("nereid-fast-%s/c%d", p.key, c), c, warmSmall, p.echo(b), p.fast(b))
				if got := n.InProcess() - before; got < uint64(b.N) {
					b.Fatalf("%d of %d requests took the in-process bus", got, b.N)
				}
			})
		}
	}
}
