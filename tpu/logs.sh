#!/usr/bin/env bash
# Follow the run's log on worker 0 (process 0 writes the progress and metrics; the others stay quiet).
#   tpu/logs.sh --project P --zone Z [--dry-run]
source "$(dirname "$0")/common.sh"
require PROJECT ZONE
# shellcheck disable=SC2046
run gcloud compute tpus tpu-vm ssh "$TPU_NAME" $(tpu_flags) --worker=0 --command="tail -n 50 -f ~/marljax.log"
