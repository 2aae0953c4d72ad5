"""test_slurm_sbatch.py - checks deploy/slurm/stoker.sbatch without Slurm.

Usage: test_slurm_sbatch.py SBATCH_FILE [STOKER_LAUNCH]

1. `bash -n` accepts it.
2. Its #SBATCH header is a heterogeneous job: every directive comes before
   the first command, exactly one `#SBATCH hetjob` separates component 0
   (data nodes, no GPUs) from component 1 (training nodes, with GPUs).
3. It runs under bash with a stand-in `srun` on PATH (which records its
   arguments): srun is called once, over both components
   (--het-group=0,1), starting stoker-launch --backend slurm with the job
   file, the data root and `--` before the training command; arguments
   given to the script become the training command.
4. If STOKER_LAUNCH exists (deploy/stoker-launch, built by another part of
   the tree): every option the script passes it is listed by its --help.
   Without it this part is skipped with a message, the rest still runs.
Exit 0 all good, 1 a check failed (each printed).
"""
import os
import re
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails  # noqa: E402


def header(path):
    """The #SBATCH directives (component-separated) before the first command."""
    comps, first_cmd = [[]], None
    for n, line in enumerate(open(path), 1):
        s = line.strip()
        if s.startswith("#SBATCH"):
            check(first_cmd is None, "line %d: #SBATCH after the first command (line %s) is "
                  "ignored by sbatch" % (n, first_cmd))
            d = s[len("#SBATCH"):].strip()
            if d in ("hetjob", "packjob"):
                comps.append([])
            else:
                comps[-1].append(d)
        elif s and not s.startswith("#") and first_cmd is None:
            first_cmd = n
    return comps


def run_script(path, launch, argv):
    """Run the script with a recording srun; returns srun's argv list(s)."""
    with tempfile.TemporaryDirectory() as d:
        rec = os.path.join(d, "srun.args")
        srun = os.path.join(d, "srun")
        with open(srun, "w") as f:
            f.write('#!/bin/sh\nfor a in "$@"; do printf "%%s\\n" "$a"; done > %s.$$\n'
                    'exit 0\n' % rec)
        os.chmod(srun, stat.S_IRWXU)
        env = dict(os.environ, PATH=d + ":" + os.environ.get("PATH", ""),
                   SLURM_SUBMIT_DIR=d, SLURM_JOB_ID="42", STOKER_LAUNCH=launch)
        r = subprocess.run(["bash", path] + argv, env=env, capture_output=True, text=True,
                           timeout=30)
        check(r.returncode == 0, "the script runs (exit %d): %s" % (r.returncode,
                                                                   r.stderr.strip()))
        calls = [open(os.path.join(d, f)).read().split("\n")[:-1]
                 for f in sorted(os.listdir(d)) if f.startswith("srun.args.")]
        return calls, d


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    path = sys.argv[1]
    launch = sys.argv[2] if len(sys.argv) > 2 else ""
    r = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
    check(r.returncode == 0, "bash -n: %s" % r.stderr.strip())

    comps = header(path)
    if check(len(comps) == 2, "two components separated by one '#SBATCH hetjob' (got %d)"
             % len(comps)):
        gpu = [any(re.match(r"--(gpus|gres=gpu|gpus-per-node)", o) for o in c) for c in comps]
        check(not gpu[0], "component 0 (data nodes) asks for no GPU")
        check(gpu[1], "component 1 (training nodes) asks for GPUs")
        for i, c in enumerate(comps):
            check(any(o.startswith("--nodes") or o.startswith("-N") for o in c),
                  "component %d sets --nodes" % i)
            check(any(o.startswith("--ntasks-per-node=1") for o in c),
                  "component %d: one task (one stoker-launch) per node" % i)

    fake_launch = launch if launch and os.path.exists(launch) else "/opt/stoker-launch"
    for argv, want_train in (([], ["stoker-train-loop", "--progress"]),
                             (["python3", "train.py", "--epochs", "3"],
                              ["python3", "train.py", "--epochs", "3"])):
        calls, tmp = run_script(path, fake_launch, argv)
        if not check(len(calls) == 1, "srun called once (got %d)" % len(calls)):
            continue
        a = calls[0]
        check("--het-group=0,1" in a, "srun spans both components (--het-group=0,1): %s" % a)
        if not check(fake_launch in a, "srun starts stoker-launch: %s" % a):
            continue
        la = a[a.index(fake_launch) + 1:]
        if not check("--" in la, "'--' before the training command"):
            continue
        opts, train = la[:la.index("--")], la[la.index("--") + 1:]
        check(train == want_train, "training command %s (want %s)" % (train, want_train))
        check(opts[:2] == ["--backend", "slurm"], "stoker-launch --backend slurm first")
        check("--job" in opts and opts[opts.index("--job") + 1] == os.path.join(tmp, "job.conf"),
              "--job defaults to $SLURM_SUBMIT_DIR/job.conf")
        check("--data-root" in opts, "--data-root passed")
        tok = opts[opts.index("--token-file") + 1] if "--token-file" in opts else ""
        check(tok.startswith(tmp) and ".stoker-token-" in tok,
              "a per-job --token-file in the submit dir is passed: %s" % tok)
        flags = [o for o in opts if o.startswith("--")]

    if launch and os.path.exists(launch):
        r = subprocess.run([launch, "--help"], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "%s --help exits 0" % launch)
        known = set(re.findall(r"--[a-z][a-z0-9-]*", r.stdout + r.stderr))
        for f in flags:
            check(f.split("=")[0] in known, "stoker-launch --help lists %s" % f)
        print("stoker-launch options checked against %s --help: %s" % (launch, " ".join(flags)))
    else:
        print("SKIP (this part only): %s is not in this tree; the options passed to "
              "stoker-launch (%s) were not checked against its --help"
              % (launch or "stoker-launch", " ".join(flags)))
    print("FAILED: %d" % len(fails) if fails else "stoker.sbatch: all checks passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
