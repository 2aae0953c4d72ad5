"""test_tickets.py - per-worker stream tickets with role tokens, between
real daemons, a real training client and stock grpcio peers on loopback.

  rogue     a coordinator with worker, client and admin tokens, two real
            workers holding only the worker token (no --client-token-file).
            A stock grpcio server registers itself as a worker with the
            worker token through a raw WorkerSession and gets a ticket key;
            the Join list gives every worker a distinct ticket
            "<expiry>.<64 hex>", the rogue's one made with its key. Real
            ranks (stoker-train-loop --verify, the client token) verify
            every batch while the rogue is listed, and every authorization
            the rogue receives is a ticket of its own key: never the client
            or the admin token. A worker session that does not check
            tickets is refused. The same id and address registered again
            get another key. A real worker refuses (UNAUTHENTICATED or
            PERMISSION_DENIED) a stream with another worker's ticket, the
            worker, client or admin token, or no token, takes one with its
            own ticket, and keeps serving. No ticket or key appears in any
            daemon's log.
  restart   the coordinator is killed (SIGKILL) mid-job and restarted on
            the same port without a state dir: the workers get new ticket
            keys (their logs show at least two key hashes), and both ranks still
            finish with every batch verified.
  expiry    --ticket-ttl-s 4, workers that end a stream every few batches
            (--fault-transient-every: the client reopens it with the
            ticket it holds): a stock Join's ticket opens a stream, then,
            while the ranks still run, is refused UNAUTHENTICATED as
            expired (the reason says so) while the list's fresh ticket
            opens one; the coordinator is then stopped (SIGSTOP) until the
            workers refuse the ranks' reopened streams as expired, and
            continued: the ranks, which reopen streams all along, take the
            fresh tickets and finish with every batch verified and in
            order.

Usage: test_tickets.py BIN_DIR TRAIN_LOOP
Exit 0 passed, 1 failed (each failure printed), 77 skipped (no grpcio).
"""
import os
import queue
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

if len(sys.argv) != 3:
    print(__doc__)
    sys.exit(2)
try:
    import grpc
    from concurrent import futures
    import hashlib
    import hmac
except ImportError:
    print("skip: python3-grpcio is not installed")
    sys.exit(77)
from sec_util import (COORD, TRAIN, WORKER, check, fails, reap_all, run,  # noqa: E402
                      spawn, stop, wait_port)
import harness  # noqa: E402
from protowire import f_bytes, f_fixed64, f_varint, parse  # noqa: E402

PROTOCOL_VERSION = 1


def hello(wid, addr, job_hash=0, size=0, fp=0, tickets="check"):
    """tickets: "check" (takes_ticket and checks_tickets), "take" (only
    the older takes_ticket), None."""
    info = f_bytes(1, wid) + f_bytes(2, addr) + f_varint(3, 1)
    reg = (f_bytes(1, info) + f_varint(2, PROTOCOL_VERSION) + f_fixed64(3, job_hash) +
           f_varint(4, size) + f_fixed64(5, fp) + (f_varint(8, 1) if tickets else b"") +
           (f_varint(9, 1) if tickets == "check" else b""))
    return f_bytes(1, reg)


TICKET_RE = r"[0-9]{1,20}\.[0-9a-f]{64}"


def ticket_of(key, tk):
    """1 when tk is a ticket of key (rpc/include/rpc/ticket.h): "<expiry>.<hex
    HMAC-SHA256(key, expiry)>"."""
    m = re.fullmatch(r"([0-9]{1,20})\.([0-9a-f]{64})", tk or "")
    return bool(m and key and hmac.compare_digest(
        hmac.new(key.encode(), m.group(1).encode(), hashlib.sha256).hexdigest(),
        m.group(2)))


HEARTBEAT = f_bytes(2, f_bytes(1, b""))


# ---- Tokens, calls ---------------------------------------------------------

