"""test_health.py - grpc.health.v1.Health on both daemons, asked by a stock
gRPC client: Debian's python3-grpcio with message classes that protoc
(protobuf-compiler) generates from proto/health.proto at test time.

  coordinator  Check "" and "stoker.v1.Coordinator" SERVING while it takes
               joins; an unknown name NOT_FOUND; no bearer token needed
               (the coordinator has one), while its own RPCs still demand it.
  worker       Watch "stoker.v1.Worker" from before the worker registers:
               NOT_SERVING, then SERVING once registered with its dataset
               open; after SIGTERM the stream sees NOT_SERVING (drain) or
               ends as the worker exits. Watch of an unknown name gets
               SERVICE_UNKNOWN and stays open.
  coordinator  a Watch ends with OK after its lease (--health-watch-lease-s
               1), so watches without a token cannot hold the table.
  coordinator  a raw HTTP/2 peer flooding PINGs on a connection with no
               calls gets GOAWAY ENHANCE_YOUR_CALM ("too_many_pings") and
               its connection closed; Check still answers on a new one.
  coordinator  when the job ends (stoker abort), Check answers NOT_SERVING
               or the coordinator is gone.

Usage: test_health.py BIN_DIR PROTO_DIR
Exit 0 passed, 1 failed, 77 skipped (no grpcio/protobuf/protoc).
"""
import os
import queue
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails, reap, say_passes, spawn, wait_port  # noqa: E402

BIN, PROTO = sys.argv[1], sys.argv[2]
try:
    import grpc
    import google.protobuf  # noqa: F401
except ImportError as e:
    print("SKIP: %s (apt-get install python3-grpcio python3-protobuf)" % e)
    sys.exit(77)
if not shutil.which("protoc"):
    print("SKIP: protoc is not installed (apt-get install protobuf-compiler)")
    sys.exit(77)
say_passes()  # every check printed, ok or FAIL


