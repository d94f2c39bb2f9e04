#!/usr/bin/env bash
# The accelerator protocol: what marljax's figures on a GPU (or TPU) are made of. It needs no
# network: marljax and what it needs installed (on an offline node: experiments/offline_kit.sh
# install KIT), run from a marljax checkout (the tests step runs its tests/).
#
#   bash experiments/gpu_protocol.sh OUT [--step NAME] [--small] [--kit DIR | --jaxmarl PATH] [--dry-run]
#
# Steps, each under its own time limit (`timeout`; together about 31 minutes), each writing
# OUT/<step>.log (every command it ran, after "$ ", then its output) and a line of OUT/steps.tsv
# (step, exit code, seconds, limit); a failing step is recorded and the next one still runs.
# --step NAME runs that step alone (the others' records stay), so each step can be its own
# 10-minute command. Last, OUT/summary.txt: every figure with the command that printed it, and
# the table of steps (experiments/protocol_summary.py).
#   perf                (only with --step perf, not in the whole protocol) what the card issue asks, in one
#                       command of at most 6.5 minutes (run it first, alone), most wanted first: the
#                       time to -20.3 per agent at 64, 1024 and 4096 envs (the card's default candidates),
#                       the default run twice (an empty compile cache, then warm), JaxMARL's own script
#                       beside marljax (4096 envs x 10 seeds; 16 envs x 10 seeds, 1e6 steps), the bench at
#                       65,536 envs, float32 vs bfloat16 at 16,384, each backend choice timed both ways
#                       (experiments/backend_choices.py)
#   doctor              marljax doctor --expect $EXPECT (default gpu)
#   tests               the fast tests (not slow, not nightly) on the default backend, -n $TEST_WORKERS
#                       (12), each failure's traceback written to OUT/tests_failures.log as it ends; a test
#                       needing a package the kit leaves out (Jupyter, wandb, neptune, mlflow) skips
#   bench_scale         marljax bench scale: 64 .. 64k envs per device (env-steps/s, MFU, memory, compile)
#   train               the default run (marljax train), whole process timed
#   jaxmarl_own_config  JaxMARL's baselines/IPPO/ippo_ff_mpe.py beside marljax at JaxMARL's settings
#                       (16 envs, 10 seeds; 2e6 steps each rather than its 1e7, to fit the limit)
#   jaxmarl_4096_envs   the same at 4096 envs (1e7 steps)
#   dtype               marljax bench at 4096 envs, dtype=float32 then dtype=bfloat16 (MFU against
#                       the device's own measured matmul peak of that dtype)
#   async               marljax bench mode=async: generation, learning, sync and async rates and the
#                       overlap efficiency; actors and learner sharing the one accelerator, then
#                       the actors on the host CPU backend (async.actor_backend=cpu)
# --small: tiny budgets (and a few test files), so that the whole protocol runs on a CPU in
# minutes: the offline rehearsal (offline_kit.sh rehearse). $PYTHON: the interpreter (python3).
# JaxMARL's baseline: DIR/JaxMARL of a kit (--kit), a JaxMARL checkout (--jaxmarl), or $JAXMARL_DIR.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SELF="$HERE/$(basename "${BASH_SOURCE[0]}")"
PY="${PYTHON:-python3}"
EXPECT="${EXPECT:-gpu}"
STEPS=(doctor tests bench_scale train jaxmarl_own_config jaxmarl_4096_envs dtype async)
ALONE=(perf)  # steps that run only when named (--step perf), never in the whole protocol
declare -A LIMIT=([perf]=390 [doctor]=60 [tests]=570 [bench_scale]=330 [train]=180 [jaxmarl_own_config]=300
  [jaxmarl_4096_envs]=120 [dtype]=120 [async]=180)
declare -A SMALL_LIMIT=([perf]=900 [doctor]=60 [tests]=240 [bench_scale]=150 [train]=90 [jaxmarl_own_config]=150
  [jaxmarl_4096_envs]=150 [dtype]=240 [async]=240)

die() { echo "gpu_protocol: $*" >&2; exit 2; }

