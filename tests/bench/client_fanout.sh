#!/usr/bin/env bash
# client_fanout.sh - one stoker-train-loop rank against local worker
# processes, for two builds side by side (e.g. main's and a branch's):
#   threads ROOT_A ROOT_B M...   the rank's most threads (/proc/PID/task)
#                                while it reads a tiny synthetic job (8x8,
#                                batches of 4, --verify) from M single-thread
#                                workers; and how many workers built nothing
#   rate ROOT_A ROOT_B IMAGES ROUNDS
#                                images/s of the rank reading IMAGES 224x224x3
#                                uint8 images (batches of 64) from 2 workers
#                                (--threads 1), rank start to exit, and its
#                                CPU seconds; A and B alternate, medians last
# ROOT is a build directory (server/, examples/, client/ under it).
# Not run by ctest. Figures: docs/benchmarks.md, "Client threads".
set -uo pipefail
mode=$1 a=$2 b=$3; shift 3

# one_run ROOT M COORD_SETS...: start a coordinator and M workers, run the
# rank, print "threads=N idle=K wall=S cpu=S rc=R".
one_run() {
  local root=$1 m=$2; shift 2
  local tmp; tmp=$(mktemp -d /tmp/stoker-fanout-XXXXXX)
  local lib; lib="$(cd "$root" && pwd)/client"
  "$root/server/stoker-coordinator" --listen 127.0.0.1:0 --port-file "$tmp/c.port" \
    --set world_size=1 --set epochs=1 --set seed=3 "$@" >"$tmp/c.log" 2>&1 &
  local pids=$!
  for _ in $(seq 200); do [ -s "$tmp/c.port" ] && break; sleep 0.05; done
  local cp; cp=$(cat "$tmp/c.port")
  for i in $(seq "$m"); do
    "$root/server/stoker-worker" --coordinator "127.0.0.1:$cp" --threads 1 \
      --log-level debug >"$tmp/w$i.log" 2>&1 &
    pids="$pids $!"
  done
  for _ in $(seq 300); do
    [ "$(grep -l registered "$tmp"/w*.log 2>/dev/null | wc -l)" -ge "$m" ] && break
    sleep 0.1
  done
  local t0; t0=$(date +%s.%N)
  (
    TIMEFORMAT='%U %S'
    time LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$root/examples/stoker-train-loop" --coordinator "127.0.0.1:$cp" --rank 0 \
      --world-size 1 $RANK_ARGS >"$tmp/t.log" 2>&1
  ) 2>"$tmp/cpu" &
  local waiter=$! max=0 tp=""
  while kill -0 $waiter 2>/dev/null; do
    [ -z "$tp" ] && tp=$(pgrep -P $waiter -n)
    if [ -n "$tp" ]; then
      local k; k=$(ls "/proc/$tp/task" 2>/dev/null | wc -l)
      [ "$k" -gt "$max" ] && max=$k
    fi
    sleep 0.02
  done
  wait $waiter
  local rc=$? t1; t1=$(date +%s.%N)
  local idle=0
  for i in $(seq "$m"); do grep -q "building epoch" "$tmp/w$i.log" || idle=$((idle + 1)); done
  kill $pids 2>/dev/null; wait $pids 2>/dev/null
  echo "threads=$max idle=$idle wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')" \
    "cpu=$(awk '{printf "%.2f", $1+$2}' "$tmp/cpu") rc=$rc"
  rm -rf "$tmp"
}

median() { sort -g | awk '{v[NR]=$1} END{print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

case $mode in
  threads)
    RANK_ARGS="--verify --prefetch 16"
    for m in "$@"; do
      n=$((160 * m > 4000 ? 160 * m : 4000))
      for r in "A $a" "B $b"; do
        set -- $r
        echo "$1 M=$m $(one_run "$2" "$m" --set num_samples=$n --set batch_size=4 \
          --set height=8 --set width=8 --set synthetic_cost_us=500)"
      done
    done
    ;;
  rate)
    images=$1 rounds=$2
    RANK_ARGS="--prefetch 8"
    : >/tmp/stoker-fanout-rates.$$
    for i in $(seq "$rounds"); do
      for r in "A $a" "B $b"; do
        set -- $r
        out=$(one_run "$2" 2 --set num_samples="$images" --set batch_size=64 \
          --set height=224 --set width=224)
        wall=$(sed -E 's/.*wall=([0-9.]+).*/\1/' <<<"$out")
        ips=$(awk -v n="$images" -v w="$wall" 'BEGIN{printf "%.0f", n/w}')
        echo "round $i $1 images/s=$ips $out"
        echo "$1 $ips $(sed -E 's/.*cpu=([0-9.]+).*/\1/' <<<"$out")" >>/tmp/stoker-fanout-rates.$$
      done
    done
    for s in A B; do
      echo "median $s: $(awk -v s=$s '$1==s{print $2}' /tmp/stoker-fanout-rates.$$ | median)" \
        "images/s, client CPU $(awk -v s=$s '$1==s{print $3}' /tmp/stoker-fanout-rates.$$ | median) s"
    done
    rm -f /tmp/stoker-fanout-rates.$$
    ;;
  *) echo "usage: $0 threads|rate ROOT_A ROOT_B ..." >&2; exit 2 ;;
esac
