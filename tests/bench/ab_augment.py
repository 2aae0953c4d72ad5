#!/usr/bin/env python3
"""ab_augment.py - two builds of `stoker-bench augment` against each other:
runs OLD and NEW alternately, PAIRS times each, with the same arguments
(`--rounds 1` is added: one timed round, and one profiled round when the
arguments hold --profile), and prints, per run and as medians, each build's
ratios to its own full decode of the same files (the baseline it measures
in the same run) and, with --profile, each part's fraction of a full
decode; then NEW / OLD of the medians.

    tests/bench/ab_augment.py OLD/stoker-bench NEW/stoker-bench --pairs 7 -- \\
        /tmp/photos500 --prepared /tmp/p500 --images 288 --no-torch --profile

--new-prepared PDIR gives NEW's runs PDIR in place of ARGS's --prepared
directory: with the same build as OLD and NEW, two prepared copies of one
dataset (e.g. `stoker-dataset prepare --interval 8` and `--interval 4`)
against each other, each run against its own full decode of the originals.

Each run's ratios are per CPU second of one thread, against a baseline in
the same process a moment apart, so the load of a shared machine falls on
both alike; the pairs alternate so that it falls on both builds alike.
"""
import argparse
import re
import statistics
import subprocess
import sys

RATIOS = [
    ("stoker/full", re.compile(r"stoker/full ([0-9.]+)x \(u8 ([0-9.]+)x\)")),
    ("prepared/full", re.compile(r"prepared/full ([0-9.]+)x \(u8 ([0-9.]+)x\)")),
]
PART = re.compile(r"^  (\S.*?)\s+\|(.*)$")
CELL = re.compile(r"([0-9.-]+) us ([0-9.-]+)")


def run(bench, args):
    """One run: {name: value} of the ratios and the profile's fractions."""
    out = subprocess.run([bench, "augment", *args, "--rounds", "1"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{bench}: exit {out.returncode}\n{out.stdout}{out.stderr}")
    got, cols = {}, []
    for line in out.stdout.splitlines():
        if line.startswith("  round 1:"):
            for name, rx in RATIOS:
                m = rx.search(line)
                if m:
                    got[name] = float(m.group(1))
                    got[name + " u8"] = float(m.group(2))
        m = PART.match(line)
        if m and m.group(1) == "part":
            cols = [c.strip() for c in m.group(2).split("|")]
        elif m and cols:
            for col, cell in zip(cols, m.group(2).split("|")):
                c = CELL.search(cell)
                if c:
                    got[f"{m.group(1)} [{col}]"] = float(c.group(2))
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--new-prepared", metavar="PDIR")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    args = argv[cut + 1:]
    new_args = list(args)
    if a.new_prepared:
        if "--prepared" not in args[:-1]:
            sys.exit("--new-prepared: ARGS have no --prepared PDIR")
        new_args[args.index("--prepared") + 1] = a.new_prepared
    runs = {"old": [], "new": []}
    for p in range(a.pairs):
        for which in ("old", "new"):
            got = run(getattr(a, which), new_args if which == "new" else args)
            runs[which].append(got)
            short = ", ".join(f"{k} {v:.2f}x" for k, v in got.items() if "/" in k)
            print(f"pair {p + 1} {which}: {short}", flush=True)
    keys = [k for k in runs["old"][0] if all(k in r for r in runs["old"] + runs["new"])]
    print(f"medians of {a.pairs} runs each (alternating): old | new | new / old")
    for k in keys:
        o = statistics.median(r[k] for r in runs["old"])
        n = statistics.median(r[k] for r in runs["new"])
        print(f"  {k:58s} {o:6.3f} | {n:6.3f} | {n / o if o else float('nan'):5.2f}")


if __name__ == "__main__":
    main()
