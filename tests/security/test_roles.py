"""test_roles.py - role separation (worker, client, admin tokens) and the
coordinator's check of a worker's advertised address, between real
daemons on loopback.

  roles      the coordinator has --worker-token-file, --client-token-file
             and --admin-token-file; the worker presents the worker token
             and also takes the client token on its streams
             (--client-token-file, kept for clients older than stream
             tickets; test_tickets.py covers the tickets). A rank with the
             client token verifies its batches; `stoker status` works with
             the client and admin tokens, fails without one, and with the
             worker token shows the job's state alone (no job spec, no
             worker address: Status withholds them from the worker role).
             Refused, each with
             PERMISSION_DENIED or UNAUTHENTICATED and a message naming the
             method, while the daemons keep serving: a rank with the
             worker token (Join), a stock gRPC client opening a worker
             session with the client token and a worker stream with the
             worker token, `stoker abort` with the worker token (the job
             goes on), and a stoker-worker started with the client token
             (rejected: exit 4).
  address    a worker advertising 192.0.2.1 (not this host) is refused
             with a message that names both addresses and exits 4; the
             same worker is accepted by a coordinator started with
             --trust-worker-addresses.
  modes      a 0644 token file, and a 0644 --config file holding
             `token =`, are warned about (0600 ones are not), and so is a
             token shorter than 16 bytes; the daemon starts.

Usage: test_roles.py BIN_DIR TRAIN_LOOP
Exit 0 passed, 1 failed (each failure printed).
"""
import os
import re
import shutil
import sys
import tempfile

if len(sys.argv) != 3:
    print(__doc__)
    sys.exit(2)
from sec_util import (CLI, COORD, TRAIN, WORKER, check, fails, job_file,  # noqa: E402
                      reap_all, run, spawn, stop, wait_log, wait_port)

EXIT_REJECTED = 4


def tokens(d):
    paths = {}
    for role in ("worker", "client", "admin"):
        paths[role] = f"{d}/{role}.tok"
        with open(paths[role], "w") as f:
            f.write(f"{role}-secret-{os.getpid()}-0123456789\n")
        os.chmod(paths[role], 0o600)
    return paths


def token_of(path):
    return open(path).read().strip()


