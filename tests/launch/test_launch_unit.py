"""test_launch_unit.py - the pure logic of deploy/stoker-launch, no daemons:
Slurm host-list expansion (and its bad syntax), SageMaker resource-config
parsing (and malformed files), role and rank assignment, the training
environment, backend detection, binary lookup, token hiding in logs, and
the command line itself (--dry-run and usage errors as a process).

Usage: test_launch_unit.py STOKER_LAUNCH [BIN_DIR]
Exit 0 all passed, 1 a test failed (unittest's report says which).
"""
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

LAUNCH = BIN_DIR = None
L = None  # the launcher, imported as a module


def load(path):
    loader = importlib.machinery.SourceFileLoader("stoker_launch", path)
    spec = importlib.util.spec_from_loader("stoker_launch", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


class HostList(unittest.TestCase):
    def test_expansions(self):
        e = L.expand_hostlist
        self.assertEqual(e("node1"), ["node1"])
        self.assertEqual(e("a,b,c"), ["a", "b", "c"])
        self.assertEqual(e("node[01-03,7],gpu-a[1-2]"),
                         ["node01", "node02", "node03", "node7", "gpu-a1", "gpu-a2"])
        self.assertEqual(e("n[8-11]"), ["n8", "n9", "n10", "n11"])
        self.assertEqual(e("n[098-101]"), ["n098", "n099", "n100", "n101"])
        self.assertEqual(e("rack[1-2]-n[1-2]"), ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"])
        self.assertEqual(e("x[3]y"), ["x3y"])
        self.assertEqual(e(" cpu[1-2] "), ["cpu1", "cpu2"])
        self.assertEqual(e("10.0.0.[5-6]"), ["10.0.0.5", "10.0.0.6"])

    def test_bad_syntax(self):
        for bad in ("", "   ", "n[1-3", "n1-3]", "n[[1-2]]", "n[]", "n[a-b]", "n[3-1]",
                    "n[1-2,]", "a,,b", "a,", "n[1--2]", "n[-2]", "n[1-999999999]", "a b"):
            with self.assertRaises(L.UsageError, msg=bad):
                L.expand_hostlist(bad)

    def test_error_names_the_list(self):
        with self.assertRaises(L.UsageError) as cm:
            L.expand_hostlist("node[3-1]")
        self.assertIn("node[3-1]", str(cm.exception))
        self.assertIn("backwards", str(cm.exception))


def rc(**kw):
    d = {"current_host": "algo-1", "current_group_name": "dnn_group",
         "hosts": ["algo-1", "algo-2", "algo-3", "algo-4"],
         "instance_groups": [
             {"instance_group_name": "data_group", "instance_type": "ml.c5.18xlarge",
              "hosts": ["algo-3", "algo-4"]},
             {"instance_group_name": "dnn_group", "instance_type": "ml.p4d.24xlarge",
              "hosts": ["algo-1", "algo-2"]}]}
    d.update(kw)
    return json.dumps(d)


class ResourceConfig(unittest.TestCase):
    def test_heterogeneous(self):
        self.assertEqual(L.parse_resource_config(rc()),
                         (["algo-3", "algo-4"], ["algo-1", "algo-2"], "algo-1"))

    def test_group_names(self):
        t = rc(instance_groups=[{"instance_group_name": "cpu", "hosts": ["b"]},
                                {"instance_group_name": "gpu", "hosts": ["a"]}])
        self.assertEqual(L.parse_resource_config(t, "cpu", "gpu"), (["b"], ["a"], "algo-1"))
        with self.assertRaises(L.UsageError) as cm:
            L.parse_resource_config(t)  # default names: no dnn_group
        self.assertIn("dnn_group", str(cm.exception))
        self.assertIn("cpu, gpu", str(cm.exception))

    def test_homogeneous(self):
        # no instance_groups: every host trains and serves
        self.assertEqual(L.parse_resource_config(rc(instance_groups=[])),
                         ([], ["algo-1", "algo-2", "algo-3", "algo-4"], "algo-1"))
        d = json.loads(rc())
        del d["instance_groups"]
        self.assertEqual(L.parse_resource_config(json.dumps(d))[0], [])
        # one group, whatever its name
        t = rc(instance_groups=[{"instance_group_name": "train", "hosts": ["algo-1"]}])
        self.assertEqual(L.parse_resource_config(t), ([], ["algo-1"], "algo-1"))
        # only the dnn group
        t = rc(instance_groups=[{"instance_group_name": "dnn_group", "hosts": ["algo-1"]},
                                {"instance_group_name": "other", "hosts": ["algo-9"]}])
        self.assertEqual(L.parse_resource_config(t), ([], ["algo-1"], "algo-1"))

    def test_malformed(self):
        bad = ["", "{", "[]", "null", '"x"', json.dumps({"hosts": ["a"]}),
               rc(current_host=""), rc(current_host=5), rc(instance_groups={}),
               rc(instance_groups=[{"hosts": ["a"]}]),
               rc(instance_groups=[{"instance_group_name": "dnn_group", "hosts": "algo-1"}]),
               rc(instance_groups=[{"instance_group_name": "dnn_group", "hosts": [1]}]),
               rc(instance_groups=[{"instance_group_name": "dnn_group", "hosts": []}]),
               rc(instance_groups=[{"instance_group_name": "dnn_group", "hosts": ["a", "a"]}]),
               rc(instance_groups=[{"instance_group_name": "dnn_group", "hosts": ["a"]},
                                   {"instance_group_name": "dnn_group", "hosts": ["b"]}]),
               rc(instance_groups=[{"instance_group_name": "dnn_group", "hosts": ["a"]},
                                   {"instance_group_name": "data_group", "hosts": ["a"]}]),
               rc(instance_groups=[{"instance_group_name": "data_group", "hosts": ["a"]}]),
               rc(instance_groups=[], hosts=[])]
        for t in bad:
            with self.assertRaises(L.UsageError, msg=t):
                L.parse_resource_config(t, source="rc.json")
        with self.assertRaises(L.UsageError) as cm:
            L.parse_resource_config("{ nope", source="/x/rc.json")
        self.assertIn("/x/rc.json", str(cm.exception))
        self.assertIn("not valid JSON", str(cm.exception))


def published(current, group):
    """The resource config of the published heterogeneous example: a
    data_group of 2 x ml.c5.18xlarge and a dnn_group of 1 x
    ml.p4d.24xlarge (the host order as SageMaker writes it)."""
    types = {"data_group": "ml.c5.18xlarge", "dnn_group": "ml.p4d.24xlarge"}
    return json.dumps({
        "current_host": current, "current_instance_type": types[group],
        "current_group_name": group, "hosts": ["algo-1", "algo-2", "algo-3"],
        "instance_groups": [
            {"instance_group_name": "data_group", "instance_type": "ml.c5.18xlarge",
             "hosts": ["algo-2", "algo-1"]},
            {"instance_group_name": "dnn_group", "instance_type": "ml.p4d.24xlarge",
             "hosts": ["algo-3"]}],
        "network_interface_name": "eth0"})


class SageMaker(unittest.TestCase):
    """The files and variables of a SageMaker training container."""

    def test_instance_types(self):
        i = L.resource_config_info(published("algo-1", "data_group"))
        self.assertEqual((i["data"], i["dnn"], i["current"]),
                         (["algo-2", "algo-1"], ["algo-3"], "algo-1"))
        self.assertEqual((i["current_type"], i["current_group"], i["data_type"],
                          i["dnn_type"], i["warnings"]),
                         ("ml.c5.18xlarge", "data_group", "ml.c5.18xlarge",
                          "ml.p4d.24xlarge", []))
        # Trainium: the dnn group of trn1 hosts
        t = json.loads(published("algo-3", "dnn_group"))
        t["instance_groups"][1]["instance_type"] = t["current_instance_type"] = \
            "ml.trn1.32xlarge"
        i = L.resource_config_info(json.dumps(t))
        self.assertEqual((i["current_type"], i["dnn_type"]),
                         ("ml.trn1.32xlarge", "ml.trn1.32xlarge"))
        # homogeneous: no groups, the current type is the dnn type
        i = L.resource_config_info(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"],
                                               "current_instance_type": "ml.p3.2xlarge"}))
        self.assertEqual((i["data"], i["dnn_type"], i["data_type"]),
                         ([], "ml.p3.2xlarge", ""))
        # the lists decide; a contradicting current_group_name is a warning
        i = L.resource_config_info(published("algo-1", "dnn_group"))
        self.assertEqual(i["current_group"], "data_group")
        self.assertTrue(any("current_group_name" in w for w in i["warnings"]))
        for bad in (5, "", "ml c5", "x" * 48, "ml.c5;rm", ["ml.c5"]):
            t = json.loads(published("algo-1", "data_group"))
            t["instance_groups"][0]["instance_type"] = bad
            with self.assertRaises(L.UsageError, msg=repr(bad)) as cm:
                L.resource_config_info(json.dumps(t), source="rc.json")
            self.assertIn("instance_type", str(cm.exception))

    def test_from_toolkit_variables(self):
        """No resourceconfig.json: the training toolkit's SM_* variables
        (JSON as its to_env_vars writes them) say the same."""
        env = {"SM_CURRENT_HOST": "algo-3", "SM_HOSTS": '["algo-1","algo-2","algo-3"]',
               "SM_CURRENT_INSTANCE_TYPE": "ml.p4d.24xlarge",
               "SM_CURRENT_INSTANCE_GROUP": "dnn_group",
               "SM_INSTANCE_GROUPS": '["data_group","dnn_group"]',
               "SM_INSTANCE_GROUPS_DICT": json.dumps({
                   "data_group": {"instance_group_name": "data_group",
                                  "instance_type": "ml.c5.18xlarge",
                                  "hosts": ["algo-2", "algo-1"]},
                   "dnn_group": {"instance_group_name": "dnn_group",
                                 "instance_type": "ml.p4d.24xlarge", "hosts": ["algo-3"]}})}
        self.assertEqual(L.resource_config_info(L.resource_config_from_env(env)),
                         L.resource_config_info(published("algo-3", "dnn_group")))
        self.assertIsNone(L.resource_config_from_env({}))
        with tempfile.TemporaryDirectory() as d:
            e = dict(env, STOKER_SM_ROOT=d)  # no file there
            info = {}
            self.assertEqual(L.topology(Args(), e, info),
                             ("sagemaker", ["algo-2", "algo-1"], ["algo-3"], "algo-3"))
            self.assertEqual(info["source"], "the SM_* variables")
            with self.assertRaises(L.UsageError) as cm:
                L.topology(Args(), dict(e, SM_INSTANCE_GROUPS_DICT="{nope"))
            self.assertIn("SM_INSTANCE_GROUPS_DICT", str(cm.exception))
            with self.assertRaises(L.UsageError) as cm:
                L.topology(Args(backend="sagemaker"), {"STOKER_SM_ROOT": d})
            self.assertIn("resourceconfig.json", str(cm.exception))

    def test_paths(self):
        p = L.sm_paths({})
        self.assertEqual((p["resource_config"], p["hyperparameters"], p["data"],
                          p["failure"]),
                         ("/opt/ml/input/config/resourceconfig.json",
                          "/opt/ml/input/config/hyperparameters.json",
                          "/opt/ml/input/data", "/opt/ml/output/failure"))
        p = L.sm_paths({"STOKER_SM_ROOT": "/r", "SM_INPUT_DIR": "/x",
                        "STOKER_RESOURCE_CONFIG": "/c/rc.json"})
        self.assertEqual((p["resource_config"], p["hyperparameters"], p["data"],
                          p["failure"]),
                         ("/c/rc.json", "/r/input/config/hyperparameters.json",
                          "/r/input/data", "/r/output/failure"))
        p = L.sm_paths({"SM_INPUT_CONFIG_DIR": "/i/c", "SM_INPUT_DIR": "/i",
                        "SM_OUTPUT_DIR": "/o"})
        self.assertEqual((p["resource_config"], p["data"], p["failure"]),
                         ("/i/c/resourceconfig.json", "/i/data", "/o/failure"))

    def test_hyperparameters(self):
        with tempfile.TemporaryDirectory() as d:
            f = os.path.join(d, "hyperparameters.json")
            self.assertEqual(L.read_hyperparameters(f), {})  # none given
            # as the SDK writes them: each value a JSON text in a string
            with open(f, "w") as fh:
                json.dump({"epochs": "90", "stoker_epochs": "2", "stoker_dataset": '"train"',
                           "stoker_shuffle": "true", "sagemaker_program": '"entry.sh"',
                           "lr": 0.1}, fh)
            hps = L.read_hyperparameters(f)
            self.assertEqual(hps["stoker_dataset"], "train")
            self.assertEqual(hps["lr"], "0.1")
            self.assertEqual(L.hyperparameter_sets(hps),
                             ["dataset=train", "epochs=2", "shuffle=true"])
            for bad in ({"stoker_World": "1"}, {"stoker_world_size": "8"},
                        {"stoker_epochs": "1\nseed=2"}, {"stoker_": "x"}):
                with self.assertRaises(L.UsageError, msg=str(bad)):
                    L.hyperparameter_sets(bad)
            for text in ("[1]", "{", "\xff"):
                with open(f, "w", errors="surrogateescape") as fh:
                    fh.write(text)
                with self.assertRaises(L.UsageError, msg=text) as cm:
                    L.read_hyperparameters(f)
                self.assertIn(f, str(cm.exception))

    def test_data_root_and_channel(self):
        paths = L.sm_paths({"STOKER_SM_ROOT": "/r"})
        self.assertEqual(L.sm_data_root({}, paths, "train"), "/r/input/data")
        self.assertEqual(L.sm_data_root({"SM_CHANNEL_TRAIN": "/mnt/ch/train/"}, paths,
                                        "train"), "/mnt/ch")
        # a channel variable that is not the dataset's folder is not used
        self.assertEqual(L.sm_data_root({"SM_CHANNEL_TRAIN": "/mnt/x"}, paths, "train"),
                         "/r/input/data")
        self.assertEqual(L.sm_data_root({"SM_CHANNEL_TRAIN": "/mnt/ch/train"}, paths,
                                        "../train"), "/r/input/data")
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "eval"))
            self.assertIsNone(L.channel_error(d, "eval", {}))
            self.assertIsNone(L.channel_error(d, "/abs/path", {}))
            e = L.channel_error(d, "train", {})
            self.assertIn("'train'", e)
            self.assertIn("channels here: eval", e)
            self.assertIn("instance_groups", e)
            with tempfile.TemporaryDirectory() as empty:  # the toolkit's list, else none
                self.assertIn("channels here: eval)",
                              L.channel_error(empty, "train", {"SM_CHANNELS": '["eval"]'}))
                self.assertIn("channels here: none)",
                              L.channel_error(empty, "train", {"SM_CHANNELS": "[]"}))
            self.assertEqual(L.job_key(os.path.join(d, "none"), "dataset"), None)
            j = os.path.join(d, "job.conf")
            with open(j, "w") as fh:
                fh.write("# dataset = no\nname = x\ndataset = train  # the channel\n")
            self.assertEqual(L.job_key(j, "dataset"), "train")
            self.assertEqual(L.job_key(j, "dataset", ["dataset=eval"]), "eval")

    def test_cannot_serve_wait_is_bounded(self):
        # a data host that cannot serve looks for the coordinator a bounded
        # time: one that already ended (another host aborted the job before
        # this one looked) is not waited for, and not aborted again
        la = L.Launcher.__new__(L.Launcher)
        la.args = type("A", (), {"wait_coordinator_s": 900.0})()
        la.plan = {"coordinator": "algo-1:7070"}
        la.signum, la.current = 0, "algo-2"
        looks, aborts = [], []
        la.job_status = lambda: looks.append(1)  # never answers: None
        la.abort_job = lambda rank, reason: aborts.append(reason)
        saved = L.CANNOT_SERVE_WAIT_S
        L.CANNOT_SERVE_WAIT_S = 0.3
        try:
            self.assertEqual(la.fail_setup("no channel (channels here: none)"), L.EXIT_USAGE)
        finally:
            L.CANNOT_SERVE_WAIT_S = saved
        self.assertTrue(looks)
        self.assertEqual(aborts, [])
        # a coordinator that answers is told
        la.job_status = lambda: ("running", 0)
        self.assertEqual(la.fail_setup("no channel (channels here: none)"), L.EXIT_USAGE)
        self.assertEqual(aborts, ["algo-2 (data host) cannot serve: no channel"])
        self.assertEqual(L.CANNOT_SERVE_WAIT_S, 60)

    def test_failure_file(self):
        with tempfile.TemporaryDirectory() as d:
            f = os.path.join(d, "output", "failure")
            self.assertFalse(L.write_failure(f, "no output folder: none made"))
            self.assertFalse(os.path.exists(os.path.dirname(f)))
            os.makedirs(os.path.dirname(f))
            self.assertTrue(L.write_failure(f, "first reason"))
            self.assertTrue(L.write_failure(f, "x" * 5000))
            with open(f) as fh:
                lines = fh.read().split("\n")
            self.assertEqual(lines[0], "first reason")  # the first stays first
            self.assertEqual(len(lines[1]), L.FAILURE_MAX)
            self.assertFalse(L.write_failure(os.path.join(f, "sub"), "x"))  # never raises


