#!/usr/bin/env bash
# tsan.sh - the ThreadSanitizer check: builds everything with
# -fsanitize=thread (STOKER_SANITIZE=thread) into build/tsan and runs the
# integration tests (real coordinator and worker processes, libstoker
# clients with their threads) and the client's unit tests under it.
#   usage: scripts/tsan.sh [ctest -R regex]   (default: every test of
#          tests/integration and tests/unit/client)
# The Python, launch and cluster tests are left out: they drive the same
# daemons from Python with wall-clock bounds that TSan's slowdown (5-15x)
# breaks, and the augment memcheck test runs valgrind.
#
# gRPC, abseil and protobuf-c come from Debian without TSan: tests/tsan.supp
# silences what they do internally (called_from_lib entries, one per
# library, never stoker's own code). Every process writes its reports to
# build/tsan/tsan-reports/report.<pid>, so a daemon that a test kills with
# SIGKILL still leaves its reports behind. Passes only when ctest passes
# and no process reported anything. A test that fails without any report
# gets one more try (its timing bounds can be too tight under TSan on a
# loaded machine); reports of every try count.
# Prints the time taken by the build and by the tests.
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
dir=build/tsan
reports=$PWD/$dir/tsan-reports
mkdir -p build

t0=$(date +%s)
echo "=== tsan: configure + build ($dir)"
if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOKER_WERROR=ON \
     -DSTOKER_SANITIZE=thread >"$dir.configure.log" 2>&1; then
  cat "$dir.configure.log"; echo "tsan.sh: configure failed"; exit 1
fi
if ! cmake --build "$dir" -j"$JOBS" >"$dir.build.log" 2>&1; then
  tail -n 40 "$dir.build.log"; echo "tsan.sh: build failed (see $dir.build.log)"; exit 1
fi
t1=$(date +%s)
echo "tsan: build took $((t1 - t0)) s"

regex=${1:-}
if [ -z "$regex" ]; then
  # every test whose working directory is tests/integration or tests/unit/client
  regex=$(ctest --test-dir "$dir" --show-only=json-v1 | /usr/bin/python3 -c '
import json, sys
names = []
for t in json.load(sys.stdin)["tests"]:
    wd = [p["value"] for p in t.get("properties", []) if p["name"] == "WORKING_DIRECTORY"]
    if wd and wd[0].endswith(("/tests/integration", "/tests/unit/client")):
        names.append(t["name"])
print("^(" + "|".join(names) + ")$")')
fi
rm -rf "$reports" && mkdir -p "$reports"
export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=0 second_deadlock_stack=1 log_path=$reports/report"
echo "=== tsan: ctest -R '$regex' -j$JOBS"
ctest --test-dir "$dir" -j"$JOBS" --timeout 600 --output-on-failure -R "$regex" \
  --repeat until-pass:2 >"$dir.ctest.log" 2>&1
rc=$?
t2=$(date +%s)
grep -E "tests passed|tests failed|\*\*\*|Test +#" "$dir.ctest.log" | tail -n 40
nrep=$(cat "$reports"/report.* 2>/dev/null | grep -c "WARNING: ThreadSanitizer")
if [ "$nrep" -gt 0 ]; then
  echo "=== tsan: $nrep report(s) in $reports; distinct summaries:"
  cat "$reports"/report.* | grep "^SUMMARY: ThreadSanitizer" | sort | uniq -c | sort -rn | head -n 30
  rc=1
fi
echo "tsan: tests took $((t2 - t1)) s; build + tests $((t2 - t0)) s"
[ $rc -eq 0 ] && echo "tsan.sh: no report, every test passed" ||
  echo "tsan.sh: FAILED (logs: $dir.ctest.log, reports: $reports)"
exit $rc
