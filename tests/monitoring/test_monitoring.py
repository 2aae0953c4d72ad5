"""test_monitoring.py - deploy/monitoring against real daemons and a real
Prometheus.

One case per run (argv[1]); ctest runs each as its own test:
  rules       `promtool check config` of prometheus.yml, `promtool check
              rules` and `promtool test rules` of the alerting rules, and
              every alert has a test case that expects it to fire
  dashboard   grafana-stoker.json parses, its panels are well formed, and
              every metric it or the rules name is on the /metrics pages
              of a real job (coordinator, two workers, two
              `stoker-train-loop --verify` ranks)
  prometheus  Debian's real `prometheus` on 127.0.0.1 (its own TSDB in a
              temp dir, 1 s intervals) scrapes that job with the shipped
              prometheus.yml (targets pointed at the daemons) and loads
              the shipped rules; through its HTTP API: every target up,
              every series docs/operations.md names present, batches
              rising from scrape to scrape, stall within 0..1, every rule
              evaluated without error and every series it names present,
              nothing firing; each input series of stoker-alerts.test.yml
              has the name and labels of a scraped one; and `promtool test
              rules` passes on a test made of the scraped series themselves
              (quiet at the end of the run, each alert firing on their
              labels once a synthetic tail breaks the job)

Arguments: the source tree's root. Environment (CMakeLists.txt):
STOKER_COORDINATOR_BIN, STOKER_WORKER_BIN, STOKER_CLI_BIN,
STOKER_TRAIN_LOOP_BIN, STOKER_SANITIZED. A case whose program is missing
(promtool, prometheus) exits 77 saying so. Every wait is bounded and polls
a condition; no duration is asserted. Every process is reaped in a
finally block. Standard library only.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402
from harness import check, fails  # noqa: E402

SRC = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else \
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MON = os.path.join(SRC, "deploy", "monitoring")
BIN = {k: os.environ.get(v, "") for k, v in {
    "coord": "STOKER_COORDINATOR_BIN", "worker": "STOKER_WORKER_BIN",
    "cli": "STOKER_CLI_BIN", "loop": "STOKER_TRAIN_LOOP_BIN"}.items()}
SLOW = 3 if os.environ.get("STOKER_SANITIZED") == "1" else 1
WAIT = 60 * SLOW  # every wait's bound: prometheus starts slowly on a busy host

METRIC = re.compile(r"\b((?:stoker|process)_[a-z0-9_]+|up)\b")


def wait_for(pred, what, timeout=WAIT):
    """Poll pred every 100 ms until it returns a true value (returned);
    None and a failed check after timeout seconds."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            check(False, "timed out (%g s) waiting for %s" % (timeout, what))
            return None
        time.sleep(0.1)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def family(name):
    """A histogram sample's family (stoker_worker_build_seconds_bucket ->
    stoker_worker_build_seconds); other names as they are."""
    return re.sub(r"_(bucket|sum|count)$", "", name) if name.startswith(
        "stoker_worker_build_seconds") else name


# ---- the job ---------------------------------------------------------------

