"""`marljax train | sweep | report | bench | bench-checkpoint | bench-sweep | export`: the command line.

    marljax train [CONFIG.yaml] [key=value ...]
    marljax sweep SWEEP.yaml [key=value ...]
    marljax report SWEEP_DIR
    marljax bench [CONFIG.yaml] [key=value ...]
    marljax export RUN_DIR POLICY_DIR [seed_index=N]

Nested keys take dots: `mesh.data=4`, `env_kwargs.scenario=3m`. A bad config
prints one line naming the field and exits with code 2 before compiling.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from marljax.config import ConfigError, load_config

USAGE = """usage: marljax {train,bench,bench-checkpoint,bench-sweep} [CONFIG.yaml] [key=value ...]
       marljax sweep SWEEP.yaml [key=value ...]
       marljax report SWEEP_DIR
       marljax export RUN_DIR POLICY_DIR [seed_index=N]

  train   train a team of agents (default: IPPO on MPE_simple_spread_v3)
          out_dir=D resume=true continues the run in D from its newest good checkpoint
  sweep   every cell of a sweep file with its seeds; traced axes (lr, ent_coef, ...) are vmapped
          in one program. Rerun to continue a killed sweep; overwrite=true starts it over,
          progress=false hides the bars, other key=value change the sweep's base (or seeds=N)
  report  mean, median and IQM with bootstrap CIs, plots and marl-eval JSON of a sweep directory
  bench   measure throughput, FLOPs, MFU, compile time and memory; prints a JSON line last
  bench-checkpoint
          training time with checkpoints every checkpoint_every updates vs only at the end
  bench-sweep
          8 seeds x 4 learning rates: one vmapped program vs the same 32 runs one after another
  export  write one seed's trained actors to POLICY_DIR; load with marljax.load_policy

examples:
  marljax train
  marljax train algo=ippo env=MPE_simple_spread_v3 total_timesteps=2e6 num_envs=64 num_seeds=4 out_dir=runs/demo
  marljax train env=HeuristicEnemySMAX env_kwargs.scenario=3m recurrent=true
  marljax bench num_envs=1024
  marljax sweep experiments/sharing_ablation.yaml
  marljax report runs/sweeps/sharing_ablation
"""


def _split_args(args: Sequence[str]) -> tuple[str | None, list[str]]:
    path = None
    rest = list(args)
    if rest and rest[0].endswith((".yaml", ".yml")) and ("=" not in rest[0] or Path(rest[0]).is_file()):
        path = rest.pop(0)
    return path, rest


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        if not argv:
            argv = ["train"]
        else:
            print(USAGE)
            return 0
    command, rest = argv[0], argv[1:]
    if command == "export":
        return _export(rest)
    if command == "sweep":
        return _sweep(rest)
    if command == "report":
        return _report(rest)
    if command not in ("train", "bench", "bench-checkpoint", "bench-sweep"):
        print(f"marljax: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        path, overrides = _split_args(rest)
        if command == "bench-sweep" and path is None:  # its own defaults, unless a file gives the run
            from marljax.bench.sweep import DEFAULTS

            overrides = [*DEFAULTS, *overrides]
        config = load_config(path, overrides)
        if command == "train":
            from marljax.train.checkpoint import CheckpointError
            from marljax.parallel.distributed import DistributedError
            from marljax.train.loop import TrainingDiverged, train

            try:
                train(config)
            except (TrainingDiverged, CheckpointError, DistributedError) as exc:
                print(f"marljax: {exc}", file=sys.stderr)
                return 1
        elif command == "bench":
            from marljax.bench import run_bench

            run_bench(config)
        elif command == "bench-sweep":
            from marljax.bench.sweep import run_sweep_bench

            run_sweep_bench(config)
        else:
            from marljax.bench import run_checkpoint_bench

            run_checkpoint_bench(config)
    except ConfigError as exc:
        print(f"marljax: config error: {exc}", file=sys.stderr)
        return 2
    return 0


def _sweep(args: list[str]) -> int:
    if not args or "=" in args[0]:
        print(f"marljax: sweep takes a sweep file first\n\n{USAGE}", file=sys.stderr)
        return 2
    options = {"overwrite": False, "progress": True}
    rest = []
    for arg in args[1:]:
        key, _, value = arg.partition("=")
        if key.strip() in options:
            if value.strip().lower() not in ("true", "false"):
                print(f"marljax: config error: {key}: expected true or false, got {value!r}", file=sys.stderr)
                return 2
            options[key.strip()] = value.strip().lower() == "true"
        else:
            rest.append(arg)
    try:
        from marljax.parallel.distributed import DistributedError
        from marljax.sweeps.runner import run_sweep
        from marljax.sweeps.spec import load_sweep

        try:
            run_sweep(load_sweep(args[0], rest), **options)
        except DistributedError as exc:
            print(f"marljax: {exc}", file=sys.stderr)
            return 1
    except ConfigError as exc:
        print(f"marljax: config error: {exc}", file=sys.stderr)
        return 2
    return 0


def _report(args: list[str]) -> int:
    if len(args) != 1:
        print(f"marljax: report takes one sweep directory\n\n{USAGE}", file=sys.stderr)
        return 2
    from marljax.sweeps.runner import finish

    try:
        finish(Path(args[0]))
    except FileNotFoundError as exc:
        print(f"marljax: {exc}", file=sys.stderr)
        return 2
    return 0


def _export(args: list[str]) -> int:
    positional = [a for a in args if "=" not in a]
    options = dict(a.split("=", 1) for a in args if "=" in a)
    if len(positional) != 2 or set(options) - {"seed_index"}:
        print(f"marljax: export takes RUN_DIR POLICY_DIR [seed_index=N]\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        seed_index = int(options.get("seed_index", 0))
    except ValueError:
        print(f"marljax: config error: seed_index: expected an integer, got {options['seed_index']!r}", file=sys.stderr)
        return 2
    from marljax.train.policy import export_policy

    try:
        export_policy(positional[0], positional[1], seed_index)
    except ConfigError as exc:
        print(f"marljax: config error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
