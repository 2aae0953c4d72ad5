"""test_metrics.py - the coordinator's /metrics endpoint under an address
that hoards connections, and what an anonymous scrape is told, between
real daemons on loopback (127.0.0.2 and 127.0.0.3 are other addresses of
lo: the endpoint tells them apart).

  limits     a coordinator with --metrics-listen 127.0.0.1:0 and a worker;
             32 connections from 127.0.0.2 that send a request one byte at
             a time and never finish it (so the idle timeout never closes
             them) hold at most 8 of the endpoint's places (the per-address
             limit: the rest are closed at once), and a scrape from
             127.0.0.3 is served meanwhile, the worker named in it (no
             token: a loopback scrape sees what Status shows).
  labels     a coordinator with worker, client and admin tokens: an
             anonymous scrape, and one with the worker token, have the
             worker count but no worker id or address (Status withholds
             them from the worker role); with the client or the admin
             token as `Authorization: Bearer` the per-worker series name
             the worker. The daemon serves on.

Usage: test_metrics.py BIN_DIR TRAIN_LOOP
Exit 0 passed, 1 failed (each failure printed).
"""
import http.client
import os
import select
import shutil
import socket
import sys
import tempfile
import threading
import time

if len(sys.argv) != 3:
    print(__doc__)
    sys.exit(2)
from sec_util import (COORD, WORKER, check, harness, job_file, reap_all,  # noqa: E402
                      spawn, stop, wait_log, wait_port)

HOARD = 32      # connections the hoarding address opens
PER_ADDRESS = 8  # METRICS_MAX_PER_ADDRESS (server/metrics.h)


def scrape(port, source, token=None, timeout=30):
    """(status, body) of GET /metrics from source (an address of lo), or
    (None, why)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                   source_address=(source, 0))
    try:
        c.request("GET", "/metrics",
                  headers={"Authorization": "Bearer " + token} if token else {})
        r = c.getresponse()
        return r.status, r.read().decode(errors="replace")
    except OSError as e:
        return None, repr(e)
    finally:
        c.close()


def metrics_port_of(log, proc):
    if not wait_log(log, "metrics on http://", proc):
        return None
    return harness.metrics_port(open(log, errors="replace").read())


def closed(s):
    """True when the server closed s (readable and at its end)."""
    try:
        r, _, _ = select.select([s], [], [], 0)
        return bool(r) and s.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def start(d, tag, coord_args, worker_args):
    log = f"{d}/{tag}.coord.log"
    pf = f"{d}/{tag}.port"
    c = spawn([COORD, "--job", job_file(d), "--listen", "127.0.0.1:0", "--port-file", pf,
               "--idle-timeout-s", "120", "--metrics-listen", "127.0.0.1:0", *coord_args],
              log)
    port = wait_port(pf, c, timeout=30, or_none=True)
    mport = metrics_port_of(log, c) if port else None
    if not check(port and mport, f"{tag}: coordinator up with /metrics"):
        return None
    w = spawn([WORKER, "--coordinator", f"127.0.0.1:{port}", "--threads", "1",
               *worker_args], f"{d}/{tag}.worker.log")
    check(wait_log(log, "registered at", c), f"{tag}: the worker registered")
    return c, w, mport


def case_limits(d):
    got = start(d, "limits", [], [])
    if not got:
        return
    c, w, mport = got
    hoard = []
    try:
        for _ in range(HOARD):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", mport))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: ")
            hoard.append(s)
        result = {}
        t = threading.Thread(target=lambda: result.update(r=scrape(mport, "127.0.0.3")))
        t.start()
        # Keep the hoard busy (a byte each on every open one, every 200 ms)
        # until the scrape is answered, so none is closed as idle: only the
        # per-address limit can make room.
        end = time.monotonic() + 60
        while t.is_alive() and time.monotonic() < end:
            for s in hoard:
                if not closed(s):
                    try:
                        s.send(b"a", socket.MSG_NOSIGNAL)
                    except OSError:
                        pass
            t.join(0.2)
        t.join()
        status, body = result.get("r", (None, "no answer"))
        check(status == 200 and "stoker_coordinator_live_workers 1" in body,
              "limits: a scrape from 127.0.0.3 is served while 127.0.0.2 holds %d "
              "connections (%s)" % (HOARD, status if status else body[-200:]))
        check('worker="' in body and 'address="' in body,
              "limits: with no token, a loopback scrape names the worker")
        # the surplus was closed on arrival; bounded wait for the last ones
        check(harness.until(lambda: sum(not closed(s) for s in hoard) <= PER_ADDRESS, 30,
                            "limits: 127.0.0.2's surplus connections are closed"),
              "limits: at most %d of 127.0.0.2's connections stay open" % PER_ADDRESS)
        print("limits: %d of %d hoarding connections still open" %
              (sum(not closed(s) for s in hoard), HOARD))
    finally:
        for s in hoard:
            s.close()
    check(c.poll() is None, "limits: the coordinator serves on")
    check(stop(w, 60) is not None and stop(c, 60) is not None, "limits: daemons stopped")


def tokens(d):
    paths = {}
    for role in ("worker", "client", "admin"):
        paths[role] = f"{d}/{role}.tok"
        with open(paths[role], "w") as f:
            f.write(f"{role}-secret-{os.getpid()}-metrics\n")
        os.chmod(paths[role], 0o600)
    return paths


def case_labels(d):
    t = tokens(d)
    got = start(d, "labels", ["--worker-token-file", t["worker"], "--client-token-file",
                              t["client"], "--admin-token-file", t["admin"]],
                ["--token-file", t["worker"]])
    if not got:
        return
    c, w, mport = got
    tok = {r: open(p).read().strip() for r, p in t.items()}
    for who, token in (("no token", None), ("the worker token", tok["worker"]),
                       ("a wrong token", "not-a-token")):
        status, body = scrape(mport, "127.0.0.1", token)
        check(status == 200 and "stoker_coordinator_live_workers 1" in body,
              "labels: a scrape with %s is served, with the worker count (%s)" % (who, status))
        check('worker="' not in body and 'address="' not in body and
              "127.0.0.1:" not in body,
              "labels: a scrape with %s names no worker and no address" % who)
        check("# TYPE stoker_coordinator_worker_suspect gauge" in body,
              "labels: ... and still declares the per-worker families")
    for role in ("client", "admin"):
        status, body = scrape(mport, "127.0.0.1", tok[role])
        check(status == 200 and "stoker_coordinator_worker_suspect{worker=\"" in body and
              'address="127.0.0.1:' in body,
              "labels: a scrape with the %s token names the worker and its address" % role)
    check(c.poll() is None, "labels: the coordinator serves on")
    check(stop(w, 60) is not None and stop(c, 60) is not None, "labels: daemons stopped")


def main():
    d = tempfile.mkdtemp(prefix="stoker-metrics-test.")
    try:
        case_limits(d)
        case_labels(d)
    finally:
        reap_all(d)
        shutil.rmtree(d, ignore_errors=True)
    print("%d failure(s)" % len(harness.fails) if harness.fails else
          "test_metrics: all passed")
    return 1 if harness.fails else 0


sys.exit(main())
