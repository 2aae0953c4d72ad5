"""smplatform.py - a stand-in for the SageMaker platform on the simulated
cluster (netcluster.py): what SageMaker does around a heterogeneous
training job, so that deploy/sagemaker/entry.sh and stoker-launch run on
each host exactly as they would in the training container.

Per host, as the platform and its training toolkit prepare a container:
  - /opt/ml of its own: the host's tree under WORK/sm/HOST/opt is
    bind-mounted over /opt inside the host's mount namespace (the one
    `ip netns exec` makes; nothing reaches the root namespace), holding
    input/config/resourceconfig.json (current_host, current_instance_type,
    current_group_name, hosts, instance_groups, network_interface_name),
    hyperparameters.json (each value JSON-encoded, as the SDK sends them),
    inputdataconfig.json, input/data/<channel> (hard links of the dataset,
    only on the groups the channel is sent to), output/, model/, and
    code/ (deploy/sagemaker as the SDK uploads source_dir, with the test's
    job.conf and train.py);
  - the training toolkit's variables: SM_CURRENT_HOST, SM_HOSTS,
    SM_CURRENT_INSTANCE_TYPE, SM_CURRENT_INSTANCE_GROUP,
    SM_CURRENT_INSTANCE_GROUP_HOSTS, SM_INSTANCE_GROUPS,
    SM_INSTANCE_GROUPS_DICT, SM_IS_HETERO, SM_CHANNELS, SM_CHANNEL_<NAME>,
    SM_HPS, SM_HP_<NAME>, SM_NUM_GPUS, SM_NUM_CPUS, SM_INPUT_DIR,
    SM_INPUT_CONFIG_DIR, SM_OUTPUT_DIR, SM_MODEL_DIR,
    SM_NETWORK_INTERFACE_NAME, SM_USER_ARGS;
  - the entry point run as the toolkit runs a shell entry point: `sh
    entry.sh --NAME VALUE ...` (every hyperparameter) in /opt/ml/code.

And the platform's verdict: the job ends only when every host has exited;
Completed when every host exited 0, else Failed with the FailureReason
SageMaker reports: the first 1024 characters of the failure file of the
first host that exited non-zero.

Python 3 standard library only; owns the tree under WORK/sm.
"""
import json
import os
import shutil

FAILURE_MAX = 1024


class Group:
    def __init__(self, name, instance_type, hosts, gpus=0):
        self.name, self.instance_type, self.hosts, self.gpus = name, instance_type, hosts, gpus


