#!/usr/bin/python3
"""job_keys.py - the job keys three ways, checked against each other both
ways (test_docs_job_keys): what the job text takes, what
`stoker-coordinator --help-job-keys` lists, and docs/operations.md's job
table.

  job_keys.py BIN_DIR OPERATIONS_MD

1. The keys of core/job_spec.c's option table (job_opts[]) as the parser and
   the canonical text see them: `stoker-coordinator --print-job` prints
   the canonical text, one `key = value` line per key; the keys it leaves
   out at their default (plugin, views, view1..3, shuffle, bad_samples)
   are set here so that every key is printed.
2. `stoker-coordinator --help-job-keys`: one line per key of the same
   table (name, type, meaning), each with a type and a meaning, in the
   canonical text's order.
3. The docs table under "## A job" whose header is `| key | type |
   meaning |`; a row may name several keys (`view1`, `view2`, `view3`),
   its type must be the type --help-job-keys gives.

Exits 0 when the three agree, 1 naming each difference, 77 when the
coordinator is not built.
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


def help_keys(bindir):
    """{key: (type, help)} and the order, from --help-job-keys."""
    coord = os.path.join(bindir, "stoker-coordinator")
    r = subprocess.run([coord, "--help-job-keys"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("job_keys.py: %s --help-job-keys failed (%d): %s"
                 % (coord, r.returncode, r.stderr))
    keys, order = {}, []
    for line in r.stdout.splitlines()[1:]:
        m = re.match(r"  ([a-z_0-9]+) +(.+?)  +(.*)$", line)
        if not m:
            sys.exit("job_keys.py: --help-job-keys line not 'name type help': %r" % line)
        keys[m.group(1)] = (m.group(2).strip(), m.group(3).strip())
        order.append(m.group(1))
    return keys, order


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
        cells = l.split("|")
        keys += [(k, cells[2].strip()) for k in re.findall(r"`([a-z_0-9]+)`", cells[1])]
    return keys


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    have = binary_keys(argv[1])
    helped, order = help_keys(argv[1])
    doc_rows = doc_keys(argv[2])
    documented = [k for k, _ in doc_rows]
    fails = []
    for k in have:
        if k not in helped:
            fails.append("job key '%s' (job_opts[]) is missing from --help-job-keys" % k)
        if k not in documented:
            fails.append("job key '%s' (job_opts[]) has no row in %s" % (k, argv[2]))
    for k in helped:
        if k not in have:
            fails.append("--help-job-keys lists '%s', which the job text does not take" % k)
        elif not helped[k][1]:
            fails.append("--help-job-keys gives '%s' no meaning (its help in job_opts[])" % k)
    if [k for k in order if k in have] != [k for k in have if k in helped]:
        fails.append("--help-job-keys is not in the canonical text's order")
    for k, t in doc_rows:
        if k not in have:
            fails.append("%s documents '%s', which is not a job key" % (argv[2], k))
        elif k in helped and helped[k][0] != t:
            fails.append("%s gives '%s' the type '%s', --help-job-keys '%s'"
                         % (argv[2], k, t, helped[k][0]))
    for k in sorted({k for k in documented if documented.count(k) > 1}):
        fails.append("%s documents '%s' twice" % (argv[2], k))
    for f in fails:
        print("FAIL: " + f)
    if fails:
        return 1
    print("ok: the %d job keys of job_opts[] are the %d of --help-job-keys and the %d "
          "rows' keys of the job table, with the same types"
          % (len(have), len(helped), len(documented)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
