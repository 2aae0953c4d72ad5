#!/bin/sh
# entry.sh - the SageMaker entry point, run on every host of both instance
# groups (estimator.py). stoker-launch reads the host's group from
# /opt/ml/input/config/resourceconfig.json: on data_group hosts it runs one
# stoker-worker over the channels under /opt/ml/input/data; on dnn_group
# hosts the coordinator (first host) and one training process per GPU,
# with STOKER_COORDINATOR, RANK, WORLD_SIZE and LOCAL_RANK set, so
# stoker.Loader() in train.py needs no arguments. Every host exits when
# training ends, so no instance keeps billing. The estimator's
# hyperparameters arrive as arguments and are passed to train.py.
set -eu
cd "$(dirname "$0")"                    # /opt/ml/code: this folder
PROCS=${SM_NUM_GPUS:-1}                 # 0 on CPU-only hosts
[ "$PROCS" -gt 0 ] || PROCS=1
export MASTER_PORT="${MASTER_PORT:-29500}"  # torch.distributed env:// wants it
# Credentials. SageMaker runs the hosts of one training job on a network of
# their own that nothing outside the job reaches, so by default this names
# --insecure explicitly (no token, no TLS; every host's log says INSECURE).
# To use a token, ship a one-line file every host reads (e.g. an input
# channel "secrets": STOKER_TOKEN_FILE=/opt/ml/input/data/secrets/token).
if [ -n "${STOKER_TOKEN_FILE:-}" ]; then
  AUTH="--token-file=$STOKER_TOKEN_FILE"
else
  AUTH="--insecure"
fi
# The stoker_ hyperparameters (e.g. stoker_epochs) are stoker-launch's: it
# reads them from hyperparameters.json. The toolkit passes every
# hyperparameter as "--NAME VALUE" too: drop those, so train.py sees only
# its own.
n=$#
skip=false
while [ "$n" -gt 0 ]; do
  arg=$1
  shift
  n=$((n - 1))
  if $skip; then skip=false; continue; fi
  case $arg in
    --stoker_*=*) continue ;;
    --stoker_*) skip=true; continue ;;
  esac
  set -- "$@" "$arg"
done
# The data hosts serve the job's dataset channel ($SM_CHANNEL_TRAIN for
# dataset = train): stoker-launch finds it and writes why a host failed to
# /opt/ml/output/failure.
exec stoker-launch --backend sagemaker --job job.conf \
  --data-group data_group --dnn-group dnn_group \
  --procs-per-host "$PROCS" "$AUTH" \
  -- python3 "${STOKER_TRAIN_SCRIPT:-train.py}" "$@"
