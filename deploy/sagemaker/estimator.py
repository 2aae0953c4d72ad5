"""estimator.py - start the stoker SageMaker example: a heterogeneous
cluster with a CPU data group feeding an accelerator group.

    python3 deploy/sagemaker/estimator.py --image-uri URI --role ARN \
        --train s3://bucket/imagenet/train/ [--dnn-type ml.trn1.32xlarge]

Needs the SageMaker Python SDK (`sagemaker`, v2.98 or later for
instance_groups) and AWS credentials; never run by stoker's CI (no AWS
account there): tests/deploy/test_sagemaker_files.py parses this file and
checks every call against the SDK's signatures (InstanceGroup, the
estimator's instance_groups, TrainingInput's instance_groups).
docs/deploy.md explains each part.
"""
import argparse


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--image-uri", required=True, help="the image from deploy/sagemaker/Dockerfile")
    p.add_argument("--role", required=True, help="SageMaker execution role ARN")
    p.add_argument("--train", required=True, help="S3 prefix of the ImageFolder dataset")
    p.add_argument("--data-type", default="ml.c5.18xlarge", help="the data hosts' type")
    p.add_argument("--data-hosts", type=int, default=2)
    p.add_argument("--dnn-type", default="ml.p4d.24xlarge",
                   help="the training hosts' type (e.g. ml.trn1.32xlarge)")
    p.add_argument("--dnn-hosts", type=int, default=1)
    p.add_argument("--epochs", type=int, default=90)
    a = p.parse_args()

    from sagemaker.inputs import TrainingInput
    from sagemaker.instance_group import InstanceGroup
    from sagemaker.pytorch import PyTorch

    # The group names are the ones entry.sh gives stoker-launch
    # (--data-group, --dnn-group); the launcher reads each host's group and
    # every group's instance type from /opt/ml/input/config/resourceconfig.json.
    data_group = InstanceGroup(instance_group_name="data_group", instance_type=a.data_type,
                               instance_count=a.data_hosts)
    dnn_group = InstanceGroup(instance_group_name="dnn_group", instance_type=a.dnn_type,
                              instance_count=a.dnn_hosts)
    est = PyTorch(
        entry_point="entry.sh",       # runs stoker-launch on every host
        source_dir="deploy/sagemaker",  # entry.sh, job.conf, your train.py
        image_uri=a.image_uri,
        role=a.role,
        # instead of instance_type/instance_count (the SDK takes one or the
        # other). No distribution=: stoker-launch starts one training
        # process per GPU on the dnn hosts itself, and a distribution would
        # run the entry point under its own launcher on its groups only.
        instance_groups=[data_group, dnn_group],
        # epochs reach train.py as --epochs; stoker_epochs becomes the
        # coordinator's --set epochs=... so the job streams as many epochs
        hyperparameters={"epochs": a.epochs, "stoker_epochs": a.epochs},
        max_run=5 * 24 * 3600,
        # greppable log lines of the workers and the training loop
        metric_definitions=[
            {"Name": "worker_batches_per_s", "Regex": r"batches_per_s=([0-9.]+)"},
            {"Name": "worker_mb_per_s", "Regex": r"mb_per_s=([0-9.]+)"},
            {"Name": "input_stall_percent", "Regex": r"stall ([0-9.]+)%"},
        ],
    )
    # The dataset goes to the data hosts only: the accelerator hosts never
    # read it (stoker streams them finished batches). The channel name is
    # job.conf's dataset.
    est.fit({"train": TrainingInput(a.train, instance_groups=["data_group"])})


if __name__ == "__main__":
    main()