def as_role(path, args, limit_s=60):
    """Run args with $STOKER_TOKEN set to the token in path (None: none)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_TOKEN")}
    if path:
        env["STOKER_TOKEN"] = token_of(path)
    return run(["env", "-i", *[f"{k}={v}" for k, v in env.items()], *args], limit_s)


def raw_call(port, method, tok):
    """A stock gRPC client (python3-grpcio) opening a bidirectional stream
    with this bearer token and sending nothing: (status name, details), or
    None when grpcio is missing."""
    try:
        import grpc
    except ImportError:
        return None
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.stream_stream(method, request_serializer=None,
                                response_deserializer=None)
        try:
            list(call(iter([]), metadata=[("authorization", "Bearer " + tok)],
                      timeout=10))
            return ("OK", "")
        except grpc.RpcError as e:
            return (e.code().name, e.details() or "")


def case_roles(d):
    t = tokens(d)
    cpf, wpf = f"{d}/roles.cport", f"{d}/roles.wport"
    c = spawn([COORD, "--job", job_file(d), "--listen", "127.0.0.1:0", "--port-file", cpf,
               "--idle-timeout-s", "120", "--worker-token-file", t["worker"],
               "--client-token-file", t["client"], "--admin-token-file", t["admin"]],
              f"{d}/roles.coord.log")
    port = wait_port(cpf, c, timeout=30, or_none=True)
    if not check(port is not None, "roles: coordinator up"):
        return
    w = spawn([WORKER, "--coordinator", f"127.0.0.1:{port}", "--threads", "1",
               "--port-file", wpf, "--token-file", t["worker"],
               "--client-token-file", t["client"]], f"{d}/roles.worker.log")
    wport = wait_port(wpf, w, timeout=30, or_none=True)
    check(wait_log(f"{d}/roles.coord.log", "registered at", c),
          "roles: the worker registered with the worker token")

    rc, out = as_role(t["client"], [TRAIN, "--coordinator", f"127.0.0.1:{port}", "--rank",
                                    "0", "--world-size", "8", "--verify"])
    check(rc == 0 and "verify_failures 0" in out,
          "roles: a rank with the client token verifies its batches (rc %d)" % rc)
    for role in ("admin", "client"):
        rc, out = as_role(t[role], [CLI, "status", "--coordinator", f"127.0.0.1:{port}"])
        check(rc == 0 and "running" in out,
              "roles: stoker status with the %s token (rc %d)" % (role, rc))
    # Status tells the job spec, every worker's address and bad-file paths:
    # a worker-token holder gets none of it, only the job's state (what a
    # data host's launcher waits on)
    rc, out = as_role(t["worker"], [CLI, "status", "--coordinator", f"127.0.0.1:{port}"])
    check(rc == 0 and re.search(r"^state +running", out, re.M) and
          re.search(r"^workers +0 live", out, re.M) and "synthetic" not in out and
          "world_size 8" not in out and f":{wport}" not in out,
          "roles: stoker status with the worker token shows the state alone: " +
          out.strip()[-300:])
    rc, out = as_role(None, [CLI, "status", "--coordinator", f"127.0.0.1:{port}",
                             "--timeout-ms", "3000"])
    check(rc != 0 and "token" in out,
          "roles: stoker status without a token is refused: " + out.strip()[-120:])

    rc, out = as_role(t["worker"], [TRAIN, "--coordinator", f"127.0.0.1:{port}",
                                    "--rank", "1", "--world-size", "8",
                                    "--join-timeout-ms", "3000"])
    check(rc != 0 and "may not call /stoker.v1.Coordinator/Join" in out,
          "roles: a rank with the worker token is refused: " + out.strip()[-160:])
    r = raw_call(port, "/stoker.v1.Coordinator/WorkerSession", token_of(t["client"]))
    if r is None:
        print("skip roles: python3-grpcio missing: raw calls not tried")
    else:
        check(r[0] == "PERMISSION_DENIED" and "WorkerSession" in r[1],
              "roles: a worker session with the client token: %s %s" % r)
        r = raw_call(wport, "/stoker.v1.Worker/Stream", token_of(t["worker"]))
        check(r[0] == "UNAUTHENTICATED",
              "roles: a worker stream with the worker token: %s %s" % r)
        r = raw_call(wport, "/stoker.v1.Worker/Stream", token_of(t["admin"]))
        check(r[0] == "UNAUTHENTICATED",
              "roles: a worker stream with a token the worker does not know: %s" % r[0])
    rc, out = as_role(t["worker"], [CLI, "abort", "--coordinator", f"127.0.0.1:{port}",
                                    "--reason", "rogue"])
    check(rc != 0 and "may not call" in out,
          "roles: stoker abort with the worker token is refused (rc %d)" % rc)

    rogue = spawn([WORKER, "--coordinator", f"127.0.0.1:{port}", "--threads", "1",
                   "--token-file", t["client"], "--orphan-timeout-s", "30"],
                  f"{d}/roles.rogue.log")
    try:
        rrc = rogue.wait(30)
    except Exception:
        rrc = None
    log = open(f"{d}/roles.rogue.log", errors="replace").read()
    check(rrc == EXIT_REJECTED and "may not call" in log,
          "roles: a worker with the client token is rejected (exit %s)" % rrc)

    rc, out = as_role(t["client"], [TRAIN, "--coordinator", f"127.0.0.1:{port}", "--rank",
                                    "2", "--world-size", "8", "--verify"])
    check(rc == 0 and "verify_failures 0" in out,
          "roles: after the refusals a rank still verifies (daemons kept serving)")
    check(c.poll() is None and w.poll() is None, "roles: both daemons still running")
    check(stop(w) == 0 and stop(c) == 0, "roles: daemons exit 0 on SIGTERM")


def case_address(d):
    for tag, extra in (("addr", []), ("trust", ["--trust-worker-addresses"])):
        pf = f"{d}/{tag}.port"
        c = spawn([COORD, "--job", job_file(d), "--listen", "127.0.0.1:0", "--port-file",
                   pf, "--idle-timeout-s", "120", *extra], f"{d}/{tag}.coord.log")
        port = wait_port(pf, c, timeout=30, or_none=True)
        if not check(port is not None, f"{tag}: coordinator up"):
            return
        w = spawn([WORKER, "--coordinator", f"127.0.0.1:{port}", "--threads", "1",
                   "--advertise", "192.0.2.1:5555", "--orphan-timeout-s", "30"],
                  f"{d}/{tag}.worker.log")
        if not extra:
            try:
                rc = w.wait(30)
            except Exception:
                rc = None
            log = open(f"{d}/{tag}.worker.log", errors="replace").read()
            check(rc == EXIT_REJECTED and "advertised address 192.0.2.1:5555" in log and
                  "127.0.0.1" in log and "--trust-worker-addresses" in log,
                  "address: a worker advertising another host is rejected (exit %s)" % rc)
        else:
            check(wait_log(f"{d}/{tag}.coord.log", "registered at 192.0.2.1:5555", c),
                  "address: --trust-worker-addresses accepts it")
            stop(w)
        check(c.poll() is None, f"{tag}: coordinator still running")
        stop(c)


def case_file_modes(d):
    """A token file its group or others can read: the daemon warns (it
    still starts: a Kubernetes Secret volume is 0644 by default); a 0600
    one draws no warning (case_roles' files). Likewise a --config file
    holding `token =`. A token shorter than 16 bytes is warned about."""
    loose = f"{d}/loose.tok"
    with open(loose, "w") as f:
        f.write("loose-secret\n")
    os.chmod(loose, 0o644)
    pf = f"{d}/loose.port"
    c = spawn([COORD, "--job", job_file(d), "--listen", "127.0.0.1:0", "--port-file", pf,
               "--token-file", loose], f"{d}/loose.coord.log")
    check(wait_port(pf, c, timeout=30, or_none=True) is not None,
          "modes: a coordinator with a 0644 token file starts")
    log = open(f"{d}/loose.coord.log", errors="replace").read()
    check("(mode 0644)" in log and "chmod 600" in log,
          "modes: it warns that the token file is readable by others")
    check("can be read or written" not in open(f"{d}/roles.coord.log",
                                               errors="replace").read(),
          "modes: no warning for 0600 token files")
    check("the bearer token is 12 bytes" in log and "openssl rand" in log,
          "modes: it warns that a 12-byte token is short")
    stop(c)
    check("shorter than 16 bytes" not in open(f"{d}/roles.coord.log",
                                              errors="replace").read(),
          "modes: no short-token warning for tokens of 16 bytes or more")

    # A --config file that holds `token =` is a key file too.
    for mode, warned in ((0o644, True), (0o600, False)):
        conf = f"{d}/token-{mode:o}.conf"
        with open(conf, "w") as f:
            f.write("token = config-secret-0123456789abcdef\n")
        os.chmod(conf, mode)
        pf = f"{d}/conf{mode:o}.port"
        clog = f"{d}/conf{mode:o}.coord.log"
        c = spawn([COORD, "--config", conf, "--job", job_file(d), "--listen",
                   "127.0.0.1:0", "--port-file", pf], clog)
        check(wait_port(pf, c, timeout=30, or_none=True) is not None,
              "modes: a coordinator with token = in a %04o --config starts" % mode)
        log = open(clog, errors="replace").read()
        check(("config file (it holds token =) %s" % conf in log and
               "(mode %04o)" % mode in log) == warned,
              "modes: a %04o config file holding the token %s" %
              (mode, "is warned about" if warned else "draws no warning"))
        check("shorter than 16 bytes" not in log, "modes: a 36-byte token is not short")
        stop(c)


def main():
    d = tempfile.mkdtemp(prefix="stoker-roles-test.")
    try:
        case_roles(d)
        case_address(d)
        case_file_modes(d)
    finally:
        reap_all(d)
        shutil.rmtree(d, ignore_errors=True)
    print("%d failure(s)" % len(fails) if fails else "test_roles: all passed")
    return 1 if fails else 0


sys.exit(main())
