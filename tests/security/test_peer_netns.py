"""test_peer_netns.py - who a daemon serves, and how it reads its peers,
against real daemons inside a private network namespace the test makes
(`unshare -n`, root only; 77 elsewhere) with 10.200.0.1 and 10.200.0.2,
fd00::1 and fd00::2 on its loopback interface (a connection to one of
them comes from that address: a peer beyond loopback).

  tlsonly   a coordinator with a server certificate and no token
            (--tls-cert/--tls-key only, listening on 0.0.0.0) refuses
            Status and Finish{abort_job} from a TLS peer with no
            credential through 10.200.0.1 (PERMISSION_DENIED, protected
            mode), says so at start naming the flags to add, and stays up:
            the same Status through 127.0.0.1 is served afterwards, and the
            job is not aborted. Its worker (the same TLS options) refuses
            Worker.Stream through 10.200.0.1 the same way. With --insecure
            the same Status is served and the log says INSECURE.
  ipv6      no credential, listening on [::]: Status over ::1 and over
            127.0.0.1 (an IPv4-mapped peer) is served; over fd00::1 and
            10.200.0.1 refused; the log names the refused peer as
            ipv6:[fd00::1]:PORT.
  job6      a coordinator with --token-file on [fd00::1]; a worker with the
            token registers over IPv6 (its advertised [fd00::1]:PORT checked
            against its peer address); one rank (stoker-train-loop
            --verify) runs the job over IPv6; all three exit 0.
  health6   one IPv6 address (fd00::1), over 4 connections, asks for 64
            grpc.health.v1 Watches: only half of the health table is
            granted to it (the rest RESOURCE_EXHAUSTED "from this peer's
            address"), and a Check from fd00::2 is served meanwhile.

Usage: test_peer_netns.py BIN_DIR TRAIN_LOOP STOKER_CERTS
Exit 0 passed, 1 failed (each failure printed), 77 skipped (not root, no
unshare, no python3-grpcio, no openssl, no IPv6 in the namespace).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

if len(sys.argv) != 4:
    print(__doc__)
    sys.exit(2)
CERTS = sys.argv[3]
INSIDE = "STOKER_TEST_IN_NETNS"
V4A, V4B, V6A, V6B = "10.200.0.1", "10.200.0.2", "fd00::1", "fd00::2"

# A stock grpcio client: argv[1] is a JSON list of calls, each
# {"target", "method", "body" (hex), "kind": "unary"|"watches"|"check",
#  "ca" (path, TLS) ...}; prints a JSON list of [code, details] (watches:
# the codes of every watch, and the first "check" after them is done while
# the watches are held).
CLIENT = r"""
import json, sys, grpc
calls = json.loads(sys.argv[1])
out, held = [], []
def chan(c, i=0):
    opts = [("grpc.use_local_subchannel_pool", 1), ("stoker.test.conn", i)]
    if c.get("ca"):
        creds = grpc.ssl_channel_credentials(open(c["ca"], "rb").read())
        return grpc.secure_channel(c["target"], creds, options=opts)
    return grpc.insecure_channel(c["target"], options=opts)
def code(f):
    try:
        f()
        return ["OK", ""]
    except grpc.RpcError as e:
        return [e.code().name, e.details() or ""]
for c in calls:
    body = bytes.fromhex(c.get("body", ""))
    if c["kind"] == "watches":
        res = []
        chans = [chan(c, i) for i in range(c["conns"])]
        for i in range(c["n"]):
            w = chans[i % len(chans)].unary_stream("/grpc.health.v1.Health/Watch")(
                body, timeout=120)
            held.append(w)
            res.append(code(lambda: next(w)))
        out.append(res)
        continue
    ch = chan(c)
    rpc = ch.unary_unary(c["method"])
    out.append(code(lambda: rpc(body, timeout=15)))
    ch.close()
for w in held:
    w.cancel()
