#!/usr/bin/env bash
# perfdoc.sh writes docs/performance.md from the output of `make bench`
# (`go test -bench` lines, and the summary the bench suite prints after
# them), read on stdin; the page goes to stdout. `make perfdoc` runs it.
#
#   make bench | tee bench.out
#   scripts/perfdoc.sh "quiet run, 2-vCPU VM" < bench.out > docs/performance.md
#
# The optional argument describes the run (machine, load); it is printed
# above the table. Every benchmark line becomes one row: its name (without
# the -GOMAXPROCS suffix), ns/op, p50, p99 and req/s (each with the
# baseline's, base-*, measured in alternation with it), the ratios the
# benchmark reports (ratio-*), and its other metrics. A benchmark that
# appears more than once (-count) shows its last run. Exits 1, writing
# nothing, when the input holds no benchmark line.
set -euo pipefail

note="${1:-}"
input="$(cat)"

table="$(printf '%s\n' "$input" | awk '
function commas(x,   s, neg) {
	s = sprintf("%.0f", x)
	neg = (substr(s, 1, 1) == "-")
	if (neg) s = substr(s, 2)
	while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]($|,)/, ",&", s)
	sub(/^,/, "", s)
	return (neg ? "-" : "") s
}
# dur formats a time metric given in "us" or "ms": µs below 1 ms, ms above.
function dur(v, unit) {
	if (unit == "us") {
		if (v < 100) return sprintf("%.1f µs", v)
		if (v < 1000) return sprintf("%.0f µs", v)
		v = v / 1000
	}
	if (v < 100) return sprintf("%.2f ms", v)
	return sprintf("%.0f ms", v)
}
# num drops the trailing zeros of a number as go test prints it.
function num(s) {
	if (s ~ /^-?[0-9]+\.[0-9]+$/) { sub(/0+$/, "", s); sub(/\.$/, "", s) }
	return s
}
function timecell(n, what,   own, base) {
	own = ""; base = ""
	if ((n, what "-us") in m) own = dur(m[n, what "-us"], "us")
	else if ((n, what "-ms") in m) own = dur(m[n, what "-ms"], "ms")
	if ((n, "base-" what "-us") in m) base = dur(m[n, "base-" what "-us"], "us")
	else if ((n, "base-" what "-ms") in m) base = dur(m[n, "base-" what "-ms"], "ms")
	if (own != "" && base != "") return own " (base " base ")"
	if (base != "") return "(base " base ")"
	return own
}
function ratename(u) {
	u = substr(u, 7)
	return u
}
/^(goos|goarch|cpu):/ {
	v = $0; sub(/^[a-z]+:[ \t]*/, "", v)
	meta[$1] = v
	next
}
/^Benchmark/ && NF >= 4 && $2 ~ /^[0-9]+$/ {
	n = $1
	sub(/-[0-9]+$/, "", n)
	if (!(n in seen)) { seen[n] = 1; order[++rows] = n }
	# A later run of the same benchmark replaces the earlier one.
	for (k in units) if (index(k, n SUBSEP) == 1) delete m[k]
	for (i = 3; i < NF; i += 2) {
		m[n, $(i + 1)] = $i
		units[n SUBSEP $(i + 1)] = 1
		if (!(n in ulist)) ulist[n] = ""
		if (index(" " ulist[n] " ", " " $(i + 1) " ") == 0) ulist[n] = ulist[n] " " $(i + 1)
	}
	next
}
END {
	if (rows == 0) exit 3
	if (meta["goos:"] != "" || meta["cpu:"] != "") {
		line = "Go benchmarks on " meta["goos:"] "/" meta["goarch:"]
		if (meta["cpu:"] != "") line = line ", " meta["cpu:"]
		print line "."
		print ""
	}
	print "| benchmark | ns/op | p50 | p99 | req/s | vs baseline | other metrics |"
	print "| --- | ---: | ---: | ---: | ---: | --- | --- |"
	for (r = 1; r <= rows; r++) {
		n = order[r]
		ns = ((n, "ns/op") in m) ? commas(m[n, "ns/op"]) : ""
		rps = ((n, "req/s") in m) ? commas(m[n, "req/s"]) : ""
		if ((n, "base-req/s") in m) rps = (rps == "" ? "" : rps " ") "(base " commas(m[n, "base-req/s"]) ")"
		ratios = ""; other = ""
		cnt = split(substr(ulist[n], 2), us, " ")
		for (j = 1; j <= cnt; j++) {
			u = us[j]
			if (!((n, u) in m)) continue
			if (u ~ /^ratio-/) {
				ratios = ratios (ratios == "" ? "" : ", ") ratename(u) " " sprintf("%.2fx", m[n, u])
			} else if (u == "ns/op" || u == "req/s" || u ~ /^base-/ || u ~ /^p(50|99)-(us|ms)$/) {
				continue
			} else {
				other = other (other == "" ? "" : ", ") num(m[n, u]) " " u
			}
		}
		printf "| `%s` | %s | %s | %s | %s | %s | %s |\n", n, ns, timecell(n, "p50"), timecell(n, "p99"), rps, ratios, other
	}
}
')" || { echo "perfdoc.sh: no benchmark lines in the input (is it the output of make bench?)" >&2; exit 1; }

# The summary the bench suite prints after the benchmarks (raw results,
# ratios with their targets, other numbers), verbatim.
summary="$(printf '%s\n' "$input" | awk '
/^== nereid bench:/ { on = 1 }
on && (/^(ok|FAIL|PASS)([ \t]|$)/ || /^Benchmark/ || /^goos:/) { on = 0 }
on { print }
')"

cat <<'EOF'
# Performance