class Plan(unittest.TestCase):
    def test_ranks(self):
        data, dnn = ["d1", "d2"], ["g1", "g2", "g3"]
        p = L.plan(data, dnn, "g1", 2, 7070)
        self.assertEqual((p["role"], p["is_coordinator"], p["run_worker"]), ("dnn", True, False))
        self.assertEqual((p["ranks"], p["world_size"], p["nnodes"]), ([0, 1], 6, 3))
        self.assertEqual(p["coordinator"], "g1:7070")
        p = L.plan(data, dnn, "g3", 2, 7070)
        self.assertEqual((p["ranks"], p["node_rank"], p["is_coordinator"]), ([4, 5], 2, False))
        p = L.plan(data, dnn, "d2", 2, 9000)
        self.assertEqual((p["role"], p["run_worker"], p["ranks"]), ("data", True, []))
        self.assertEqual(p["coordinator"], "g1:9000")
        # every rank exactly once over the dnn hosts
        ranks = sorted(r for h in dnn for r in L.plan(data, dnn, h, 4, 1)["ranks"])
        self.assertEqual(ranks, list(range(12)))

    def test_homogeneous_runs_workers_on_dnn(self):
        p = L.plan([], ["a", "b"], "b", 1, 7070)
        self.assertTrue(p["run_worker"])
        self.assertEqual(p["ranks"], [1])

    def test_worker_hosts_counted(self):
        self.assertEqual(L.plan(["d1", "d2", "d3"], ["a"], "a", 1, 7070)["n_worker_hosts"], 3)
        self.assertEqual(L.plan([], ["a", "b"], "a", 1, 7070)["n_worker_hosts"], 2)

    def test_parse_status(self):
        out = ("coordinator      a:1\nstate            draining  (up 3.0 s)\n"
               "workers          3 live\n\nADDRESS   WORKER ID\n")
        self.assertEqual(L.parse_status(out), ("draining", 3))
        self.assertEqual(L.parse_status(""), ("?", 0))
        self.assertEqual(L.parse_status("workers          x live\n"), ("?", 0))

    def test_world_size_for_torchrun(self):
        p = L.plan([], ["a", "b"], "b", 1, 7070, world_size=16)
        self.assertEqual((p["world_size"], p["ranks"]), (16, [1]))
        # the ranks it finishes when training exits 0: torchrun's share
        self.assertEqual(p["host_ranks"], list(range(8, 16)))
        self.assertEqual(L.plan([], ["a", "b"], "a", 2, 7070)["host_ranks"], [0, 1])
        self.assertEqual(L.plan([], ["a", "b"], "a", 1, 7070, world_size=3)["host_ranks"], [])
        with self.assertRaises(L.UsageError):
            L.plan([], ["a", "b"], "b", 1, 7070, world_size=1)

    def test_bad(self):
        with self.assertRaises(L.UsageError) as cm:
            L.plan(["d"], ["g"], "x", 1, 7070)
        self.assertIn("neither", str(cm.exception))
        with self.assertRaises(L.UsageError):
            L.plan(["a"], ["a"], "a", 1, 7070)
        with self.assertRaises(L.UsageError):
            L.plan(["d"], [], "d", 1, 7070)
        with self.assertRaises(L.UsageError):
            L.plan(["d"], ["g"], "g", 0, 7070)

    def test_env(self):
        p = L.plan(["d"], ["g1", "g2"], "g2", 4, 7070)
        env = L.train_env({"PATH": "/bin"}, p, 3, 4)
        self.assertEqual(env["RANK"], "7")
        self.assertEqual(env["WORLD_SIZE"], "8")
        self.assertEqual(env["LOCAL_RANK"], "3")
        self.assertEqual(env["NODE_RANK"], "1")
        self.assertEqual(env["NNODES"], "2")
        self.assertEqual(env["MASTER_ADDR"], "g1")
        self.assertEqual(env["MASTER_PORT"], "29500")
        self.assertEqual(env["STOKER_COORDINATOR"], "g1:7070")
        self.assertEqual(env["PATH"], "/bin")
        self.assertEqual(L.train_env({"MASTER_PORT": "1234"}, p, 0, 4)["MASTER_PORT"], "1234")
        self.assertEqual(env["GRPC_POLL_STRATEGY"], "poll")
        self.assertEqual(
            L.train_env({"GRPC_POLL_STRATEGY": "epoll1"}, p, 0, 4)["GRPC_POLL_STRATEGY"],
            "epoll1")


