package bench

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// Sizes and concurrencies of the benchmarks.
const (
	small   = 64       // bytes: 16 FP32 values
	medium  = 1 << 20  // 1 MiB
	large   = 16 << 20 // 16 MiB
	memSize = 64 << 20 // memcpy size

	warmSmall = 20 // untimed, fully checked requests per worker
	warmLarge = 2
)

// concurrencies: c=1 gives latency (p50, p99), c=16 throughput.
var concurrencies = []int{1, 16}

func TestMain(m *testing.M) {
	code := m.Run()
	printSummary(os.Stdout)
	fx.close()
	constellation.RemoveBinaries()
	os.Exit(code)
}

// fixtures are started once, on first use, and shared by every benchmark
// of the run (a benchmark function runs several times while the framework
// finds b.N).
type fixtures struct {
	mu       sync.Mutex
	base     *Baselines
	grpc     map[string]*grpc.ClientConn
	http     *http.Client
	startErr map[string]error
	onClose  []func() // servers started by other files, stopped last
}

var fx = &fixtures{grpc: map[string]*grpc.ClientConn{}, startErr: map[string]error{}}

func (f *fixtures) baselines(b testing.TB) *Baselines {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.base == nil && f.startErr["base"] == nil {
		f.base, f.startErr["base"] = StartBaselines()
	}
	if err := f.startErr["base"]; err != nil {
		b.Fatalf("starting the baseline servers: %v", err)
	}
	return f.base
}

func (f *fixtures) conn(b testing.TB, addr string) *grpc.ClientConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cc := f.grpc[addr]; cc != nil {
		return cc
	}
	cc, err := DialGRPC(addr)
	if err != nil {
		b.Fatalf("dial %s: %v", addr, err)
	}
	f.grpc[addr] = cc
	return cc
}

func (f *fixtures) httpClient() *http.Client {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.http == nil {
		f.http = NewHTTPClient()
	}
	return f.http
}

func (f *fixtures) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, cc := range f.grpc {
		_ = cc.Close()
	}
	if f.http != nil {
		f.http.CloseIdleConnections()
	}
	for i := len(f.onClose) - 1; i >= 0; i-- {
		f.onClose[i]()
	}
	if f.base != nil {
		f.base.Close()
	}
}

// Results of this run, by key, in the order first measured. A benchmark
// function runs several times while the framework settles b.N; the last
// (longest) run wins.
var results = struct {
	sync.Mutex
	m     map[string]Result
	rss   map[string]int64 // peak RSS during the run, bytes
	order []string
}{m: map[string]Result{}, rss: map[string]int64{}}

func record(key string, r Result, peakRSS int64) {
	results.Lock()
	defer results.Unlock()
	if _, ok := results.m[key]; !ok {
		results.order = append(results.order, key)
	}
	results.m[key] = r
	if peakRSS > 0 {
		results.rss[key] = peakRSS
	}
}

func lookup(key string) (Result, bool) {
	results.Lock()
	defer results.Unlock()
	r, ok := results.m[key]
	return r, ok
}

// What a comparison compares.
type kind int

const (
	latency    kind = iota // c=1: p50 and p99, lower is better
	throughput             // c=16: req/s, higher is better
	duration               // large payloads: p50 time, lower is better
)

// comparison is one ratio the summary prints: path over base. Targets are
// the project's performance goals; a ratio outside its target is flagged, never failed — timing
// on a shared 2-core machine is no pass/fail criterion.
type comparison struct {
	path, base string
	kind       kind
	target     float64 // p50 (latency), req/s (throughput) or time (duration) ratio; 0: report only
	targetP99  float64
}

