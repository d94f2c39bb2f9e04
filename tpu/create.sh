#!/usr/bin/env bash
# Create a TPU VM slice.   tpu/create.sh --project P --zone us-central2-b --accelerator v4-8 [--spot] [--dry-run]
source "$(dirname "$0")/common.sh"
require PROJECT ZONE
extra=()
[[ $SPOT == 1 ]] && extra+=(--spot)
# shellcheck disable=SC2046
run gcloud compute tpus tpu-vm create "$TPU_NAME" $(tpu_flags) \
  --accelerator-type="$ACCELERATOR_TYPE" --version="$RUNTIME_VERSION" "${extra[@]}"
