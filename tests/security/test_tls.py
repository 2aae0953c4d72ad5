"""test_tls.py - TLS and mutual TLS between real daemons and clients on
loopback, with certificates made by deploy/stoker-certs (openssl: a CA, a
server certificate naming 127.0.0.1, a client certificate, and a second,
unrelated CA with its own client certificate).

  tls        coordinator and worker serve TLS; the worker's session, the
             client's join/watch/finish and its worker streams use it:
             stoker-train-loop --verify passes, `stoker status` works.
             Refused, each with a clear message, while the daemons keep
             serving: a plaintext client, a client trusting the wrong CA,
             a plaintext worker (its log says the coordinator may expect
             TLS). A good client afterwards still passes.
  mtls       --tls-require-client-cert on both daemons: a client with a
             certificate from the CA passes; without one, or with one from
             the other CA, it is refused; the daemons keep serving.
  config     bad TLS options are usage errors naming the problem (missing
             file, cert without key, not PEM, require without CA), and a
             key that does not match its certificate fails at start.

Usage: test_tls.py BIN_DIR TRAIN_LOOP STOKER_CERTS
Exit 0 passed, 1 failed (each failure printed), 77 skipped (no openssl).
"""
import shutil
import subprocess
import sys
import tempfile

if len(sys.argv) != 4:
    print(__doc__)
    sys.exit(2)
CERTS = sys.argv[3]
from sec_util import (CLI, COORD, TRAIN, WORKER, check, fails, job_file,  # noqa: E402
                      reap_all, run, spawn, start_job, stop, train, wait_log)


def make_certs(d):
    """deploy/stoker-certs (what docs/operations.md tells users to run): a
    CA with server and client certificates in d, and a second, unrelated
    CA in d/other with a 'rogue' client certificate; copied flat into d."""
    for args in (["ca", d], ["issue", d, "server", "IP:127.0.0.1", "DNS:localhost"],
                 ["issue", d, "client", "DNS:client"], ["ca", d + "/other"],
                 ["issue", d + "/other", "rogue", "DNS:client"]):
        subprocess.run([CERTS, *args], check=True, stdout=subprocess.DEVNULL, timeout=60)
    for n in ("ca", "rogue"):
        for ext in ("pem", "key"):
            shutil.copy(f"{d}/other/{n}.{ext}",
                        f"{d}/{'other' if n == 'ca' else n}.{ext}")


def case_tls(d):
    srv = ["--tls-cert", f"{d}/server.pem", "--tls-key", f"{d}/server.key"]
    started = start_job(d, "tls", srv, srv + ["--tls-ca", f"{d}/ca.pem"])
    if not started:
        return
    c, w, port = started
    check("(TLS)" in open(f"{d}/tls.coord.log").read(), "tls: coordinator logs TLS")
    rc, out = train(port, "--tls-ca", f"{d}/ca.pem")
    check(rc == 0 and "verify_failures 0" in out,
          "tls: train-loop over TLS verifies every batch (rc %d)" % rc)
    rc, out = run([CLI, "status", "--coordinator", f"127.0.0.1:{port}", "--tls-ca",
                   f"{d}/ca.pem"])
    check(rc == 0 and "running" in out, "tls: stoker status over TLS (rc %d)" % rc)

    rc, out = train(port, join_ms=2000)
    check(rc != 0 and "may expect TLS" in out,
          "tls: a plaintext client is refused with a hint: " + out.strip()[-160:])
    rc, out = train(port, "--tls-ca", f"{d}/other.pem", join_ms=2000)
    check(rc != 0 and "check the TLS setup" in out,
          "tls: a client trusting another CA is refused with a hint")
    rc, out = run([CLI, "status", "--coordinator", f"127.0.0.1:{port}",
                   "--timeout-ms", "2000"])
    check(rc == 1, "tls: plaintext stoker status fails (rc %d)" % rc)

    pw = spawn([WORKER, "--coordinator", f"127.0.0.1:{port}", "--threads", "1",
                "--orphan-timeout-s", "60"], f"{d}/tls.plainworker.log")
    check(wait_log(f"{d}/tls.plainworker.log", "may expect TLS", pw),
          "tls: a plaintext worker's log says the coordinator may expect TLS")
    stop(pw)

    rc, out = train(port, "--tls-ca", f"{d}/ca.pem")
    check(rc == 0 and "verify_failures 0" in out,
          "tls: after the refusals a good client still passes (daemons kept serving)")
    check(c.poll() is None and w.poll() is None, "tls: both daemons still running")
    check(stop(w) == 0 and stop(c) == 0, "tls: daemons exit 0 on SIGTERM")