`make bench` measures Nereid against the floors of its own architecture, on loopback, in one run:
what a request through Nereid costs is printed as a ratio against a baseline measured in the same
run, in alternation with it. Absolute numbers on a shared machine drift by ±20% from run to run;
ratios within one run do not. Nothing in the suite asserts a time: a request that fails fails the
benchmark (a broken server never shows a fast number), and a ratio outside its target is flagged
in the summary, not failed.

## What is measured

The baselines (`e2e/bench`, `BenchmarkTransport` and the pairs' `base-*` sides):

- **bare transports**: a grpc-go unary and bidirectional-stream echo, a net/http echo, NATS
  request-reply over TCP and in-process, and memcpy of 64 MiB (Go's copy, and the C library's
  for the C backend);
- **the chains** this architecture cannot beat: client -gRPC-> proxy -NATS-> responder (the
  messages a gateway and an executor exchange, with no validation, scheduling or backend), the
  same over a stream, and over HTTP with the very request body carried over NATS to an echo;
- **the protocol chain**: the HTTP chain plus the translation any gateway must make between
  KServe's HTTP protocol and the bus's messages (`pkg/kserve`), without Nereid's checks,
  scheduling or statistics; **the routed chain**: the gRPC chain with one NATS leg more, as the
  sequence router adds; **the Redis floor**: a request followed by one bare Redis `SET` of
  64 bytes.

The paths, each against its baseline, with the targets the summary checks:

| benchmark | path | baseline | target |
| --- | --- | --- | --- |
| `BenchmarkInfer` | 64 B identity through the standalone server with its in-process bus off (the constellation's path): gRPC unary, stream, HTTP binary, HTTP JSON | the chain of its transport | c=1: p50 ≤ 1.1x (JSON 1.2x), p99 ≤ 1.25x; c=16: ≥ 0.85x the req/s |
| `BenchmarkInfer/*/protocol-vs-chain`, `*/vs-protocol` | the protocol chain; Nereid's HTTP paths | the HTTP chain; the protocol chain | report |
| `BenchmarkInferInProcess` | 64 B identity through the standalone server as `make run` starts it (in-process bus) | the bare echo of its transport | c=1: p50 ≤ 1.6x; c=16: ≥ 0.6x the req/s |
| `BenchmarkBatcher` | a model taking 2 ms per execution whatever the batch, `max_batch_size` 8, gRPC c=64, 1 and 2 instances | the ideal: 8 inferences per 2 ms per instance | ≥ 0.9x |
| `BenchmarkLarge` | 1 MiB over HTTP binary; 16 MiB (256 MiB with `NEREID_BENCH_256MIB=1`) over HTTP binary and gRPC, both paths | 1 MiB as HTTP JSON; the bare echo of the same bytes | 16 MiB: ≤ 1.25x (HTTP), ≤ 1.15x (gRPC) the time |
| `BenchmarkSharedMemory` | 64 MiB identity with input and output in system shared memory | one memcpy of 64 MiB; HTTP binary; gRPC | ≤ 2x memcpy's time; ≤ 1/6 of HTTP binary's |
| `BenchmarkCBackend` | 64 B through a Triton C identity backend; 64 MiB in shared memory through it | the built-in Go identity; the C library's memcpy | p50 ≤ 1.05x; ≤ 2x the time |
| `BenchmarkDecoupled` | one request streaming 1,000 small responses; time to the first response | a bare gRPC stream of the same messages; a unary request to the same backend | ≥ 0.7x the responses/s; p50 ≤ 1.2x |
| `BenchmarkSequence` | a mid-sequence request; 64-byte implicit state; durable 64-byte and 1 MiB state; 64 sequences × 20 requests on 2 executors | a stateless request; the same model without state; the floors above | mid-sequence p50 ≤ 1.3x; implicit state ≤ 1.15x; durable state ≤ 1.6x |
| `BenchmarkTracing` | every request traced to an OTLP collector; tracing configured but off | the same model with trace level `OFF`; a server without `--trace-config` | configured-off p50 ≤ 1.05x |
| `BenchmarkAlone`, `BenchmarkCBackendAlone` | one path at a time, for profiles: goroutines started and wake-ups per request (`-benchmem` adds allocations) | — | report |

c=1 gives latency (p50, p99), c=16 throughput; ratios of time are lower-is-better, ratios of
req/s higher-is-better.

## Running it

```sh
make bench                          # every benchmark, -benchtime 2s (BENCHTIME=...), with -benchmem
NEREID_BENCH_256MIB=1 make bench    # adds 256 MiB tensors (seconds per request, GiBs of memory)
go test -run '^$' -bench 'Infer/grpc-unary' -benchtime 2s ./e2e/bench   # one benchmark
make perfdoc                        # make bench, then this page from its output (kept in bench.out)
make perfdoc BENCH_OUT=bench.out    # this page from an earlier run's output
```

`make perfdoc` runs `scripts/perfdoc.sh`, which reads `go test -bench` output on stdin and writes
this page; `PERFDOC_NOTE="..."` describes the run above the table. A whole run takes a long
time on two cores; run it on a machine with nothing else to do, since the ratios move with the
load. The baselines need `redis-server` for the durable-state rows (installed by `make deps`).

## Current figures

EOF

if [ -n "$note" ]; then
	printf 'Run: %s.\n\n' "${note%.}"
fi
printf '%s\n' "$table"
if [ -n "$summary" ]; then
	printf '\n## The summary of the run\n\nRaw numbers, every ratio with its target, and the numbers that are not ratios, as `make bench`\nprints them after the benchmarks:\n\n```text\n%s\n```\n' "$summary"
fi
