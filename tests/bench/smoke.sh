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
# --recipes: every chain on stoker's side; torchvision's side (when
# installed) for one per-image recipe and the batch one
out=$("$bench" augment "$tmp/data/imagefolder" --recipes --no-torch --images 32 --batch 8 \
  --rounds 1 2>&1) || { echo "$out"; echo "augment --recipes failed"; exit 1; }
echo "$out"
for want in "round 1 augmix   stoker" "round 1 mix      stoker" "median of 1 rounds" \
  "tawide   stoker"; do
  grep -q "$want" <<<"$out" || { echo "augment --recipes: no line with '$want'"; exit 1; }
done
out=$("$bench" augment "$tmp/data/imagefolder" --recipes base,mix --images 32 --batch 8 \
  --rounds 1 2>&1) || { echo "$out"; echo "augment --recipes base,mix failed"; exit 1; }
echo "$out"
for want in "round 1 base     stoker" "round 1 mix      stoker" "mix      stoker"; do
  grep -q "$want" <<<"$out" || { echo "augment --recipes: no line with '$want'"; exit 1; }
done
if grep -q "torchvision: not available" <<<"$out"; then
  echo "augment --recipes: torchvision not installed, its side not run"
else
  grep -q "ratio of medians" <<<"$out" ||
    { echo "augment --recipes: no torchvision ratio"; exit 1; }
fi
# a bare --recipes before DIR named like a recipe: DIR, every recipe
ln -s "$tmp/data/imagefolder" "$tmp/mix"
out=$(cd "$tmp" && "$bench" augment --recipes mix --no-torch --images 16 --batch 8 \
  --rounds 1 2>&1) || { echo "$out"; echo "augment --recipes mix (DIR) failed"; exit 1; }
for want in "round 1 recipe   stoker" "round 1 tawide   stoker" "round 1 mix      stoker"; do
  grep -q "$want" <<<"$out" || { echo "augment --recipes DIR: no line with '$want'"; exit 1; }
done
# --pyop needs /usr/bin/python3 with numpy (the python op's process)
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  out=$("$bench" augment "$tmp/data/imagefolder" --pyop --images 32 --batch 8 \
    --rounds 1 2>&1) || { echo "$out"; echo "augment --pyop failed"; exit 1; }
  echo "$out"
  for want in "round 1: base" "python op invert" "python - C"; do
    grep -q "$want" <<<"$out" || { echo "augment --pyop: no line with '$want'"; exit 1; }
  done
else
  echo "augment --pyop: skipped, /usr/bin/python3 with numpy is needed"
fi
out=$("$bench" transport --batches 3 --rounds 2 --batch-size 4 2>&1) ||
  { echo "$out"; echo "transport failed"; exit 1; }
echo "$out"
for want in "round 2: raw TCP" "ratio stoker / raw TCP" "client CPU per GB" \
  "worker split" "client page faults" "client copy+crc" "raw receiver split" \
  "client threads (from /proc" "reported receive CPU" "/proc, the same threads"; do
  grep -q "$want" <<<"$out" || { echo "transport: no line with '$want'"; exit 1; }
done
out=$("$bench" decode-modes "$tmp/data/imagefolder" --rounds 2 2>&1) ||
  { echo "$out"; echo "decode-modes failed"; exit 1; }
echo "$out"
for want in "round 2: rgb" "ycc / rgb time"; do
  grep -q "$want" <<<"$out" || { echo "decode-modes: no line with '$want'"; exit 1; }
done
echo "bench smoke: ok"
