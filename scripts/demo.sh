#!/usr/bin/env bash
# demo.sh - one command that shows stoker working on this machine:
# installs the Debian packages, builds, generates a small JPEG dataset,
# starts a coordinator, two workers and two training ranks on loopback,
# shows rank 0's live progress line and every process's summary and exit
# status. Every process it starts is killed and reaped when it ends.
#
#   scripts/demo.sh             everything on loopback (the default)
#   scripts/demo.sh --cluster   the same job on a simulated cluster (as root):
#       4 network-namespace hosts (algo-1..4, 1 Gbit/s links, see
#       tests/cluster/README.md), stoker-launch --backend sagemaker on each;
#       rank 0's progress line, then which host served how many batches and
#       the bytes on each link. Without root / network namespaces it says
#       why and exits 1.
#
# Options (environment): DEMO_IMAGES (default 1600), DEMO_EPOCHS (2),
# DEMO_STEP_MS (simulated training step, default 5), DEMO_SOURCE
# (imagefolder | synthetic; default imagefolder when the JPEG source is built;
# --cluster always uses imagefolder).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
B=$ROOT/build/demo

CLUSTER=0
case "${1:-}" in
  "") ;;
  --cluster) CLUSTER=1 ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "demo.sh: unknown argument '$1' (usage: scripts/demo.sh [--cluster])" >&2; exit 2 ;;
esac
if [ "$CLUSTER" = 1 ] && [ "$(id -u)" != 0 ]; then
  echo "demo.sh --cluster: needs root (it creates network namespaces, veth links and a" >&2
  echo "bridge, and shapes the links with tc); run it as root or with sudo." >&2
  exit 1
fi

./scripts/install-deps.sh
echo "== building (build/demo)"
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build "$B" -j"$(nproc)" >/dev/null

if [ "$CLUSTER" = 1 ]; then
  # tests/cluster/scenarios.py builds the namespaces, runs the job, prints
  # the progress and the split, and always tears everything down.
  set +e
  /usr/bin/python3 tests/cluster/scenarios.py demo --build "$B"
  rc=$?
  set -e
  if [ $rc = 77 ]; then
    echo "demo.sh --cluster: network namespaces are not available here (see the line above)" >&2
    exit 1
  fi
  [ $rc = 0 ] && echo "== cluster demo OK: every host exited 0" || echo "== cluster demo FAILED"
  exit $rc
fi

WORK=$(mktemp -d /tmp/stoker-demo-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

IMAGES=${DEMO_IMAGES:-1600}
EPOCHS=${DEMO_EPOCHS:-2}
STEP_MS=${DEMO_STEP_MS:-5}
SOURCE=${DEMO_SOURCE:-imagefolder}
DATASET_BIN=$B/tools/stoker-dataset
[ -x "$DATASET_BIN" ] || SOURCE=synthetic

if [ "$SOURCE" = imagefolder ]; then
  echo "== generating $IMAGES JPEGs (ImageNet-like sizes) in $WORK/data"
  "$DATASET_BIN" gen --out "$WORK/data" --count "$IMAGES" --classes 10 --layout imagefolder >/dev/null
  cat >"$WORK/job.conf" <<EOF
name = demo
source = imagefolder
dataset = imagefolder
pipeline = train
height = 224
width = 224
dtype = uint8
layout = nchw
batch_size = 32
world_size = 2
epochs = $EPOCHS
seed = 1
EOF
else
  cat >"$WORK/job.conf" <<EOF
name = demo
source = synthetic
num_samples = $((IMAGES * 4))
synthetic_cost_us = 200
batch_size = 32
world_size = 2
epochs = $EPOCHS
seed = 1
EOF
fi
echo "== job ($WORK/job.conf):"
sed 's/^/   /' "$WORK/job.conf"

"$B/server/stoker-coordinator" --listen 127.0.0.1:0 --port-file "$WORK/coordinator.port" \
  --job "$WORK/job.conf" --idle-timeout-s 120 2>"$WORK/coordinator.log" &
COORD=$!; PIDS+=("$COORD")
for _ in $(seq 100); do [ -s "$WORK/coordinator.port" ] && break; sleep 0.1; done
[ -s "$WORK/coordinator.port" ] || { echo "coordinator did not start:"; cat "$WORK/coordinator.log"; exit 1; }
ADDR=127.0.0.1:$(cat "$WORK/coordinator.port")
echo "== coordinator on $ADDR"

WORKERS=()
for i in 1 2; do
  "$B/server/stoker-worker" --coordinator "$ADDR" --listen 127.0.0.1:0 \
    --port-file "$WORK/worker$i.port" --threads 1 --data-root "$WORK/data" \
    2>"$WORK/worker$i.log" &
  WORKERS+=($!); PIDS+=($!)
done
echo "== 2 workers started (1 builder thread each; logs in $WORK)"

echo "== 2 training ranks, $EPOCHS epochs, ${STEP_MS} ms simulated step (rank 1 verifies every batch); rank 0's progress:"
# Rank 1 also rebuilds every batch in-process and compares it byte for byte.
"$B/examples/stoker-train-loop" --coordinator "$ADDR" --rank 1 --world-size 2 \
  --step-ms "$STEP_MS" --verify --data-root "$WORK/data" >"$WORK/rank1.out" 2>&1 &
R1=$!; PIDS+=("$R1")
set +e
"$B/examples/stoker-train-loop" --coordinator "$ADDR" --rank 0 --world-size 2 \
  --step-ms "$STEP_MS" --progress
R0_RC=$?
wait "$R1"; R1_RC=$?
echo "== rank 1:"; sed 's/^/   /' "$WORK/rank1.out"

# Both ranks called finish: the coordinator now shuts the workers down.
# Wait (bounded) for a child; its exit code lands in RC ("timeout" if it
# did not exit). No $(...): a subshell cannot wait for our children.
wait_rc() {
  local pid=$1 t=$2
  RC=timeout
  for _ in $(seq $((t * 10))); do
    if ! kill -0 "$pid" 2>/dev/null; then wait "$pid"; RC=$?; return; fi
    sleep 0.1
  done
}
wait_rc "${WORKERS[0]}" 15; W1_RC=$RC
wait_rc "${WORKERS[1]}" 15; W2_RC=$RC
wait_rc "$COORD" 15; C_RC=$RC
set -e
echo "== exit status: coordinator=$C_RC worker1=$W1_RC worker2=$W2_RC rank0=$R0_RC rank1=$R1_RC"
grep -h "stats" "$WORK/worker1.log" | tail -n 1 | sed 's/^/   worker1 last stats: /' || true
if [ "$C_RC$W1_RC$W2_RC$R0_RC$R1_RC" = 00000 ]; then
  echo "== demo OK: every process exited 0 (logs: $WORK)"
else
  echo "== demo FAILED (logs: $WORK)"; exit 1
fi
