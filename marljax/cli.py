"""`marljax train | sweep | report | compare | bench | bench-target | bench-scale | bench-agents | bench-checkpoint | bench-sweep | export | doctor`.

    marljax train [CONFIG.yaml] [key=value ...]     (marljax train [algo=NAME] --help: every setting)
    marljax sweep SWEEP.yaml [key=value ...]
    marljax report SWEEP_DIR
    marljax compare RUN_DIR|SWEEP_DIR:CELL ... [--metric M] [--out DIR] [--allow-mixed] [--csv PATH]
    marljax bench [CONFIG.yaml] [key=value ...]
    marljax bench-target [CONFIG.yaml] [key=value ...] [target=R]
    marljax export RUN_DIR POLICY_DIR [seed_index=N]
    marljax doctor [--expect cpu|gpu|tpu]

Nested keys take dots: `mesh.data=4`, `env_kwargs.scenario=3m`. A bad config
prints one line naming the field and exits with code 2 before compiling.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Sequence

from marljax.config import ConfigError, load_config

USAGE = """usage: marljax {train,bench,bench-checkpoint,bench-sweep} [CONFIG.yaml] [key=value ...]
       marljax bench-target [CONFIG.yaml] [key=value ...] [target=R]
       marljax sweep SWEEP.yaml [key=value ...]
       marljax report SWEEP_DIR
       marljax compare RUN_DIR|SWEEP_DIR:CELL ... [--metric M] [--out DIR] [--allow-mixed] [--csv PATH]
       marljax export RUN_DIR POLICY_DIR [seed_index=N]
       marljax bench-scale [CONFIG.yaml] [key=value ...] [--max-envs N] [--timeout S]
       marljax bench-agents [--agents 4,16,64] [--mesh-agent 1,2,4,8] [--device-memory-mib M] [key=value ...]
       marljax doctor [--expect cpu|gpu|tpu]
       marljax COMMAND --help     (train --help lists every setting; algo=NAME --help another algorithm's)
       marljax --version

  train   train a team of agents (default: IPPO on MPE_simple_spread_v3)
          out_dir=D resume=true continues the run in D from its newest good checkpoint
  sweep   every cell of a sweep file with its seeds; traced axes (lr, ppo.ent_coef, ...) are vmapped
          in one program. Rerun to continue a killed sweep; overwrite=true starts it over,
          progress=false hides the bars, other key=value change the sweep's base (or seeds=N)
  report  mean, median and IQM with bootstrap CIs, plots and marl-eval JSON of a sweep directory
  compare training runs and sweep cells side by side: curves, final mean/median/IQM with bootstrap
          CIs and the probability of improvement between every pair of runs
  bench   measure throughput, FLOPs, MFU, compile time and memory; prints a JSON line last
  bench-target
          train until the mean training return over seeds first reaches R (per agent; default
          -20.3 on MPE simple_spread, 1.8 on SMAX 3m) and print the wall time with compilation,
          the env steps used and the curve; a JSON line last
  bench-scale
          the bench at 64, 256, 1k, 4k, 16k, 64k envs per device, until memory or time runs out
  bench-agents
          learner bytes per device, swap bytes and update time over agent count N and mesh.agent K
          (independent parameters), and the largest N whose learner state fits a device budget
  bench-checkpoint
          training time with checkpoints every checkpoint_every updates vs only at the end
  bench-sweep
          8 seeds x 4 learning rates: one vmapped program vs the same 32 runs one after another
  export  write one seed's trained actors to POLICY_DIR; load with marljax.load_policy
  doctor  versions, backend, devices and the installed jax build; --expect gpu exits 1 on a CPU-only jax

examples:
  marljax train
  marljax train algo=qmix --help
  marljax train algo=ippo env=MPE_simple_spread_v3 total_timesteps=2e6 num_envs=64 num_seeds=4 out_dir=runs/demo
  marljax train env=HeuristicEnemySMAX env_kwargs.scenario=3m recurrent=true
  marljax bench num_envs=1024
  marljax bench-target target=-20.3
  marljax sweep experiments/sharing_ablation.yaml
  marljax report runs/sweeps/sharing_ablation
  marljax compare runs/a runs/b runs/sweeps/lr_sweep:lr=0.001 --metric eval_return --out runs/compare_ab
"""

COMMAND_USAGE = {
    "sweep": """usage: marljax sweep SWEEP.yaml [key=value ...]

Run every cell of a sweep file with its seeds. Axes over traced hyperparameters (lr, gamma,
max_grad_norm, ppo.clip_eps, ...) are vmapped with the seeds in one compiled program; other axes
compile one program each. Rerunning the same command continues a killed sweep.

  overwrite=true    start the sweep over in its out_dir
  progress=false    hide the progress bars
  seeds=N           runs per cell
  out_dir=D         where the results go (default runs/sweeps/<name>)
  key=value         any other key changes the sweep's base config (marljax train --help lists them)

A sweep file holds: name, base (a config mapping), axes (key -> list of values: the grid), zip
(key -> list, varied together), seeds, traced (axis keys to vmap; default every traceable one),
out_dir. See experiments/lr_sweep.yaml.""",
    "report": """usage: marljax report SWEEP_DIR

Summarise a finished (or partial) sweep: mean, median and IQM with bootstrap confidence
intervals per cell, the absolute metric (and the win rate where the env has a win condition),
plots and marl-eval JSON, written into SWEEP_DIR.""",
    "compare": """usage: marljax compare RUN ... [--metric M] [--out DIR] [--allow-mixed] [--csv PATH]

Compare training runs and sweep cells over their seeds. A RUN is a training run's directory
(config.yaml and metrics.jsonl) or a sweep cell, SWEEP_DIR:CELL, by the cell's name
(runs/sweeps/lr_sweep:lr=0.001) or its directory name (lr-0.001); SWEEP_DIR/cells/<dir> works too.
x is env steps of one run; a shorter run's curve stops where it stops.

Prints, and writes as CSV, each run's final value (each seed's last value of the metric): mean,
median and IQM over seeds with 95% bootstrap CIs; and the probability of improvement P(A > B)
between every pair of runs (Agarwal et al., 2021), with its bootstrap CI.

  --metric M      return_mean, eval_return, win_rate or eval_win_rate (default: eval_return
                  where every run evaluated, else return_mean)
  --out DIR       where final.csv, improvement.csv, compare.md and a curves_<metric>.png per
                  metric go (default runs/compare_<time>)
  --csv PATH      also every value in long format: run, seed, env_steps, metric, value
  --allow-mixed   compare runs of different envs (refused otherwise)""",
    "bench-scale": """usage: marljax bench-scale [CONFIG.yaml] [key=value ...] [--max-envs N] [--timeout S]

