#!/usr/bin/python3
"""job_keys.py - docs/operations.md's job table names every job key, and
only job keys (test_docs_job_keys).

  job_keys.py BIN_DIR OPERATIONS_MD

The keys come from the binary: `stoker-coordinator --print-job` prints the
canonical text, which core/job_spec.c writes from its option table (job_opts[]),
one `key = value` line per key; the keys the canonical text leaves out at
their default (plugin, views, view1..3, shuffle, bad_samples) are set here
so that every key is printed. The table is the one under "## A job" whose
header is `| key | type | meaning |`; a row may name several keys
(`view1`, `view2`, `view3`). Exits 0 when the two sets are equal, 1 naming
the keys missing on either side, 77 when the coordinator is not built.
"""
import os
import re
import subprocess
import sys

CHAIN = "decode | resize(32, 32)"
SETS = ["source=imagefolder", "dataset=d", "pipeline=" + CHAIN, "views=4",
        "view1=" + CHAIN, "view2=" + CHAIN, "view3=" + CHAIN, "plugin=x",
        "shuffle=false", "bad_samples=fail"]


def binary_keys(bindir):
    coord = os.path.join(bindir, "stoker-coordinator")
    if not os.access(coord, os.X_OK):
        print("SKIP: no stoker-coordinator in %s" % bindir)
        sys.exit(77)
    cmd = [coord, "--print-job"]
    for s in SETS:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("job_keys.py: %s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr))
    keys = []
    for line in r.stdout.splitlines():
        m = re.match(r"([a-z_0-9]+) = ", line)
        if m:
            keys.append(m.group(1))
    return keys


def doc_keys(path):
    with open(path) as f:
        lines = f.read().split("\n")
    start = None
    for i, l in enumerate(lines):
        if l.strip() == "| key | type | meaning |":
            start = i + 2
            break
    if start is None:
        sys.exit("job_keys.py: no '| key | type | meaning |' table in %s" % path)
    keys = []
    for l in lines[start:]:
        if not l.startswith("|"):
            break
        first = l.split("|")[1]
        keys += re.findall(r"`([a-z_0-9]+)`", first)
    return keys


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    have = binary_keys(argv[1])
    documented = doc_keys(argv[2])
    fails = 0
    for k in have:
        if k not in documented:
            print("FAIL: job key '%s' (job_opts[]) has no row in %s" % (k, argv[2]))
            fails += 1
    for k in documented:
        if k not in have:
            print("FAIL: %s documents '%s', which is not a job key" % (argv[2], k))
            fails += 1
    dup = sorted({k for k in documented if documented.count(k) > 1})
    for k in dup:
        print("FAIL: %s documents '%s' twice" % (argv[2], k))
        fails += 1
    if fails:
        return 1
    print("ok: the %d job keys of job_opts[] are the %d rows' keys of the job table"
          % (len(have), len(documented)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
