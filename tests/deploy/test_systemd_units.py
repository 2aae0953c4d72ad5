"""test_systemd_units.py - deploy/*.service checked without systemd running:
each unit is Type=notify with a watchdog, restarts on failure but not on the
daemon's "job over" exit codes, takes the token from a credential file (never
--token on its command line), passes only options its binary's --help lists,
and `systemd-analyze verify` accepts it (with ExecStart pointed at the build
tree; skipped when systemd-analyze is missing).

usage: test_systemd_units.py DEPLOY_DIR COORDINATOR_BIN WORKER_BIN"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails  # noqa: E402


def keys(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "[")) and "=" in line:
            k, v = line.split("=", 1)
            out.setdefault(k.strip(), []).append(v.strip())
    return out


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    deploy, bins = sys.argv[1], {"stoker-coordinator": sys.argv[2], "stoker-worker": sys.argv[3]}
    tmp = tempfile.mkdtemp(prefix="stoker-units-")
    try:
        for prog, binary in bins.items():
            path = os.path.join(deploy, prog + ".service")
            if not os.path.exists(path):
                check(False, path + " exists")
                continue
            text = open(path).read()
            k = keys(text)
            check(k.get("Type") == ["notify"], prog + ": Type=notify")
            check(k.get("NotifyAccess") == ["main"], prog + ": NotifyAccess=main")
            check(bool(k.get("WatchdogSec")), prog + ": WatchdogSec= set")
            check(k.get("Restart") == ["on-failure"], prog + ": Restart=on-failure")
            check("4" in k.get("RestartPreventExitStatus", [""])[0].split(),
                  prog + ": exit 4 (aborted/rejected) does not restart")
            ex = k.get("ExecStart", [""])[0]
            check(not re.search(r"--token(\s|=)", ex), prog + ": no --token on the command line")
            check("--token-file %d/" in ex and bool(k.get("LoadCredential")),
                  prog + ": token from a LoadCredential file")
            helptext = subprocess.run([binary, "--help"], capture_output=True, text=True,
                                      timeout=30).stdout
            for opt in re.findall(r"(--[a-z][a-z0-9-]*)", ex):
                check(re.search(r"(^|\s)%s(\s|$)" % re.escape(opt), helptext, re.M) or
                      opt == "--config", "%s: %s is in its --help" % (prog, opt))
            tool = shutil.which("systemd-analyze")
            if not tool:
                print("SKIP: systemd-analyze not installed: %s not verified" % prog)
                continue
            unit = os.path.join(tmp, prog + ".service")
            with open(unit, "w") as f:
                f.write(text.replace("/usr/local/bin/" + prog, os.path.abspath(binary)))
            r = subprocess.run([tool, "verify", unit], capture_output=True, text=True,
                               timeout=60)
            msgs = [m for m in (r.stdout + r.stderr).splitlines() if prog in m]
            check(r.returncode == 0 and not msgs,
                  "systemd-analyze verify %s: %s" % (prog, r.stdout + r.stderr))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("systemd units:", "FAILED" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
