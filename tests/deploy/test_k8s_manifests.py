"""test_k8s_manifests.py - checks deploy/k8s/*.yaml without a cluster: the
fields the daemons and libstoker need, against the real binaries.

Usage: test_k8s_manifests.py K8S_DIR BINARY...   (each BINARY a path to
stoker-coordinator, stoker-worker, stoker, stoker-train-loop)

Checks: the YAML parses; every container has an image (one image for all),
a command whose program is one of BINARY and whose every --flag (and every
flag of an exec probe) is listed by that program's --help; CPU and memory
requests; a readiness probe on each daemon; the coordinator Service's port
and targetPort match the coordinator container and every address that
dials it (--coordinator, STOKER_COORDINATOR); a worker's --listen and
--advertise ports match its containerPort; --threads equals the CPU
request; volumes mounted exist and every token only ever comes from a
mounted Secret (no --token on a command line); role tokens, a Secret per
role: the coordinator takes the worker and client Secrets, each worker
pod mounts the worker Secret alone (never the client token), the
trainers and the probes use the client Secret; the job spec in the
ConfigMap is accepted by `stoker-coordinator --print-job` and its
world_size equals the training Job's completions, parallelism and
WORLD_SIZE; RANK comes from the completion index of an Indexed Job.
Then a self-test: each edit in MUTATIONS (an unknown flag, a port that
differs, a missing probe or request, a wrong world size, ...) applied to a
copy must make the checks fail.
Exit 0 all good, 1 a check failed (each printed), 77 python3-yaml missing.
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails  # noqa: E402

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml is not installed (scripts/install-deps.sh installs it)")
    sys.exit(77)


def load(k8s_dir):
    docs = []
    for f in sorted(os.listdir(k8s_dir)):
        if f.endswith((".yaml", ".yml")):
            with open(os.path.join(k8s_dir, f)) as fh:
                for d in yaml.safe_load_all(fh):
                    if d:
                        d["_file"] = f
                        docs.append(d)
    return docs


_help = {}


def help_flags(progs, argv):
    """Every --flag that argv's program (and subcommand, for `stoker
    status`) lists in its --help."""
    prog = os.path.basename(argv[0])
    cmd = [progs[prog]]
    if prog == "stoker" and len(argv) > 1 and not argv[1].startswith("-"):
        cmd.append(argv[1])  # `stoker status --help` lists status's options
    key = tuple(cmd)
    if key not in _help:
        r = subprocess.run(cmd + ["--help"], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "%s --help exits 0 (got %d)" % (" ".join(cmd), r.returncode))
        _help[key] = set(re.findall(r"--([a-z][a-z0-9-]*)", r.stdout + r.stderr))
    return _help[key]


def flags_of(argv):
    return [a[2:].split("=", 1)[0] for a in argv if a.startswith("--")]


def opt(argv, name):
    """Value of --name in argv (either --name v or --name=v), else None."""
    for i, a in enumerate(argv):
        if a == "--" + name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--" + name + "="):
            return a.split("=", 1)[1]
    return None


def port_of(addr):
    return int(addr.rsplit(":", 1)[1])


def cpu(q):
    q = str(q)
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def pod_spec(d):
    if d["kind"] in ("Job", "Deployment", "StatefulSet", "DaemonSet"):
        return d["spec"]["template"]["spec"], d["spec"]["template"]["metadata"]
    if d["kind"] == "Pod":
        return d["spec"], d["metadata"]
    return None, None


# Self-test: each of these edits must make the checks fail.
MUTATIONS = [
    ("workers.yaml", "- --threads", "- --thread-count"),
    ("coordinator.yaml", "containerPort: 7070", "containerPort: 7071"),
    ("coordinator.yaml", "- --timeout-ms", "- --timeout"),
    ("workers.yaml", "grpc: {port: 7071, service", "grpc: {port: 7072, service"),
    ("workers.yaml", "service: stoker.v1.Worker}", "service: stoker.v1.Coordinator}"),
    ("coordinator.yaml", "service: stoker.v1.Coordinator}", "service: stoker.Coordinator}"),
    ("workers.yaml", "readinessProbe:\n            grpc:", "x-probe:\n            grpc:"),
    ("workers.yaml", 'cpu: "16", memory: 16Gi', "memory: 16Gi"),
    ("workers.yaml", '- "16"', '- "8"'),
    ("train.yaml", 'value: "2"', 'value: "3"'),
    ("train.yaml", "value: stoker-coordinator:7070", "value: stoker-coord:7070"),
    ("train.yaml", "- --token-file", "- --token"),
    ("train.yaml", "completionMode: Indexed", "completionMode: NonIndexed"),
    ("job-config.yaml", "batch_size = 256", "batch_size = x"),
    ("workers.yaml", "image: registry.example.com/stoker:0.1.0", "image: other:1"),
    ("workers.yaml", "- stoker-worker", "- stoker-wrker"),
    ("workers.yaml", "secretName: stoker-worker-token", "secretName: stoker-client-token"),
    ("workers.yaml", "secret: {secretName: stoker-worker-token, defaultMode: 0400}",
     "secret: {secretName: stoker-worker-token, defaultMode: 0400}\n        - name: c\n"
     "          secret: {secretName: stoker-client-token}"),
    ("train.yaml", "secretName: stoker-client-token", "secretName: stoker-worker-token"),
    ("coordinator.yaml", "- --client-token-file", "- --token-file"),
    ("coordinator.yaml", "/etc/stoker/client-token/token\n            - --listen",
     "/etc/stoker/worker-token/token\n            - --listen"),
]


# the options that name a token file
TOKEN_FLAGS = ("token-file", "worker-token-file", "client-token-file", "admin-token-file")


def secret_of(path, mounts, volumes):
    """The name of the Secret whose mount holds path, else None."""
    for mp, name in mounts.items():
        v = volumes.get(name, {})
        if path and "secret" in v and path.startswith(mp.rstrip("/") + "/"):
            return v["secret"]["secretName"]
    return None


def check_role_secrets(secrets):
    """Role tokens, a Secret per role: the coordinator takes the worker and
    the client Secrets (distinct); each worker's token is the worker Secret
    and its pod mounts no other role's Secret (a data pod never holds the
    client token); the trainers' and the probes' token is the client (or
    admin) Secret. secrets: {container: (program, {flag: Secret}, Secrets
    its pod mounts)}."""
    coord = [t for p, t, _ in secrets.values() if p == "stoker-coordinator"]
    if not check(coord and coord[0].get("worker-token-file") and
                 coord[0].get("client-token-file"),
                 "the coordinator takes role tokens (--worker-token-file and "
                 "--client-token-file from Secrets)"):
        return
    w, c, a = (coord[0].get(f) for f in ("worker-token-file", "client-token-file",
                                         "admin-token-file"))
    check(len({w, c, a} - {None}) == len([x for x in (w, c, a) if x]),
          "one Secret per role (worker %s, client %s, admin %s)" % (w, c, a))
    for cw, (prog, toks, mounted) in secrets.items():
        if prog == "stoker-worker":
            check(toks == {"token-file": w}, "%s: its token is the worker Secret %s (%s)"
                  % (cw, w, toks))
            check(not mounted & {c, a}, "%s: its pod mounts no client or admin Secret (%s)"
                  % (cw, ", ".join(sorted(mounted))))
        elif prog in ("stoker-train-loop", "probe"):
            check(toks.get("token-file") in (c, a) and len(toks) == 1,
                  "%s: its token is the client Secret %s (%s)" % (cw, c, toks))


# grpc.health.v1 service name each daemon answers for (besides "")
HEALTH_SERVICE = {"stoker-coordinator": "stoker.v1.Coordinator",
                  "stoker-worker": "stoker.v1.Worker"}


def check_probe(cw, prog, probe, progs, ports):
    """An exec probe runs a stoker binary with flags its --help lists; a
    tcpSocket probe names a containerPort; a grpc probe a numeric
    containerPort (Kubernetes takes no name there) and the daemon's own
    grpc.health.v1 service."""
    if not probe:
        return
    if "exec" in probe:
        pargv = probe["exec"]["command"]
        pprog = os.path.basename(pargv[0])
        if check(pprog in progs, cw + ": probe program %s is a stoker binary" % pprog):
            known = help_flags(progs, pargv)
            for f in flags_of(pargv[1:]):
                check(f in known, cw + ": probe: %s has no --%s" % (pprog, f))
    if "tcpSocket" in probe:
        p = probe["tcpSocket"]["port"]
        check(p in ports or p in ports.values(), cw + ": probe port %s is a containerPort" % p)
    if "grpc" in probe:
        p, svc = probe["grpc"].get("port"), probe["grpc"].get("service", "")
        check(isinstance(p, int) and p in ports.values(),
              cw + ": grpc probe port %s is a numeric containerPort" % p)
        check(svc in ("", HEALTH_SERVICE.get(prog)),
              cw + ": grpc probe service %r is what %s answers for" % (svc, prog))

def self_test(k8s_dir, binaries):
    import shutil
    bad = 0
    for f, old, new in MUTATIONS:
        with tempfile.TemporaryDirectory() as d:
            for n in os.listdir(k8s_dir):
                if n.endswith(".yaml"):
                    shutil.copy(os.path.join(k8s_dir, n), d)
            path = os.path.join(d, f)
            text = open(path).read()
            if old not in text:
                print("SELF-TEST: %s no longer contains %r: update MUTATIONS" % (f, old))
                bad += 1
                continue
            open(path, "w").write(text.replace(old, new, 1))
            fails.clear()
            out = sys.stdout
            sys.stdout = open(os.devnull, "w")
            try:
                rc = check_dir(d, binaries)
            finally:
                sys.stdout.close()
                sys.stdout = out
            ok = rc != 0 and fails
            print("self-test %-16s %-40r -> %s" % (f, new[:40], "caught: " + fails[0]
                                                   if ok else "NOT CAUGHT"))
            bad += 0 if ok else 1
    fails.clear()
    return bad


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    rc = check_dir(sys.argv[1], sys.argv[2:])
    if rc:
        return rc
    return 1 if self_test(sys.argv[1], sys.argv[2:]) else 0


def check_dir(k8s_dir, binaries):
    """Run every check on the manifests in k8s_dir; 0 if all pass."""
    try:
        return check_docs(k8s_dir, binaries)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, StopIteration,
            yaml.YAMLError) as e:
        check(False, "malformed manifest (a field the checks need is missing or of the "
              "wrong type): %s: %s" % (type(e).__name__, e))
        return 1


def check_docs(k8s_dir, binaries):
    progs = {os.path.basename(b): b for b in binaries}
    docs = load(k8s_dir)
    kinds = [(d["_file"], d["kind"], d["metadata"]["name"]) for d in docs]
    print("manifests:", ", ".join("%s %s/%s" % k for k in kinds))
    for d in docs:
        check(d.get("apiVersion") and d.get("kind") and d.get("metadata", {}).get("name"),
              "%s: apiVersion, kind and metadata.name" % d["_file"])

    services = [d for d in docs if d["kind"] == "Service"]
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    images, coord_addrs, roles, secrets = set(), [], {}, {}
    for d in docs:
        spec, meta = pod_spec(d)
        if spec is None:
            continue
        where = "%s %s/%s" % (d["_file"], d["kind"], d["metadata"]["name"])
        if d["kind"] == "Job":
            check(spec.get("restartPolicy") in ("Never", "OnFailure"),
                  "%s: restartPolicy Never or OnFailure" % where)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            cw = "%s container %s" % (where, c["name"])
            argv = list(c.get("command", [])) + list(c.get("args", []))
            check(c.get("image"), cw + ": image set")
            images.add(c.get("image"))
            if not check(argv, cw + ": has a command"):
                continue
            prog = os.path.basename(argv[0])
            if not check(prog in progs, cw + ": program %s is a stoker binary" % prog):
                continue
            roles.setdefault(prog, []).append((d, spec, meta, c, argv))
            known = help_flags(progs, argv)
            for f in flags_of(argv[1:]):
                check(f in known, cw + ": %s has no --%s (see its --help)" % (prog, f))
            check("token" not in flags_of(argv[1:]),
                  cw + ": no --token on the command line (use the mounted Secret)")
            req = c.get("resources", {}).get("requests", {})
            check("cpu" in req and "memory" in req, cw + ": cpu and memory requests")
            probe = c.get("readinessProbe")
            if prog in ("stoker-coordinator", "stoker-worker"):
                check(probe, cw + ": readinessProbe")
            ports = {cp.get("name"): cp["containerPort"] for cp in c.get("ports", [])}
            for kind in ("readinessProbe", "livenessProbe"):
                check_probe(cw, prog, c.get(kind), progs, ports)
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            for path, name in mounts.items():
                check(name in volumes, cw + ": volume %s is defined" % name)
            # files the command reads must lie under a mount
            for f in ("config", "job") + TOKEN_FLAGS:
                v = opt(argv, f)
                if v:
                    check(any(v.startswith(p.rstrip("/") + "/") for p in mounts),
                          cw + ": --%s %s is under a mounted volume" % (f, v))
            toks = {f: secret_of(opt(argv, f), mounts, volumes) for f in TOKEN_FLAGS
                    if opt(argv, f)}
            check(toks and all(toks.values()),
                  cw + ": every token comes from a mounted Secret (%s)" %
                  (", ".join("--%s" % f for f in toks) or "no token option"))
            secrets[cw] = (prog, toks, {v["secret"]["secretName"] for v in volumes.values()
                                        if "secret" in v})
            for kind in ("readinessProbe", "livenessProbe"):
                pargv = (c.get(kind) or {}).get("exec", {}).get("command")
                if pargv and opt(pargv, "token-file"):
                    secrets[cw + " " + kind] = (
                        "probe", {"token-file": secret_of(opt(pargv, "token-file"), mounts,
                                                          volumes)}, set())
            for v in volumes.values():
                if "configMap" in v:
                    check(v["configMap"]["name"] in configmaps,
                          cw + ": ConfigMap %s is in the manifests" % v["configMap"]["name"])
            env = {e["name"]: e for e in c.get("env", [])}
            if "STOKER_COORDINATOR" in env:
                coord_addrs.append((cw, env["STOKER_COORDINATOR"]["value"]))
            if opt(argv, "coordinator") and prog != "stoker":
                coord_addrs.append((cw, opt(argv, "coordinator")))
    check(len(images) == 1, "one image for every container (got %s)" % sorted(images))
    for prog in ("stoker-coordinator", "stoker-worker"):
        check(prog in roles, "a %s container" % prog)
    if fails:
        return 1
    check_role_secrets(secrets)

    # the coordinator: its Service, listen port, and every address dialling it
    (cd, cspec, cmeta, cc, cargv) = roles["stoker-coordinator"][0]
    clabels = cmeta.get("labels", {})
    svc = [s for s in services
           if all(clabels.get(k) == v for k, v in s["spec"]["selector"].items())]
    if check(len(svc) == 1, "exactly one Service selects the coordinator pod"):
        sp = svc[0]["spec"]["ports"][0]
        cports = {p.get("name"): p["containerPort"] for p in cc.get("ports", [])}
        tp = sp.get("targetPort", sp["port"])
        target = cports.get(tp, tp)
        listen = port_of(opt(cargv, "listen"))
        check(target == listen and listen in cports.values(),
              "Service targetPort %s = coordinator --listen port %d = a containerPort"
              % (tp, listen))
        check(opt(cargv, "listen").startswith("0.0.0.0:"),
              "the coordinator listens on all addresses (pods dial it)")
        want = "%s:%d" % (svc[0]["metadata"]["name"], sp["port"])
        for cw, addr in coord_addrs:
            check(addr == want, "%s dials %s (the Service is %s)" % (cw, addr, want))
        probe = cc["readinessProbe"].get("exec", {}).get("command")
        if probe:
            check(port_of(opt(probe, "coordinator")) == listen,
                  "the coordinator probe asks its own port")

    # the job spec: accepted by the coordinator, world_size consistent
    jobf = opt(cargv, "job")
    vol = {m["mountPath"]: m["name"] for m in cc["volumeMounts"]}
    vname = vol.get(os.path.dirname(jobf))
    cm = next(v["configMap"]["name"] for v in cspec["volumes"] if v["name"] == vname)
    text = configmaps[cm]["data"][os.path.basename(jobf)]
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as tf:
        tf.write(text)
        tf.flush()
        r = subprocess.run([progs["stoker-coordinator"], "--job", tf.name, "--print-job"],
                           capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "the ConfigMap's job spec is valid: %s" % r.stderr.strip())
    world = int(re.search(r"^world_size = (\d+)", text, re.M).group(1))

    # workers: ports and threads
    for (d, spec, meta, c, argv) in roles["stoker-worker"]:
        cports = [p["containerPort"] for p in c.get("ports", [])]
        lp, ap = port_of(opt(argv, "listen")), port_of(opt(argv, "advertise"))
        check(lp == ap and lp in cports,
              "worker --listen port %d = --advertise port %d = a containerPort" % (lp, ap))
        check(opt(argv, "advertise").startswith("$(POD_IP)") and
              c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP",
              "worker advertises its pod IP")
        check(opt(argv, "data-root") is not None, "worker --data-root set")
        check(int(opt(argv, "threads") or 0) == cpu(c["resources"]["requests"]["cpu"]),
              "worker --threads equals its CPU request")

    # training ranks: an Indexed Job, RANK from the completion index
    trains = [r for p in ("stoker-train-loop",) for r in roles.get(p, [])]
    if check(trains, "a training Job"):
        (d, spec, meta, c, argv) = trains[0]
        js = d["spec"]
        env = {e["name"]: e for e in c.get("env", [])}
        check(js.get("completionMode") == "Indexed", "training Job is Indexed")
        check(js.get("completions") == js.get("parallelism") == world ==
              int(env["WORLD_SIZE"]["value"]),
              "completions = parallelism = WORLD_SIZE = job world_size (%d)" % world)
        fp = env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
        check("job-completion-index" in fp, "RANK from the completion index (%s)" % fp)
        check(c["resources"].get("limits", {}).get("nvidia.com/gpu"),
              "training pods ask for a GPU")
    print("FAILED: %d" % len(fails) if fails else
          "k8s manifests: all checks passed (%d documents)" % len(docs))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