Run `marljax bench` at 64, 256, 1024, 4096, 16384 and 65536 environments per device, each row
in its own process, until a row runs out of memory, passes --timeout seconds (default 900) or
passes --max-envs per device (default 4096 on CPU, 65536 elsewhere). Prints env-steps/s, MFU,
peak memory and compile time per row, a JSON line per row, and last a JSON line with every row.
key=value settings apply to every row (marljax train --help lists them).""",
    "bench-agents": """usage: marljax bench-agents [--agents 4,16,64] [--mesh-agent 1,2,4,8] [--device-memory-mib M] [key=value ...]

For each agent count N (MPE_simple_spread_v3 with N agents and N landmarks) and each K in
--mesh-agent dividing N, bench IPPO with param_sharing=independent and mesh.agent=K on 8 devices
(on a CPU with fewer, it re-runs itself on 8 fake CPU devices): learner bytes per device and in
all, beside the ideal 1/K; the swap's bytes per update (parameters, trajectories) and its share
of an update; the update's time and env-steps/s. Then the largest N whose learner state fits
--device-memory-mib per device (default: half the learner state of the largest N) on one device
and on each K: fitted through the measured bytes and checked against the state's shapes. Prints a
markdown table, then one JSON line. Defaults: 8 envs x 16 steps (times compare rows; they are not
absolute); key=value settings (marljax train --help) change every row.""",
    "doctor": """usage: marljax doctor [--expect cpu|gpu|tpu]

Print the versions of marljax, jax, jaxlib, flax, optax, orbax, chex, jaxmarl, tensorstore; the
backend; every device with its kind and memory; the process count; which accelerator build of jax
is installed (cuda12, tpu, or the CPU build); then one JSON line. --expect gpu (or tpu) exits
with code 1 and a line saying why when JAX sees no such device.""",
    "export": """usage: marljax export RUN_DIR POLICY_DIR [seed_index=N]

