#!/usr/bin/env bash
# test_wheel.sh - the wheel (scripts/wheel.sh) from this build tree,
# installed with `pip install --no-index` into a fresh venv
# (--system-site-packages: torch and numpy from Debian), then a whole job
# from that venv alone, in a folder outside the source tree, with no
# STOKER_LIB, PYTHONPATH or LD_LIBRARY_PATH: the venv's stoker-coordinator
# and stoker-worker entry points on loopback, the README's Python loop over
# a 2-epoch synthetic job (every batch must arrive), `stoker status` while
# it runs, and every process exiting 0. Also: the package loads the
# libstoker inside the venv, stoker-launch answers --help, and
# stoker-dataset (bundled, its libraries found) offers prepare.
# usage: test_wheel.sh BUILD_DIR SOURCE_DIR [SANITIZE]
# Exits 77 (skip) without python3-venv, patchelf or torch, or in a
# sanitizer build (python cannot load that libstoker without a preload).
set -uo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
sanitize=${3:-}
skip() { echo "SKIP: $*"; exit 77; }
[ -z "$sanitize" ] || skip "a $sanitize build: python cannot load its libstoker without the sanitizer runtime"
command -v patchelf >/dev/null || skip "patchelf is not installed (apt-get install patchelf)"
/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || skip "python3-venv is not installed"
/usr/bin/python3 -c 'import torch' 2>/dev/null || skip "python3-torch is not installed"

work=$(mktemp -d /tmp/stoker-wheel-test-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
fail=0
check() { if eval "$1"; then echo "ok   $2"; else echo "FAIL $2"; fail=1; fi; }
# wait_exit PID SECONDS: the process's exit code, or 124 (then killed) if
# it is still running after SECONDS
wait_exit() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  local rc=124
  if kill -0 "$1" 2>/dev/null; then kill -KILL "$1"; wait "$1" 2>/dev/null; else wait "$1"; rc=$?; fi
  local left=() p
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || left+=("$p"); done
  pids=("${left[@]}")  # reaped: never signal that id again
  return $rc
}
logs() { for f in "$work"/run/*.log; do echo "---- $f"; tail -20 "$f"; done; }

t0=$SECONDS
if ! "$src/scripts/wheel.sh" "$build" "$work/dist" >"$work/wheel.log" 2>&1; then
  cat "$work/wheel.log"; echo "FAIL scripts/wheel.sh $build"; exit 1
fi
whl=$(ls "$work"/dist/stoker-*-py3-none-*.whl 2>/dev/null)
check '[ -n "$whl" ]' "scripts/wheel.sh wrote $(basename "${whl:-no wheel}") ($(tail -2 "$work/wheel.log" | head -1)) in $((SECONDS - t0)) s"
[ -n "$whl" ] || exit 1

venv=$work/venv
/usr/bin/python3 -m venv --system-site-packages "$venv" >"$work/venv.log" 2>&1 ||
  { cat "$work/venv.log"; skip "python3 -m venv failed (python3-venv incomplete?)"; }
check "'$venv/bin/python' -m pip install --no-index --disable-pip-version-check -q '$whl' >'$work/pip.log' 2>&1" \
  "pip install --no-index the wheel into a fresh venv" || cat "$work/pip.log"
for b in stoker-coordinator stoker-worker stoker stoker-dataset stoker-launch; do
  check "[ -x '$venv/bin/$b' ]" "the venv has the $b entry point"
done

# From here on: only the venv, outside the source tree.
unset STOKER_LIB PYTHONPATH LD_LIBRARY_PATH STOKER_COORDINATOR RANK WORLD_SIZE
export PATH=$venv/bin:/usr/bin:/bin
mkdir -p "$work/run" && cd "$work/run" || exit 1
check "stoker-launch --help >launch-help.log 2>&1" "stoker-launch --help runs from the venv"
check "stoker-dataset --help 2>&1 | grep -q prepare" \
  "stoker-dataset runs from the venv (its libraries bundled) and offers prepare"
printf 'source = synthetic\nnum_samples = 64\nheight = 8\nwidth = 8\nbatch_size = 4\nworld_size = 1\nepochs = 2\n' >job.conf
check "stoker-launch --backend hosts --dnn-hosts 127.0.0.1 --current-host 127.0.0.1 \
  --listen-host 127.0.0.1 --job job.conf --dry-run -- true 2>/dev/null >launch-dry.log &&
  python -c 'import json, sys; b = json.load(open(\"launch-dry.log\"))[\"binaries\"]; sys.exit(not all(v.startswith(\"$venv/\") for v in b.values()))'" \
  "stoker-launch finds the venv's bundled daemons"

stoker-coordinator --listen 127.0.0.1:0 --port-file c.port --job job.conf >coordinator.log 2>&1 &
cpid=$!
pids+=("$cpid")
for _ in $(seq 100); do [ -s c.port ] && break; sleep 0.1; done
cport=$(cat c.port 2>/dev/null)
check '[ -n "$cport" ]' "the venv's stoker-coordinator listens (port ${cport:-none})"
[ -n "$cport" ] || { logs; exit 1; }
stoker-worker --coordinator "127.0.0.1:$cport" --listen 127.0.0.1:0 --threads 1 >worker.log 2>&1 &
wpid=$!
pids+=("$wpid")
check "timeout 30 stoker status --coordinator 127.0.0.1:$cport >status.log 2>&1" \
  "stoker status answers from the venv"
# the running daemons (exec'd by the entry points: same pid) map gRPC from the wheel
for p in "$cpid" "$wpid"; do
  check "grep -q '$venv/.*/stoker.libs/libgrpc' /proc/$p/maps && ! grep -q ' /usr/lib/.*libgrpc' /proc/$p/maps" \
    "$(cat /proc/$p/comm 2>/dev/null) (pid $p) loads gRPC from the wheel's stoker.libs"
done

cat >train.py <<'EOF'
import os, sys
import stoker

venv = sys.argv[2]
for what, path in (("the package", stoker.__file__), ("libstoker", stoker.lib_path)):
    if not os.path.realpath(path).startswith(os.path.realpath(venv) + os.sep):
        sys.exit("%s comes from %s, not the venv" % (what, path))
loader = stoker.Loader(sys.argv[1], rank=0, world_size=1)
with open("/proc/self/maps") as f:
    grpc = {l.split()[-1] for l in f if "libgrpc.so" in l}
if not grpc or any(not p.startswith(os.path.realpath(venv) + os.sep) for p in grpc):
    sys.exit("libgrpc loaded from %s, not the venv's stoker.libs" % sorted(grpc))
n = 0
for epoch in range(loader.epochs):
    for images, labels in loader:
        assert tuple(images.shape[:1]) == (4,) and tuple(labels.shape) == (4,), images.shape
        n += 1
print("libstoker", stoker.lib_path)
print("batches", n)
sys.exit(0 if n == 2 * 16 else 1)
EOF
check "timeout 120 python train.py 127.0.0.1:$cport '$venv' >train.log 2>&1" \
  "the README's loop ran from the venv (exit 0)"
check "grep -qx 'batches 32' train.log" "rank 0 got every batch (2 epochs x 16)"
wait_exit "$cpid" 30
rc=$?
check "[ $rc -eq 0 ]" "stoker-coordinator exited 0 (got $rc)"
wait_exit "$wpid" 30
rc=$?
check "[ $rc -eq 0 ]" "stoker-worker exited 0 (got $rc)"
check "grep -q 'job\\|worker\\|rank' status.log" "stoker status printed the job"
if [ "$fail" -ne 0 ]; then
  logs
  exit 1
fi
echo "wheel: passed in $((SECONDS - t0)) s"