var comparisons = []comparison{
	// The chains against the bare transports: what one NATS hop costs.
	{"chain-grpc-unary/c1", "grpc-echo-unary/c1", latency, 0, 0},
	{"chain-grpc-unary/c16", "grpc-echo-unary/c16", throughput, 0, 0},
	{"chain-grpc-stream/c1", "grpc-echo-stream/c1", latency, 0, 0},
	{"chain-grpc-stream/c16", "grpc-echo-stream/c16", throughput, 0, 0},
	{"chain-http-binary/c1", "http-echo/c1", latency, 0, 0},
	{"chain-http-binary/c16", "http-echo/c16", throughput, 0, 0},
	{"nats-inproc/c1", "nats-tcp/c1", latency, 0, 0},
	{"nats-inproc/c16", "nats-tcp/c16", throughput, 0, 0},
	// Nereid against the floor of its architecture, each path against its
	// own chain (goals: p50 <= 1.1x (HTTP JSON 1.2x), p99 <= 1.25x, req/s >= 0.85x).
	{"nereid-grpc-unary/c1", "chain-grpc-unary/c1", latency, 1.10, 1.25},
	{"nereid-grpc-stream/c1", "chain-grpc-stream/c1", latency, 1.10, 1.25},
	{"nereid-http-binary/c1", "chain-http-binary/c1", latency, 1.10, 1.25},
	{"nereid-http-json/c1", "chain-http-json/c1", latency, 1.20, 1.25},
	{"nereid-grpc-unary/c16", "chain-grpc-unary/c16", throughput, 0.85, 0},
	{"nereid-grpc-stream/c16", "chain-grpc-stream/c16", throughput, 0.85, 0},
	{"nereid-http-binary/c16", "chain-http-binary/c16", throughput, 0.85, 0},
	{"nereid-http-json/c16", "chain-http-json/c16", throughput, 0.85, 0},
	// The HTTP chain's proxy and responder move bytes only; the protocol
	// chain adds the translation between KServe's HTTP protocol and the
	// bus's messages that any gateway and executor make (reported: where
	// the HTTP paths' time goes beyond the transport).
	{"protocol-chain-http-binary/c1", "chain-http-binary-vs-protocol/c1", latency, 0, 0},
	{"protocol-chain-http-json/c1", "chain-http-json-vs-protocol/c1", latency, 0, 0},
	{"nereid-http-binary-vs-protocol/c1", "protocol-http-binary/c1", latency, 0, 0},
	{"nereid-http-json-vs-protocol/c1", "protocol-http-json/c1", latency, 0, 0},
	{"nereid-http-binary-vs-protocol/c16", "protocol-http-binary/c16", throughput, 0, 0},
	{"nereid-http-json-vs-protocol/c16", "protocol-http-json/c16", throughput, 0, 0},
	// The standalone server's in-process path against the bare transports
	// (goals: p50 <= 1.6x, req/s >= 0.6x), each echo measured in
	// alternation with its path.
	{"nereid-fast-grpc-unary/c1", "echo-for-fast-grpc-unary/c1", latency, 1.60, 0},
	{"nereid-fast-http-binary/c1", "echo-for-fast-http-binary/c1", latency, 1.60, 0},
	{"nereid-fast-grpc-unary/c16", "echo-for-fast-grpc-unary/c16", throughput, 0.60, 0},
	{"nereid-fast-http-binary/c16", "echo-for-fast-http-binary/c16", throughput, 0.60, 0},
	{"nereid-fast-grpc-stream/c1", "echo-for-fast-grpc-stream/c1", latency, 0, 0},
	{"nereid-fast-grpc-stream/c16", "echo-for-fast-grpc-stream/c16", throughput, 0, 0},
	{"nereid-fast-http-json/c1", "echo-for-fast-http-json/c1", latency, 0, 0},
	{"nereid-fast-http-json/c16", "echo-for-fast-http-json/c16", throughput, 0, 0},
	// Large tensors.
	{"nereid-http-binary-1MiB", "nereid-http-json-1MiB", duration, 0, 0},
	{"nats-inproc-16MiB", "http-echo-16MiB", duration, 0, 0},
	{"grpc-echo-16MiB", "http-echo-16MiB", duration, 0, 0},
	{"nereid-http-binary-16MiB", "http-echo-16MiB", duration, 1.25, 0},
	{"nereid-grpc-unary-16MiB", "grpc-echo-16MiB", duration, 1.15, 0},
	{"nereid-fast-http-binary-16MiB", "echo-for-fast-http-binary-16MiB", duration, 1.25, 0},
	{"nereid-fast-grpc-unary-16MiB", "echo-for-fast-grpc-unary-16MiB", duration, 1.15, 0},
	{"nereid-http-binary-256MiB", "http-echo-256MiB", duration, 1.25, 0},
	{"nereid-grpc-unary-256MiB", "grpc-echo-256MiB", duration, 1.15, 0},
	{"nereid-fast-http-binary-256MiB", "echo-for-fast-http-binary-256MiB", duration, 1.25, 0},
	{"nereid-fast-grpc-unary-256MiB", "echo-for-fast-grpc-unary-256MiB", duration, 1.15, 0},
}

// measure drives b.N requests at conc, fails the benchmark on any error,
// reports the raw numbers and every ratio against a baseline of this run.
func measure(b *testing.B, key string, conc, warmup int, w Worker) Result {
	b.Helper()
	big := warmup == warmLarge
	if big {
		resetPeakRSS()
	}
	res, err := Drive(b, b.N, conc, warmup, w)
	if err != nil {
		b.Fatalf("%s: %v", key, err)
	}
	report(b, key, res, big)
	return res
}

// measurePair measures a path and its baseline together, alternating
// between them (DrivePair), and reports the path's numbers, the
// baseline's (as base-*) and their ratios. b.N counts requests on each side.
func measurePair(b *testing.B, baseKey, key string, conc, warmup int, base, w Worker) {
	b.Helper()
	big := warmup == warmLarge
	if big {
		resetPeakRSS()
	}
	rb, res, err := DrivePair(b, b.N, conc, warmup, base, w)
	if err != nil {
		b.Fatalf("%s vs %s: %v", key, baseKey, err)
	}
	record(baseKey, rb, 0)
	reportRaw(b, "base-", rb, big)
	report(b, key, res, big)
}

