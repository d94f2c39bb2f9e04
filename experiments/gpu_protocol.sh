#!/usr/bin/env bash
# The accelerator protocol in one command: what marljax's figures on a GPU (or TPU) are made of.
#
#   pip install -e ".[cuda12,dev]"          # in a fresh venv, from a checkout (TPU: ".[tpu,dev]")
#   bash experiments/gpu_protocol.sh [OUT_DIR]          (EXPECT=tpu for a TPU)
#
# Each step's output goes to OUT_DIR/<step>.log (default runs/gpu_protocol_<time>); a failing
# step is recorded and the next one still runs. The steps:
#   doctor       marljax doctor --expect gpu: versions, devices, and a stop if JAX sees no GPU
#   tests        the test suite (python -m pytest -q -n 4)
#   bench_scale  marljax bench-scale: env-steps/s, MFU, peak memory, compile per num_envs
#   train        the default training run (marljax train), whole process timed
#   jaxmarl_*    JaxMARL's own baselines/IPPO/ippo_ff_mpe.py beside marljax at the same settings,
#                one right after the other: at JaxMARL's config (16 envs, 10 seeds, 1e7 steps)
#                and at 4096 envs (experiments/jaxmarl_side_by_side.py; clones JaxMARL into
#                OUT_DIR unless JAXMARL_DIR points at a checkout, and pip-installs what its
#                script imports: hydra-core, omegaconf, distrax, wandb (disabled), six)
# Last it prints one table of every figure, and writes it to OUT_DIR/summary.txt.
set -uo pipefail
EXPECT="${EXPECT:-gpu}"
OUT="${1:-runs/gpu_protocol_$(date +%Y%m%d_%H%M%S)}"
here="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$OUT"
: > "$OUT/steps.tsv"

step() {  # step NAME CMD...: run CMD, keep its output in OUT/NAME.log, note its exit code
  local name=$1; shift
  echo "== $name: $*"
  "$@" 2>&1 | tee "$OUT/$name.log"
  printf '%s\t%s\t%s\n' "$name" "${PIPESTATUS[0]}" "$*" >> "$OUT/steps.tsv"
}

step doctor marljax doctor --expect "$EXPECT"
step tests python -m pytest -q -n 4 "$here/tests"
step bench_scale marljax bench-scale
start=$(date +%s.%N)
step train marljax train out_dir="$OUT/train" overwrite=true progress=false
printf 'train_wall_s\t%s\n' "$(echo "$(date +%s.%N) - $start" | bc)" > "$OUT/train_wall.tsv"

JAXMARL_DIR="${JAXMARL_DIR:-$OUT/JaxMARL}"
[[ -d "$JAXMARL_DIR" ]] || git clone --depth 1 https://github.com/FLAIROx/JaxMARL "$JAXMARL_DIR"
python -m pip install -q hydra-core omegaconf distrax wandb six
step jaxmarl_own_config python "$here/experiments/jaxmarl_side_by_side.py" --jaxmarl "$JAXMARL_DIR"
step jaxmarl_4096_envs python "$here/experiments/jaxmarl_side_by_side.py" --jaxmarl "$JAXMARL_DIR" --num-envs 4096

python "$here/experiments/protocol_summary.py" "$OUT" | tee "$OUT/summary.txt"
