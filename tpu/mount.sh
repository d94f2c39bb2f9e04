#!/usr/bin/env bash
# Mount the gs:// bucket BUCKET (without gs://) at MOUNT with gcsfuse, installing gcsfuse first
# from Google's own apt repository where it is missing (Ubuntu's archive does not carry it).
# setup.sh runs it on every TPU worker.
#
#   tpu/mount.sh [--dry-run] BUCKET MOUNT
set -euo pipefail

DRY_RUN=0
[[ "${1:-}" == --dry-run ]] && { DRY_RUN=1; shift; }
[[ $# -eq 2 ]] || { echo "mount.sh: usage: mount.sh [--dry-run] BUCKET MOUNT" >&2; exit 2; }
BUCKET="${1#gs://}" MOUNT="$2"

run() {  # print the command (dry run) or run it
  if [[ $DRY_RUN == 1 ]]; then printf '%q ' "$@" | sed 's/ $//'; echo; else "$@"; fi
}

KEYRING=/usr/share/keyrings/cloud.google.asc
if ! command -v gcsfuse >/dev/null; then
  codename="$(lsb_release -cs 2>/dev/null || echo jammy)"
  run sh -c "curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg | sudo tee $KEYRING >/dev/null"
  run sh -c "echo 'deb [signed-by=$KEYRING] https://packages.cloud.google.com/apt gcsfuse-$codename main' | sudo tee /etc/apt/sources.list.d/gcsfuse.list >/dev/null"
  run sudo apt-get -q update
  run sudo apt-get -q install -y gcsfuse
fi
run mkdir -p "$MOUNT"
if [[ $DRY_RUN == 1 ]] || ! mountpoint -q "$MOUNT"; then
  run gcsfuse --implicit-dirs "$BUCKET" "$MOUNT"
fi