class Platform:
    """One training job: groups (Group), channels {name: (source folder,
    [group names])}, hyperparameters {name: value}, code_dir (deploy/
    sagemaker), job_text (its job.conf), train_argv (what train.py
    execs; '{RANK}' in it is the rank's number)."""

    def __init__(self, work, groups, channels, hyperparameters, code_dir, job_text, train_argv):
        self.work = os.path.join(work, "sm")
        self.groups, self.channels, self.hps = groups, channels, hyperparameters
        self.code_dir, self.job_text, self.train_argv = code_dir, job_text, train_argv
        self.hosts = sorted(h for g in groups for h in g.hosts)

    def group_of(self, host):
        return [g for g in self.groups if host in g.hosts][0]

    def root(self, host):
        """The host's /opt as seen from outside (its /opt/ml is root/ml)."""
        return os.path.join(self.work, host, "opt")

    def ml(self, host, *parts):
        return os.path.join(self.root(host), "ml", *parts)

    def prepare(self, host):
        g = self.group_of(host)
        cfg = self.ml(host, "input", "config")
        os.makedirs(cfg)
        for d in ("output", "model", os.path.join("output", "data")):
            os.makedirs(self.ml(host, d), exist_ok=True)
        rc = {"current_host": host, "current_instance_type": g.instance_type,
              "current_group_name": g.name, "hosts": self.hosts,
              "instance_groups": [{"instance_group_name": x.name,
                                   "instance_type": x.instance_type, "hosts": list(x.hosts)}
                                  for x in self.groups],
              "network_interface_name": "eth0"}
        with open(os.path.join(cfg, "resourceconfig.json"), "w") as f:
            json.dump(rc, f)
        with open(os.path.join(cfg, "hyperparameters.json"), "w") as f:
            json.dump({k: json.dumps(v) for k, v in self.hps.items()}, f)
        here = [c for c, (_, groups) in sorted(self.channels.items()) if g.name in groups]
        with open(os.path.join(cfg, "inputdataconfig.json"), "w") as f:
            json.dump({c: {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
                           "RecordWrapperType": "None"} for c in here}, f)
        for c in here:  # File mode: the channel is copied in (hard links here)
            src = self.channels[c][0]
            shutil.copytree(src, self.ml(host, "input", "data", c), copy_function=os.link)
        os.makedirs(self.ml(host, "input", "data"), exist_ok=True)
        code = self.ml(host, "code")
        shutil.copytree(self.code_dir, code)
        with open(os.path.join(code, "job.conf"), "w") as f:
            f.write(self.job_text)
        with open(os.path.join(code, "train.py"), "w") as f:
            f.write("# the test's train.py: records its arguments, then runs the loop\n"
                    "import json, os, sys\n"
                    "with open('/opt/ml/model/args.%%s.json' %% os.environ['RANK'], 'w') as f:\n"
                    "    json.dump(sys.argv[1:], f)\n"
                    "argv = [a.replace('{RANK}', os.environ['RANK']) for a in %r]\n"
                    "os.execv(argv[0], argv)\n" % (self.train_argv,))
        return here

    def env(self, host, base):
        """The training toolkit's variables for host (on top of base)."""
        g = self.group_of(host)
        here = [c for c, (_, groups) in sorted(self.channels.items()) if g.name in groups]
        e = dict(base)
        e.update({
            "SM_CURRENT_HOST": host, "SM_HOSTS": json.dumps(self.hosts),
            "SM_CURRENT_INSTANCE_TYPE": g.instance_type, "SM_CURRENT_INSTANCE_GROUP": g.name,
            "SM_CURRENT_INSTANCE_GROUP_HOSTS": json.dumps(g.hosts),
            "SM_INSTANCE_GROUPS": json.dumps([x.name for x in self.groups]),
            "SM_INSTANCE_GROUPS_DICT": json.dumps({
                x.name: {"instance_group_name": x.name, "instance_type": x.instance_type,
                         "hosts": x.hosts} for x in self.groups}),
            "SM_IS_HETERO": json.dumps(len(self.groups) > 1),
            "SM_CHANNELS": json.dumps(here),
            "SM_HPS": json.dumps(self.hps),
            "SM_NUM_GPUS": str(g.gpus), "SM_NUM_CPUS": "2",
            "SM_INPUT_DIR": "/opt/ml/input", "SM_INPUT_CONFIG_DIR": "/opt/ml/input/config",
            "SM_OUTPUT_DIR": "/opt/ml/output", "SM_MODEL_DIR": "/opt/ml/model",
            "SM_OUTPUT_DATA_DIR": "/opt/ml/output/data",
            "SM_NETWORK_INTERFACE_NAME": "eth0", "SM_USER_ARGS": json.dumps(self.args()),
        })
        for c in here:
            e["SM_CHANNEL_" + c.upper()] = "/opt/ml/input/data/" + c
        for k, v in self.hps.items():
            e["SM_HP_" + k.upper()] = v if isinstance(v, str) else json.dumps(v)
        return e

    def args(self):
        """The hyperparameters as the toolkit passes them to the entry point."""
        out = []
        for k, v in sorted(self.hps.items()):
            out += ["--" + k, v if isinstance(v, str) else json.dumps(v)]
        return out

    def start(self, cluster, host, base_env, log):
        """Run the entry point on host as the platform does; the Popen."""
        argv = ["sh", "-c", 'mount --bind "$0" /opt && cd /opt/ml/code && exec "$@"',
                self.root(host), "sh", "entry.sh"] + self.args()
        return cluster.spawn(host, argv, log, env=self.env(host, base_env))

    def failure(self, host):
        try:
            with open(self.ml(host, "output", "failure"), errors="replace") as f:
                return f.read()
        except OSError:
            return None

    def verdict(self, codes, ended):
        """(status, FailureReason) from each host's exit code and time."""
        bad = sorted((ended[h], h) for h, c in codes.items() if c != 0)
        if not bad:
            return "Completed", ""
        h = bad[0][1]
        text = self.failure(h)
        return "Failed", (text[:FAILURE_MAX] if text else
                          "AlgorithmError: exit code %s on %s (no failure file)" %
                          (codes[h], h))


def supported():
    """None when bind mounts work inside a host's namespace, else why not."""
    if not os.path.isdir("/opt"):
        return "no /opt to mount each host's own over"
    if not shutil.which("mount"):
        return "no mount(8)"
    return None