class Job:
    """A real job on loopback: a coordinator and two workers, each with
    --metrics-listen 127.0.0.1:0, and two `stoker-train-loop --verify`
    ranks started by ranks(). The ranks exit without Finish, so the job
    (and every /metrics page) stays up until end() says `stoker finish`."""

    WORLD = 2
    SAMPLES, BATCH = 8192, 4
    STEPS = SAMPLES // (BATCH * WORLD)  # batches per rank in the one epoch

    def __init__(self, tmp):
        self.tmp = tmp
        self.cport = None
        self.metrics = {}  # name -> metrics port
        self.ranks_started = False

    def log(self, name):
        try:
            return read(os.path.join(self.tmp, name + ".log"))
        except OSError:
            return ""

    def start(self):
        pf = os.path.join(self.tmp, "coord.port")
        self.coord = harness.spawn(
            [BIN["coord"], "--listen", "127.0.0.1:0", "--port-file", pf,
             "--metrics-listen", "127.0.0.1:0", "--stats-interval-s", "1",
             "--idle-timeout-s", "600", "--set", "num_samples=%d" % self.SAMPLES,
             "--set", "height=16", "--set", "width=16", "--set", "batch_size=%d" % self.BATCH,
             "--set", "world_size=%d" % self.WORLD, "--set", "epochs=1"],
            os.path.join(self.tmp, "coord.log"))
        self.cport = harness.wait_port(pf, self.coord, timeout=WAIT)
        self.workers = []
        for i in range(2):
            self.workers.append(harness.spawn(
                [BIN["worker"], "--coordinator", "127.0.0.1:%d" % self.cport,
                 "--listen", "127.0.0.1:0", "--threads", "1", "--stats-interval-s", "1",
                 "--metrics-listen", "127.0.0.1:0"],
                os.path.join(self.tmp, "worker%d.log" % i)))
        for name in ["coord", "worker0", "worker1"]:
            port = wait_for(lambda: harness.metrics_port(self.log(name)),
                            name + "'s 'metrics on' log line")
            if not port:
                return False
            self.metrics[name] = port
        return bool(wait_for(lambda: self.live_workers() == 2, "both workers registered"))

    def live_workers(self):
        r = subprocess.run([BIN["cli"], "status", "--coordinator", "127.0.0.1:%d" % self.cport,
                            "--json"], capture_output=True, timeout=30 * SLOW)
        try:
            return len(json.loads(r.stdout)["workers"]) if r.returncode == 0 else 0
        except ValueError:
            return 0

    def ranks(self, step_ms):
        """Start both ranks: every batch verified against the reference,
        a step of step_ms, no Finish at their end."""
        self.loops = [harness.spawn(
            [BIN["loop"], "--coordinator", "127.0.0.1:%d" % self.cport, "--rank", str(r),
             "--world-size", str(self.WORLD), "--step-ms", str(step_ms), "--verify",
             "--no-finish"], os.path.join(self.tmp, "rank%d.log" % r))
            for r in range(self.WORLD)]
        self.ranks_started = True

    def end(self):
        """Wait for the ranks (each exits 0 having verified every batch),
        finish them, and wait for both daemons to exit 0."""
        if self.ranks_started:
            for r, p in enumerate(self.loops):
                check(harness.wait_exit(p, 300 * SLOW) == 0,
                      "rank %d verified every batch and exited 0" % r)
        r = subprocess.run([BIN["cli"], "finish", "--coordinator", "127.0.0.1:%d" % self.cport,
                            "--ranks", ",".join(str(r) for r in range(self.WORLD))],
                           capture_output=True, timeout=30 * SLOW)
        check(r.returncode == 0, "stoker finish: rc %d %s" % (r.returncode, r.stderr[-300:]))
        for name, p in [("coordinator", self.coord)] + [
                ("worker %d" % i, w) for i, w in enumerate(self.workers)]:
            check(harness.wait_exit(p, WAIT) == 0, name + " exited 0 at the end of the job")

    def dump(self):
        for name in ["coord", "worker0", "worker1", "rank0", "rank1", "prometheus"]:
            text = self.log(name)
            if text:
                print("---- %s.log (tail) ----\n%s" % (name, text[-2500:]))


