# Shared by the tpu/*.sh scripts: settings from flags or environment variables, and `run`,
# which prints a command (--dry-run) or runs it. Source it; don't execute it.
#
#   --project P      or PROJECT           Google Cloud project              (required)
#   --zone Z         or ZONE              e.g. us-central2-b (v4), us-west4-a (v5e)   (required)
#   --name N         or TPU_NAME          the slice's name                  (default: marljax)
#   --accelerator A  or ACCELERATOR_TYPE  e.g. v4-8, v4-32, v5litepod-16    (default: v4-8)
#   --version V      or RUNTIME_VERSION   TPU VM image (default: tpu-ubuntu2204-base; v5e: v2-alpha-tpuv5-lite)
#   --bucket B       or BUCKET            gs:// bucket for runs, mounted on every worker (required by setup/launch/fetch)
#   --spot                                create a Spot slice (preemptible; runs resume from checkpoints)
#   --local DIR                           setup.sh only: install into DIR on this machine (CPU jax; no gcloud)
#   --dry-run                             print the commands instead of running them
set -euo pipefail

PROJECT="${PROJECT:-}"
ZONE="${ZONE:-}"
TPU_NAME="${TPU_NAME:-marljax}"
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v4-8}"
RUNTIME_VERSION="${RUNTIME_VERSION:-tpu-ubuntu2204-base}"
BUCKET="${BUCKET:-}"
SPOT=0
DRY_RUN=0
LOCAL=""
ARGS=()  # what the flags above leave: the script's own arguments

die() { echo "tpu: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --project) PROJECT="$2"; shift 2 ;;
    --zone) ZONE="$2"; shift 2 ;;
    --name) TPU_NAME="$2"; shift 2 ;;
    --accelerator) ACCELERATOR_TYPE="$2"; shift 2 ;;
    --version) RUNTIME_VERSION="$2"; shift 2 ;;
    --bucket) BUCKET="$2"; shift 2 ;;
    --spot) SPOT=1; shift ;;
    --local) LOCAL="${2:-}"; [[ -n "$LOCAL" ]] || die "--local needs a directory"; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d'; exit 0 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done

require() {  # require NAME...: each must be set, by flag or environment variable
  local name
  for name in "$@"; do
    [[ -n "${!name}" ]] || die "$name is not set: pass --$(echo "$name" | tr 'A-Z_' 'a-z-' | sed 's/tpu-name/name/; s/accelerator-type/accelerator/; s/runtime-version/version/') or export $name"
  done
  [[ -z "$BUCKET" || "$BUCKET" == gs://* ]] || die "BUCKET must start with gs://, got '$BUCKET'"
  [[ "$TPU_NAME" =~ ^[a-z]([-a-z0-9]*[a-z0-9])?$ ]] || die "TPU_NAME must be lower-case letters, digits and dashes, got '$TPU_NAME'"
}

run() {  # run CMD...: print it (dry run) or run it
  if [[ $DRY_RUN == 1 ]]; then
    printf '%q ' "$@" | sed 's/ $//'
    echo
  else
    "$@"
  fi
}

tpu_flags() { echo --zone="$ZONE" --project="$PROJECT"; }

on_all_workers() {  # on_all_workers COMMAND: one shell command on every worker of the slice
  # shellcheck disable=SC2046
  run gcloud compute tpus tpu-vm ssh "$TPU_NAME" $(tpu_flags) --worker=all --command="$1"
}

MOUNT='$HOME/marljax-runs'  # where setup.sh mounts the bucket on every worker (expanded there)
