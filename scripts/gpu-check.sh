#!/usr/bin/env bash
# gpu-check.sh - the GPU check of libstoker's CUDA backend, run on a machine
# with an NVIDIA GPU (never in CI): stoker-cuda-overlap on the in-process
# source and against real daemons, the Python Loader's CUDA tensors
# (gpu_loader_check.py), and stoker-cuda-overlap under compute-sanitizer
# where it is installed. Prints the figures docs/gpu.md records.
#
#   scripts/gpu-check.sh [BUILD_DIR]     (default: build)
#
# Needs the CUDA runtime (libcudart) on the loader path or in
# $STOKER_CUDART, the driver, and for the Python part a python3 with torch
# built for CUDA. Exit 0 only if every part passed; 77 = no GPU here.
set -u
B=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
ov=$B/examples/stoker-cuda-overlap
[ -x "$ov" ] || { echo "no $ov: build first"; exit 2; }
if ! nvidia-smi -L >/dev/null 2>&1; then echo "SKIP: no NVIDIA GPU"; exit 77; fi
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail=0
step() { echo; echo "== $*"; }
result() { echo "-> rc $1"; [ "$1" = 0 ] || fail=1; }

step machine
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
  --format=csv,noheader
echo "cpus $(nproc); $(uname -sr)"

step "stoker-cuda-overlap: in-process synthetic source (224x224 float32, batch 32)"
timeout 120 "$ov" --steps 200 --reps 4
result $?

step "stoker-cuda-overlap: against a coordinator and two workers on this host"
"$B/server/stoker-coordinator" --listen 127.0.0.1:0 --port-file "$work/c.port" \
  --set height=224 --set width=224 --set batch_size=32 --set num_samples=100000 \
  --set world_size=1 >"$work/coord.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/c.port" ] && break; sleep 0.1; done
cport=$(cat "$work/c.port" 2>/dev/null)
for w in 1 2; do
  "$B/server/stoker-worker" --coordinator "127.0.0.1:$cport" --threads 4 \
    >"$work/worker$w.log" 2>&1 &
  pids+=($!)
done
timeout 120 "$ov" --coordinator "127.0.0.1:$cport" --steps 400 --reps 4
result $?

step "Python Loader: CUDA tensors (torch)"
py=${PYTHON:-python3}
STOKER_LIB=$(ls "$B"/client/libstoker.so | head -1) PYTHONPATH="$here/../client/python" \
  timeout 150 "$py" "$here/gpu_loader_check.py"
result $?

if command -v compute-sanitizer >/dev/null; then
  step "compute-sanitizer memcheck: stoker-cuda-overlap --steps 20"
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$ov" --steps 20 --reps 1 \
    >"$work/san.log" 2>&1
  rc=$?
  grep -E "ERROR SUMMARY|identical|MISMATCH|device bytes" "$work/san.log"
  result $rc
fi
echo
[ $fail = 0 ] && echo "gpu-check: PASS" || echo "gpu-check: FAIL"
exit $fail
