"""test_sagemaker_files.py - checks deploy/sagemaker without AWS.

Usage: test_sagemaker_files.py SAGEMAKER_DIR STOKER_COORDINATOR [STOKER_LAUNCH]

entry.sh passes `sh -n` and runs under sh with a stand-in stoker-launch on
PATH (recording its arguments): it execs stoker-launch --backend sagemaker
with job.conf, the group names of estimator.py, one process per GPU
(SM_NUM_GPUS, at least 1) and `--` before the training command, which
gets the hyperparameter arguments; estimator.py compiles and names the
same groups; job.conf passes `stoker-coordinator --print-job`; and, if
STOKER_LAUNCH exists, every option entry.sh passes is in its --help (else
that part is skipped with a message). The Dockerfile is not built here.
Exit 0 all good, 1 a check failed (each printed).
"""
import os
import py_compile
import re
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails  # noqa: E402


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    d, coord = sys.argv[1], sys.argv[2]
    launch = sys.argv[3] if len(sys.argv) > 3 else ""
    entry = os.path.join(d, "entry.sh")
    r = subprocess.run(["sh", "-n", entry], capture_output=True, text=True)
    check(r.returncode == 0, "sh -n entry.sh: %s" % r.stderr.strip())
    with tempfile.TemporaryDirectory() as tmp:
        try:
            py_compile.compile(os.path.join(d, "estimator.py"),
                               cfile=os.path.join(tmp, "e.pyc"), doraise=True)
        except py_compile.PyCompileError as e:
            check(False, "estimator.py compiles: %s" % e)
    est = open(os.path.join(d, "estimator.py")).read()
    groups = re.findall(r'InstanceGroup\("([a-z_]+)", "([a-z0-9.]+)"', est)
    check(("data_group", "ml.c5.18xlarge") in groups and
          any(g == "dnn_group" for g, _ in groups), "estimator: data_group and dnn_group")
    check("instance_groups=[data_group, dnn_group]" in est, "estimator passes instance_groups")
    check('entry_point="entry.sh"' in est, "estimator's entry point is entry.sh")

    r = subprocess.run([coord, "--job", os.path.join(d, "job.conf"), "--print-job"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "job.conf passes --print-job: %s" % r.stderr.strip())

    flags = []
    for gpus, want_procs in (("8", "8"), ("0", "1")):
        with tempfile.TemporaryDirectory() as tmp:
            rec = os.path.join(tmp, "args")
            fake = os.path.join(tmp, "stoker-launch")
            with open(fake, "w") as f:
                f.write('#!/bin/sh\nfor a in "$@"; do printf "%%s\\n" "$a"; done > %s\n' % rec)
            os.chmod(fake, stat.S_IRWXU)
            env = dict(os.environ, PATH=tmp + ":" + os.environ.get("PATH", ""),
                       SM_NUM_GPUS=gpus)
            r = subprocess.run(["sh", entry, "--epochs", "3"], env=env, capture_output=True,
                               text=True, timeout=30)
            if not check(r.returncode == 0 and os.path.exists(rec),
                         "entry.sh runs stoker-launch (exit %d): %s" % (r.returncode,
                                                                     r.stderr.strip())):
                continue
            a = open(rec).read().split("\n")[:-1]
        if not check("--" in a, "'--' before the training command: %s" % a):
            continue
        opts, train = a[:a.index("--")], a[a.index("--") + 1:]
        check(opts[:2] == ["--backend", "sagemaker"], "--backend sagemaker first")
        for k, v in (("--job", "job.conf"), ("--data-group", "data_group"),
                     ("--dnn-group", "dnn_group"), ("--data-root", "/opt/ml/input/data"),
                     ("--procs-per-host", want_procs)):
            check(k in opts and opts[opts.index(k) + 1] == v,
                  "%s %s (SM_NUM_GPUS=%s): %s" % (k, v, gpus, opts))
        check(train == ["python3", "train.py", "--epochs", "3"],
              "training command gets the hyperparameters: %s" % train)
        check("--insecure" in opts,
              "no token given: --insecure is named explicitly (protected mode): %s" % opts)
        flags = [o for o in opts if o.startswith("--")]

    if launch and os.path.exists(launch):
        r = subprocess.run([launch, "--help"], capture_output=True, text=True, timeout=30)
        known = set(re.findall(r"--[a-z][a-z0-9-]*", r.stdout + r.stderr))
        for f in flags:
            check(f in known, "stoker-launch --help lists %s" % f)
        print("entry.sh's options checked against %s --help" % launch)
    else:
        print("SKIP (this part only): %s is not in this tree; entry.sh's options (%s) "
              "were not checked against its --help" % (launch or "stoker-launch",
                                                       " ".join(flags)))
    print("FAILED: %d" % len(fails) if fails else "deploy/sagemaker: all checks passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