print(json.dumps(out))
"""


def enter_namespace():
    """Run this script again inside a new network namespace; its exit code,
    or 77 when one cannot be made here."""
    if os.geteuid() != 0:
        print("SKIP: needs root (it makes a network namespace with unshare -n)")
        return 77
    if not shutil.which("unshare") or not shutil.which("ip"):
        print("SKIP: unshare or ip (iproute2) is not installed")
        return 77
    r = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if r.returncode:
        print("SKIP: 'unshare -n' is not permitted here: %s" % r.stderr.strip())
        return 77
    env = dict(os.environ, **{INSIDE: "1"})
    return subprocess.run(["unshare", "-n", sys.executable, *sys.argv], env=env).returncode


def sh(*args):
    return subprocess.run(args, capture_output=True, text=True)


def setup_addresses():
    """lo up with the test's addresses: (ok, ipv6 ok, reason)."""
    for cmd in (["link", "set", "lo", "up"], ["addr", "add", V4A + "/32", "dev", "lo"],
                ["addr", "add", V4B + "/32", "dev", "lo"]):
        r = sh("ip", *cmd)
        if r.returncode:
            return False, False, "ip %s: %s" % (" ".join(cmd), r.stderr.strip())
    for a in (V6A, V6B):
        r = sh("ip", "-6", "addr", "add", a + "/128", "dev", "lo", "nodad")
        if r.returncode:
            return True, False, "ip -6 addr add %s: %s" % (a, r.stderr.strip())
    return True, True, ""