checkout() {  # the marljax checkout whose tests/ the tests step runs: this script's, else the working directory
  local d
  for d in "$HERE/.." "$PWD"; do [[ -d $d/tests && -f $d/pyproject.toml ]] && { (cd "$d" && pwd); return; }; done
  die "run from a marljax checkout (its tests/ are the tests step's)"
}

q() { printf '%q ' "$@"; }  # a command as one line that the shell reads back as it was

commands() {  # NAME SMALL JAXMARL: the step's commands, one shell line each
  local name=$1 small=$2 jaxmarl=$3 cli side pytest
  cli="$(q "$PY")-m marljax.cli"
  side="$(q "$PY" "$HERE/jaxmarl_side_by_side.py" --jaxmarl "$jaxmarl")"
  case $name in
    perf)
      local cache envs
      cache="compile_cache=$(q "$OUT/perf_compile_cache")"
      if ((small)); then
        for envs in 16 32; do echo "$cli bench target num_envs=$envs total_timesteps=8192 target=-100 num_chunks=2"; done
        for envs in cold warm; do
          echo "$cli train out_dir=$(q "$OUT/perf_train_$envs") overwrite=true progress=false $cache total_timesteps=16384 num_envs=16 num_chunks=2"
        done
        echo "$side--timesteps 8192 --seeds 1"
        echo "$cli bench num_envs=64 num_steps=16 total_timesteps=8192"
        for dt in float32 bfloat16; do echo "$cli bench num_envs=32 num_steps=16 total_timesteps=8192 dtype=$dt"; done
        echo "$(q "$PY" "$HERE/backend_choices.py") --small"
      else
        # what the last lease did not reach comes first (the time to -20.3 that the card's defaults are
        # chosen by, 4096 envs beside JaxMARL); the command-buffer pair is decided (0.94x) and gone
        for envs in 64 1024 4096; do echo "$cli bench target num_envs=$envs total_timesteps=2e7 num_chunks=100"; done
        for envs in cold warm; do echo "$cli train out_dir=$(q "$OUT/perf_train_$envs") overwrite=true progress=false $cache"; done
        echo "$side--num-envs 4096"
        echo "$side--timesteps 1e6"
        echo "$cli bench num_envs=65536"
        for dt in float32 bfloat16; do echo "$cli bench num_envs=16384 dtype=$dt"; done
        echo "$(q "$PY" "$HERE/backend_choices.py")"
      fi ;;
    doctor) echo "$cli doctor --expect $EXPECT" ;;
    tests)
      # each failure's traceback in OUT/tests_failures.log as it ends, so that a step stopped at its
      # limit still says why; the full suite -v: a line per test as it ends, to say what passed
      pytest="MARLJAX_FAILURES_LOG=$(q "$OUT/tests_failures.log")$(q "$PY")-m pytest -p absent_extras -p failures_as_they_end -m 'not slow and not nightly'"
      if ((small)); then echo "$pytest -q -rs -n 1 tests/test_trackers.py tests/test_offline_kit.py"
      else echo "$pytest -n ${TEST_WORKERS:-12} -v -rfEs"; fi ;;
    bench_scale)
      if ((small)); then echo "$cli bench scale num_steps=8 --max-envs 64 --timeout 120"
      else echo "$cli bench scale --timeout 100"; fi ;;
    train)
      local run="out_dir=$(q "$OUT/train")overwrite=true progress=false"
      if ((small)); then echo "$cli train $run total_timesteps=16384 num_envs=16 num_chunks=2"
      else echo "$cli train $run"; fi ;;
    jaxmarl_own_config)
      if ((small)); then echo "$side--timesteps 8192 --seeds 1"; else echo "$side--timesteps 2e6"; fi ;;
    jaxmarl_4096_envs)
      if ((small)); then echo "$side--num-envs 64 --timesteps 16384 --seeds 1"; else echo "$side--num-envs 4096"; fi ;;
    dtype)
      local dt bench="$cli bench num_envs=4096"
      ((small)) && bench="$cli bench num_envs=16 num_steps=16 total_timesteps=8192"
      for dt in float32 bfloat16; do echo "$bench dtype=$dt"; done ;;
    async)
      local asy="$cli bench mode=async num_envs=1024"
      ((small)) && asy="$cli bench mode=async num_envs=16 num_steps=16 total_timesteps=8192"
      # actors and learner on the one accelerator, then the actors on the host CPU (on a CPU: the same placement)
      echo "$asy"; echo "$asy async.actor_backend=cpu" ;;
  esac
}

