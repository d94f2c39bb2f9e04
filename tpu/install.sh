#!/usr/bin/env bash
# Install marljax from the source tree SRC into a fresh virtual environment VENV with the jax
# build BUILD, then print `marljax doctor`'s report, which fails when the build's device is not
# seen. setup.sh runs it on every TPU worker (BUILD=tpu); `setup.sh --local DIR` runs it here
# with jax's CPU build, which is how CI checks these exact lines.
#
#   tpu/install.sh [--dry-run] SRC VENV cpu|tpu|cuda12
#
# Why uv: the default TPU VM images (tpu-ubuntu2204-base, v2-alpha-tpuv5-lite) are Ubuntu 22.04
# with Python 3.10; marljax needs 3.11 or newer, and jax 0.11 and later need 3.12. `uv venv
# --python 3.13` takes the newest Python marljax is tested on where it is installed and otherwise
# fetches a standalone build of it: no apt source, no PPA, the same command on every image.
# MARLJAX_PYTHON names another (a version such as 3.12, or an interpreter's path). uv itself
# comes from pip where the system has pip, else from its installer.
set -euo pipefail

DRY_RUN=0
[[ "${1:-}" == --dry-run ]] && { DRY_RUN=1; shift; }
[[ $# -eq 3 ]] || { echo "install.sh: usage: install.sh [--dry-run] SRC VENV cpu|tpu|cuda12" >&2; exit 2; }
SRC="$(realpath -m "$1")" VENV="$(realpath -m "$2")" BUILD="$3"
case "$BUILD" in
  cpu) SPEC="$SRC" EXPECT=cpu ;;
  tpu) SPEC="$SRC[tpu]" EXPECT=tpu ;;
  cuda12) SPEC="$SRC[cuda12]" EXPECT=gpu ;;
  *) echo "install.sh: BUILD must be cpu, tpu or cuda12, got '$BUILD'" >&2; exit 2 ;;
esac
[[ $DRY_RUN == 1 || -f "$SRC/pyproject.toml" ]] || { echo "install.sh: $SRC holds no pyproject.toml" >&2; exit 2; }

run() {  # print the command (dry run) or run it
  if [[ $DRY_RUN == 1 ]]; then printf '%q ' "$@" | sed 's/ $//'; echo; else "$@"; fi
}

UV_HOME="${XDG_CACHE_HOME:-$HOME/.cache}/marljax-uv"
if command -v uv >/dev/null; then
  UV=uv
else
  UV="$UV_HOME/bin/uv"
  if [[ ! -x "$UV" ]]; then
    run python3 -m pip install --quiet --target "$UV_HOME" uv \
      || run sh -c "curl -LsSf https://astral.sh/uv/install.sh | env UV_INSTALL_DIR='$UV_HOME/bin' UV_NO_MODIFY_PATH=1 sh"
  fi
fi
run "$UV" venv --clear --python "${MARLJAX_PYTHON:-3.13}" "$VENV"
run "$UV" pip install --python "$VENV/bin/python" "$SPEC"
run "$VENV/bin/marljax" doctor --expect "$EXPECT"
