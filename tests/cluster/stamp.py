#!/usr/bin/python3
"""stamp.py - the training command as the cluster tests hand it to stoker-launch.

    stamp.py STAMP_FILE [--fail-after S --fail-code N] -- COMMAND ARGS...

Runs COMMAND, forwards SIGTERM/SIGINT/SIGHUP to it, and when it ends writes
"<exit code> <time.time()>" to STAMP_FILE (atomically), so the test knows
when training ended on this host and can hold every launcher's exit to the
time limits counted from that moment. Exits with COMMAND's code (128+N when a
signal N ended it).

--fail-after S --fail-code N: a training process that crashes mid-run:
after S seconds COMMAND is killed (SIGKILL) and this exits N.
Standard library only; owns nothing but its child.
"""
import os
import signal
import subprocess
import sys
import time


def main(argv):
    if len(argv) < 4 or "--" not in argv:
        print("usage: stamp.py STAMP_FILE [--fail-after S --fail-code N] -- COMMAND...",
              file=sys.stderr)
        return 2
    sep = argv.index("--")
    stamp, opts, cmd = argv[1], argv[2:sep], argv[sep + 1:]
    fail_after, fail_code = None, 1
    while opts:
        if opts[0] == "--fail-after" and len(opts) > 1:
            fail_after = float(opts[1])
        elif opts[0] == "--fail-code" and len(opts) > 1:
            fail_code = int(opts[1])
        else:
            print("stamp.py: bad option %r" % opts[0], file=sys.stderr)
            return 2
        opts = opts[2:]
    if not cmd:
        print("stamp.py: no command", file=sys.stderr)
        return 2
    child = subprocess.Popen(cmd)

    def forward(signum, frame):
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, forward)
    failed = False
    if fail_after is not None:
        try:
            child.wait(timeout=fail_after)
        except subprocess.TimeoutExpired:
            child.kill()
            failed = True
    rc = child.wait()
    if failed:
        rc = fail_code
        print("stamp.py: simulated crash: killed the training command after %g s, exit %d" %
              (fail_after, rc), flush=True)
    elif rc < 0:
        rc = 128 - rc
    tmp = stamp + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d %.6f\n" % (rc, time.time()))
    os.rename(tmp, stamp)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