run_commands() {  # NAME SMALL JAXMARL: inside the time limit; every command runs, the step fails if one did
  local line rc=0 start
  export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"  # absent_extras, the pytest plugin
  # the tests' conftest picks the CPU unless JAX_PLATFORMS is set: empty lets JAX take the accelerator
  export JAX_PLATFORMS="${JAX_PLATFORMS-}"
  export XLA_PYTHON_CLIENT_PREALLOCATE=false  # several test workers share one GPU
  if [[ $1 == jaxmarl_* && ! -f $3/baselines/IPPO/ippo_ff_mpe.py ]]; then
    echo "no JaxMARL baseline at '$3': give --kit DIR (a kit built with --jaxmarl) or --jaxmarl PATH"
    return 2
  fi
  while read -r line; do
    echo "\$ $line"
    start=$(date +%s.%N)
    eval "$line" || rc=$?
    echo "whole process: $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $start}") s"
  done < <(commands "$@")
  return $rc
}

run_step() {  # NAME SMALL JAXMARL: run the step under its limit, log it, record its exit code
  local name=$1 limit rc start seconds
  limit=$(($2 ? SMALL_LIMIT[$name] : LIMIT[$name]))
  echo "== $name (limit $limit s)"
  start=$(date +%s)
  set +e
  timeout --kill-after=20 "$limit" bash "$SELF" __step "$OUT" "$@" 2>&1 | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  seconds=$(($(date +%s) - start))
  ((rc == 124 || rc == 137)) && echo "gpu_protocol: $name passed its limit of $limit s" | tee -a "$OUT/$name.log"
  touch "$OUT/steps.tsv"
  { grep -v "^$name	" "$OUT/steps.tsv" || true; printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$seconds" "$limit"; } >"$OUT/steps.tsv.new"
  mv "$OUT/steps.tsv.new" "$OUT/steps.tsv"
}

main() {
  local only="" small=0 dry=0 jaxmarl="${JAXMARL_DIR:-}"
  OUT=""
  while (($#)); do
    case $1 in
      --step) only="$2"; shift 2 ;;
      --small) small=1; shift ;;
      --dry-run) dry=1; shift ;;
      --kit) jaxmarl="$2/JaxMARL"; shift 2 ;;
      --jaxmarl) jaxmarl="$2"; shift 2 ;;
      -*) die "unknown option $1" ;;
      *) OUT="$1"; shift ;;
    esac
  done
  [[ -n $OUT ]] || die "usage: gpu_protocol.sh OUT [--step NAME] [--small] [--kit DIR | --jaxmarl PATH] [--dry-run]"
  [[ -z $only || " ${STEPS[*]} ${ALONE[*]} " == *" $only "* ]] || die "--step $only: the steps are ${STEPS[*]} (and ${ALONE[*]}, alone)"
  local steps=("${STEPS[@]}") name total=0
  [[ -n $only ]] && steps=("$only")
  if ((dry)); then
    for name in "${steps[@]}"; do
      local limit=$((small ? SMALL_LIMIT[$name] : LIMIT[$name]))
      total=$((total + limit))
      printf '%s\t%s\n' "$name" "$limit"
      commands "$name" "$small" "$jaxmarl" | sed 's/^/\t$ /'
    done
    printf 'total\t%s\n' "$total"
    return 0
  fi
  mkdir -p "$OUT"
  OUT="$(cd "$OUT" && pwd)"
  cd "$(checkout)"
  for name in "${steps[@]}"; do run_step "$name" "$small" "$jaxmarl"; done
  "$PY" "$HERE/protocol_summary.py" "$OUT" | tee "$OUT/summary.txt"
}

if [[ ${1:-} == __step ]]; then  # one step's commands, in the process that `timeout` limits
  OUT="$2"; shift 2
  run_commands "$@"
else
  main "$@"
fi
