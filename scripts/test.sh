#!/usr/bin/env bash
# test.sh - the full test suite, as CI runs it (.ci/run calls this).
#   1. installs the Debian packages (scripts/install-deps.sh), checks the
#      layout of the C code (scripts/format.sh --check, clang-format 14)
#   2. Release build (what users install) with warnings as errors, then
#      every ctest test
#   3. AddressSanitizer + UndefinedBehaviorSanitizer build, every test again
#   4. the libFuzzer targets built with clang and run for 30 s in all (when
#      clang is there)
# Ends with one line "N passed, N failed, N skipped" (a skipped test says
# why in the log, e.g. the cluster tests without root). Exit status 0
# only if nothing failed.
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
./scripts/install-deps.sh || { echo "test.sh: dependency install failed"; exit 1; }

passed=0; failed=0; skipped=0
run_suite() { # name builddir cmake-args...
  local name=$1 dir=$2; shift 2
  echo "=== $name: configure + build ($dir)"
  if ! cmake -S . -B "$dir" -DSTOKER_WERROR=ON "$@" >"$dir.configure.log" 2>&1; then
    cat "$dir.configure.log"; failed=$((failed + 1)); return
  fi
  # a failed build ends this tier: its tests would only fail for want of binaries
  local rc=0
  cmake --build "$dir" -j"$JOBS" >"$dir.build.log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    grep -E -B2 -A12 'error:|Error [0-9]' "$dir.build.log" | head -n 80
    echo "=== $name: BUILD FAILED (all of it: $dir.build.log)"; failed=$((failed + 1)); return
  fi
  tail -n 3 "$dir.build.log"
  echo "=== $name: ctest"
  ctest --test-dir "$dir" --output-on-failure --timeout 600 -j"$JOBS" 2>&1 | tee "$dir.ctest.log"
  local p f
  p=$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$dir.ctest.log" | tail -1)
  if [ -z "$p" ]; then failed=$((failed + 1)); return; fi
  f=$(echo "$p" | sed -E 's/.*passed, ([0-9]+) tests failed out of ([0-9]+)/\1/')
  local total
  total=$(echo "$p" | sed -E 's/.*out of ([0-9]+)/\1/')
  local sk
  sk=$(grep -c '\*\*\*Skipped' "$dir.ctest.log")
  passed=$((passed + total - f - sk)); failed=$((failed + f)); skipped=$((skipped + sk))
}

mkdir -p build
start=$(date +%s)
echo "=== layout: clang-format check (.clang-format)"
./scripts/format.sh --check; rc=$?
if [ $rc -eq 0 ]; then passed=$((passed + 1)); elif [ $rc -eq 77 ]; then skipped=$((skipped + 1)); else failed=$((failed + 1)); fi
run_suite release build/ci-release -DCMAKE_BUILD_TYPE=Release
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:check_initialization_order=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
run_suite asan+ubsan build/ci-asan -DCMAKE_BUILD_TYPE=Debug -DSTOKER_SANITIZE=address,undefined
unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS

if command -v clang >/dev/null; then
  echo "=== libFuzzer: build the targets with clang, fuzz them for 30 s in all"
  if CC=clang cmake -S . -B build/ci-fuzz -DSTOKER_FUZZ=ON -DBUILD_TESTING=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >build/ci-fuzz.configure.log 2>&1 &&
     cmake --build build/ci-fuzz -j"$JOBS" --target stoker_fuzz_targets 2>&1 | tail -n 5 &&
     [ "${PIPESTATUS[0]}" -eq 0 ]; then
    fuzz_new=$(mktemp -d /tmp/stoker-fuzz-XXXXXX) # new inputs land here, not in the tree
    # target:seconds:corpus; the decode path is the widest, the others are small
    for ts in decode:10:decode job:4:job worker_requests:4:worker_requests \
              coordinator_msgs:4:coordinator_msgs tar:4:tar megatron_idx:4:idx; do
      t=${ts%%:*} corpus=${ts##*:} secs=${ts#*:}
      secs=${secs%%:*}
      mkdir -p "$fuzz_new/$t"
      if build/ci-fuzz/tests/fuzz/fuzz_$t -max_total_time="$secs" -rss_limit_mb=2048 \
           -timeout=10 "$fuzz_new/$t" "tests/fuzz/corpus/$corpus" >build/ci-fuzz.$t.log 2>&1; then
        passed=$((passed + 1)); echo "fuzz_$t: $(grep -c . <(ls "$fuzz_new/$t")) new inputs, no crash"
      else
        failed=$((failed + 1)); echo "FUZZ RUN OF fuzz_$t FOUND A CRASH:"; tail -n 40 build/ci-fuzz.$t.log
      fi
    done
    rm -rf "$fuzz_new"
  else
    failed=$((failed + 1)); echo "FUZZ BUILD FAILED"; tail -n 20 build/ci-fuzz.configure.log
  fi
fi
echo "=== suite took $(( $(date +%s) - start )) s"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