def main_inside():
    import sec_util as S
    try:
        import grpc  # noqa: F401
    except ImportError:
        print("SKIP: python3-grpcio is not installed")
        return 77
    import protowire as W

    ok, v6, why = setup_addresses()
    if not ok:
        print("SKIP: cannot set up the namespace: " + why)
        return 77
    d = tempfile.mkdtemp(prefix="stoker-peer-netns-")
    skipped = []

    def client(calls):
        code, out = S.run([sys.executable, "-c", CLIENT, json.dumps(calls)], limit_s=120)
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            S.check(False, "the grpcio client ran (exit %d): %s" % (code, out[-800:]))
            return [["", ""]] * len(calls)

    def daemon(tag, args):
        pf = f"{d}/{tag}.port"
        p = S.spawn([*args, "--port-file", pf], f"{d}/{tag}.log")
        return p, S.wait_port(pf, p, timeout=30, or_none=True)

    def log_of(tag):
        return open(f"{d}/{tag}.log", errors="replace").read()

    job = S.job_file(d)
    status = {"method": "/stoker.v1.Coordinator/Status", "kind": "unary"}
    abort = {"method": "/stoker.v1.Coordinator/Finish", "kind": "unary",
             "body": (W.f_varint(1, 0) + W.f_varint(3, 1) +
                      W.f_bytes(4, "peer without credential")).hex()}
    try:
        # ---- tlsonly: server TLS is no caller credential
        if shutil.which("openssl"):
            for args in (["ca", d], ["issue", d, "server", "IP:127.0.0.1", "IP:" + V4A]):
                subprocess.run([CERTS, *args], check=True, stdout=subprocess.DEVNULL,
                               timeout=60)
            tls = ["--tls-cert", f"{d}/server.pem", "--tls-key", f"{d}/server.key"]
            c, port = daemon("tlsonly", [S.COORD, "--job", job, "--listen", "0.0.0.0:0",
                                         "--idle-timeout-s", "120", *tls])
            if S.check(port is not None, "tlsonly: coordinator up"):
                w, wport = daemon("tlsonly.worker",
                                  [S.WORKER, "--coordinator", f"127.0.0.1:{port}", "--listen",
                                   "0.0.0.0:0", "--threads", "1", *tls, "--tls-ca",
                                   f"{d}/ca.pem"])
                S.check(S.wait_log(f"{d}/tlsonly.log", "registered at", c),
                        "tlsonly: the worker registered over loopback TLS")
                ca = {"ca": f"{d}/ca.pem"}
                remote = {"target": f"{V4A}:{port}", **ca}
                got = client([{**status, **remote}, {**abort, **remote},
                              {"target": f"{V4A}:{wport}", "kind": "unary", **ca,
                               "method": "/stoker.v1.Worker/Stream"},
                              {**status, "target": f"127.0.0.1:{port}", **ca}])
                print("tlsonly:", got)
                for i, what in ((0, "Status"), (1, "Finish{abort_job}")):
                    S.check(got[i][0] == "PERMISSION_DENIED" and "protected mode" in got[i][1],
                            "tlsonly: %s over TLS through %s without a credential is "
                            "refused: %s" % (what, V4A, got[i]))
                S.check(got[2][0] == "PERMISSION_DENIED" and "protected mode" in got[2][1],
                        "tlsonly: the worker refuses Worker.Stream through %s: %s" %
                        (V4A, got[2]))
                S.check(got[3][0] == "OK",
                        "tlsonly: Status through 127.0.0.1 is served afterwards: %s" %
                        (got[3],))
                S.check(c.poll() is None and w.poll() is None,
                        "tlsonly: the coordinator and the worker are still up")
                text = log_of("tlsonly")
                S.check("aborted the job" not in text, "tlsonly: the job was not aborted")
                S.check("TLS with a server certificate only" in text and
                        "--tls-require-client-cert" in text and "--token-file" in text,
                        "tlsonly: the coordinator's start warning says so, naming the flags")
                S.check("TLS with a server certificate only" in log_of("tlsonly.worker"),
                        "tlsonly: the worker's start warning says so")
                S.stop(w)
            S.stop(c)
            c, port = daemon("tlsinsecure", [S.COORD, "--job", job, "--listen", "0.0.0.0:0",
                                             "--idle-timeout-s", "120", *tls, "--insecure"])
            if S.check(port is not None, "tlsonly: an --insecure TLS coordinator is up"):
                got = client([{**status, "target": f"{V4A}:{port}", "ca": f"{d}/ca.pem"}])
                S.check(got[0][0] == "OK",
                        "tlsonly: with --insecure, Status through %s is served: %s" %
                        (V4A, got[0]))
                S.check("INSECURE" in log_of("tlsinsecure") and
                        "TLS authenticates only this daemon" in log_of("tlsinsecure"),
                        "tlsonly: an --insecure TLS coordinator says INSECURE at start")
            S.stop(c)
        else:
            skipped.append("tlsonly (no openssl)")

        if not v6:
            skipped.append("ipv6, job6, health6 (%s)" % why)
            raise StopIteration

        # ---- ipv6: protected mode reads IPv6 and IPv4-mapped peers
        c, port = daemon("ipv6", [S.COORD, "--job", job, "--listen", "[::]:0",
                                  "--idle-timeout-s", "120"])
        if S.check(port is not None, "ipv6: coordinator up on [::]"):
            got = client([{**status, "target": f"[::1]:{port}"},
                          {**status, "target": f"127.0.0.1:{port}"},
                          {**status, "target": f"[{V6A}]:{port}"},
                          {**status, "target": f"{V4A}:{port}"}])
            print("ipv6:", got)
            S.check(got[0][0] == "OK", "ipv6: Status over ::1 is served: %s" % (got[0],))
            S.check(got[1][0] == "OK",
                    "ipv6: Status over 127.0.0.1 (an IPv4-mapped peer) is served: %s" %
                    (got[1],))
            S.check(got[2][0] == "PERMISSION_DENIED" and "protected mode" in got[2][1],
                    "ipv6: Status over %s is refused: %s" % (V6A, got[2]))
            S.check(got[3][0] == "PERMISSION_DENIED",
                    "ipv6: Status over %s (IPv4-mapped) is refused: %s" % (V4A, got[3]))
            S.check("refused a call from ipv6:[%s]:" % V6A in log_of("ipv6"),
                    "ipv6: the log names the refused peer as ipv6:[%s]:PORT" % V6A)
        S.stop(c)

        # ---- job6: a worker registers and a job runs over IPv6
        tok = f"{d}/token"
        with open(tok, "w") as f:
            f.write("peer-netns-token-%d-0123456789\n" % os.getpid())
        os.chmod(tok, 0o600)
        job1 = f"{d}/job1.txt"
        with open(job1, "w") as f:
            f.write("source = synthetic\nnum_samples = 256\nheight = 8\nwidth = 8\n"
                    "batch_size = 8\nworld_size = 1\nepochs = 1\nseed = 5\n")
        c, port = daemon("job6", [S.COORD, "--job", job1, "--listen", f"[{V6A}]:0",
                                  "--idle-timeout-s", "120", "--token-file", tok])
        if S.check(port is not None, "job6: coordinator up on [%s]" % V6A):
            w, wport = daemon("job6.worker",
                              [S.WORKER, "--coordinator", f"[{V6A}]:{port}", "--listen",
                               f"[{V6A}]:0", "--threads", "1", "--token-file", tok])
            S.check(S.wait_log(f"{d}/job6.log", "registered at", c),
                    "job6: the worker registered over IPv6 with the token")
            env = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_TOKEN")}
            env["STOKER_TOKEN_FILE"] = tok
            rc, out = S.run(["env", "-i", *[f"{k}={v}" for k, v in env.items()], S.TRAIN,
                             "--coordinator", f"[{V6A}]:{port}", "--rank", "0",
                             "--world-size", "1", "--verify"], limit_s=120)
            S.check(rc == 0 and "verify_failures 0" in out,
                    "job6: the rank verifies every batch over IPv6 (rc %d): %s" %
                    (rc, out.strip()[-300:]))
            crc, wrc = S.harness.wait_exit(c, 60), S.harness.wait_exit(w, 60)
            S.check(crc == 0 and wrc == 0,
                    "job6: the coordinator and the worker exit 0 (%s, %s)" % (crc, wrc))
            S.check("malformed" not in log_of("job6"), "job6: no peer was read as malformed")
        S.stop(c)

        # ---- health6: one IPv6 address cannot take the whole health table
        c, port = daemon("health6", [S.COORD, "--job", job, "--listen", "[::]:0",
                                     "--idle-timeout-s", "120"])
        if S.check(port is not None, "health6: coordinator up"):
            got = client([{"kind": "watches", "target": f"[{V6A}]:{port}", "n": 64,
                           "conns": 4},
                          {"kind": "unary", "target": f"[{V6B}]:{port}",
                           "method": "/grpc.health.v1.Health/Check"}])
            watches, check = got[0], got[1]
            served = sum(1 for x in watches if x[0] == "OK")
            capped = [x for x in watches if x[0] == "RESOURCE_EXHAUSTED"]
            print("health6: %d watches served, %d refused, check %s" %
                  (served, len(capped), check))
            S.check(served == 32 and len(capped) == 32,
                    "health6: %s holds half of the 64-call health table (%d served, "
                    "%d refused)" % (V6A, served, len(capped)))
            S.check(all("from this peer's address" in x[1] for x in capped),
                    "health6: the refusals name the peer's address as the limit")
            S.check(check[0] == "OK",
                    "health6: a Check from %s is served while %s holds its Watches: %s" %
                    (V6B, V6A, check))
            S.check(c.poll() is None, "health6: the coordinator is still up")
        S.stop(c)
    except StopIteration:
        pass
    finally:
        S.reap_all(d)
    if S.fails:
        print("FAILED: %d checks; logs in %s" % (len(S.fails), d))
        return 1
    if skipped:
        print("SKIP (after the rest passed): " + "; ".join(skipped))
        return 77
    shutil.rmtree(d, ignore_errors=True)
    print("peer parsing and server-only TLS in a namespace: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main_inside() if os.environ.get(INSIDE) else enter_namespace())
