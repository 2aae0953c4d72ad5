"""test_sagemaker_files.py - checks deploy/sagemaker without AWS.

Usage: test_sagemaker_files.py SAGEMAKER_DIR STOKER_COORDINATOR [STOKER_LAUNCH]

entry.sh passes `sh -n` and runs under sh with a stand-in stoker-launch on
PATH (recording its arguments): it execs stoker-launch --backend sagemaker
with job.conf, the group names of estimator.py, one process per GPU
(SM_NUM_GPUS, at least 1) and `--` before the training command, which
gets the hyperparameter arguments but not the stoker_ ones (the
launcher's, read from hyperparameters.json). estimator.py is parsed
(python ast) and checked against the SageMaker Python SDK's signatures:
InstanceGroup(instance_group_name, instance_type, instance_count), the
estimator's instance_groups=[...] without instance_type/instance_count,
TrainingInput(s3_data, ..., instance_groups=[group names]) naming
defined groups (the data group, never the dnn group), a distribution's
instance_groups (if any) bound InstanceGroup objects, the group names
entry.sh passes, and instance types that deploy/instances.tsv prices;
job.conf passes `stoker-coordinator --print-job` and names the channel
the estimator sends; and, if STOKER_LAUNCH exists, every option entry.sh
passes is in its --help (else that part is skipped with a message). The
Dockerfile is not built here.
Exit 0 all good, 1 a check failed (each printed).
"""
import ast
import os
import py_compile
import re
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, fails  # noqa: E402


SDK = {
    # sagemaker.instance_group.InstanceGroup.__init__
    "InstanceGroup": ["instance_group_name", "instance_type", "instance_count"],
    # sagemaker.inputs.TrainingInput.__init__
    "TrainingInput": ["s3_data", "distribution", "compression", "content_type",
                      "record_wrapping", "s3_data_type", "instance_groups", "input_mode",
                      "attribute_names", "target_attribute_name", "shuffle_config"],
}
IMPORTS = {"InstanceGroup": "sagemaker.instance_group", "TrainingInput": "sagemaker.inputs"}


def call_name(node):
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def bind_args(node, params):
    """{parameter: AST node} of a call, as Python would bind it; None (and
    a failed check) for too many positionals, unknown or doubled keywords."""
    name = call_name(node)
    if not check(len(node.args) <= len(params), "%s(...) line %d: at most %d positional "
                 "arguments (%s)" % (name, node.lineno, len(params), ", ".join(params))):
        return None
    bound = dict(zip(params, node.args))
    for kw in node.keywords:
        if not check(kw.arg in params and kw.arg not in bound,
                     "%s(...) line %d: keyword %s is one of the SDK's (%s), given once" %
                     (name, node.lineno, kw.arg, ", ".join(params))):
            return None
        bound[kw.arg] = kw.value
    return bound


