#!/usr/bin/env bash
# heap-profile.sh - where a process's heap goes: runs one command (a
# daemon, a rank, a benchmark) under heaptrack (Debian's heaptrack package)
# and prints what answers "does it grow, and from where": the peak heap and
# its allocation sites, the sites that allocate most often, what was still
# allocated at exit (leaked), and the size histogram (a heap whose free
# space grows while its use stays flat is fragmented by allocations of many
# sizes from different sites: the histogram and the sites show which).
#   usage: scripts/heap-profile.sh OUT_DIR COMMAND [ARGS...]
# The profile (OUT_DIR/heaptrack.NAME.zst, open it in heaptrack_gui for
# graphs over time) and the report (OUT_DIR/report.txt) stay in OUT_DIR.
# Stop a daemon with SIGTERM (or let a rank end its job): heaptrack writes
# its data as the process exits. Without heaptrack it says how to install
# it; valgrind --tool=massif (also Debian) is the slower alternative:
#   valgrind --tool=massif --massif-out-file=OUT COMMAND; ms_print OUT
# Exit: the command's exit status, 2 on bad usage or a missing tool.
set -uo pipefail
if [ $# -lt 2 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  [ $# -lt 2 ] && exit 2 || exit 0
fi
out=$1
shift
for tool in heaptrack heaptrack_print; do
  if ! command -v "$tool" >/dev/null; then
    echo "heap-profile.sh: $tool not found: apt-get install -y heaptrack" >&2
    exit 2
  fi
done
mkdir -p "$out" || exit 2
name=$(basename "$1")
heaptrack -o "$out/heaptrack.$name" "$@"
rc=$?
data=$(ls -t "$out"/heaptrack."$name"*.zst 2>/dev/null | head -n 1)
if [ -z "$data" ]; then
  echo "heap-profile.sh: heaptrack wrote no data in $out" >&2
  exit 2
fi
heaptrack_print -f "$data" --print-peaks 1 --print-allocators 1 --print-leaks 1 \
  --print-temporary 0 --print-histogram "$out/histogram.txt" --peak-limit 10 \
  --sub-peak-limit 3 >"$out/report.txt" 2>&1
# the summary heaptrack_print ends with: totals, peak heap, leaked
grep -E "^(total runtime|calls to allocation functions|temporary memory allocations|peak heap memory consumption|peak RSS|total memory leaked)" \
  "$out/report.txt"
echo "heap-profile.sh: $data, report $out/report.txt, size histogram $out/histogram.txt"
exit $rc
