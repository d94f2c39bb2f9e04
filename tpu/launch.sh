#!/usr/bin/env bash
# Launch `marljax train` or `marljax sweep` on every worker at once (one process per worker,
# joined by distributed=auto); outputs go to the mounted bucket, logs to ~/marljax.log.
#   tpu/launch.sh --project P --zone Z --bucket gs://B train RUN_NAME [key=value ...]
#   tpu/launch.sh --project P --zone Z --bucket gs://B sweep RUN_NAME experiments/FILE.yaml [key=value ...]
# A relaunch with the same RUN_NAME resumes it (train: resume=true; sweep: always).
source "$(dirname "$0")/common.sh"
require PROJECT ZONE BUCKET
[[ ${#ARGS[@]} -ge 2 ]] || die "usage: launch.sh [flags] train|sweep RUN_NAME [FILE.yaml] [key=value ...]"
command="${ARGS[0]}"; run_name="${ARGS[1]}"; rest=("${ARGS[@]:2}")
[[ "$run_name" =~ ^[A-Za-z0-9._-]+$ ]] || die "RUN_NAME may hold letters, digits, '.', '_' and '-', got '$run_name'"
case "$command" in
  train) cli="marljax train ${rest[*]} distributed=auto out_dir=$MOUNT/$run_name resume=true" ;;
  sweep) [[ ${#rest[@]} -ge 1 ]] || die "sweep needs a sweep file: launch.sh ... sweep RUN_NAME FILE.yaml"
         cli="marljax sweep ${rest[*]} distributed=auto out_dir=$MOUNT/$run_name progress=false" ;;
  *) die "the command must be train or sweep, got '$command'" ;;
esac
on_all_workers "cd marljax && nohup ~/venv/bin/$cli > ~/marljax.log 2>&1 &"