def check_estimator(path, instances_tsv):
    """Parse estimator.py and check it against the SDK's signatures.
    Returns {"data": name, "dnn": name, "channels": {channel: groups}}."""
    tree = ast.parse(open(path).read(), path)
    # argparse defaults: a.NAME -> its literal default
    defaults = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and call_name(n) == "add_argument" and n.args and \
                isinstance(n.args[0], ast.Constant):
            dest = n.args[0].value.lstrip("-").replace("-", "_")
            for kw in n.keywords:
                if kw.arg == "default" and isinstance(kw.value, ast.Constant):
                    defaults[dest] = kw.value.value

    def value(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return defaults.get(node.attr)
        return None

    for name, mod in IMPORTS.items():
        check(any(isinstance(n, ast.ImportFrom) and n.module == mod and
                  any(a.name == name for a in n.names) for n in ast.walk(tree)),
              "estimator.py: from %s import %s" % (mod, name))
    # variable -> its InstanceGroup (name, type, count)
    groups = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and \
                call_name(n.value) == "InstanceGroup" and len(n.targets) == 1 and \
                isinstance(n.targets[0], ast.Name):
            b = bind_args(n.value, SDK["InstanceGroup"])
            if b is None:
                continue
            g = tuple(value(b.get(k)) for k in SDK["InstanceGroup"])
            check(all(k in b for k in SDK["InstanceGroup"]) and isinstance(g[0], str) and
                  isinstance(g[1], str) and isinstance(g[2], int) and g[2] >= 1,
                  "InstanceGroup %s: name, type and count given (%s)" % (n.targets[0].id, g))
            groups[n.targets[0].id] = g
    names = {g[0]: v for v, g in groups.items()}
    check(set(names) == {"data_group", "dnn_group"},
          "estimator: two instance groups, data_group and dnn_group (%s)" % sorted(names))
    data = names.get("data_group") and groups[names["data_group"]]
    dnn = names.get("dnn_group") and groups[names["dnn_group"]]
    check(bool(data) and data[1].startswith("ml.c5"),
          "data_group is of CPU (ml.c5) instances (%s)" % (data and data[1]))
    check(bool(dnn) and (dnn[1].startswith("ml.p") or dnn[1].startswith("ml.trn")),
          "dnn_group is of accelerator (ml.p*/ml.trn*) instances (%s)" % (dnn and dnn[1]))
    try:
        known = {line.split()[0] for line in open(instances_tsv)
                 if line.strip() and not line.startswith("#")}
        for g in (data, dnn):
            if g:
                check(g[1] in known, "%s's type %s is in %s" % (g[0], g[1], instances_tsv))
    except OSError:
        print("note: %s not found: instance types not checked against it" % instances_tsv)
    # the estimator: the call with instance_groups=
    ests = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and
            any(k.arg == "instance_groups" for k in n.keywords) and
            call_name(n) != "TrainingInput"]
    if check(len(ests) == 1, "one estimator with instance_groups=[...] (%d)" % len(ests)):
        e = ests[0]
        kw = {k.arg: k.value for k in e.keywords}
        ig = kw["instance_groups"]
        check(isinstance(ig, ast.List) and sorted(x.id for x in ig.elts
                                                  if isinstance(x, ast.Name)) ==
              sorted(groups), "instance_groups=[...] lists the InstanceGroup objects")
        check("instance_type" not in kw and "instance_count" not in kw,
              "no instance_type/instance_count beside instance_groups (the SDK refuses both)")
        check(value(kw.get("entry_point")) == "entry.sh", "the entry point is entry.sh")
        check("image_uri" in kw or ("framework_version" in kw and "py_version" in kw),
              "image_uri given (else framework_version and py_version are required)")
        if "distribution" in kw:
            d = kw["distribution"]
            ok = isinstance(d, ast.Dict) and any(
                isinstance(k, ast.Constant) and k.value == "instance_groups" and
                isinstance(v, ast.List) and all(isinstance(x, ast.Name) and x.id in groups
                                                for x in v.elts)
                for k, v in zip(d.keys, d.values))
            check(ok, "distribution names its instance_groups as InstanceGroup objects")
        hp = kw.get("hyperparameters")
        if isinstance(hp, ast.Dict):
            for k in hp.keys:
                if isinstance(k, ast.Constant) and str(k.value).startswith("stoker_"):
                    check(str(k.value)[7:] != "world_size",
                          "no stoker_world_size hyperparameter (the launcher sets it)")
    # the channels: TrainingInput(..., instance_groups=[names])
    channels = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and call_name(n) == "fit" and n.args and \
                isinstance(n.args[0], ast.Dict):
            for k, v in zip(n.args[0].keys, n.args[0].values):
                if isinstance(v, ast.Call) and call_name(v) == "TrainingInput":
                    b = bind_args(v, SDK["TrainingInput"])
                    if b is None:
                        continue
                    check("s3_data" in b, "TrainingInput %r has s3_data" % k.value)
                    lst = b.get("instance_groups")
                    gs = [x.value for x in lst.elts] if isinstance(lst, ast.List) else None
                    channels[k.value] = gs
    check(bool(channels), "fit({...}) sends channels (%s)" % channels)
    for ch, gs in channels.items():
        check(gs is not None and all(isinstance(g, str) and g in names for g in gs),
              "channel %r: instance_groups names defined groups (%s)" % (ch, gs))
        check(gs is not None and "data_group" in gs and "dnn_group" not in gs,
              "channel %r goes to the data group only (%s)" % (ch, gs))
    return {"data": "data_group" if data else None, "dnn": "dnn_group" if dnn else None,
            "channels": channels}


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    d, coord = sys.argv[1], sys.argv[2]
    launch = sys.argv[3] if len(sys.argv) > 3 else ""
    entry = os.path.join(d, "entry.sh")
    r = subprocess.run(["sh", "-n", entry], capture_output=True, text=True)
    check(r.returncode == 0, "sh -n entry.sh: %s" % r.stderr.strip())
    with tempfile.TemporaryDirectory() as tmp:
        try:
            py_compile.compile(os.path.join(d, "estimator.py"),
                               cfile=os.path.join(tmp, "e.pyc"), doraise=True)
        except py_compile.PyCompileError as e:
            check(False, "estimator.py compiles: %s" % e)
    groups = check_estimator(os.path.join(d, "estimator.py"),
                             os.path.join(os.path.dirname(os.path.abspath(d)),
                                          "instances.tsv"))

    r = subprocess.run([coord, "--job", os.path.join(d, "job.conf"), "--print-job"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "job.conf passes --print-job: %s" % r.stderr.strip())
    ds = re.search(r"^dataset\s*=\s*(\S+)", open(os.path.join(d, "job.conf")).read(), re.M)
    check(ds is not None and ds.group(1) in groups["channels"],
          "job.conf's dataset (%s) is a channel the estimator sends (%s)" %
          (ds and ds.group(1), sorted(groups["channels"])))

    flags = []
    for gpus, want_procs in (("8", "8"), ("0", "1")):
        with tempfile.TemporaryDirectory() as tmp:
            rec = os.path.join(tmp, "args")
            fake = os.path.join(tmp, "stoker-launch")
            with open(fake, "w") as f:
                f.write('#!/bin/sh\nfor a in "$@"; do printf "%%s\\n" "$a"; done > %s\n' % rec)
            os.chmod(fake, stat.S_IRWXU)
            env = dict(os.environ, PATH=tmp + ":" + os.environ.get("PATH", ""),
                       SM_NUM_GPUS=gpus)
            # as the training toolkit passes the hyperparameters
            r = subprocess.run(["sh", entry, "--epochs", "3", "--stoker_epochs", "3",
                                "--lr", "0.1 x", "--stoker_seed=4"], env=env,
                               capture_output=True, text=True, timeout=30)
            if not check(r.returncode == 0 and os.path.exists(rec),
                         "entry.sh runs stoker-launch (exit %d): %s" % (r.returncode,
                                                                     r.stderr.strip())):
                continue
            a = open(rec).read().split("\n")[:-1]
        if not check("--" in a, "'--' before the training command: %s" % a):
            continue
        opts, train = a[:a.index("--")], a[a.index("--") + 1:]
        check(opts[:2] == ["--backend", "sagemaker"], "--backend sagemaker first")
        for k, v in (("--job", "job.conf"), ("--data-group", groups.get("data", "?")),
                     ("--dnn-group", groups.get("dnn", "?")),
                     ("--procs-per-host", want_procs)):
            check(k in opts and opts[opts.index(k) + 1] == v,
                  "%s %s (SM_NUM_GPUS=%s): %s" % (k, v, gpus, opts))
        check(train == ["python3", "train.py", "--epochs", "3", "--lr", "0.1 x"],
              "training command gets its hyperparameters, not the stoker_ ones: %s" % train)
        check("--data-root" not in opts, "no --data-root: the launcher takes the channel's "
              "folder ($SM_CHANNEL_<DATASET>): %s" % opts)
        check("--insecure" in opts,
              "no token given: --insecure is named explicitly (protected mode): %s" % opts)
        flags = [o for o in opts if o.startswith("--")]

    if launch and os.path.exists(launch):
        r = subprocess.run([launch, "--help"], capture_output=True, text=True, timeout=30)
        known = set(re.findall(r"--[a-z][a-z0-9-]*", r.stdout + r.stderr))
        for f in flags:
            check(f in known, "stoker-launch --help lists %s" % f)
        print("entry.sh's options checked against %s --help" % launch)
    else:
        print("SKIP (this part only): %s is not in this tree; entry.sh's options (%s) "
              "were not checked against its --help" % (launch or "stoker-launch",
                                                       " ".join(flags)))
    print("FAILED: %d" % len(fails) if fails else "deploy/sagemaker: all checks passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
