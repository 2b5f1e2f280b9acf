#!/usr/bin/env bash
# Checks scripts/perfdoc.sh against a sample of `make bench` output
# (scripts/testdata/perfdoc/bench.txt: a log line inside a benchmark, a
# benchmark run twice, µs and ms metrics, base-* and ratio-* metrics, the
# suite's summary) and its expected page. NEREID_UPDATE_GOLDEN=1 rewrites
# the expected page.
set -euo pipefail
cd "$(dirname "$0")"
dir=testdata/perfdoc
got="$(bash perfdoc.sh "synthetic sample" < "$dir/bench.txt")"
if [ "${NEREID_UPDATE_GOLDEN:-}" = 1 ]; then
	printf '%s\n' "$got" > "$dir/performance.md"
fi
if ! diff -u "$dir/performance.md" <(printf '%s\n' "$got"); then
	echo "perfdoc_test.sh: output differs from $dir/performance.md" >&2
	exit 1
fi
# Input without a benchmark line: an error, and nothing on stdout.
if out="$(printf 'PASS\nok  \tpkg\t1.0s\n' | bash perfdoc.sh 2>/dev/null)"; then
	echo "perfdoc_test.sh: input without benchmarks was accepted" >&2
	exit 1
fi
if [ -n "$out" ]; then
	echo "perfdoc_test.sh: input without benchmarks wrote: $out" >&2
	exit 1
fi
echo "perfdoc_test.sh: ok"