def scrape(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            return r.read().decode()
    except OSError:
        return ""


def exposed_names(text):
    """The metric names on a /metrics page (histograms by family too)."""
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            n = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
            names.add(n)
            names.add(family(n))
    return names


# ---- the shipped files -------------------------------------------------------

def alert_names():
    return re.findall(r"^\s*- alert: (\w+)\s*$", read(os.path.join(MON, "stoker-alerts.yml")),
                      re.M)


def dashboard_exprs():
    """Every target expression of grafana-stoker.json, after checking the
    file's shape: JSON, a title and uid, panels with unique ids, a grid
    position, the datasource variable and at least one expression."""
    try:
        d = json.loads(read(os.path.join(MON, "grafana-stoker.json")))
    except ValueError as e:
        check(False, "grafana-stoker.json is not JSON: %s" % e)
        return []
    check(d.get("title") and d.get("uid") and isinstance(d.get("panels"), list) and
          d["panels"], "the dashboard has a title, a uid and panels")
    check(any(v.get("type") == "datasource" and v.get("query") == "prometheus"
              for v in d.get("templating", {}).get("list", [])),
          "the dashboard asks for its Prometheus data source")
    ids, exprs = set(), []
    for p in d.get("panels", []):
        what = "panel %r" % p.get("title")
        check(p.get("id") not in ids, what + ": unique id")
        ids.add(p.get("id"))
        g = p.get("gridPos", {})
        check(all(isinstance(g.get(k), int) for k in "hwxy"), what + ": grid position")
        check(p.get("datasource", {}).get("uid") == "${datasource}",
              what + ": the datasource variable")
        t = [x.get("expr", "") for x in p.get("targets", [])]
        check(t and all(t), what + ": has expressions")
        exprs += t
    return exprs


def rule_exprs():
    """The expr of every rule in stoker-alerts.yml (block scalars)."""
    out, cur = [], None
    for line in read(os.path.join(MON, "stoker-alerts.yml")).splitlines():
        if re.match(r"^\s*expr: \|\s*$", line):
            cur = []
            out.append(cur)
        elif cur is not None and re.match(r"^\s{10}", line):
            cur.append(line.strip())
        else:
            cur = None
    return [" ".join(x) for x in out]


def named_metrics(exprs):
    names = set()
    for e in exprs:
        e = re.sub(r'"[^"]*"', '""', e)  # label values are not names
        names.update(m for m in METRIC.findall(e))
    return names


def case_rules(tmp):
    tool = shutil.which("promtool")
    if not tool:
        print("SKIP: promtool is not installed (Debian: prometheus)")
        return 77
    for args in (["check", "config", "prometheus.yml"], ["check", "rules", "stoker-alerts.yml"],
                 ["test", "rules", "stoker-alerts.test.yml"]):
        r = subprocess.run([tool] + args, cwd=MON, capture_output=True, timeout=120)
        check(r.returncode == 0, "promtool %s: rc %d\n%s" % (
            " ".join(args), r.returncode, (r.stdout + r.stderr).decode()[-3000:]))
    tests = read(os.path.join(MON, "stoker-alerts.test.yml"))
    names = alert_names()
    check(len(names) >= 4, "the rules hold the alerts (%s)" % names)
    for a in names:
        check(re.search(r"alertname: %s\n\s+exp_alerts:\n\s+- exp_labels:" % a, tests),
              "stoker-alerts.test.yml has a case where %s fires" % a)
        check(re.search(r"alertname: %s\n\s+exp_alerts: \[\]" % a, tests),
              "stoker-alerts.test.yml has a case where %s stays quiet" % a)
    return 0


def case_dashboard(tmp):
    exprs = dashboard_exprs()
    want = named_metrics(exprs) | named_metrics(rule_exprs())
    want.discard("up")  # Prometheus makes it, not the daemons
    check(len(want) > 20, "the dashboard and rules name the series (%d)" % len(want))
    job = Job(tmp)
    try:
        if not job.start():
            return 1
        job.ranks(step_ms=2)

        def pages():
            c = scrape(job.metrics["coord"])
            w = [scrape(job.metrics[n]) for n in ("worker0", "worker1")]
            # the per-rank and per-worker series appear once reported
            if all(('stoker_rank_batches_total{rank="%d"}' % r) in c for r in range(2)) and \
                    "stoker_coordinator_worker_suspect{" in c:
                return exposed_names(c) | exposed_names(w[0]) | exposed_names(w[1])
            return None
        have = wait_for(pages, "both ranks and both workers on the coordinator's page")
        if have:
            for n in sorted(want):
                check(n in have, "%s (dashboard or rules) is on a daemon's /metrics page" % n)
        job.end()
    finally:
        harness.reap()
        if fails:
            job.dump()
    return 1 if fails else 0


# ---- prometheus ----------------------------------------------------------------

class Prom:
    """A real prometheus on 127.0.0.1 and its HTTP API."""

    def __init__(self, tmp, job):
        self.tmp, self.job, self.port, self.proc = tmp, job, None, None

    def config(self, targets):
        """The shipped prometheus.yml with 1 s intervals and each job's
        targets replaced (targets: job name -> list of host:port), beside
        a copy of the shipped rules."""
        text = read(os.path.join(MON, "prometheus.yml"))
        text, n = re.subn(r"(?m)^(\s*)(scrape|evaluation)_interval: \S+",
                          r"\1\2_interval: 1s", text)
        check(n == 2, "prometheus.yml sets scrape_interval and evaluation_interval")
        for name, t in targets.items():
            pat = r"(job_name: %s\n(?:.*\n)*?\s*- targets: )\[[^\]]*\]" % re.escape(name)
            text, n = re.subn(pat, lambda m: m.group(1) + json.dumps(t), text, count=1)
            check(n == 1, "prometheus.yml has scrape job %s with static targets" % name)
        with open(os.path.join(self.tmp, "prometheus.yml"), "w") as f:
            f.write(text)
        shutil.copy(os.path.join(MON, "stoker-alerts.yml"), self.tmp)

    def start(self):
        """Start it on a free port (another, up to 3 times, if a port taken
        in between made it exit); True once /-/ready answers."""
        for attempt in range(3):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
            s.close()
            db = os.path.join(self.tmp, "tsdb%d" % attempt)
            self.proc = harness.spawn(
                ["prometheus", "--config.file=" + os.path.join(self.tmp, "prometheus.yml"),
                 "--storage.tsdb.path=" + db, "--web.listen-address=127.0.0.1:%d" % self.port,
                 "--storage.tsdb.retention.time=1h"],
                os.path.join(self.tmp, "prometheus.log"), cwd=self.tmp)

            def ready():
                if self.proc.poll() is not None:
                    return "exited"
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port,
                                                timeout=5) as r:
                        return "ready" if r.status == 200 else None
                except (OSError, urllib.error.HTTPError):
                    return None
            got = wait_for(ready, "prometheus ready on 127.0.0.1:%d" % self.port)
            if got == "ready":
                return True
            if got != "exited" or "address already in use" not in self.job.log("prometheus"):
                return False
        return False

    def api(self, path, **params):
        """GET /api/v1/PATH?params: its data, or None (a failed check) when
        the answer is not a success."""
        q = urllib.parse.urlencode(params, doseq=True)
        url = "http://127.0.0.1:%d/api/v1/%s%s" % (self.port, path, "?" + q if q else "")
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
        except (OSError, ValueError) as e:
            body = {"status": "error", "error": str(e)}
        if body.get("status") != "success":
            check(False, "prometheus %s %r: %s" % (path, params, body.get("error")))
            return None
        return body["data"]

    def query(self, expr):
        """An instant query's result list ([] on error)."""
        d = self.api("query", query=expr)
        return d["result"] if d else []


