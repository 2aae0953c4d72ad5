"""test_protected.py - protected mode: a daemon with no token and no TLS
serves only peers on its own host's loopback, unless started --insecure.

Everything runs inside a network namespace made by the test (root only;
77 elsewhere), with a veth pair whose end va holds 10.213.7.1: the
host's non-loopback address. A stock grpcio client in the namespace calls:
  - the coordinator (--listen 0.0.0.0:0, no token, no TLS) through
    10.213.7.1: Status is refused PERMISSION_DENIED saying "protected
    mode", and the coordinator's log names the refused peer; the same call
    through 127.0.0.1 is served; grpc.health.v1 (no credentials by design)
    is served through 10.213.7.1 too;
  - a worker of that coordinator (listening on 0.0.0.0): Worker.Stream
    through 10.213.7.1 is refused the same way;
  - a coordinator started --insecure: Status through 10.213.7.1 is served,
    and its log says INSECURE.
Usage: test_protected.py BIN_DIR TRAIN_LOOP
"""
import json
import os
import subprocess
import sys
import tempfile

import sec_util as S

ADDR = "10.213.7.1"
CLIENT = r"""
import json, sys, grpc
target, wport = sys.argv[1], sys.argv[2]
out = {}
def code(f):
    try:
        f()
        return ["OK", ""]
    except grpc.RpcError as e:
        return [e.code().name, e.details() or ""]
for name, host in (("remote", target), ("loopback", "127.0.0.1")):
    ch = grpc.insecure_channel("%s:%s" % (host, sys.argv[3]))
    status = ch.unary_unary("/stoker.v1.Coordinator/Status")
    out[name] = code(lambda: status(b"", timeout=10))
    ch.close()
ch = grpc.insecure_channel("%s:%s" % (target, sys.argv[3]))
health = ch.unary_unary("/grpc.health.v1.Health/Check")
out["health_remote"] = code(lambda: health(b"", timeout=10))
ch.close()
if wport != "0":
    ch = grpc.insecure_channel("%s:%s" % (target, wport))
    stream = ch.stream_stream("/stoker.v1.Worker/Stream")
    out["worker_remote"] = code(lambda: list(stream(iter([b""]), timeout=10)))
    ch.close()
print(json.dumps(out))
"""


def sh(*args):
    return subprocess.run(args, capture_output=True, text=True)


def main():
    if os.geteuid() != 0:
        print("SKIP: needs root (it makes a network namespace)")
        return 77
    try:
        import grpc  # noqa: F401
    except ImportError:
        print("SKIP: python3-grpcio is not installed")
        return 77
    ns = "stkprot%d" % os.getpid()
    r = sh("ip", "netns", "add", ns)
    if r.returncode:
        print("SKIP: 'ip netns add' is not permitted here: %s" % r.stderr.strip())
        return 77
    d = tempfile.mkdtemp(prefix="stoker-protected-")
    try:
        for cmd in (["link", "set", "lo", "up"],
                    ["link", "add", "va", "type", "veth", "peer", "name", "vb"],
                    ["addr", "add", ADDR + "/24", "dev", "va"], ["link", "set", "va", "up"],
                    ["link", "set", "vb", "up"]):
            r = sh("ip", "-n", ns, *cmd)
            if r.returncode:
                print("SKIP: cannot set up the namespace (%s): %s" % (" ".join(cmd),
                                                                      r.stderr.strip()))
                return 77
        inns = ["ip", "netns", "exec", ns]
        job = S.job_file(d)

        def coordinator(tag, *extra):
            pf = f"{d}/{tag}.port"
            c = S.spawn(inns + [S.COORD, "--job", job, "--listen", "0.0.0.0:0", "--port-file",
                                pf, "--idle-timeout-s", "120", *extra], f"{d}/{tag}.log")
            return c, S.wait_port(pf, c, timeout=30, or_none=True)

        def client(port, wport=0):
            code, out = S.run(inns + [sys.executable, "-c", CLIENT, ADDR, str(wport),
                                      str(port)], limit_s=60)
            try:
                return json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                S.check(False, "the grpcio client ran (exit %d): %s" % (code, out[-800:]))
                return {}

        c, port = coordinator("protected")
        if not S.check(port is not None, "the coordinator is up in the namespace"):
            return 1
        wpf = f"{d}/worker.port"
        w = S.spawn(inns + [S.WORKER, "--coordinator", f"127.0.0.1:{port}", "--listen",
                            "0.0.0.0:0", "--port-file", wpf, "--threads", "1"],
                    f"{d}/worker.log")
        wport = S.wait_port(wpf, w, timeout=30, or_none=True)
        S.check(wport is not None, "the worker is up in the namespace")
        S.check(S.wait_log(f"{d}/protected.log", "registered at", c),
                "the worker registered over loopback")
        got = client(port, wport or 0)
        print("protected:", got)
        rem = got.get("remote", ["", ""])
        S.check(rem[0] == "PERMISSION_DENIED" and "protected mode" in rem[1],
                "Status through %s is refused, saying why: %s" % (ADDR, rem))
        S.check(got.get("loopback", [""])[0] == "OK", "Status through 127.0.0.1 is served")
        S.check(got.get("health_remote", [""])[0] == "OK",
                "grpc.health.v1 is served through %s (no credentials by design)" % ADDR)
        wr = got.get("worker_remote", ["", ""])
        S.check(wr[0] == "PERMISSION_DENIED" and "protected mode" in wr[1],
                "Worker.Stream through %s is refused: %s" % (ADDR, wr))
        log = open(f"{d}/protected.log", errors="replace").read()
        S.check("protected mode: no token and no TLS" in log,
                "the coordinator says at start that it is in protected mode")
        S.check("protected mode: refused a call from ipv4:%s" % ADDR in log,
                "the coordinator's log names the refused peer")
        S.stop(w)
        S.stop(c)

        c2, port2 = coordinator("insecure", "--insecure")
        if S.check(port2 is not None, "an --insecure coordinator is up"):
            got = client(port2)
            print("insecure:", got)
            S.check(got.get("remote", [""])[0] == "OK",
                    "with --insecure, Status through %s is served" % ADDR)
            S.check("INSECURE" in open(f"{d}/insecure.log", errors="replace").read(),
                    "an --insecure coordinator says so in its log")
        S.stop(c2)
    finally:
        S.reap_all(d)
        sh("ip", "netns", "del", ns)
    if S.fails:
        print("FAILED: %d checks; logs in %s" % (len(S.fails), d))
        return 1
    print("protected mode: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