Write seed N's trained actors (from the newest good checkpoint of RUN_DIR) to POLICY_DIR;
load them with `marljax.load_policy(POLICY_DIR)`.""",
}
CONFIG_COMMANDS = {
    "train": "Train a team of agents; writes metrics.jsonl, checkpoints, config.yaml and returns.png to out_dir.",
    "bench": "Measure throughput, FLOPs, MFU, compile time and memory of the config's training; prints a JSON line last.",
    "bench-checkpoint": "Training time with checkpoints every checkpoint_every updates vs only at the end.",
    "bench-sweep": "4 learning rates x 8 seeds: one vmapped program vs the same runs one after another.",
    "bench-target": "Train until the mean training return per agent over seeds first reaches target=R (default: the "
                    "env's, -20.3 on MPE simple_spread, 1.8 on SMAX 3m); prints the wall time with compilation, the "
                    "env steps used and the curve, then a JSON line. total_timesteps is the budget.",
}


def config_help(command: str, algo: str) -> str:
    """`marljax COMMAND --help`: every setting of the core schema and of algo's sections, with
    its default for that algorithm and its help line, generated from the config's dataclasses."""
    from marljax.config import algorithm_schema, algorithms, schema_fields

    schema = algorithm_schema(algo)
    lines = [
        f"usage: marljax {command} [CONFIG.yaml] [key=value ...]" + (" [target=R]" if command == "bench-target" else ""),
        "",
        CONFIG_COMMANDS[command],
        f"Settings of algo={algo} ({schema.summary}), with its defaults; `algo=NAME --help` shows another's.",
        f"algorithms: {', '.join(algorithms())}",
        "Nested keys take dots (mesh.data=4, ppo.clip_eps=0.1, env_kwargs.scenario=3m).",
    ]
    heading = None
    for key, field, default in schema_fields(algo):
        section = key.split(".")[0] if key.split(".")[0] in schema.sections else "core"
        if section != heading:
            heading = section
            doc = "settings every algorithm has" if section == "core" else schema.sections[section].__doc__.strip().splitlines()[0]
            lines += ["", f"{section}: {re.sub(r'^`[a-z_]+[.][*]`: ', '', doc)}"]
        shown = "''" if default == "" else str(default).lower() if isinstance(default, bool) else str(default)
        lines.append(f"  {key:<30} {shown:<21} {field.metadata.get('help', '')}")
    return "\n".join(lines)


def _help_algo(path: str | None, overrides: list[str]) -> str:
    """The algorithm a help request is about: algo=NAME, else the config file's, else the default."""
    from marljax.config import parse_overrides, read_yaml_mapping

    values = read_yaml_mapping(path, "config", "a mapping of keys to values") if path is not None else {}
    algo = parse_overrides([a for a in overrides if a.startswith("algo=")]).get("algo", values.get("algo", "ippo"))
    return str(algo)


def _split_args(args: Sequence[str]) -> tuple[str | None, list[str]]:
    path = None
    rest = list(args)
    if rest and rest[0].endswith((".yaml", ".yml")) and ("=" not in rest[0] or Path(rest[0]).is_file()):
        path = rest.pop(0)
    return path, rest


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. Every failure ends in one line naming its cause, exit 1 (at run time)
    or 2 (usage, config); MARLJAX_DEBUG=1 shows the traceback of an unexpected one."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("marljax: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no traceback for the user
        if os.environ.get("MARLJAX_DEBUG") == "1":
            raise
        text = str(exc).strip().splitlines()
        print(f"marljax: {type(exc).__name__}: {text[0][:500] if text else 'no message'} "
              "(MARLJAX_DEBUG=1 shows the traceback)", file=sys.stderr)  # fmt: skip
        return 1


