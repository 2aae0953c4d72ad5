#!/bin/bash
# idle_ranks.sh - what an idle rank process costs the host: one
# stoker-coordinator, 8 single-thread stoker-workers and 16
# stoker-train-loop ranks on 127.0.0.1, each rank taking a batch every 2 s
# (--step-ms 2000); prints the ranks' CPU (utime + stime from /proc) over
# 12 s and rank 0's threads. Not part of CI (tests/scale/README.md).
#
# Usage: tests/scale/idle_ranks.sh [BIN_DIR]   (default build/rel)
# Every process is killed and reaped on exit, however the script ends.
set -u
B=${1:-build/rel}
D=$(mktemp -d /tmp/stoker-idle.XXXXXX)
PIDS=()
cleanup() {
  kill "${PIDS[@]}" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$D"
}
trap cleanup EXIT
printf 'name = idle\nsource = synthetic\nnum_samples = 100000\nheight = 8\nwidth = 8\nbatch_size = 4\nworld_size = 16\n' >"$D/job.conf"
"$B/server/stoker-coordinator" --listen 127.0.0.1:0 --job "$D/job.conf" \
  --port-file "$D/cp" --log-level warn >"$D/c.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$D/cp" ] && break; sleep 0.1; done
[ -s "$D/cp" ] || { echo "idle_ranks: the coordinator did not start" >&2; exit 1; }
CO=127.0.0.1:$(cat "$D/cp")
for i in $(seq 8); do
  "$B/server/stoker-worker" --coordinator "$CO" --listen 127.0.0.1:0 --threads 1 \
    --log-level warn >"$D/w$i.log" 2>&1 &
  PIDS+=($!)
done
RANKS=()
for r in $(seq 0 15); do
  "$B/examples/stoker-train-loop" --coordinator "$CO" --rank "$r" --world-size 16 \
    --step-ms 2000 --steps 12 >"$D/r$r.log" 2>&1 &
  PIDS+=($!)
  RANKS+=($!)
done
# every rank has its first batch
for _ in $(seq 300); do
  n=$(grep -l "first batch" "$D"/r*.log 2>/dev/null | wc -l)
  [ "$n" -eq 16 ] && break
  sleep 0.1
done
[ "$n" -eq 16 ] || { echo "idle_ranks: only $n of 16 ranks got a batch" >&2; exit 1; }
ticks() {
  local t=0
  for p in "${RANKS[@]}"; do t=$((t + $(awk '{print $14 + $15}' /proc/"$p"/stat))); done
  echo "$t"
}
t0=$(ticks)
sleep 12
t1=$(ticks)
hz=$(getconf CLK_TCK)
ms=$(((t1 - t0) * 1000 / hz))
echo "16 idle ranks over 12 s: ${ms} ms of CPU in all, $((ms / 16 / 12)) ms/s per rank;" \
  "rank 0 has $(ls /proc/"${RANKS[0]}"/task | wc -l) threads"
