#!/usr/bin/env bash
# smoke.sh - test_bench_smoke: every stoker-bench subcommand runs to the end
# on a tiny input and prints its summary lines. Not a timing test: no
# figure is checked, only that the benchmarks still work.
#   usage: smoke.sh <stoker-bench> <stoker-dataset>
set -euo pipefail
bench=$1 dataset=$2
tmp=$(mktemp -d /tmp/stoker-bench-smoke-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$dataset" gen --out "$tmp/data" --count 48 --classes 3 --layout imagefolder \
  --min-side 64 --max-side 160 >/dev/null
out=$("$bench" augment "$tmp/data/imagefolder" --images 48 --batch 8 --rounds 2 \
  --no-torch --worker --profile 2>&1) || { echo "$out"; echo "augment failed"; exit 1; }
echo "$out"
for want in "round 2: stoker" "ratio stoker / full decode" "2 threads" "2/1" \
  "resample, horizontal pass" "whole pipeline"; do
  grep -q "$want" <<<"$out" || { echo "augment: no line with '$want'"; exit 1; }
done
out=$("$bench" transport --batches 3 --rounds 2 --batch-size 4 2>&1) ||
  { echo "$out"; echo "transport failed"; exit 1; }
echo "$out"
for want in "round 2: raw TCP" "ratio stoker / raw TCP" "client CPU per GB" \
  "worker split" "client page faults"; do
  grep -q "$want" <<<"$out" || { echo "transport: no line with '$want'"; exit 1; }
done
out=$("$bench" decode-modes "$tmp/data/imagefolder" --rounds 2 2>&1) ||
  { echo "$out"; echo "decode-modes failed"; exit 1; }
echo "$out"
for want in "round 2: rgb" "ycc / rgb time"; do
  grep -q "$want" <<<"$out" || { echo "decode-modes: no line with '$want'"; exit 1; }
done
echo "bench smoke: ok"
