#!/usr/bin/env bash
# format.sh - apply the tree's .clang-format to every tracked C file, or with
# --check list the files that differ and exit 1 (test.sh runs the check).
# Uses clang-format 14 (Debian bookworm's); another version may lay out a
# few constructs differently, so the check is skipped when it is not 14.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format.sh: clang-format not installed"; exit 77; }
ver=$(clang-format --version | grep -Eo 'version [0-9]+' | grep -Eo '[0-9]+')
mapfile -t files < <(git ls-files '*.c' '*.h')
if [ "${1:-}" = "--check" ]; then
  if [ "$ver" != 14 ]; then echo "format.sh: clang-format $ver, not 14: check skipped"; exit 77; fi
  bad=()
  for f in "${files[@]}"; do
    clang-format "$f" | cmp -s - "$f" || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format.sh: not formatted (run scripts/format.sh): ${bad[*]}"
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted"
  exit 0
fi
clang-format -i "${files[@]}"
