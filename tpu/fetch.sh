#!/usr/bin/env bash
# Copy a run's outputs (metrics, plots, results, checkpoints) from the bucket to runs/RUN_NAME here.
#   tpu/fetch.sh --bucket gs://B RUN_NAME [--dry-run]
source "$(dirname "$0")/common.sh"
[[ -n "$BUCKET" ]] || die "BUCKET is not set: pass --bucket gs://... or export BUCKET"
[[ "$BUCKET" == gs://* ]] || die "BUCKET must start with gs://, got '$BUCKET'"
[[ ${#ARGS[@]} -eq 1 ]] || die "usage: fetch.sh [flags] RUN_NAME"
run mkdir -p runs
run gcloud storage cp --recursive "${BUCKET%/}/${ARGS[0]}" runs/
