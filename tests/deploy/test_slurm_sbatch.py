"""test_slurm_sbatch.py - checks deploy/slurm/stoker.sbatch without Slurm.

Usage: test_slurm_sbatch.py SBATCH_FILE [STOKER_LAUNCH]

1. `bash -n` accepts it.
2. Its #SBATCH header is a heterogeneous job: every directive comes before
   the first command, exactly one `#SBATCH hetjob` separates component 0
   (data nodes, no GPUs) from component 1 (training nodes, with GPUs).
3. It runs under bash with a stand-in `srun` on PATH (which records its
   arguments and exits with a code per component): srun is called once
   per component (--het-group=0 and --het-group=1), each starting
   stoker-launch --backend slurm with the same options: the job file, the
   data root and `--` before the training command; arguments given to the
   script become the training command. The script exits with the training
   step's code (component 1), whatever the data step's; with
   STOKER_ROLE_TOKENS it passes --role-tokens and makes no token file.
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


def run_script(path, launch, argv, extra=None, want_rc=0):
    """Run the script with a recording srun (extra: more environment;
    SRUN_RC0/SRUN_RC1 set the stand-in's exit code per component) and
    check it exits want_rc; returns srun's argv lists, component 0's
    first, and the submit folder."""
    with tempfile.TemporaryDirectory() as d:
        rec = os.path.join(d, "srun.args")
        srun = os.path.join(d, "srun")
        with open(srun, "w") as f:
            f.write('#!/bin/sh\nfor a in "$@"; do printf "%%s\\n" "$a"; done > %s.$$\n'
                    'case "$1" in --het-group=0) exit "${SRUN_RC0:-0}";; '
                    '--het-group=1) exit "${SRUN_RC1:-0}";; esac\nexit 0\n' % rec)
        os.chmod(srun, stat.S_IRWXU)
        env = dict(os.environ, PATH=d + ":" + os.environ.get("PATH", ""),
                   SLURM_SUBMIT_DIR=d, SLURM_JOB_ID="42", STOKER_LAUNCH=launch)
        env.update(extra or {})
        r = subprocess.run(["bash", path] + argv, env=env, capture_output=True, text=True,
                           timeout=30)
        check(r.returncode == want_rc, "the script runs (exit %d, want %d): %s" %
              (r.returncode, want_rc, r.stderr.strip()))
        calls = [open(os.path.join(d, f)).read().split("\n")[:-1]
                 for f in sorted(os.listdir(d)) if f.startswith("srun.args.")]
        calls.sort(key=lambda a: a[0] if a else "")  # component 0 first
        left = [f for f in os.listdir(d) if f.startswith(".stoker-token")]
        check(not left, "the per-job token file is removed when the script ends (%s)" % left)
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
        if not check(len(calls) == 2, "srun called twice, once per component (got %d)" %
                     len(calls)):
            continue
        check([a[0] for a in calls] == ["--het-group=0", "--het-group=1"],
              "one srun per component (--het-group=0, --het-group=1): %s" %
              [a[:1] for a in calls])
        check(calls[0][1:] == calls[1][1:], "both steps start the same stoker-launch command")
        a = calls[1]
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

    # the job's exit code is the training step's
    run_script(path, fake_launch, [], extra={"SRUN_RC0": "5"}, want_rc=0)
    run_script(path, fake_launch, [], extra={"SRUN_RC1": "42"}, want_rc=42)
    # role tokens: a node-local folder, no shared token
    calls, tmp = run_script(path, fake_launch, [], extra={"STOKER_ROLE_TOKENS": "/etc/stoker"})
    check(len(calls) == 2, "STOKER_ROLE_TOKENS: srun called twice (got %d)" % len(calls))
    for a in calls:
        check("--role-tokens" in a and a[a.index("--role-tokens") + 1] == "/etc/stoker" and
              "--token-file" not in a,
              "STOKER_ROLE_TOKENS: --role-tokens /etc/stoker and no --token-file: %s" % a)
    if "--role-tokens" not in flags:
        flags.append("--role-tokens")

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
