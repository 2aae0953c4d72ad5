#!/usr/bin/env bash
# wheel.sh - builds dist/stoker-<version>-py3-none-<platform>.whl: the
# Python package, libstoker, the daemons and the CLI, and every shared
# library they need except glibc's own, so `pip install` of the one file
# gives a training or data host everything (stoker-coordinator,
# stoker-worker, stoker, stoker-dataset and stoker-launch on PATH,
# `import stoker` finding its own libstoker) with no LD_LIBRARY_PATH or
# STOKER_LIB.
#
#   scripts/wheel.sh                    configure and build a Release tree
#                                       in build/wheel (no tests), then the wheel
#   scripts/wheel.sh BUILD_DIR [OUT]    the wheel from an already built tree
#                                       (e.g. build/rel; nothing is rebuilt)
#
# OUT defaults to dist/ in the source tree. The tree is installed with
# `cmake --install --strip` into a staging prefix; scripts/wheel.py then
# collects the libraries (ldd), sets $ORIGIN-relative RUNPATHs (patchelf)
# and writes the wheel with the standard library. Needs patchelf and
# binutils (scripts/install-deps.sh). Exit 0 and the wheel's path on
# stdout's last line; non-zero with the reason otherwise.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
build=${1:-}
out=${2:-$ROOT/dist}

command -v patchelf >/dev/null || { echo "wheel.sh: patchelf not found (apt-get install patchelf)" >&2; exit 1; }
if [ -z "$build" ]; then
  build=$ROOT/build/wheel
  cmake -S "$ROOT" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
  cmake --build "$build" -j "$(nproc)"
fi
[ -f "$build/CMakeCache.txt" ] || { echo "wheel.sh: $build is not a CMake build tree" >&2; exit 1; }
build=$(cd "$build" && pwd)

stage=$(mktemp -d "${TMPDIR:-/tmp}/stoker-wheel-XXXXXX")
trap 'rm -rf "$stage"' EXIT
if ! cmake --install "$build" --prefix "$stage/prefix" --strip >"$stage/install.log" 2>&1; then
  cat "$stage/install.log" >&2
  echo "wheel.sh: cmake --install $build failed (is it built? cmake --build $build)" >&2
  exit 1
fi
/usr/bin/python3 "$ROOT/scripts/wheel.py" --prefix "$stage/prefix" \
  --python-src "$ROOT/client/python" --work "$stage/root" --out "$out"