class Args:
    def __init__(self, **kw):
        self.data_hosts = self.dnn_hosts = self.current_host = self.backend = None
        self.data_group, self.dnn_group = "data_group", "dnn_group"
        self.__dict__.update(kw)


class Backends(unittest.TestCase):
    def test_detect(self):
        with tempfile.TemporaryDirectory() as d:
            rcp = os.path.join(d, "rc.json")
            with open(rcp, "w") as f:
                f.write(rc(current_host="algo-3"))
            self.assertEqual(L.detect_backend(Args(dnn_hosts="a"), {}), "hosts")
            self.assertEqual(L.detect_backend(Args(), {"STOKER_RESOURCE_CONFIG": rcp,
                                                       "SLURM_JOB_NODELIST": "x"}), "sagemaker")
            if not os.path.exists(L.DEFAULT_RESOURCE_CONFIG):
                self.assertEqual(L.detect_backend(
                    Args(), {"SLURM_JOB_NODELIST_HET_GROUP_1": "g[1-2]"}), "slurm")
                with self.assertRaises(L.UsageError):
                    L.detect_backend(Args(), {})
            b, data, dnn, cur = L.topology(Args(), {"STOKER_RESOURCE_CONFIG": rcp})
            self.assertEqual((b, data, dnn, cur),
                             ("sagemaker", ["algo-3", "algo-4"], ["algo-1", "algo-2"], "algo-3"))
            with self.assertRaises(L.UsageError):  # missing file
                L.topology(Args(backend="sagemaker"),
                           {"STOKER_RESOURCE_CONFIG": os.path.join(d, "none.json")})

    def test_slurm(self):
        env = {"SLURM_JOB_NODELIST_HET_GROUP_0": "cpu[01-02]",
               "SLURM_JOB_NODELIST_HET_GROUP_1": "gpu[7,9]", "SLURMD_NODENAME": "gpu9"}
        self.assertEqual(L.topology(Args(backend="slurm"), env),
                         ("slurm", ["cpu01", "cpu02"], ["gpu7", "gpu9"], "gpu9"))
        self.assertEqual(L.topology(Args(backend="slurm", current_host="cpu02"), env)[3], "cpu02")
        # plain allocation: all training nodes
        self.assertEqual(L.topology(Args(backend="slurm"), {"SLURM_JOB_NODELIST": "n[1-2]",
                                                            "SLURMD_NODENAME": "n1"})[1:3],
                         ([], ["n1", "n2"]))
        for bad in ({}, {"SLURM_JOB_NODELIST_HET_GROUP_1": "gpu[1-"},
                    {"SLURM_JOB_NODELIST_HET_GROUP_0": "n1", "SLURM_JOB_NODELIST_HET_GROUP_1": "n1"}):
            with self.assertRaises(L.UsageError, msg=str(bad)):
                L.topology(Args(backend="slurm"), bad)

    def test_hosts(self):
        self.assertEqual(L.topology(Args(backend="hosts", data_hosts="a, b", dnn_hosts="c",
                                         current_host="b"), {}),
                         ("hosts", ["a", "b"], ["c"], "b"))
        for kw in ({"dnn_hosts": None}, {"dnn_hosts": "c,c"}, {"dnn_hosts": "c d"}):
            a = dict(backend="hosts", data_hosts="a", current_host="a")
            a.update(kw)
            with self.assertRaises(L.UsageError, msg=str(kw)):
                L.topology(Args(**a), {})


