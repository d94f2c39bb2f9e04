#!/usr/bin/env bash
# Delete the slice (the bucket and its runs stay).   tpu/delete.sh --project P --zone Z [--dry-run]
source "$(dirname "$0")/common.sh"
require PROJECT ZONE
# shellcheck disable=SC2046
run gcloud compute tpus tpu-vm delete "$TPU_NAME" $(tpu_flags) --quiet
