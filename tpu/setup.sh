#!/usr/bin/env bash
# Install marljax (this checkout) with jax[tpu] on every worker and mount the bucket there.
#   tpu/setup.sh --project P --zone Z --bucket gs://B [--dry-run]
#   tpu/setup.sh --local DIR [--dry-run]
# On each worker: install.sh builds ~/venv with uv's Python 3.13 (the images ship 3.10; see
# install.sh for why uv), installs marljax[tpu] and prints `marljax doctor --expect tpu`, which
# fails the setup if the worker's JAX sees no TPU; mount.sh installs gcsfuse from Google's apt
# repository and mounts the bucket. --local DIR runs the same install.sh here, into DIR/venv with
# jax's CPU build, with no gcloud, ssh or bucket: CI runs it so that a broken install line fails there.
source "$(dirname "$0")/common.sh"
here="$(cd "$(dirname "$0")/.." && pwd)"
dry=(); [[ $DRY_RUN == 1 ]] && dry=(--dry-run)

if [[ -n "$LOCAL" ]]; then
  exec bash "$here/tpu/install.sh" "${dry[@]}" "$here" "$LOCAL/venv" cpu
fi

require PROJECT ZONE BUCKET
archive="/tmp/marljax-src.tar.gz"
run git -C "$here" archive --format=tar.gz --prefix=marljax/ -o "$archive" HEAD
# shellcheck disable=SC2046
run gcloud compute tpus tpu-vm scp "$archive" "$TPU_NAME":marljax-src.tar.gz $(tpu_flags) --worker=all
on_all_workers "set -e; rm -rf marljax && tar xzf marljax-src.tar.gz \
&& bash marljax/tpu/install.sh \$HOME/marljax \$HOME/venv tpu \
&& bash marljax/tpu/mount.sh ${BUCKET#gs://} $MOUNT"
