"""`marljax train | bench | bench-checkpoint | export`: the command line.

    marljax train [CONFIG.yaml] [key=value ...]
    marljax bench [CONFIG.yaml] [key=value ...]
    marljax export RUN_DIR POLICY_DIR [seed_index=N]

Nested keys take dots: `mesh.data=4`, `env_kwargs.scenario=3m`. A bad config
prints one line naming the field and exits with code 2 before compiling.
"""

from __future__ import annotations

import sys
from typing import Sequence

from marljax.config import ConfigError, load_config

USAGE = """usage: marljax {train,bench,bench-checkpoint} [CONFIG.yaml] [key=value ...]
       marljax export RUN_DIR POLICY_DIR [seed_index=N]

  train   train a team of agents (default: IPPO on MPE_simple_spread_v3)
          out_dir=D resume=true continues the run in D from its newest good checkpoint
  bench   measure throughput, FLOPs, MFU, compile time and memory; prints a JSON line last
  bench-checkpoint
          training time with checkpoints every checkpoint_every updates vs only at the end
  export  write one seed's trained actors to POLICY_DIR; load with marljax.load_policy

examples:
  marljax train
  marljax train algo=ippo env=MPE_simple_spread_v3 total_timesteps=2e6 num_envs=64 num_seeds=4 out_dir=runs/demo
  marljax train env=HeuristicEnemySMAX env_kwargs.scenario=3m recurrent=true
  marljax bench num_envs=1024
"""


def _split_args(args: Sequence[str]) -> tuple[str | None, list[str]]:
    path = None
    rest = list(args)
    if rest and "=" not in rest[0] and rest[0].endswith((".yaml", ".yml")):
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
    if command not in ("train", "bench", "bench-checkpoint"):
        print(f"marljax: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        path, overrides = _split_args(rest)
        config = load_config(path, overrides)
        if command == "train":
            from marljax.checkpoint import CheckpointError
            from marljax.run import TrainingDiverged, train

            try:
                train(config)
            except (TrainingDiverged, CheckpointError) as exc:
                print(f"marljax: {exc}", file=sys.stderr)
                return 1
        elif command == "bench":
            from marljax.bench import run_bench

            run_bench(config)
        else:
            from marljax.bench import run_checkpoint_bench

            run_checkpoint_bench(config)
    except ConfigError as exc:
        print(f"marljax: config error: {exc}", file=sys.stderr)
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
    from marljax.policy import export_policy

    try:
        export_policy(positional[0], positional[1], seed_index)
    except ConfigError as exc:
        print(f"marljax: config error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
