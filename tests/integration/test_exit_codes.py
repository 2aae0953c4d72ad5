"""test_exit_codes.py - every exit code that stoker-coordinator --help and
stoker-worker --help document is the code the daemon really exits with, in
a real run of the situation the text names; and every documented code is
tried (a code added to --help without a case here fails the test).

  coordinator  0 SIGTERM; 1 its port is taken; 2 a bad option; 3 the idle
               timeout; 4 a rank aborted the job (stoker abort)
  worker       0 SIGTERM; 1 its dataset cannot be opened; 2 a bad option;
               3 orphaned (no coordinator for --orphan-timeout-s); 4 rejected
               (a wrong token); 5 the job was aborted

usage: test_exit_codes.py BIN_DIR
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (check, fails, reap, say_passes, spawn, wait_exit,  # noqa: E402
                     wait_log, wait_port)

BIN = sys.argv[1] if len(sys.argv) > 1 else ""
COORD, WORKER, CLI = (os.path.join(BIN, n) for n in
                      ("stoker-coordinator", "stoker-worker", "stoker"))
tried = {"stoker-coordinator": set(), "stoker-worker": set()}
say_passes()  # every check printed, ok or FAIL


def documented(binary):
    """The codes listed under 'exit codes:' in binary --help."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    text = out.split("exit codes:", 1)[1] if "exit codes:" in out else ""
    return {int(c) for c in re.findall(r"^  (\d+)  ", text, re.M)}


def expect(name, p, want, what, timeout=60):
    got = wait_exit(p, timeout)
    tried[name].add(want)
    check(got == want, "%s exits %d when %s (got %s)" % (name, want, what, got))


def coordinator(d, tag, *extra):
    pf = os.path.join(d, tag + ".port")
    c = spawn([COORD, "--listen", "127.0.0.1:0", "--port-file", pf, "--set",
               "num_samples=1024", "--set", "batch_size=8", *extra],
              os.path.join(d, tag + ".log"))
    return c, wait_port(pf, c, timeout=30, or_none=True)


def worker(d, tag, port, *extra):
    return spawn([WORKER, "--coordinator", "127.0.0.1:%d" % port, "--listen", "127.0.0.1:0",
                  "--threads", "1", *extra], os.path.join(d, tag + ".log"))


def main():
    if not all(os.access(b, os.X_OK) for b in (COORD, WORKER, CLI)):
        print("SKIP: the daemons are not built in %s" % BIN)
        return 77
    d = tempfile.mkdtemp(prefix="stoker-exit-codes-")
    try:
        # usage errors
        for name, b in (("stoker-coordinator", COORD), ("stoker-worker", WORKER)):
            expect(name, spawn([b, "--no-such-option"], os.path.join(d, "usage.log")), 2,
                   "given a bad option")
        # 0: SIGTERM to a worker, then to its coordinator
        c, port = coordinator(d, "c0")
        w = worker(d, "w0", port)
        check(wait_log(os.path.join(d, "c0.log"), "registered at"), "the worker registered")
        w.send_signal(signal.SIGTERM)
        expect("stoker-worker", w, 0, "sent SIGTERM")
        c.send_signal(signal.SIGTERM)
        expect("stoker-coordinator", c, 0, "sent SIGTERM")
        # 1: a taken port (coordinator), a dataset that cannot be opened (worker)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        expect("stoker-coordinator",
               spawn([COORD, "--listen", "127.0.0.1:%d" % taken, "--set", "num_samples=1024",
                      "--set", "batch_size=8"], os.path.join(d, "c1.log")), 1,
               "its port is taken")
        s.close()
        c, port = coordinator(d, "c1b", "--set", "source=imagefolder", "--set", "dataset=imgs",
                              "--set", "num_samples=0", "--set", "pipeline=train",
                              "--set", "height=8", "--set", "width=8")
        expect("stoker-worker", worker(d, "w1", port, "--data-root", "/nonexistent-root"), 1,
               "its dataset cannot be opened")
        c.send_signal(signal.SIGTERM)
        wait_exit(c, 60)
        # 3: the coordinator's idle timeout; the worker orphaned
        c, port = coordinator(d, "c3", "--idle-timeout-s", "1")
        expect("stoker-coordinator", c, 3, "no client touched the job for --idle-timeout-s")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        gone = s.getsockname()[1]
        s.close()
        w = spawn([WORKER, "--coordinator", "127.0.0.1:%d" % gone, "--listen", "127.0.0.1:0",
                   "--threads", "1", "--orphan-timeout-s", "1"], os.path.join(d, "w3.log"))
        expect("stoker-worker", w, 3, "no coordinator answered for --orphan-timeout-s")
        # 4: a worker with the wrong token is rejected
        good, bad = os.path.join(d, "good.tok"), os.path.join(d, "bad.tok")
        for path, tok in ((good, "the-right-token"), (bad, "a-wrong-token")):
            with open(path, "w") as f:
                f.write(tok + "\n")
            os.chmod(path, 0o600)
        c, port = coordinator(d, "c4", "--token-file", good)
        expect("stoker-worker", worker(d, "w4", port, "--token-file", bad), 4,
               "the coordinator rejects its token")
        c.send_signal(signal.SIGTERM)
        wait_exit(c, 60)
        # 4 (coordinator) and 5 (worker): a rank aborts the job
        c, port = coordinator(d, "c5")
        w = worker(d, "w5", port)
        check(wait_log(os.path.join(d, "c5.log"), "registered at"), "the worker registered")
        r = subprocess.run([CLI, "abort", "--coordinator", "127.0.0.1:%d" % port, "--rank", "0",
                            "--reason", "exit-code test"], capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 0, "stoker abort was taken: %s" % r.stderr.strip())
        expect("stoker-worker", w, 5, "the job was aborted")
        expect("stoker-coordinator", c, 4, "a rank aborted the job")
        # every documented code was tried
        for name, b in (("stoker-coordinator", COORD), ("stoker-worker", WORKER)):
            doc = documented(b)
            check(doc and doc <= tried[name],
                  "%s: every code its --help documents was tried (documented %s, tried %s)"
                  % (name, sorted(doc), sorted(tried[name])))
    finally:
        reap(term_s=0)
        if fails:
            for f in sorted(os.listdir(d)):
                print("---- %s" % f)
                print(open(os.path.join(d, f), errors="replace").read()[-1500:])
        shutil.rmtree(d, ignore_errors=True)
    print("exit codes: %s" % ("FAILED %d" % len(fails) if fails else "passed"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