def case_mtls(d):
    srv = ["--tls-cert", f"{d}/server.pem", "--tls-key", f"{d}/server.key", "--tls-ca",
           f"{d}/ca.pem", "--tls-require-client-cert"]
    started = start_job(d, "mtls", srv)
    if not started:
        return
    c, w, port = started
    check("mTLS" in open(f"{d}/mtls.coord.log").read(), "mtls: coordinator logs mTLS")
    good = ["--tls-ca", f"{d}/ca.pem", "--tls-cert", f"{d}/client.pem", "--tls-key",
            f"{d}/client.key"]
    rc, out = train(port, *good)
    check(rc == 0 and "verify_failures 0" in out,
          "mtls: a client with a CA-signed certificate passes (rc %d)" % rc)
    rc, out = train(port, "--tls-ca", f"{d}/ca.pem", join_ms=2000)
    check(rc != 0 and "check the TLS setup" in out,
          "mtls: a client without a certificate is refused with a hint")
    rc, out = train(port, "--tls-ca", f"{d}/ca.pem", "--tls-cert", f"{d}/rogue.pem",
                    "--tls-key", f"{d}/rogue.key", join_ms=2000)
    check(rc != 0, "mtls: a client certificate from another CA is refused")
    env_rc = run(["env", f"STOKER_TLS_CA={d}/ca.pem", f"STOKER_TLS_CERT={d}/client.pem",
                  f"STOKER_TLS_KEY={d}/client.key", TRAIN, "--coordinator",
                  f"127.0.0.1:{port}", "--rank", "7", "--world-size", "8", "--verify"])
    check(env_rc[0] == 0, "mtls: the STOKER_TLS_* variables work as the options do")
    check(c.poll() is None and w.poll() is None, "mtls: both daemons still running")
    check(stop(w) == 0 and stop(c) == 0, "mtls: daemons exit 0 on SIGTERM")


def case_config(d):
    job = job_file(d)
    base = [COORD, "--job", job, "--listen", "127.0.0.1:0"]
    for args, want, what in (
        (["--tls-cert", f"{d}/missing.pem", "--tls-key", f"{d}/server.key"],
         "missing.pem", "a missing certificate file"),
        (["--tls-cert", f"{d}/server.pem"], "both", "a certificate without its key"),
        (["--tls-cert", job, "--tls-key", f"{d}/server.key"], "not a PEM",
         "a certificate file that is not PEM"),
        (["--tls-cert", f"{d}/server.pem", "--tls-key", f"{d}/server.key",
          "--tls-require-client-cert"], "--tls-ca", "mTLS without a CA"),
    ):
        rc, out = run(base + args, 20)
        check(rc == 2 and want in out, "config: %s is a usage error naming it (rc %d): %s"
              % (what, rc, out.strip().splitlines()[-1][-120:] if out.strip() else ""))
    rc, out = run(base + ["--tls-cert", f"{d}/server.pem", "--tls-key", f"{d}/client.key"],
                  20)
    check(rc != 0 and "TLS" in out, "config: a key that does not match its certificate "
          "fails at start (rc %d)" % rc)
    rc, out = run([TRAIN, "--coordinator", "127.0.0.1:1", "--tls-ca", f"{d}/missing.pem"],
                  20)
    check(rc != 0 and "missing.pem" in out, "config: a client with a missing CA file "
          "fails at open naming it")


def main():
    if not shutil.which("openssl"):
        print("SKIP: openssl is not installed")
        return 77
    d = tempfile.mkdtemp(prefix="stoker-tls-test.")
    try:
        make_certs(d)
        case_tls(d)
        case_mtls(d)
        case_config(d)
    finally:
        reap_all(d)
        shutil.rmtree(d, ignore_errors=True)
    print("%d failure(s)" % len(fails) if fails else "test_tls: all passed")
    return 1 if fails else 0


sys.exit(main())
