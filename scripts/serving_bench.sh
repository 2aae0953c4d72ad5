#!/usr/bin/env bash
# serving_bench.sh - bounded serving at full scale (not part of CI's
# default run): one stoker-worker (6 batch buffers) under
# 5000 idle TCP connections + 2000 streams that never send a request + 10
# streams that ask and never read, while a real libstoker client reads
# batches. Prints the client's throughput with and without the load
# (alternating runs, medians), and the worker's RSS and thread count; exits
# non-zero when the loaded median is below 90% of the normal one or the
# thread count grew. Raises the open-file limit (soft to hard) for itself.
# Then (and alone with --acceptance) one worker at its default call table
# under 4500 silent streams and 4000 health watches: a real stream opened
# meanwhile is served; the time to its first batch, threads and RSS.
#   usage: scripts/serving_bench.sh [BUILD_DIR] [--acceptance]   (default build/rel)
#   STOKER_BENCH_BATCHES=N   batches per run (default 300)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/rel}
need=$((5000 + 2000 + 512))
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
  echo "serving_bench.sh: the hard open-file limit $hard is below $need; raise it (limits.conf, LimitNOFILE)"
  exit 77
fi
ulimit -n "$hard"
mode=--full
[ "${2:-}" = --acceptance ] && mode=--acceptance
exec "$B/tests/integration/test_serving_bounds" "$B/server/stoker-coordinator" \
  "$B/server/stoker-worker" "$mode"