// report records res under key and reports its numbers and ratios.
func report(b *testing.B, key string, res Result, big bool) {
	var peak int64
	if big {
		// Client, servers and NATS share this process: the peak bounds
		// them all together (for a pair, both sides).
		if peak = peakRSS(); peak > 0 {
			b.ReportMetric(float64(peak)/(1<<20), "peak-rss-MiB")
		}
	}
	record(key, res, peak)
	reportRaw(b, "", res, big)
	for _, c := range comparisons {
		if c.path != key {
			continue
		}
		base, ok := lookup(c.base)
		if !ok {
			continue // baseline not part of this run (-bench filter)
		}
		switch c.kind {
		case latency:
			b.ReportMetric(ratio(res.P50, base.P50), "ratio-p50")
			b.ReportMetric(ratio(res.P99, base.P99), "ratio-p99")
		case throughput:
			b.ReportMetric(res.PerSec/base.PerSec, "ratio-req/s")
		case duration:
			b.ReportMetric(ratio(res.P50, base.P50), "ratio-time")
		}
	}
}

func reportRaw(b *testing.B, prefix string, res Result, big bool) {
	if big {
		b.ReportMetric(ms(res.P50), prefix+"p50-ms")
		b.ReportMetric(ms(res.P99), prefix+"p99-ms")
		return
	}
	b.ReportMetric(us(res.P50), prefix+"p50-us")
	b.ReportMetric(us(res.P99), prefix+"p99-us")
	b.ReportMetric(res.PerSec, prefix+"req/s")
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// resetPeakRSS starts a fresh peak-RSS window (Linux: writing 5 to
// clear_refs resets VmHWM) after giving back what the last benchmark left.
func resetPeakRSS() {
	runtime.GC()
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSS is VmHWM of this process in bytes (0 where /proc is missing).
// Everything — client, gateway, executor and NATS — runs in this process,
// so it bounds every service's peak together.
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// BenchmarkMemcpy64MiB is the copy speed of one core: the cost of every
// copy a large tensor makes on its way through.
func BenchmarkMemcpy64MiB(b *testing.B) {
	src, dst := FP32Payload(memSize), make([]byte, memSize)
	copy(dst, src) // fault the pages in before timing
	b.SetBytes(memSize)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		copy(dst, src)
	}
	el := time.Since(start)
	b.StopTimer()
	per := el / time.Duration(b.N)
	gbs := float64(memSize) / per.Seconds() / 1e9
	b.ReportMetric(gbs, "GB/s")
	record("memcpy-64MiB", Result{Conc: 1, N: b.N, Elapsed: el, P50: per, P99: per, Mean: per, Max: per, PerSec: float64(b.N) / el.Seconds()}, 0)
}

// BenchmarkTransport measures the bare transports on loopback: the limits
// under every path (and what one NATS hop costs, in the summary).
func BenchmarkTransport(b *testing.B) {
	payload := FP32Payload(small)
	paths := []struct {
		key    string
		worker func(b *testing.B, bs *Baselines) Worker
	}{
		{"grpc-echo-unary", func(b *testing.B, bs *Baselines) Worker {
			return GRPCEchoUnary(fx.conn(b, bs.GRPCEchoAddr), payload)
		}},
		{"grpc-echo-stream", func(b *testing.B, bs *Baselines) Worker {
			return GRPCEchoStream(fx.conn(b, bs.GRPCEchoAddr), payload)
		}},
		{"http-echo", func(b *testing.B, bs *Baselines) Worker {
			return HTTPPost(fx.httpClient(), "http://"+bs.HTTPEchoAddr+"/", nil, payload, EchoCheck(payload))
		}},
		{"nats-tcp", func(b *testing.B, bs *Baselines) Worker { return NATSRequest(bs.NATSTCP, SubjectEchoTCP, payload) }},
		{"nats-inproc", func(b *testing.B, bs *Baselines) Worker {
			return NATSRequest(bs.NATSInproc, SubjectEchoInproc, payload)
		}},
	}
	for _, p := range paths {
		for _, c := range concurrencies {
			b.Run(fmt.Sprintf("%s/c=%d", p.key, c), func(b *testing.B) {
				measure(b, fmt.Sprintf("%s/c%d", p.key, c), c, warmSmall, p.worker(b, fx.baselines(b)))
			})
		}
	}
}

// largeSizes are 16 MiB always, plus 256 MiB when NEREID_BENCH_256MIB is
// set (it takes seconds per request and GiBs of memory).
func largeSizes() []int {
	sizes := []int{large}
	if os.Getenv("NEREID_BENCH_256MIB") != "" {
		sizes = append(sizes, 256<<20)
	}
	return sizes
}

func sizeName(n int) string { return fmt.Sprintf("%dMiB", n>>20) }
