// Package bench is Nereid's benchmark suite (make bench). It measures the
// bare transports on loopback — a grpc-go unary and bidirectional-stream
// echo, a net/http echo, NATS request-reply, memcpy — and the chains our
// architecture cannot beat (client -gRPC-> proxy -NATS-> responder, and the
// same over HTTP and over a stream), then the standalone server's infer
// paths, and prints each of Nereid's numbers as a ratio against its
// baseline measured in the same run. Absolute numbers on a shared machine
// drift by ±20% from run to run; ratios within one run do not.
//
// Nothing here asserts a time: a request that fails fails the benchmark
// (so a broken server never shows a fast number), and ratios outside
// the performance targets are flagged in the summary, not failed.
package bench
