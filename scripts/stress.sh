#!/usr/bin/env bash
# stress.sh - the flakiness check (not part of CI's default run): the whole
# ctest suite repeated until it fails (at most N rounds, default 20) in the
# release build, then once in the ASan+UBSan build, each while a CPU-bound
# process competes for the cores (one busy loop by default: "while another
# CPU-bound process runs"; STRESS_HOGS=N for more; one
# per core roughly doubles the run), so a test that leans on timing shows
# it here and not in someone else's CI run.
#   usage: [STRESS_HOGS=N] [STRESS_REUSE_CI=1] scripts/stress.sh [ROUNDS]
# Builds into build/stress-release and build/stress-asan; STRESS_REUSE_CI=1
# uses (and brings up to date) the test command's build/ci-release and
# build/ci-asan instead, built with the same options, so a run right after
# scripts/test.sh starts at once.
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
REL=build/stress-release ASAN=build/stress-asan
[ "${STRESS_REUSE_CI:-0}" = 1 ] && REL=build/ci-release ASAN=build/ci-asan
build "$REL" -DCMAKE_BUILD_TYPE=Release
build "$ASAN" -DCMAKE_BUILD_TYPE=Debug -DSTOKER_SANITIZE=address,undefined

rc=0
start_hogs
echo "=== release: ctest -j$JOBS --repeat until-fail:$ROUNDS, with $HOGS CPU hog(s)"
t0=$(date +%s)
ctest --test-dir "$REL" -j"$JOBS" --timeout 600 --output-on-failure \
  --repeat until-fail:"$ROUNDS" >"$REL.stress.log" 2>&1 || rc=1
grep -E "tests passed|tests failed|Failed|\*\*\*" "$REL.stress.log" | tail -n 15
echo "release: $(( $(date +%s) - t0 )) s"

echo "=== asan+ubsan: ctest -j$JOBS once, with $HOGS CPU hog(s)"
t0=$(date +%s)
ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:check_initialization_order=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0 \
  ctest --test-dir "$ASAN" -j"$JOBS" --timeout 600 --output-on-failure \
  >"$ASAN.stress.log" 2>&1 || rc=1
grep -E "tests passed|tests failed|Failed|\*\*\*" "$ASAN.stress.log" | tail -n 15
echo "asan+ubsan: $(( $(date +%s) - t0 )) s"
stop_hogs
[ $rc -eq 0 ] && echo "stress.sh: no failure" || echo "stress.sh: FAILED (logs in $REL.stress.log, $ASAN.stress.log)"
exit $rc
