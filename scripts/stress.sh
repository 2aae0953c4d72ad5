#!/usr/bin/env bash
# stress.sh - the flakiness check (not part of CI's default run): the whole
# ctest suite repeated until it fails (at most N rounds, default 20) in the
# release build, then once in the ASan+UBSan build, each while a CPU-bound
# process competes for the cores (one busy loop by default: "while another
# CPU-bound process runs"; STRESS_HOGS=N for more; one
# per core roughly doubles the run), so a test that leans on timing shows
# it here and not in someone else's CI run.
#   usage: [STRESS_HOGS=N] scripts/stress.sh [ROUNDS]   (builds into build/stress-*)
# Prints ctest's summary of each part and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-20}
JOBS=$(nproc)
HOGS=${STRESS_HOGS:-1}
hogs=()
start_hogs() { for _ in $(seq "$HOGS"); do (while :; do :; done) & hogs+=($!); done; }
stop_hogs() { [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null; wait "${hogs[@]}" 2>/dev/null; hogs=(); }
trap stop_hogs EXIT
trap 'echo "stress.sh: interrupted"; exit 130' INT TERM # not on to the next part

build() { # dir cmake-args...
  local dir=$1; shift
  cmake -S . -B "$dir" -DSTOKER_WERROR=ON "$@" >"$dir.configure.log" 2>&1 &&
    cmake --build "$dir" -j"$JOBS" >"$dir.build.log" 2>&1 ||
    { echo "stress.sh: build of $dir failed (see $dir.*.log)"; exit 1; }
}
mkdir -p build
build build/stress-release -DCMAKE_BUILD_TYPE=RelWithDebInfo
build build/stress-asan -DCMAKE_BUILD_TYPE=Debug -DSTOKER_SANITIZE=address,undefined

rc=0
start_hogs
echo "=== release: ctest -j$JOBS --repeat until-fail:$ROUNDS, with $HOGS CPU hog(s)"
t0=$(date +%s)
ctest --test-dir build/stress-release -j"$JOBS" --timeout 600 --output-on-failure \
  --repeat until-fail:"$ROUNDS" >build/stress-release.ctest.log 2>&1 || rc=1
grep -E "tests passed|tests failed|Failed|\*\*\*" build/stress-release.ctest.log | tail -n 15
echo "release: $(( $(date +%s) - t0 )) s"

echo "=== asan+ubsan: ctest -j$JOBS once, with $HOGS CPU hog(s)"
t0=$(date +%s)
ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:check_initialization_order=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0 \
  ctest --test-dir build/stress-asan -j"$JOBS" --timeout 600 --output-on-failure \
  >build/stress-asan.ctest.log 2>&1 || rc=1
grep -E "tests passed|tests failed|Failed|\*\*\*" build/stress-asan.ctest.log | tail -n 15
echo "asan+ubsan: $(( $(date +%s) - t0 )) s"
stop_hogs
[ $rc -eq 0 ] && echo "stress.sh: no failure" || echo "stress.sh: FAILED (logs in build/stress-*.ctest.log)"
exit $rc