def docs_metrics():
    """Every metric name docs/operations.md's "Metrics" section names, with
    whether it is a histogram."""
    text = read(os.path.join(SRC, "docs", "operations.md"))
    sec = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    names = {}
    for line in sec.splitlines():
        if line.startswith("| `"):
            cells = line.split("|")
            for n in re.findall(r"`([a-z_]+)(?:\{[^`]*\})?`", cells[1]):
                names[n] = "histogram" in cells[2]
    for n in re.findall(r"`((?:process|stoker)_[a-z_]*[a-z])[`{]", sec):
        names.setdefault(n, False)
    return names


def series_key(s):
    """A series' name and labels as (name, ((label, value), ...))."""
    return s["__name__"], tuple(sorted((k, v) for k, v in s.items() if k != "__name__"))


def test_series():
    """The input series of stoker-alerts.test.yml as {name, label: value}."""
    out = []
    for sel in re.findall(r"- series: '([^']+)'", read(os.path.join(MON, "stoker-alerts.test.yml"))):
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}$", sel)
        d = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        d["__name__"] = m.group(1)
        out.append(d)
    return out


# labels whose values name the hosts and processes of a run
HOST_LABELS = ("instance", "worker", "address")


def case_prometheus(tmp):
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        print("SKIP: prometheus or promtool is not installed (Debian: prometheus)")
        return 77
    job = Job(tmp)
    prom = Prom(tmp, job)
    try:
        if not job.start():
            return 1
        targets = {"stoker-coordinator": ["127.0.0.1:%d" % job.metrics["coord"]],
                   "stoker-worker": ["127.0.0.1:%d" % job.metrics[w]
                                     for w in ("worker0", "worker1")]}
        prom.config(targets)
        if not check(prom.start(), "prometheus started"):
            return 1

        def all_up():
            d = prom.api("targets", state="active")
            t = d["activeTargets"] if d else []
            return len(t) == 3 and all(x["health"] == "up" for x in t) and t
        t = wait_for(all_up, "prometheus scraping all 3 targets (health up)")
        if not t:
            return 1
        for x in t:
            check(x["lastError"] == "" and x["labels"]["job"] in targets,
                  "target %s of %s scraped without error" % (x["scrapeUrl"], x["labels"]["job"]))

        # the ranks train now; the job stays up after them (--no-finish)
        t0 = time.time()
        job.ranks(step_ms=10)
        rising(prom)
        for r, p in enumerate(job.loops):
            check(harness.wait_exit(p, 300 * SLOW) == 0,
                  "rank %d verified every batch and exited 0" % r)
        job.ranks_started = False  # waited for
        # a scrape after the ranks' last report: the counters as they ended
        t_exit = time.time()
        wait_for(lambda: [x for x in prom.query("timestamp(stoker_coordinator_up)")
                          if float(x["value"][1]) > t_exit + 1],
                 "a scrape of the coordinator after the ranks exited")
        got = one_values(prom, "stoker_rank_batches_total")
        check(len(got) == 2 and all(0 < v <= Job.STEPS for v in got),
              "both ranks' batches on the last scrape within 1..%d: %s" % (Job.STEPS, got))

        up = prom.query("up")
        check(len(up) == 3 and all(x["value"][1] == "1" for x in up),
              "up == 1 for every target: %s" % [(x["metric"], x["value"][1]) for x in up])
        one = lambda e: one_values(prom, e)  # noqa: E731
        check(one("stoker_coordinator_live_workers") == [2.0], "the coordinator lists 2 workers")
        check(one('stoker_coordinator_job_state{state="running"}') == [1.0], "the job runs")
        check(one("stoker_worker_serving") == [1.0, 1.0], "both workers serving")
        check(one("stoker_coordinator_world_size") == [2.0] and
              one("stoker_coordinator_ranks_joined") == [2.0], "2 ranks of 2 joined")
        rss = one('process_resident_memory_bytes{job=~"stoker-.*"}')
        check(len(rss) == 3 and rss[0] > 1 << 20, "every daemon's RSS is real: %s" % rss)
        cores = one("stoker_worker_cpu_cores")
        check(len(cores) == 2 and all(0 < c <= os.cpu_count() for c in cores),
              "each worker's usable cores within 0..%d: %s" % (os.cpu_count(), cores))
        busy = one("stoker_worker_busy_fraction") + one("stoker_coordinator_worker_busy_fraction")
        check(len(busy) == 4 and all(b >= 0 for b in busy), "busy fractions >= 0: %s" % busy)
        stall = prom.query("stoker_rank_stall_fraction[10m]")
        vals = [float(v[1]) for s in stall for v in s["values"]]
        check(len(stall) == 2 and vals and all(0 <= v <= 1 for v in vals),
              "every scraped stall fraction of both ranks within 0..1 (%d samples, max %s)"
              % (len(vals), max(vals) if vals else None))

        for n, hist in sorted(docs_metrics().items()):
            got = prom.query('count({__name__="%s"})' % (n + "_count" if hist else n))
            check(got and float(got[0]["value"][1]) > 0,
                  "%s (docs/operations.md) scraped by prometheus" % n)

        check_rules(prom)
        exprs = dashboard_exprs()
        for n in sorted(named_metrics(exprs)):
            check(prom.query('count({__name__="%s"})' % n),
                  "%s (dashboard) scraped by prometheus" % n)
        for e in exprs:
            prom.api("query", query=e)  # a failed check if it does not parse

        real = check_test_series(prom)
        replay(prom, real, t0, tmp)
        job.end()
    finally:
        harness.reap()
        if fails:
            job.dump()
    return 1 if fails else 0


