"""estimator.py - start the stoker SageMaker example: a heterogeneous
cluster with a CPU data group feeding an accelerator group.

    python3 deploy/sagemaker/estimator.py --image-uri URI --role ARN \
        --train s3://bucket/imagenet/train/

Needs the SageMaker Python SDK (`sagemaker`, v2.98 or later for
instance_groups) and AWS credentials; never run by stoker's CI (no AWS
account there): the CI only compiles this file. docs/deploy.md explains
each part.
"""
import argparse


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--image-uri", required=True, help="the image from deploy/sagemaker/Dockerfile")
    p.add_argument("--role", required=True, help="SageMaker execution role ARN")
    p.add_argument("--train", required=True, help="S3 prefix of the ImageFolder dataset")
    p.add_argument("--data-hosts", type=int, default=2)
    p.add_argument("--epochs", type=int, default=90)
    a = p.parse_args()

    from sagemaker.inputs import TrainingInput
    from sagemaker.instance_group import InstanceGroup
    from sagemaker.pytorch import PyTorch

    data_group = InstanceGroup("data_group", "ml.c5.18xlarge", a.data_hosts)
    dnn_group = InstanceGroup("dnn_group", "ml.p4d.24xlarge", 1)
    est = PyTorch(
        entry_point="entry.sh",       # runs stoker-launch on every host
        source_dir="deploy/sagemaker",  # entry.sh, job.conf, your train.py
        image_uri=a.image_uri,
        role=a.role,
        instance_groups=[data_group, dnn_group],
        hyperparameters={"epochs": a.epochs},
        max_run=5 * 24 * 3600,
        # greppable log lines of the workers and the training loop
        metric_definitions=[
            {"Name": "worker_batches_per_s", "Regex": r"batches_per_s=([0-9.]+)"},
            {"Name": "worker_mb_per_s", "Regex": r"mb_per_s=([0-9.]+)"},
            {"Name": "input_stall_percent", "Regex": r"stall ([0-9.]+)%"},
        ],
    )
    # The dataset goes to the data hosts only: the accelerator hosts never
    # read it (stoker streams them finished batches).
    est.fit({"train": TrainingInput(a.train, instance_groups=["data_group"])})


if __name__ == "__main__":
    main()