class Binaries(unittest.TestCase):
    def test_lookup(self):
        with tempfile.TemporaryDirectory() as d:
            b = os.path.join(d, "stoker-worker")
            with open(b, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(b, 0o755)
            self.assertEqual(L.find_binary("stoker-worker", bin_dir=d), b)
            with self.assertRaises(L.UsageError) as cm:
                L.find_binary("stoker-nothing", bin_dir=d)
            self.assertIn("--bin-dir", str(cm.exception))
            # next to the launcher
            self.assertEqual(L.find_binary("stoker-worker", launcher=os.path.join(d, "x")), b)
            # PATH last
            with self.assertRaises(L.UsageError):
                L.find_binary("stoker-nothing-at-all", launcher=os.path.join(d, "x"), path=d)

    def test_token_hidden(self):
        s = L.shown(["stoker-worker", "--token", "s3cret", "--reason", "a b"])
        self.assertNotIn("s3cret", s)
        self.assertIn("'a b'", s)


def run(*args, env=None, timeout=30):
    e = dict(os.environ)
    e.pop("STOKER_RESOURCE_CONFIG", None)
    e.update(env or {})
    return subprocess.run([LAUNCH] + list(args), capture_output=True, text=True, env=e,
                          timeout=timeout, stdin=subprocess.DEVNULL)


class CommandLine(unittest.TestCase):
    def bins(self):
        return ["--bin-dir", BIN_DIR] if BIN_DIR else []

    def test_help(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        for word in ("exit codes", "--procs-per-host", "--wait-coordinator-s", "torchrun",
                     "SLURM_JOB_NODELIST_HET_GROUP_0", "resourceconfig.json", "143"):
            self.assertIn(word, r.stdout)

    def test_usage_errors(self):
        self.assertEqual(run("--job", "j").returncode, 2)  # no command
        self.assertEqual(run("--", "true").returncode, 2)  # no --job
        r = run("--job", "j", "--procs-per-host", "0", "--", "true")
        self.assertEqual(r.returncode, 2)
        r = run("--backend", "hosts", "--job", "j", "--data-hosts", "a", "--dnn-hosts", "b",
                "--current-host", "zzz", "--", "true")
        self.assertEqual(r.returncode, 2)
        self.assertIn("neither list", r.stderr)
        self.assertIn("stoker-launch[", r.stderr)
        r = run("--backend", "hosts", "--job", "j", "--dnn-hosts", "b", "--current-host", "b",
                "--bin-dir", "/nonexistent", "--", "true")
        self.assertEqual(r.returncode, 2)
        self.assertIn("not found", r.stderr)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "rc.json")
            with open(p, "w") as f:
                f.write('{"current_host": "algo-1", "hosts": ["algo-1"')
            r = run("--backend", "sagemaker", "--job", "j", "--", "true",
                    env={"STOKER_RESOURCE_CONFIG": p})
            self.assertEqual(r.returncode, 2)
            self.assertIn("not valid JSON", r.stderr)
        r = run("--backend", "slurm", "--job", "j", "--", "true",
                env={"SLURM_JOB_NODELIST_HET_GROUP_1": "gpu[1-2", "SLURMD_NODENAME": "gpu1"})
        self.assertEqual(r.returncode, 2)
        self.assertIn("gpu[1-2", r.stderr)

    def test_dry_run_slurm(self):
        env = {"SLURM_JOB_NODELIST_HET_GROUP_0": "cpu[1-2]",
               "SLURM_JOB_NODELIST_HET_GROUP_1": "gpu[01-02]", "SLURMD_NODENAME": "gpu02"}
        if os.path.exists(L.DEFAULT_RESOURCE_CONFIG):
            self.skipTest("a real SageMaker resource config is present")
        argv = ["--job", "/dev/null", "--procs-per-host", "8", "--dry-run", *self.bins()]
        # beyond loopback with no token and no TLS: refused unless --insecure
        r = run(*argv, "--", "python3", "train.py", env=env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("no token and no TLS", r.stderr)
        r = run(*argv, "--insecure", "--", "python3", "train.py", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("INSECURE", r.stderr)
        p = json.loads(r.stdout)
        self.assertEqual((p["backend"], p["role"], p["node_rank"], p["world_size"]),
                         ("slurm", "dnn", 1, 16))
        self.assertEqual(p["ranks"], list(range(8, 16)))
        self.assertEqual(p["coordinator"], "gpu01:7070")

    def sm_tree(self, d, current, group, channel=True, hps=None, folder=None):
        """A host's /opt/ml under d/(folder or current): the published
        example's resource config, hyperparameters.json, the train channel."""
        root = os.path.join(d, folder or current)
        os.makedirs(os.path.join(root, "input", "config"))
        with open(os.path.join(root, "input", "config", "resourceconfig.json"), "w") as f:
            f.write(published(current, group))
        if hps is not None:
            with open(os.path.join(root, "input", "config", "hyperparameters.json"), "w") as f:
                json.dump(hps, f)
        if channel:
            os.makedirs(os.path.join(root, "input", "data", "train"))
        os.makedirs(os.path.join(root, "output"))
        return root

    def test_dry_run_sagemaker(self):
        """The files a SageMaker host sees, relocated by STOKER_SM_ROOT:
        roles and instance types from resourceconfig.json, stoker_
        hyperparameters as --set, the data root from SM_CHANNEL_TRAIN; a
        data host without the channel exits 2 and writes why to
        output/failure, as does a broken resource config."""
        if not BIN_DIR:
            self.skipTest("no build directory given (the daemons' --help is read)")
        coord = os.path.join(BIN_DIR, "stoker-coordinator")
        worker = os.path.join(BIN_DIR, "stoker-worker")
        with tempfile.TemporaryDirectory() as d:
            job = os.path.join(d, "job.conf")
            with open(job, "w") as f:
                f.write("name = sm\ndataset = train\n")
            hps = {"epochs": "90", "stoker_epochs": "1", "sagemaker_program": '"entry.sh"'}
            argv = ["--job", job, "--dry-run", "--insecure", *self.bins(), "--", "true"]
            root = self.sm_tree(d, "algo-3", "dnn_group", channel=False, hps=hps)
            r = run(*argv, env={"STOKER_SM_ROOT": root})
            self.assertEqual(r.returncode, 0, r.stderr)
            p = json.loads(r.stdout)
            self.assertEqual((p["backend"], p["role"], p["is_coordinator"], p["data_hosts"],
                              p["dnn_hosts"]),
                             ("sagemaker", "dnn", True, ["algo-2", "algo-1"], ["algo-3"]))
            self.assertEqual((p["data_instance_type"], p["dnn_instance_type"]),
                             ("ml.c5.18xlarge", "ml.p4d.24xlarge"))
            self.assertEqual(p["job_sets"], ["epochs=1"])
            if L.supports(coord, "--accel-type"):
                self.assertEqual(p["coordinator_args"][:4],
                                 ["--accel-type", "ml.p4d.24xlarge", "--accel-hosts", "1"])
                if L.supports(coord, "--data-type"):
                    self.assertEqual(p["coordinator_args"][4:],
                                     ["--data-type", "ml.c5.18xlarge"])
            else:
                self.assertEqual(p["coordinator_args"], [])
                self.assertIn("no --accel-type option", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(root, "output", "failure")))

            root = self.sm_tree(d, "algo-1", "data_group", hps=hps)
            ch = os.path.join(root, "input", "data", "train")
            r = run(*argv, env={"STOKER_SM_ROOT": root, "SM_CHANNEL_TRAIN": ch})
            self.assertEqual(r.returncode, 0, r.stderr)
            p = json.loads(r.stdout)
            self.assertEqual((p["role"], p["data_root"]),
                             ("data", os.path.join(root, "input", "data")))
            if L.supports(worker, "--instance-type"):
                self.assertEqual(p["worker_args"], ["--instance-type", "ml.c5.18xlarge"])
            else:
                self.assertIn("no --instance-type option", r.stderr)
            # the launcher's own flags win over the resource config
            r = run("--data-instance-type", "c5.9xlarge", *argv,
                    env={"STOKER_SM_ROOT": root})
            self.assertEqual(json.loads(r.stdout)["data_instance_type"], "c5.9xlarge")
            r = run("--data-instance-type", "bad name", *argv, env={"STOKER_SM_ROOT": root})
            self.assertEqual(r.returncode, 2)
            self.assertIn("not an instance type name", r.stderr)

            # no channel on a data host: exit 2, the reason in output/failure
            root = self.sm_tree(d, "algo-2", "data_group", channel=False)
            r = run(*argv, env={"STOKER_SM_ROOT": root})
            self.assertEqual(r.returncode, 2, r.stderr)
            with open(os.path.join(root, "output", "failure")) as f:
                text = f.read()
            self.assertIn("algo-2 (data host) exited 2", text)
            self.assertIn("dataset 'train' is not on this data host", text)
            self.assertIn("wrote the reason", r.stderr)

            # a broken resource config, a bad hyperparameters file: said there too
            for name, body, want in (("resourceconfig.json", '{"hosts": [', "not valid JSON"),
                                     ("hyperparameters.json", "[]", "not a JSON object")):
                root = self.sm_tree(d, "algo-1", "data_group", folder="x-" + name)
                with open(os.path.join(root, "input", "config", name), "w") as f:
                    f.write(body)
                r = run(*argv, env={"STOKER_SM_ROOT": root})
                self.assertEqual(r.returncode, 2, r.stderr)
                with open(os.path.join(root, "output", "failure")) as f:
                    text = f.read()
                self.assertIn(want, text)
                self.assertIn("exited 2", text)

    def test_instance_types_hosts_backend(self):
        """--data-instance-type / --dnn-instance-type tell the daemons the
        types on the backends whose platform does not say them."""
        if not BIN_DIR:
            self.skipTest("no build directory given (the daemons' --help is read)")
        coord = os.path.join(BIN_DIR, "stoker-coordinator")
        worker = os.path.join(BIN_DIR, "stoker-worker")
        argv = ["--backend", "hosts", "--job", "/dev/null", "--data-hosts", "b",
                "--dnn-hosts", "a", "--dnn-instance-type", "p4d.24xlarge",
                "--data-instance-type", "c5.18xlarge", "--dry-run", "--insecure",
                *self.bins()]
        r = run(*argv, "--current-host", "a", "--", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        p = json.loads(r.stdout)
        if L.supports(coord, "--accel-type") and L.supports(coord, "--data-type"):
            self.assertEqual(p["coordinator_args"],
                             ["--accel-type", "p4d.24xlarge", "--accel-hosts", "1",
                              "--data-type", "c5.18xlarge"])
        r = run(*argv, "--current-host", "b", "--", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        p = json.loads(r.stdout)
        if L.supports(worker, "--instance-type"):
            self.assertEqual(p["worker_args"], ["--instance-type", "c5.18xlarge"])
        # a homogeneous job: the worker on the dnn host is of the dnn type
        r = run("--backend", "hosts", "--job", "/dev/null", "--dnn-hosts", "a",
                "--current-host", "a", "--dnn-instance-type", "g5.2xlarge", "--dry-run",
                "--insecure", *self.bins(), "--", "true")
        p = json.loads(r.stdout)
        if L.supports(worker, "--instance-type"):
            self.assertEqual(p["worker_args"], ["--instance-type", "g5.2xlarge"])

    def test_tls_dir_server_only_is_no_credential(self):
        """--tls-dir without client.pem authenticates the servers only: beyond
        loopback it is refused without a token (naming what to add), taken
        with --token-file or --insecure (which says INSECURE); with a client
        certificate (mutual TLS) it is a credential of its own."""
        if not BIN_DIR:
            self.skipTest("no build directory given (the daemons' --help is read)")
        env = {"SLURM_JOB_NODELIST_HET_GROUP_0": "cpu[1-2]",
               "SLURM_JOB_NODELIST_HET_GROUP_1": "gpu[01-02]", "SLURMD_NODENAME": "gpu02"}
        if os.path.exists(L.DEFAULT_RESOURCE_CONFIG):
            self.skipTest("a real SageMaker resource config is present")
        with tempfile.TemporaryDirectory() as d:
            for n in ("ca.pem", "server.pem", "server.key"):
                with open(os.path.join(d, n), "w") as f:
                    f.write("x\n")
            tok = os.path.join(d, "tok")
            with open(tok, "w") as f:
                f.write("0123456789abcdef0123\n")
            argv = ["--job", "/dev/null", "--dry-run", "--tls-dir", d, *self.bins()]
            r = run(*argv, "--", "true", env=env)
            if "has no --tls-ca option" in r.stderr:
                self.skipTest("this build has no TLS")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("server certificate only", r.stderr)
            for word in ("--token-file", "--role-tokens", "client.pem", "--insecure"):
                self.assertIn(word, r.stderr)
            r = run(*argv, "--insecure", "--", "true", env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("INSECURE", r.stderr)
            r = run(*argv, "--token-file", tok, "--", "true", env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("INSECURE", r.stderr)
            for n in ("client.pem", "client.key"):
                with open(os.path.join(d, n), "w") as f:
                    f.write("x\n")
            r = run(*argv, "--", "true", env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("mutual", r.stderr)
            self.assertNotIn("INSECURE", r.stderr)

    def test_token_file_needs_support(self):
        with tempfile.TemporaryDirectory() as d:
            t = os.path.join(d, "tok")
            with open(t, "w") as f:
                f.write("s3cret\n")
            r = run("--backend", "hosts", "--job", "/dev/null", "--dnn-hosts", "a",
                    "--current-host", "a", "--token-file", t, "--dry-run", *self.bins(), "--",
                    "true")
            self.assertNotIn("s3cret", r.stdout + r.stderr)
            if r.returncode == 2:  # this build's daemons cannot read a token file
                self.assertIn("--token-file", r.stderr)
            else:
                self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    LAUNCH = sys.argv[1]
    BIN_DIR = sys.argv[2] if len(sys.argv) > 2 else None
    L = load(LAUNCH)
    unittest.main(argv=[sys.argv[0], "-v"])