def ping_flood(port, pings=20):
    """Open a raw HTTP/2 connection, send the preface, empty SETTINGS and up
    to `pings` PINGs with no call, one at a time: each waits for its ACK
    before the next goes, so nothing of ours is unread at the server when
    it closes the connection (unread bytes would make the kernel reset it,
    and a reset can discard the GOAWAY before we read it). Returns the
    GOAWAY the server answers as (error code, debug text), or None if the
    connection closed (or 30 s passed) without one."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    buf = b""

    def frame():
        """The next frame as (type, flags, body); None at the end."""
        nonlocal buf
        while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
            chunk = s.recv(65536)
            if not chunk:
                return None
            buf += chunk
        n = int.from_bytes(buf[:3], "big")
        f = (buf[3], buf[4], buf[9:9 + n])
        buf = buf[9 + n:]
        return f

    try:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + struct.pack(">I", 0)[1:] +
                  b"\x04\x00\x00\x00\x00\x00")
        for i in range(pings):
            s.sendall(struct.pack(">I", 8)[1:] + b"\x06\x00\x00\x00\x00\x00" +
                      struct.pack(">Q", i))
            while True:
                f = frame()
                if f is None:
                    return None
                ftype, flags, body = f
                if ftype == 7:  # GOAWAY: last stream, error code, debug data
                    return struct.unpack(">I", body[4:8])[0], body[8:].decode(errors="replace")
                if ftype == 6 and flags & 1:  # our PING's ACK: send the next
                    break
        return None
    except (OSError, socket.timeout):
        return None
    finally:
        s.close()


def main():
    d = tempfile.mkdtemp(prefix="stoker-health-test.")
    subprocess.run(["protoc", "--proto_path", PROTO, "--python_out", d,
                    os.path.join(PROTO, "health.proto")], check=True, timeout=60)
    sys.path.insert(0, d)
    import health_pb2 as pb
    S = pb.HealthCheckResponse
    with open(f"{d}/job.txt", "w") as f:
        f.write("source = synthetic\nnum_samples = 64\nheight = 8\nwidth = 8\n"
                "batch_size = 8\nworld_size = 1\nepochs = 1\n")
    with open(f"{d}/token", "w") as f:
        f.write("s3cret\n")
    try:
        c = spawn([f"{BIN}/stoker-coordinator", "--job", f"{d}/job.txt", "--listen",
                   "127.0.0.1:0", "--port-file", f"{d}/cport", "--token-file",
                   f"{d}/token", "--idle-timeout-s", "120", "--health-watch-lease-s", "1"],
                  f"{d}/coord.log")
        cport = wait_port(f"{d}/cport", c, timeout=30)
        ch = grpc.insecure_channel(f"127.0.0.1:{cport}")
        grpc.channel_ready_future(ch).result(timeout=30)
        check_rpc = ch.unary_unary("/grpc.health.v1.Health/Check",
                                   request_serializer=pb.HealthCheckRequest.SerializeToString,
                                   response_deserializer=S.FromString)
        for name in ("", "stoker.v1.Coordinator"):
            r = check_rpc(pb.HealthCheckRequest(service=name), timeout=10)
            check(r.status == S.SERVING, "coordinator Check %r: SERVING without a token" % name)
        try:
            check_rpc(pb.HealthCheckRequest(service="nope"), timeout=10)
            check(False, "coordinator Check of an unknown service is NOT_FOUND")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.NOT_FOUND,
                  "coordinator Check of an unknown service: %s" % e.code())
        cwatch = ch.unary_stream("/grpc.health.v1.Health/Watch",
                                 request_serializer=pb.HealthCheckRequest.SerializeToString,
                                 response_deserializer=S.FromString)
        try:
            got = [m.status for m in cwatch(pb.HealthCheckRequest(service=""), timeout=60)]
            check(got[:1] == [S.SERVING], "coordinator Watch: SERVING, then the lease "
                  "ends the stream with OK (%s)" % got)
        except grpc.RpcError as e:
            check(False, "coordinator Watch ends with OK after its lease (%s: %s)" %
                  (e.code(), e.details()))
        goaway = ping_flood(cport)
        check(goaway is not None and goaway[0] == 11 and "too_many_pings" in goaway[1],
              "a PING flood gets GOAWAY ENHANCE_YOUR_CALM too_many_pings (%s)" % (goaway,))
        r = check_rpc(pb.HealthCheckRequest(service=""), timeout=10)
        check(r.status == S.SERVING, "the coordinator still answers after the flood")
        status_rpc = ch.unary_unary("/stoker.v1.Coordinator/Status",
                                    request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
        try:
            status_rpc(b"", timeout=10)
            check(False, "Status without the token is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAUTHENTICATED,
                  "the coordinator's own RPCs still need the token (%s)" % e.code())

        # The worker: watch from before it registers.
        w = spawn([f"{BIN}/stoker-worker", "--coordinator", f"127.0.0.1:{cport}",
                   "--port-file", f"{d}/wport", "--token-file", f"{d}/token",
                   "--threads", "1"], f"{d}/worker.log")
        wport = wait_port(f"{d}/wport", w, timeout=30)
        wch = grpc.insecure_channel(f"127.0.0.1:{wport}")
        grpc.channel_ready_future(wch).result(timeout=30)
        watch = wch.unary_stream("/grpc.health.v1.Health/Watch",
                                 request_serializer=pb.HealthCheckRequest.SerializeToString,
                                 response_deserializer=S.FromString)
        seen = queue.Queue()

        def follow(it):
            try:
                for m in it:
                    seen.put(m.status)
            except grpc.RpcError as e:
                seen.put(("ended", e.code()))
            seen.put(("ended", None))

        stream = watch(pb.HealthCheckRequest(service="stoker.v1.Worker"), timeout=120)
        threading.Thread(target=follow, args=(stream,), daemon=True).start()
        first = seen.get(timeout=30)
        check(first in (S.NOT_SERVING, S.SERVING),
              "worker Watch: first status %s" % first)
        got = [first]
        while got[-1] != S.SERVING:
            got.append(seen.get(timeout=60))
        check(got[-1] == S.SERVING, "worker Watch: SERVING once registered (%s)" % got)
        unknown = watch(pb.HealthCheckRequest(service="nope"), timeout=30)
        check(next(unknown).status == S.SERVICE_UNKNOWN,
              "worker Watch of an unknown service: SERVICE_UNKNOWN")
        unknown.cancel()

        w.send_signal(signal.SIGTERM)
        rest = []
        while True:
            m = seen.get(timeout=60)
            rest.append(m)
            if isinstance(m, tuple):
                break
        check(S.NOT_SERVING in rest or rest[0][0] == "ended",
              "worker Watch after SIGTERM: %s" % rest)
        check(w.wait(30) == 0, "worker exits 0")

        subprocess.run([f"{BIN}/stoker", "abort", "--coordinator", f"127.0.0.1:{cport}",
                        "--token-file", f"{d}/token", "--reason", "test over"],
                       timeout=60, capture_output=True)
        end = time.monotonic() + 30
        verdict = None
        while time.monotonic() < end:
            try:
                r = check_rpc(pb.HealthCheckRequest(service=""), timeout=5)
                if r.status == S.NOT_SERVING:
                    verdict = "NOT_SERVING"
                    break
            except grpc.RpcError:
                verdict = "gone"
                break
            time.sleep(0.1)
        check(verdict is not None, "coordinator after the job ended: %s" % verdict)
        c.wait(30)
    finally:
        reap(term_s=0)
        if fails:
            for f in ("coord.log", "worker.log"):
                if os.path.exists(f"{d}/{f}"):
                    print("----", f)
                    print("".join(open(f"{d}/{f}").readlines()[-20:]))
        shutil.rmtree(d, ignore_errors=True)
    print("%d failure(s)" % len(fails) if fails else "test_health: passed")
    return 1 if fails else 0


sys.exit(main())