def one_values(prom, expr):
    """An instant query's sample values, sorted."""
    return sorted(float(x["value"][1]) for x in prom.query(expr))


def rising(prom):
    """Batches served rise from scrape to scrape while the ranks train: a
    rank's counter and a worker's built and sent counters each take a
    larger value at a later scrape (raw samples of the range query)."""
    for expr, what in (("stoker_rank_batches_total", "a rank's batches"),
                       ("stoker_worker_batches_built_total", "a worker's batches built"),
                       ("stoker_worker_bytes_sent_total", "a worker's bytes sent")):
        def grown():
            for s in prom.query(expr + "[10m]"):
                v = [float(x[1]) for x in s["values"]]
                if len(set(x for x in v if x > 0)) >= 2:
                    return s
            return None
        s = wait_for(grown, "%s rising between two scrapes" % what)
        if s:
            v = [float(x[1]) for x in s["values"]]
            check(all(a <= b for a, b in zip(v, v[1:])),
                  "%s (%s) never falls from scrape to scrape: %s"
                  % (what, s["metric"].get("instance"), v[-8:]))
            print("%s, scraped: %s" % (what, " ".join("%g" % x for x in v[-8:])))


def check_rules(prom):
    """Every shipped rule is loaded, evaluated by the real Prometheus
    without error, names only series the job has, and nothing fires."""
    names = alert_names()

    def evaluated():
        d = prom.api("rules")
        rules = [r for g in (d or {}).get("groups", []) for r in g["rules"]]
        if len(rules) == len(names) and all(
                not r["lastEvaluation"].startswith("0001") for r in rules):
            return rules
        return None
    rules = wait_for(evaluated, "every rule evaluated")
    for r in rules or []:
        check(r["health"] == "ok" and not r.get("lastError"),
              "rule %s evaluates: %s %s" % (r["name"], r["health"], r.get("lastError", "")))
        for n in sorted(named_metrics([r["query"]])):
            check(prom.query('count({__name__="%s"})' % n),
                  "rule %s's series %s exists" % (r["name"], n))
        prom.api("query", query=r["query"])
    check(sorted(r["name"] for r in rules or []) == sorted(names),
          "the loaded rules are the shipped ones")
    alerts = (prom.api("alerts") or {}).get("alerts", [])
    check(not [a for a in alerts if a["state"] == "firing"],
          "nothing fires in a healthy job: %s" % alerts)


