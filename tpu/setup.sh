#!/usr/bin/env bash
# Install marljax (this checkout) and jax[tpu] on every worker and mount the bucket there.
#   tpu/setup.sh --project P --zone Z --bucket gs://B [--dry-run]
source "$(dirname "$0")/common.sh"
require PROJECT ZONE BUCKET
here="$(cd "$(dirname "$0")/.." && pwd)"
archive="/tmp/marljax-src.tar.gz"
run git -C "$here" archive --format=tar.gz --prefix=marljax/ -o "$archive" HEAD
# shellcheck disable=SC2046
run gcloud compute tpus tpu-vm scp "$archive" "$TPU_NAME":marljax-src.tar.gz $(tpu_flags) --worker=all
bucket="${BUCKET#gs://}"
on_all_workers "set -e; rm -rf marljax && tar xzf marljax-src.tar.gz \
&& python3 -m venv ~/venv && ~/venv/bin/pip install -q -U pip \
&& ~/venv/bin/pip install -q 'jax[tpu]>=0.10,<0.11' ./marljax \
&& (command -v gcsfuse >/dev/null || (sudo apt-get -q update && sudo apt-get -q install -y gcsfuse)) \
&& mkdir -p $MOUNT && (mountpoint -q $MOUNT || gcsfuse --implicit-dirs $bucket $MOUNT) \
&& ~/venv/bin/python -c 'import jax; print(jax.process_index(), jax.local_device_count(), jax.device_count())'"