def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        if not argv:
            argv = ["train"]
        else:
            print(USAGE)
            return 0
    if argv[0] in ("--version", "-V", "version"):
        import jax

        from marljax.version import __version__

        print(f"marljax {__version__} (jax {jax.__version__})")
        return 0
    command, rest = argv[0], argv[1:]
    if "--help" in rest or "-h" in rest:
        return _command_help(command, [a for a in rest if a not in ("--help", "-h")])
    if command == "export":
        return _export(rest)
    if command == "doctor":
        from marljax import doctor

        return doctor.main(rest)
    if command == "bench-scale":
        return _bench_scale(rest)
    if command == "bench-agents":
        from marljax.bench.agents import main as bench_agents

        return bench_agents(rest)
    if command == "sweep":
        return _sweep(rest)
    if command == "report":
        return _report(rest)
    if command == "compare":
        return _compare(rest)
    if command not in ("train", "bench", "bench-target", "bench-checkpoint", "bench-sweep"):
        print(f"marljax: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        target = None
        if command == "bench-target":  # target=R is the benchmark's, not a config key
            from marljax.bench.target import split_target

            target, rest = split_target(rest)
        path, overrides = _split_args(rest)
        if command == "bench-sweep" and path is None:  # its own defaults, unless a file gives the run
            from marljax.bench.sweep import DEFAULTS

            overrides = [*DEFAULTS, *overrides]
        config = load_config(path, overrides)
        if command == "train":
            from marljax.train.checkpoint import CheckpointError
            from marljax.parallel.distributed import DistributedError
            from marljax.pipeline.watchdog import ActorStuck
            from marljax.train.chunks import Stopped
            from marljax.train.loop import TrainingDiverged, train

            try:
                train(config)
            except (TrainingDiverged, CheckpointError, DistributedError, ActorStuck) as exc:
                print(f"marljax: {exc}", file=sys.stderr)
                return 1
            except Stopped as exc:
                print(f"marljax: {exc}", file=sys.stderr)
                return exc.exit_code
        elif command == "bench":
            from marljax.bench.train import run_bench

            run_bench(config)
        elif command == "bench-target":
            from marljax.bench.target import TargetNotReached, default_target, run_target_bench

            target = default_target(config) if target is None else target  # refused before anything compiles
            try:
                run_target_bench(config, target)
            except TargetNotReached as exc:
                print(f"marljax: {exc}", file=sys.stderr)
                return 1
        elif command == "bench-sweep":
            from marljax.bench.sweep import run_sweep_bench

            run_sweep_bench(config)
        else:
            from marljax.bench.checkpoint import run_checkpoint_bench

            run_checkpoint_bench(config)
    except ConfigError as exc:
        print(f"marljax: config error: {exc}", file=sys.stderr)
        return 2
    return 0


def _bench_scale(args: list[str]) -> int:
    from marljax.bench.scale import parse_flags, run_scale_bench

    try:
        rest, max_envs, timeout = parse_flags(args)
        path, overrides = _split_args(rest)
        rows = run_scale_bench(path, overrides, max_envs, timeout)
    except ConfigError as exc:
        print(f"marljax: config error: {exc}", file=sys.stderr)
        return 2
    return 0 if rows else 1


def _command_help(command: str, rest: list[str]) -> int:
    """`marljax COMMAND --help`: the command's usage (for config commands, every setting)."""
    if command in COMMAND_USAGE:
        print(COMMAND_USAGE[command])
        return 0
    if command not in CONFIG_COMMANDS:
        print(f"marljax: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        print(config_help(command, _help_algo(*_split_args(rest))))
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
        from marljax.files import DamagedFile
        from marljax.parallel.distributed import DistributedError
        from marljax.sweeps.runner import run_sweep
        from marljax.sweeps.spec import load_sweep

        try:
            run_sweep(load_sweep(args[0], rest), **options)
        except (DistributedError, DamagedFile) as exc:
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
    from marljax.files import DamagedFile
    from marljax.sweeps.runner import finish

    try:
        finish(Path(args[0]))
    except FileNotFoundError as exc:
        print(f"marljax: {exc}", file=sys.stderr)
        return 2
    except DamagedFile as exc:
        print(f"marljax: {exc}", file=sys.stderr)
        return 1
    return 0


def _compare(args: list[str]) -> int:
    """`marljax compare RUN ... [--metric M] [--out DIR] [--allow-mixed] [--csv PATH]`."""
    from marljax.sweeps.compare import CompareError, compare

    specs, options, rest = [], {"allow_mixed": False}, list(args)
    while rest:
        arg = rest.pop(0)
        flag, has_value, value = arg.partition("=")
        if flag == "--allow-mixed" and not has_value:
            options["allow_mixed"] = True
        elif flag in ("--metric", "--out", "--csv"):
            if not has_value:
                if not rest or rest[0].startswith("--"):
                    print(f"marljax: compare: {flag} takes a value", file=sys.stderr)
                    return 2
                value = rest.pop(0)
            options[{"--metric": "metric", "--out": "out_dir", "--csv": "csv_path"}[flag]] = value
        elif arg.startswith("--"):
            print(f"marljax: compare: unknown option {arg}; expected --metric, --out, --csv or --allow-mixed",
                  file=sys.stderr)  # fmt: skip
            return 2
        else:
            specs.append(arg)
    from marljax.files import DamagedFile

    try:
        compare(specs, warn=lambda line: print(line, file=sys.stderr), **options)
    except CompareError as exc:
        print(f"marljax: compare: {exc}", file=sys.stderr)
        return 2
    except DamagedFile as exc:
        print(f"marljax: compare: {exc}", file=sys.stderr)
        return 1
    return 0


def _export(args: list[str]) -> int:
    positional = [a for a in args if "=" not in a]
    options = dict(a.split("=", 1) for a in args if "=" in a)
    if len(positional) != 2 or set(options) - {"seed_index", "trust_code"}:
        print(f"marljax: export takes RUN_DIR POLICY_DIR [seed_index=N] [trust_code=true]\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        seed_index = int(options.get("seed_index", 0))
    except ValueError:
        print(f"marljax: config error: seed_index: expected an integer, got {options['seed_index']!r}", file=sys.stderr)
        return 2
    if options.get("trust_code", "false").lower() not in ("true", "false"):
        print(f"marljax: config error: trust_code: expected true or false, got {options['trust_code']!r}", file=sys.stderr)
        return 2
    from marljax.train.checkpoint import CheckpointError
    from marljax.train.policy import PolicyError, export_policy

    try:
        export_policy(positional[0], positional[1], seed_index, trust_code=options.get("trust_code", "").lower() == "true")
    except ConfigError as exc:
        print(f"marljax: config error: {exc}", file=sys.stderr)
        return 2
    except (PolicyError, CheckpointError) as exc:
        print(f"marljax: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