def tokens(d):
    t = {}
    for role in ("worker", "client", "admin"):
        path = f"{d}/{role}.tok"
        t[role] = f"{role}-secret-{os.getpid()}"
        with open(path, "w") as f:
            f.write(t[role] + "\n")
        os.chmod(path, 0o600)
        t[role + "_file"] = path
    return t


def role_tokens(t):
    return ["--worker-token-file", t["worker_file"], "--client-token-file",
            t["client_file"], "--admin-token-file", t["admin_file"]]


def client_env(tok):
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_TOKEN")}
    env["STOKER_TOKEN"] = tok
    return env


def md(tok):
    return [("authorization", "Bearer " + tok)] if tok is not None else []


def raw_stream(port, tok):
    """A stock gRPC client opening Worker.Stream with this bearer (None:
    none) and sending nothing: (status name, details)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.stream_stream("/stoker.v1.Worker/Stream", request_serializer=None,
                                response_deserializer=None)
        try:
            list(call(iter([]), metadata=md(tok), timeout=10))
            return ("OK", "")
        except grpc.RpcError as e:
            return (e.code().name, e.details() or "")


def raw_join(port, tok, rank, world):
    """A stock Join: [(worker id, address, ticket)], or (code, details)."""
    req = (f_varint(1, rank) + f_varint(2, world) + f_bytes(3, f"raw-{os.getpid()}") +
           f_varint(4, PROTOCOL_VERSION))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.unary_unary("/stoker.v1.Coordinator/Join", request_serializer=None,
                              response_deserializer=None)
        try:
            resp = parse(call(req, metadata=md(tok), timeout=30))
        except grpc.RpcError as e:
            return (e.code().name, e.details() or "")
    out = []
    for w in resp.get(3, []):
        f = parse(w)
        out.append(tuple(f.get(k, [b""])[0].decode() for k in (1, 2, 4)))
    return out


class Session:
    """A raw Coordinator.WorkerSession (a stock grpcio client): sends what
    is put in q, reads commands on a thread of its own. Ends within
    limit_s whatever happens (the call's deadline)."""

    def __init__(self, port, tok, limit_s=150):
        self.q = queue.Queue()
        self.cmds = queue.Queue()
        self.status = None
        self.ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        call = self.ch.stream_stream("/stoker.v1.Coordinator/WorkerSession",
                                     request_serializer=None, response_deserializer=None)
        self.resp = call(self._gen(), metadata=md(tok), timeout=limit_s)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.beat = None

    def _gen(self):
        while True:
            m = self.q.get()
            if m is None:
                return
            yield m

    def _read(self):
        try:
            for m in self.resp:
                self.cmds.put(m)
            self.status = ("OK", "")
        except grpc.RpcError as e:
            self.status = (e.code().name, e.details() or "")
        self.cmds.put(None)

    def next_cmd(self, timeout=20):
        try:
            return self.cmds.get(timeout=timeout)
        except queue.Empty:
            return None

    def heartbeats(self, interval_s):
        def loop():
            while self.status is None:
                self.q.put(HEARTBEAT)
                time.sleep(interval_s)
        self.beat = threading.Thread(target=loop, daemon=True)
        self.beat.start()

    def close(self):
        self.q.put(None)
        self.resp.cancel()
        self.reader.join(10)
        self.ch.close()


def register(port, tok, wid, addr, size, fp, tickets="check"):
    """Register a raw worker: (session, ticket key) once it is listed, or
    (session, None) with session.status saying why not."""
    s = Session(port, tok)
    s.q.put(hello(wid, addr, tickets=tickets))
    m = s.next_cmd()
    if m is None:
        return s, None
    ack = parse(parse(m).get(1, [b""])[0])
    job = parse(ack.get(1, [b""])[0])
    ticket = ack.get(4, [b""])[0].decode()
    s.q.put(hello(wid, addr, job.get(2, [0])[0], size, fp, tickets))
    s.heartbeats(max(ack.get(2, [1000])[0], 50) / 1000.0)
    time.sleep(0.5)  # a refusal of the second hello ends the call at once
    return s, (ticket if s.status is None else None)


class Rogue:
    """A stock grpcio server posing as a worker: records the authorization
    of every Worker.Stream call and refuses it (UNAVAILABLE)."""

    def __init__(self):
        self.seen = []
        self.mu = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        h = grpc.stream_stream_rpc_method_handler(self._stream)
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("stoker.v1.Worker", {"Stream": h}),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _stream(self, requests, ctx):
        auth = dict(ctx.invocation_metadata()).get("authorization")
        with self.mu:
            self.seen.append(auth)
        ctx.abort(grpc.StatusCode.UNAVAILABLE, "rogue: nothing here")

    def stop(self):
        self.server.stop(0).wait(10)


def count(path, text):
    try:
        return open(path, errors="replace").read().count(text)
    except FileNotFoundError:
        return 0


def job(d, samples, world, name="job"):
    path = f"{d}/{name}.txt"
    with open(path, "w") as f:
        f.write(f"source = synthetic\nnum_samples = {samples}\nheight = 8\nwidth = 8\n"
                f"batch_size = 8\nworld_size = {world}\nepochs = 1\nseed = 5\n")
    return path


def start_workers(d, tag, port, t, n, extra=()):
    ws, ports = [], []
    for i in range(n):
        pf = f"{d}/{tag}.w{i}.port"
        ws.append(spawn([WORKER, "--coordinator", f"127.0.0.1:{port}", "--threads", "1",
                         "--port-file", pf, "--token-file", t["worker_file"],
                         "--orphan-timeout-s", "120", *extra], f"{d}/{tag}.w{i}.log"))
        ports.append(wait_port(pf, ws[-1], timeout=30, or_none=True))
    return ws, ports


def case_rogue(d):
    t = tokens(d)
    cpf, clog = f"{d}/rogue.cport", f"{d}/rogue.coord.log"
    c = spawn([COORD, "--job", job(d, 512, 8), "--listen", "127.0.0.1:0", "--port-file", cpf,
               "--idle-timeout-s", "120", *role_tokens(t)], clog)
    port = wait_port(cpf, c, timeout=30, or_none=True)
    if not check(port is not None, "rogue: coordinator up"):
        return
    ws, wports = start_workers(d, "rogue", port, t, 2)
    if not harness.until(lambda: count(clog, "registered at") >= 2, 30,
                         "rogue: both real workers registered with the worker token"):
        return
    check(all(count(f"{d}/rogue.w{i}.log", "streams take the coordinator's tickets") >= 1
              for i in range(2)), "rogue: each real worker got a stream ticket key")

    # A worker session that does not check tickets (none, or the older
    # fixed ticket) would have clients fall back to the client token, or
    # be refused by it: refused.
    for what, form in (("takes no ticket", None), ("takes only a fixed ticket", "take")):
        s, tk = register(port, t["worker"], "old-1", "127.0.0.1:9", 512, 0, tickets=form)
        check(tk is None and s.status and s.status[0] == "FAILED_PRECONDITION" and
              "ticket" in s.status[1],
              "rogue: a worker session that %s is refused: %s" % (what, s.status))
        s.close()
    # The dataset fingerprint the job learnt from the real workers (a
    # refusal names it), so the rogue passes the dataset check.
    s, tk = register(port, t["worker"], "probe-1", "127.0.0.1:9", 512, 0)
    m = re.search(r"the job's ([0-9a-f]{16})", (s.status or ("", ""))[1])
    s.close()
    if not check(m is not None, "rogue: the fingerprint from a refusal: %s" % (s.status,)):
        return
    fp = int(m.group(1), 16)

    rogue = Rogue()
    try:
        sess, key = register(port, t["worker"], "rogue-1", f"127.0.0.1:{rogue.port}", 512,
                             fp)
        if not check(key is not None and re.fullmatch(r"[0-9a-f]{64}", key or ""),
                     "rogue: a stock server registers with the worker token and gets a "
                     "64-hex ticket key (%s)" % (sess.status,)):
            sess.close()
            return
        lst = raw_join(port, t["client"], 7, 8)
        check(isinstance(lst, list) and len(lst) == 3,
              "rogue: Join lists the two workers and the rogue: %s" % (lst,))
        if not isinstance(lst, list):
            lst = []
        by_addr = {a: tk for _, a, tk in lst}
        tickets = [tk for _, _, tk in lst]
        check(len(set(tickets)) == len(tickets) and
              all(re.fullmatch(TICKET_RE, x) for x in tickets),
              "rogue: every listed worker has its own ticket: %s" % (tickets,))
        ticket = by_addr.get(f"127.0.0.1:{rogue.port}", "")
        check(ticket_of(key, ticket),
              "rogue: the list gives the rogue a ticket made with the key of its ack")
        wt = [by_addr.get(f"127.0.0.1:{p}", "") for p in wports]

        # Streams to a real worker: its own ticket opens one, nothing else.
        r = raw_stream(wports[0], wt[0])
        check(r[0] not in ("UNAUTHENTICATED", "PERMISSION_DENIED"),
              "tickets: a real worker takes its own ticket: %s %s" % r)
        for what, tok in (("the other worker's ticket", wt[1]), ("the rogue's ticket", ticket),
                          ("the worker token", t["worker"]), ("the client token", t["client"]),
                          ("the admin token", t["admin"]), ("no token", None)):
            r = raw_stream(wports[0], tok)
            check(r[0] in ("UNAUTHENTICATED", "PERMISSION_DENIED"),
                  "tickets: a real worker refuses a stream with %s: %s %s" % ((what,) + r))

        # Real ranks with the client token, the rogue listed all along.
        for rank in range(7):
            rc, out = run(["env", "-i", *[f"{k}={v}" for k, v in
                                          client_env(t["client"]).items()],
                           TRAIN, "--coordinator", f"127.0.0.1:{port}", "--rank", str(rank),
                           "--world-size", "8", "--verify", "--join-timeout-ms", "30000"],
                          limit_s=120)
            check(rc == 0 and "verify_failures 0" in out,
                  "rogue: rank %d verifies every batch from the real workers (rc %d)%s" %
                  (rank, rc, "" if rc == 0 else ": " + out.strip()[-300:]))
        with rogue.mu:
            seen = list(rogue.seen)
        check(len(seen) > 0, "rogue: the clients did try the rogue (%d streams)" % len(seen))
        bad = [s for s in seen if not (s.startswith("Bearer ") and ticket_of(key, s[7:]))]
        check(not bad,
              "rogue: every bearer the rogue saw is a ticket of its own key (%d others)" %
              len(bad))
        check(not any(s and (t["client"] in s or t["admin"] in s) for s in seen),
              "rogue: the rogue never saw the client or the admin token")
        check(c.poll() is None and all(w.poll() is None for w in ws),
              "rogue: the coordinator and the workers still run")
        logs = "".join(open(os.path.join(d, n), errors="replace").read()
                       for n in os.listdir(d) if n.startswith("rogue.") and n.endswith(".log"))
        check(not any(x and x in logs for x in tickets + [ticket, key]),
              "tickets: no ticket or ticket key appears in a daemon's log")
        # Another holder of the worker token registering the same id at the
        # same address gets a key of its own: keys are drawn for each
        # registration, not derived from (id, address).
        sess.close()
        sess, key2 = register(port, t["worker"], "rogue-1", f"127.0.0.1:{rogue.port}", 512,
                              fp)
        check(key2 is not None and key2 != key and not ticket_of(key2, ticket),
              "rogue: the same id and address registered again get another ticket key")
        sess.close()
    finally:
        rogue.stop()
    check(all(stop(w) == 0 for w in ws) and stop(c) == 0,
          "rogue: the workers and the coordinator exit 0 on SIGTERM")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def case_restart(d):
    t = tokens(d)
    port = free_port()
    jf = job(d, 2048, 2, "restart-job")
    args = [COORD, "--job", jf, "--listen", f"127.0.0.1:{port}", "--idle-timeout-s", "120",
            *role_tokens(t)]
    c = spawn(args, f"{d}/restart.coord1.log")
    ws, _ = start_workers(d, "restart", port, t, 2)
    if not harness.until(lambda: count(f"{d}/restart.coord1.log", "registered at") >= 2, 30,
                         "restart: both workers registered"):
        return
    env = client_env(t["client"])
    ranks = [harness.spawn([TRAIN, "--coordinator", f"127.0.0.1:{port}", "--rank", str(r),
                            "--world-size", "2", "--verify", "--step-ms", "40", "--progress"],
                           f"{d}/restart.rank{r}.log", group=True, env=env)
             for r in range(2)]
    harness.until(lambda: all(count(f"{d}/restart.rank{r}.log", "step") >= 1
                              for r in range(2)), 30, "restart: both ranks are streaming")
    time.sleep(1.0)
    c.kill()
    c.wait()
    check(all(r.poll() is None for r in ranks), "restart: ranks still running at the kill")
    c = spawn(args, f"{d}/restart.coord2.log")
    harness.until(lambda: count(f"{d}/restart.coord2.log", "registered at") >= 2, 30,
                  "restart: both workers registered again with the new coordinator")

    def hashes(i):
        log = open(f"{d}/restart.w{i}.log", errors="replace").read()
        return set(re.findall(r"coordinator's tickets \(key crc32c ([0-9a-f]{8})\)", log))
    # (at least two: a worker that registers again for any other reason
    # gets another key too)
    check(all(len(hashes(i)) >= 2 for i in range(2)),
          "restart: each worker's ticket key changed with the restart: %s" %
          [sorted(hashes(i)) for i in range(2)])
    for r, p in enumerate(ranks):
        rc = harness.wait_exit(p, 120)
        out = open(f"{d}/restart.rank{r}.log", errors="replace").read()
        check(rc == 0 and "verify_failures 0" in out,
              "restart: rank %d finishes with every batch verified (rc %s)%s" %
              (r, rc, "" if rc == 0 else ": " + out.strip()[-300:]))
    check(all(stop(w, 60) == 0 for w in ws) and stop(c, 60) == 0,
          "restart: the job ends and every daemon exits 0")


def case_expiry(d):
    t = tokens(d)
    cpf, clog = f"{d}/expiry.cport", f"{d}/expiry.coord.log"
    # world 3: ranks 0 and 1 train; rank 2 is this test's stock Join.
    c = spawn([COORD, "--job", job(d, 4096, 3, "expiry-job"), "--listen", "127.0.0.1:0",
               "--port-file", cpf, "--idle-timeout-s", "120", "--ticket-ttl-s", "4",
               *role_tokens(t)], clog)
    port = wait_port(cpf, c, timeout=30, or_none=True)
    if not check(port is not None, "expiry: coordinator up"):
        return
    ws, wports = start_workers(d, "expiry", port, t, 2,
                               ["--fault-transient-every", "3", "--stats-interval-s", "1"])
    if not harness.until(lambda: count(clog, "registered at") >= 2, 30,
                         "expiry: both workers registered"):
        return
    got = {}

    def listed():
        got["l"] = raw_join(port, t["client"], 2, 3)
        return isinstance(got["l"], list) and len(got["l"]) == 2
    harness.until(listed, 30, "expiry: the list holds both workers")
    lst = got["l"]
    if not check(isinstance(lst, list) and len(lst) == 2 and
                 all(re.fullmatch(TICKET_RE, tk) for _, _, tk in lst),
                 "expiry: Join lists both workers with tickets: %s" % (lst,)):
        return
    old = {a: tk for _, a, tk in lst}.get(f"127.0.0.1:{wports[0]}", "")
    r = raw_stream(wports[0], old)
    check(r[0] not in ("UNAUTHENTICATED", "PERMISSION_DENIED"),
          "expiry: a fresh ticket opens a stream: %s %s" % r)
    env = client_env(t["client"])
    # --step-ms 150: each rank takes at least 170 x 0.15 s, several TTLs.
    ranks = [harness.spawn([TRAIN, "--coordinator", f"127.0.0.1:{port}", "--rank", str(r),
                            "--world-size", "3", "--verify", "--step-ms", "150"],
                           f"{d}/expiry.rank{r}.log", group=True, env=env)
             for r in range(2)]

    def refused():
        got["r"] = raw_stream(wports[0], old)
        return got["r"][0] == "UNAUTHENTICATED"
    if harness.until(refused, 90, "expiry: the first ticket is refused once it expired"):
        running = all(p.poll() is None for p in ranks)
        check("ticket expired" in got["r"][1] and "fresh ticket" in got["r"][1],
              "expiry: the refusal says the ticket expired: %s" % (got["r"][1],))
        lst = raw_join(port, t["client"], 2, 3)
        fresh = {a: tk for _, a, tk in lst}.get(f"127.0.0.1:{wports[0]}", "") \
            if isinstance(lst, list) else ""
        check(fresh != old and re.fullmatch(TICKET_RE, fresh or ""),
              "expiry: the list carries another ticket by then")
        r = raw_stream(wports[0], fresh)
        check(r[0] not in ("UNAUTHENTICATED", "PERMISSION_DENIED"),
              "expiry: the list's fresh ticket opens a stream: %s %s" % r)
        check(running, "expiry: the ranks were still running when the first ticket "
              "expired (their streams outlive tickets)")
        # The coordinator stopped (SIGSTOP): no fresh list reaches the
        # ranks, so the tickets they hold expire; the workers refuse the
        # ranks' reopened streams as expired, and once the coordinator
        # goes on the ranks take the list's fresh tickets and finish.
        os.kill(c.pid, signal.SIGSTOP)
        try:
            harness.until(lambda: raw_stream(wports[0], fresh)[0] == "UNAUTHENTICATED", 90,
                          "expiry: the last listed ticket expires while the coordinator "
                          "is stopped")

            def refusals():
                n = 0
                for i in range(2):
                    v = re.findall(r"tickets_expired=([0-9]+)",
                                   open(f"{d}/expiry.w{i}.log", errors="replace").read())
                    n += int(v[-1]) if v else 0
                return n
            base = 1 + 1  # this test's own two refused streams (old, fresh)
            check(harness.until(lambda: refusals() > base, 90,
                                "expiry: the workers refuse a rank's stream as expired"),
                  "expiry: a rank's stream was refused for an expired ticket (%d refusals "
                  "in all)" % refusals())
        finally:
            os.kill(c.pid, signal.SIGCONT)
    for r, p in enumerate(ranks):
        rc = harness.wait_exit(p, 180)
        out = open(f"{d}/expiry.rank{r}.log", errors="replace").read()
        check(rc == 0 and "verify_failures 0" in out,
              "expiry: rank %d gets every batch, verified and in order (rc %s)%s" %
              (r, rc, "" if rc == 0 else ": " + out.strip()[-300:]))
    check(all(stop(w) == 0 for w in ws) and stop(c) == 0,
          "expiry: the workers and the coordinator exit 0 on SIGTERM")


def main():
    d = tempfile.mkdtemp(prefix="stoker-tickets-test.")
    try:
        case_rogue(d)
        case_restart(d)
        case_expiry(d)
    finally:
        reap_all(d)
        shutil.rmtree(d, ignore_errors=True)
    print("%d failure(s)" % len(fails) if fails else "test_tickets: all passed")
    return 1 if fails else 0


sys.exit(main())