def check_test_series(prom):
    """Each input series of stoker-alerts.test.yml has the name and the
    label names of a scraped series and its label values too, host labels
    aside. Returns the scraped series of the names the rules use."""
    real = prom.api("series", **{"match[]": ['{__name__=~"up|stoker_.*"}']}) or []
    for s in test_series():
        same = [r for r in real if r["__name__"] == s["__name__"] and set(r) == set(s) and
                all(r[k] == v for k, v in s.items() if k not in HOST_LABELS)]
        check(same, "stoker-alerts.test.yml series %s has the name and labels of a scraped one"
              % s)
    used = named_metrics(rule_exprs())
    return [r for r in real if r["__name__"] in used]


def replay(prom, real, t0, tmp):
    """promtool test rules on the scraped series themselves: their values
    at every second of the run (query_range), then a synthetic tail of
    20 minutes in which the job breaks (the first worker down, suspect and
    finding bad samples; rank 0 stalled, waiting for input half its time).
    Quiet at the end of the real part; each alert fires at the end, on
    exactly the scraped labels."""
    t1 = time.time()
    start = int(t0) - 5
    n = int(t1) - start + 1
    tail = 1200
    wkr0 = sorted(r["instance"] for r in real if r["__name__"] == "up" and
                  r["job"] == "stoker-worker")[0]
    sus = [r for r in real if r["__name__"] == "stoker_coordinator_worker_suspect"]
    # the coordinator's view of that worker: the one whose address serves it
    sus0 = sorted(sus, key=lambda r: r["worker"])[0] if sus else None
    lines = []
    for r in real:
        sel = "%s{%s}" % (r["__name__"], ",".join(
            '%s="%s"' % (k, v) for k, v in sorted(r.items()) if k != "__name__"))
        d = prom.api("query_range", query=sel, start=start, end=start + n - 1, step=1)
        pts = {int(float(t)): v for t, v in (d["result"][0]["values"] if d and d["result"]
                                             else [])}
        vals = [pts.get(start + i, "_") for i in range(n)]
        lastv = next((v for v in reversed(vals) if v != "_"), "0")
        name = r["__name__"]
        if name == "stoker_coordinator_job_state":
            t = "%sx%d" % ("1" if r["state"] == "running" else "0", tail)
        elif name == "up":
            t = "%sx%d" % ("0" if r["instance"] == wkr0 else "1", tail)
        elif name == "stoker_coordinator_worker_suspect":
            t = "%sx%d" % ("1" if r is sus0 else "0", tail)
        elif name == "stoker_worker_bad_samples_total":
            up_ = r["instance"] == wkr0 and r["reason"] == "truncated"
            t = "%s+%sx%d" % (lastv, "1" if up_ else "0", tail)
        elif name == "stoker_rank_batches_total":
            t = "%s+%sx%d" % (lastv, "0" if r["rank"] == "0" else "10", tail)
        elif name == "stoker_rank_stall_fraction":
            t = "%sx%d" % ("0.5" if r["rank"] == "0" else "0.01", tail)
        else:
            t = "%sx%d" % (lastv, tail)
        lines.append("      - series: '%s'\n        values: '%s %s'" % (sel, " ".join(vals), t))
    coord = next(r["instance"] for r in real if r["__name__"] == "up" and
                 r["job"] == "stoker-coordinator")
    rules = {r["name"]: r for g in prom.api("rules")["groups"] for r in g["rules"]}

    def alert(name, labels, value=None):
        """An expected alert: the rule's labels and its annotations with
        $labels (and $value | humanizePercentage) filled in."""
        lab = dict(rules[name].get("labels", {}), **labels)
        ann = {}
        for k, v in rules[name]["annotations"].items():
            v = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: lab[m.group(1)], v)
            if value is not None:
                v = v.replace("{{ $value | humanizePercentage }}", value)
            ann[k] = v
        return {"exp_labels": lab, "exp_annotations": ann}
    fire = {
        "StokerInputBound": [alert("StokerInputBound",
                                   {"job": "stoker-coordinator", "instance": coord}, "50%")],
        "StokerWorkerDown": [alert("StokerWorkerDown", {"job": "stoker-worker",
                                                        "instance": wkr0})],
        "StokerWorkerSuspect": [alert("StokerWorkerSuspect", {
            k: v for k, v in sus0.items() if k != "__name__"})] if sus0 else [],
        "StokerBadSamplesRising": [alert("StokerBadSamplesRising", {
            "job": "stoker-worker", "instance": wkr0})],
        "StokerRankStalled": [alert("StokerRankStalled", {
            "job": "stoker-coordinator", "instance": coord, "rank": "0"})],
    }
    check(sorted(fire) == sorted(rules), "the replay expects every rule: %s" % sorted(rules))
    cases = []
    for a in sorted(rules):
        cases.append({"eval_time": "%ds" % (n - 1), "alertname": a, "exp_alerts": []})
        cases.append({"eval_time": "%ds" % (n - 1 + tail), "alertname": a,
                      "exp_alerts": fire.get(a, [])})
    text = ("rule_files:\n  - stoker-alerts.yml\nevaluation_interval: 1s\ntests:\n"
            "  - interval: 1s\n    input_series:\n%s\n    alert_rule_test: %s\n"
            % ("\n".join(lines), json.dumps(cases)))
    path = os.path.join(tmp, "real-run.test.yml")
    with open(path, "w") as f:
        f.write(text)
    r = subprocess.run(["promtool", "test", "rules", path], cwd=tmp, capture_output=True,
                       timeout=300)
    check(r.returncode == 0, "promtool test rules on the run's own series (%d series, %d s "
          "real + %d s tail): rc %d\n%s" % (len(lines), n, tail, r.returncode,
                                           (r.stdout + r.stderr).decode()[-4000:]))
    if r.returncode != 0:
        print(text[:6000])


CASES = {"rules": case_rules, "dashboard": case_dashboard, "prometheus": case_prometheus}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in CASES:
        print("usage: test_monitoring.py %s [SOURCE_DIR]" % "|".join(CASES))
        return 2
    if sys.argv[1] != "rules":
        missing = [k for k, v in BIN.items() if not (v and os.access(v, os.X_OK))]
        if missing:
            print("SKIP: binaries not given: " + ", ".join(missing))
            return 77
    tmp = tempfile.mkdtemp(prefix="stoker-mon-")
    try:
        rc = CASES[sys.argv[1]](tmp)
    finally:
        harness.reap()
        if os.environ.get("STOKER_KEEP_TMP") != "1":
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("kept " + tmp)
    if rc == 77:
        return 77
    rc = 1 if fails or rc else 0
    print("%s: %s" % (sys.argv[1], "FAILED (%d)" % len(fails) if rc else "ok"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
