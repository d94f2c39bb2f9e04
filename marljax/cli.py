"""The `marljax` command line: `marljax COMMAND [ARGS ...]`; `marljax --help` lists the commands.

Every command is declared once, in COMMANDS below (its name, arguments, one-line summary, help
and handler); `marljax --help`, `marljax help COMMAND`, `marljax COMMAND --help` and the dispatch
are all made from that table. Its arguments are an `Arguments` (marljax/arguments.py), parsed
before its handler runs: a wrong shape is one line ending in the command's usage, exit code 2. `bench` holds the benchmarks as its subcommands (`marljax bench
target ...`).

Nested keys take dots: `mesh.data=4`, `env_kwargs.scenario=3m`. A bad config prints one line
naming the field and exits with code 2 before compiling.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

_IMPORTED = time.time()  # the start-up's start where /proc cannot say when the process began

from marljax.arguments import (  # noqa: E402 - after the time above
    KEY_VALUES,
    Arguments,
    Option,
    Parsed,
    UsageError,
    choice,
    finite,
    nearest,
    number_list,
    options_of,
    positive,
    typed,
)
from marljax.config import Config, load_config  # noqa: E402 - after the time above
from marljax.run_settings import RecordSettings  # noqa: E402 - after the time above
from marljax.schema import ConfigError  # noqa: E402 - after the time above


@dataclass(frozen=True)
class Command:
    """One command of `marljax` (or one of `marljax bench`): what the usage shows, what runs it."""

    name: str
    arguments: Arguments  # what it takes; its usage line is made from this
    summary: str  # what `marljax --help` says of it (wrapped there)
    run: Callable[[Parsed], int] | None  # its parsed arguments -> the exit code; None: a subcommand runs
    help: str = ""  # `marljax NAME --help`: said after the usage line
    settings: bool = False  # --help also lists every setting of the config (a command that trains)
    subcommands: tuple[Command, ...] = ()  # bench's benchmarks; the first is the default

    @property
    def args(self) -> str:
        """Its arguments as its usage line shows them."""
        return " ".join(filter(None, ["[NAME]" if self.subcommands else "", self.arguments.usage()]))


class _Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP outside the chunk loop (building the env, compiling, finishing), raised as
    Ctrl-C is, so that the `finally` blocks on the way out run (the out_dir lock, an overwrite's old run)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated(signum)


def _stopped_exits_with_its_signal(handler: Callable[[Parsed], int]) -> Callable[[Parsed], int]:
    """A handler whose run SIGINT, SIGTERM or SIGHUP stopped at a chunk boundary (`Stopped`) prints
    its one line on stderr and exits 128 + the signal number, as a shell reports it. SIGTERM or
    SIGHUP before the chunk loop (or after it) says so in one line, rather than killing the process
    with nothing said."""

    @functools.wraps(handler)
    def run(args: Parsed) -> int:
        import signal

        main_thread = threading.current_thread() is threading.main_thread()
        previous = (
            {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)} if main_thread else {}
        )
        try:
            return handler(args)
        except _Terminated as exc:
            name = signal.Signals(exc.signum).name
            when = "outside the training chunks (starting up: building the env, compiling; or finishing)"
            after = "no checkpoint was saved then (resume=true continues from the newest one, if any)"
            print(f"marljax: stopped by {name} {when}; {after}", file=sys.stderr)
            return 128 + exc.signum
        except Exception as exc:
            from marljax.train.chunks import Stopped  # imported here: it imports jax, not wanted at start-up

            if not isinstance(exc, Stopped):
                raise
            print(f"marljax: {exc}", file=sys.stderr)
            return exc.exit_code
        finally:
            for s, previous_handler in previous.items():
                signal.signal(s, previous_handler)

    return run


def _config(args: Parsed, defaults: Sequence[str] = ()) -> Config:
    """The config of [CONFIG.yaml] [key=value ...]; `defaults` come first when no file is given."""
    return load_config(args.config, [*(defaults if args.config is None else ()), *args.overrides])


def _failed(exc: Exception, prefix: str = "") -> int:
    """A run-time failure the command names: its one line on stderr, exit code 1."""
    print(f"marljax: {prefix}{exc}", file=sys.stderr)
    return 1


@_stopped_exits_with_its_signal
def _train(args: Parsed) -> int:
    from marljax.parallel.distributed import DistributedError
    from marljax.pipeline.watchdog import ActorStuck
    from marljax.train.checkpoint import CheckpointError
    from marljax.train.loop import TrainingDiverged, train
    from marljax.train.timing import process_start

    config = _config(args)
    try:
        train(config, started=process_start() or _IMPORTED)
    except (TrainingDiverged, CheckpointError, DistributedError, ActorStuck) as exc:
        from marljax.parallel.peer_watch import settle

        settle(exc)  # a checkpoint a lost peer failed: its watch's line instead (it exits the process)
        return _failed(exc)
    return 0


def _bench_throughput(args: Parsed) -> int:
    from marljax.bench.train import run_bench

    run_bench(_config(args))
    return 0


@_stopped_exits_with_its_signal
def _bench_target(args: Parsed) -> int:
    from marljax.bench.target import TargetNotReached, default_target, run_target_bench

    config = _config(args)
    target = args.options["target"]
    target = default_target(config) if target is None else target  # refused before anything compiles
    try:
        run_target_bench(config, target)
    except TargetNotReached as exc:
        return _failed(exc)
    return 0


def _bench_scale(args: Parsed) -> int:
    from marljax.bench.scale import ROW_TIMEOUT_S, run_scale_bench

    timeout = args.options["timeout"] or ROW_TIMEOUT_S
    return 0 if run_scale_bench(args.config, args.overrides, args.options["max_envs"], timeout) else 1


def _bench_sequence(args: Parsed) -> int:
    from marljax.bench.sequence import AGENTS, run_sequence_bench

    run_sequence_bench(args.options["agents"] or AGENTS, args.overrides)
    return 0


def _bench_agents(args: Parsed) -> int:
    from marljax.bench.agents import main as bench_agents

    return bench_agents(args)


def _bench_checkpoint(args: Parsed) -> int:
    from marljax.bench.checkpoint import run_checkpoint_bench

    run_checkpoint_bench(_config(args))
    return 0


def _bench_sweep(args: Parsed) -> int:
    from marljax.bench.sweep import DEFAULTS, run_sweep_bench

    run_sweep_bench(_config(args, DEFAULTS))  # its own defaults, unless a file gives the run
    return 0


def _bench_stragglers(args: Parsed) -> int:
    from marljax.bench.stragglers import DEFAULTS, STEP_COSTS, run_straggler_bench

    costs, slow_factor, repeats = (args.options[k] for k in ("step_costs", "slow_factor", "repeats"))
    run_straggler_bench(load_config(None, DEFAULTS + args.overrides), costs or STEP_COSTS, slow_factor, repeats)
    return 0


def _bench_balance(args: Parsed) -> int:
    from marljax.bench.balance import DEFAULTS, run_balance_bench

    run_balance_bench(load_config(None, DEFAULTS + args.overrides), args.options["ratio"])
    return 0


def _doctor(args: Parsed) -> int:
    from marljax import doctor

    return doctor.main(args.options["expect"])


def _unknown(kind: str, name: str, choices: Sequence[Command], prefix: str = "") -> int:
    """A mistyped command or bench: one line with the nearest name, then at most that one's usage line; exit 2.
    `prefix`: the words before the name (`bench `), or none."""
    by_name = {c.name: c for c in choices}
    close = nearest(name, list(by_name))
    if close:
        line = f"usage: marljax {prefix}{close} {by_name[close].args}".rstrip()
        print(f"marljax: unknown {kind} {name!r}; did you mean {close!r}?\n{line}", file=sys.stderr)
    else:
        names = ", ".join(by_name)
        print(f"marljax: unknown {kind} {name!r}; allowed: {names} (marljax {prefix}--help says more)", file=sys.stderr)
    return 2


def _looks_like_a_name(arg: str) -> bool:
    """A word that is no config file, no key=value and no flag: meant as a bench's name."""
    return re.fullmatch(r"[A-Za-z][\w-]*", arg) is not None and not arg.endswith((".yaml", ".yml"))


@_stopped_exits_with_its_signal
def _sweep(args: Parsed) -> int:
    from marljax.files import DamagedFile
    from marljax.parallel.distributed import DistributedError
    from marljax.sweeps.runner import run_sweep
    from marljax.sweeps.spec import load_sweep
    from marljax.train.timing import process_start

    try:
        sweep = load_sweep(args.positional[0], args.overrides)
        run_sweep(sweep, **args.options, started=process_start() or _IMPORTED)
    except (DistributedError, DamagedFile) as exc:
        return _failed(exc)
    return 0


def _report(args: Parsed) -> int:
    from marljax.files import DamagedFile
    from marljax.sweeps.runner import finish

    try:
        finish(Path(args.positional[0]))
    except FileNotFoundError as exc:
        print(f"marljax: {exc}", file=sys.stderr)
        return 2
    except DamagedFile as exc:
        return _failed(exc)
    return 0


def _compare(args: Parsed) -> int:
    from marljax.files import DamagedFile
    from marljax.sweeps.compare import CompareError, compare

    o = args.options
    try:
        warn = functools.partial(print, file=sys.stderr)
        compare(args.positional, o["metric"], o["out"], allow_mixed=o["allow_mixed"], csv_path=o["csv"], warn=warn)
    except CompareError as exc:
        print(f"marljax: compare: {exc}", file=sys.stderr)
        return 2
    except DamagedFile as exc:
        return _failed(exc, "compare: ")
    return 0


def _export(args: Parsed) -> int:
    from marljax.train.checkpoint import CheckpointError
    from marljax.train.policy import PolicyError, export_policy

    try:
        run_dir, policy_dir = args.positional
        export_policy(run_dir, policy_dir, args.options["seed_index"], trust_code=args.options["trust_code"])
    except (PolicyError, CheckpointError) as exc:
        return _failed(exc)
    return 0


def _record(args: Parsed) -> int:
    """`marljax record SOURCE OUT [key=value ...]` (marljax/train/record.py)."""
    from marljax.datasets import DatasetError
    from marljax.train.policy import PolicyError
    from marljax.train.record import record

    settings = RecordSettings(**args.options)
    settings.check()
    try:
        source, out = args.positional
        record(source, out, settings, args.overrides)
    except (DatasetError, PolicyError) as exc:
        return _failed(exc)
    return 0


@_stopped_exits_with_its_signal
def _finetune(args: Parsed) -> int:
    """`marljax finetune OFFLINE_RUN_DIR out_dir=D [key=value ...]` (marljax/train/finetune.py)."""
    from marljax.train.checkpoint import CheckpointError
    from marljax.train.finetune import finetune
    from marljax.train.loop import TrainingDiverged
    from marljax.train.policy import PolicyError

    try:
        finetune(args.positional[0], args.overrides)
    except (PolicyError, CheckpointError, TrainingDiverged) as exc:
        return _failed(exc)
    return 0


# the arguments of a command that trains: [CONFIG.yaml] [key=value ...]
TRAINS = Arguments(config=True, overrides=KEY_VALUES)
# the benches that start from their own defaults: key=value only
SETTINGS = Arguments(overrides=KEY_VALUES)


BENCHES = (
    Command(
        "throughput",
        TRAINS,
        "the default: throughput, FLOPs, MFU, compile time and memory of "
        "the config's training (`marljax bench key=value ...` runs it); prints a JSON line last",
        _bench_throughput,
        "Measure throughput, FLOPs, MFU, compile time and memory of the config's training; prints a JSON line last.",
        settings=True,
    ),
    Command(
        "target",
        Arguments(config=True, options=(Option("target", "R", finite("a return per agent")),), overrides=KEY_VALUES),
        "train until the mean training return over seeds first "
        "reaches R (per agent; default -20.3 on MPE simple_spread, 1.8 on SMAX 3m) and print the wall time with "
        "compilation, the env steps used and the curve; a JSON line last",
        _bench_target,
        "Train until the mean training return per agent over seeds first reaches target=R (default: the env's, -20.3 "
        "on MPE simple_spread, 1.8 on SMAX 3m); prints the wall time with compilation, the env steps used and the "
        "curve, then a JSON line. total_timesteps is the budget.",
        settings=True,
    ),
    Command(
        "scale",
        Arguments(
            config=True,
            options=(Option("--max-envs", "N", positive(int)), Option("--timeout", "S", positive(int))),
            overrides=KEY_VALUES,
        ),
        "the bench at 64, 256, 1k, 4k, 16k, 64k envs per device, until memory or time runs out",
        _bench_scale,
        """\
Run `marljax bench` at 64, 256, 1024, 4096, 16384 and 65536 environments per device, each row
in its own process, until a row runs out of memory, passes --timeout seconds (default 900) or
passes --max-envs per device (default 4096 on CPU, 65536 elsewhere). Prints env-steps/s, MFU,
peak memory and compile time per row, a JSON line per row, and last a JSON line with every row.
key=value settings apply to every row (marljax train --help lists them).""",
    ),
    Command(
        "agents",
        Arguments(
            options=(
                Option("--agents", "4,16,64", number_list(int, 1)),
                Option("--mesh-agent", "1,2,4,8", number_list(int, 1)),
                Option("--device-memory-mib", "M", positive(float)),
            ),
            overrides=KEY_VALUES,
        ),
        "learner bytes per device, swap bytes and update time over agent count N and mesh.agent K (independent "
        "parameters), and the largest N whose learner state fits a device budget",
        _bench_agents,
        """\
For each agent count N (MPE_simple_spread_v3 with N agents and N landmarks) and each K in
--mesh-agent dividing N, bench IPPO with param_sharing=independent and mesh.agent=K on 8 devices
(on a CPU with fewer, it re-runs itself on 8 fake CPU devices): learner bytes per device and in
all, beside the ideal 1/K; the swap's bytes per update (parameters, trajectories) and its share
of an update; the update's time and env-steps/s. Then the largest N whose learner state fits
--device-memory-mib per device (default: half the learner state of the largest N) on one device
and on each K: fitted through the measured bytes and checked against the state's shapes. Prints a
markdown table, then one JSON line. Defaults: 8 envs x 16 steps (times compare rows; they are not
absolute); key=value settings (marljax train --help) change every row.""",
    ),
    Command(
        "sequence",
        Arguments(options=(Option("--agents", "4,16,64,128", number_list(int, 2)),), overrides=KEY_VALUES),
        "Sable's memory and time per update over the agent count N: chunked, fully parallel, and MAPPO beside them",
        _bench_sequence,
        """\
For each agent count N (MPE_simple_spread_v3 with N agents and N landmarks), compile and time one
update of one seed for algo=sable with sable.chunk_size agents per chunk (default 16), for
algo=sable with chunk_size=N (the fully parallel decoder, N x N scores) and for MAPPO with shared
parameters: XLA's temporary memory of the compiled update, the fastest of 3 updates, env-steps/s,
compile time. Prints a markdown table, then one JSON line. Defaults: 8 envs x 16 steps, 2 epochs
of 2 minibatches; key=value settings (marljax train --help) change every row.""",
    ),
    Command(
        "checkpoint",
        TRAINS,
        "training time with checkpoints every checkpoint_every updates vs only at the end",
        _bench_checkpoint,
        "Training time with checkpoints every checkpoint_every updates vs only at the end.",
        settings=True,
    ),
    Command(
        "sweep",
        TRAINS,
        "8 seeds x 4 learning rates: one vmapped program vs the same 32 runs one after another",
        _bench_sweep,
        "4 learning rates x 8 seeds: one vmapped program vs the same runs one after another.",
        settings=True,
    ),
    Command(
        "stragglers",
        Arguments(
            options=(
                Option("step_costs", "0,0.0005,0.005", number_list(float, 0)),
                Option("slow_factor", "10", positive(float), 10.0),
                Option("repeats", "1", positive(int), 1),
            ),
            overrides=KEY_VALUES,
        ),
        "host env copies at several "
        "step costs, with and without a straggler: the async pipeline's env-steps/s for each async.host_stepping",
        _bench_stragglers,
        """\
The async pipeline on marljax.testing.host_straggler (a numpy PettingZoo env whose step sleeps
step_cost_s) with 8 copies per actor, each step cost in step_costs (seconds) with every copy fast
and with 1 copy in 8 slow_factor times slower, under async.host_stepping=independent (the
default) and lockstep: consumed env-steps/s after a warm-up run, and the default's rate over the
faster of the two. Prints a table, then one JSON line. key=value settings change the run
(defaults: mode=async, num_envs=8, num_steps=32, hidden_size=32).""",
    ),
    Command(
        "balance",
        Arguments(options=(Option("ratio", "3", positive(float), 3.0),), overrides=KEY_VALUES),
        "dropped batches with async.balance=off and rate, on a run whose "
        "actors could produce ratio times more batches than the learner consumes",
        _bench_balance,
        """\
staleness_policy=drop, 2 actor threads, K=1, a buffer of 2. Generation and learning are timed
alone first; the learner is then padded with a host sleep so that the threads' generation
capacity is ratio (default 3) x consumption. Both settings run the same number of updates on the
same runner (compiled once). Prints a table (drop share = stale drops / produced), then one JSON
line. Figures, not assertions. key=value settings change the run.""",
    ),
)

COMMANDS = (
    Command(
        "train",
        TRAINS,
        "train a team of agents (default: IPPO on MPE_simple_spread_v3); "
        "out_dir=D resume=true continues the run in D from its newest good checkpoint",
        _train,
        "Train a team of agents; writes metrics.jsonl, checkpoints, config.yaml and returns.png to out_dir.",
        settings=True,
    ),
    Command(
        "sweep",
        Arguments(
            ("SWEEP.yaml",),
            options=(
                Option("overwrite", "true", typed("bool"), False),
                Option("progress", "false", typed("bool"), True),
            ),
            overrides=KEY_VALUES,
        ),
        "every cell of a sweep file with its seeds; traced axes (lr, "
        "ppo.ent_coef, ...) are vmapped in one program. Rerun to continue a killed sweep; overwrite=true starts it "
        "over, progress=false hides the bars, other key=value change the sweep's base (or seeds=N)",
        _sweep,
        """\
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
    ),
    Command(
        "report",
        Arguments(("SWEEP_DIR",)),
        "mean, median and IQM with bootstrap CIs, plots and marl-eval JSON of a sweep directory",
        _report,
        """\
Summarise a finished (or partial) sweep: mean, median and IQM with bootstrap confidence
intervals per cell, the absolute metric (and the win rate where the env has a win condition),
plots and marl-eval JSON, written into SWEEP_DIR.""",
    ),
    Command(
        "compare",
        Arguments(
            more="RUN_DIR|SWEEP_DIR:CELL",
            options=(Option("--metric", "M"), Option("--out", "DIR"), Option("--allow-mixed"), Option("--csv", "PATH")),
        ),
        "training runs and sweep cells side by side: curves, final mean/median/IQM with bootstrap CIs and the "
        "probability of improvement between every pair of runs",
        _compare,
        """\
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
    ),
    Command(
        "bench",
        TRAINS,
        "measure: throughput, FLOPs, MFU, compile time and memory "
        "(the default), or the benchmark NAME (below); each prints a JSON line last",
        None,
        "Benchmarks; each prints its figures as a table, then, last, one JSON line.",
        subcommands=BENCHES,
    ),
    Command(
        "export",
        Arguments(
            ("RUN_DIR", "POLICY_DIR"),
            options=(Option("seed_index", "N", typed("int"), 0), Option("trust_code", "true", typed("bool"), False)),
        ),
        "write one seed's trained actors to POLICY_DIR; load with marljax.load_policy",
        _export,
        """\
Write seed N's trained actors (from the newest good checkpoint of RUN_DIR) to POLICY_DIR;
load them with `marljax.load_policy(POLICY_DIR)`.""",
    ),
    Command(
        "record",
        Arguments(
            ("SOURCE", "OUT"),
            options=options_of(RecordSettings, shown=("transitions", "num_envs", "epsilon", "greedy", "quality")),
            overrides=KEY_VALUES,
        ),
        "write a policy's experience (a run, an exported policy or random) as an offline dataset in OG-MARL's Vault "
        "format, with its episode-return distribution and quality label",
        _record,
        """\
Roll out SOURCE (a run's directory: its newest checkpoint, seed seed_index=N; an exported policy;
or random, in the env that env=... and env_kwargs.*=... choose) in num_envs environments (default
64) for transitions steps in all (default 100000), and write the experience to OUT/<quality> as a
flashbax Vault in OG-MARL's layout (observations, actions, rewards, terminals, truncations,
infos.legals, infos.state where the env has a global state), with marljax.json beside it: the env,
the policy, its episode-return distribution (mean, std, quantiles, per agent), the quality label
and a sha256 of every file, checked whenever the dataset is read.

  epsilon=X        each agent takes a uniformly random available action with probability X
  greedy=false     the policy's action is sampled from it (default: its most likely action)
  quality=LABEL    the dataset's label and directory name (default: Poor for random, Medium for a
                   trained policy with exploration, Good without)
  seed=N           the recording's seed; trust_code=true rebuilds an env given as an import path

Train on it with an offline algorithm: marljax train algo=bc offline.dataset=OUT/<quality>.
Needs flashbax: pip install "marljax[offline]".""",
    ),
    Command(
        "finetune",
        Arguments(("OFFLINE_RUN_DIR",), overrides=f"out_dir=D [algo=ippo] {KEY_VALUES}"),
        "continue an offline run's policy online: a new run of algo (default ippo) starting from its parameters",
        _finetune,
        """\
Start an online run in out_dir from the newest good checkpoint of OFFLINE_RUN_DIR (offline-to-online):
the same env, networks and seeds; every parameter the online algorithm shares with the offline run
(same group, path and shape) is copied, the rest (a critic the offline run did not train) starts
from the online algorithm's initialisation, and the optimiser starts afresh. A bc or maicq run
continues with algo=ippo (their actors are IPPO's actor-critic; mappo takes the actor), an iql_cql
run with algo=iql. Any key=value of marljax train applies (total_timesteps, eval_every, ...); the
run is then an ordinary one (resume=true continues it).""",
    ),
    Command(
        "doctor",
        Arguments(options=(Option("--expect", "cpu|gpu|tpu", choice("cpu", "gpu", "tpu")),)),
        "versions, backend, devices and the installed jax build; --expect gpu exits 1 on a CPU-only jax",
        _doctor,
        """\
Print the versions of marljax, jax, jaxlib, flax, optax, orbax, chex, jaxmarl, tensorstore; the
backend; every device with its kind and memory; the process count; which accelerator build of jax
is installed (cuda12, tpu, or the CPU build); then one JSON line. --expect gpu (or tpu) exits
with code 1 and a line saying why when JAX sees no such device.""",
    ),
)
BY_NAME = {command.name: command for command in COMMANDS}

EXAMPLES = """\
  marljax train
  marljax train algo=qmix --help
  marljax train algo=mappo env=MPE_simple_spread_v3 total_timesteps=2e6 num_seeds=4 out_dir=runs/demo
  marljax train env=HeuristicEnemySMAX env_kwargs.scenario=3m recurrent=true
  marljax bench num_envs=1024
  marljax bench target target=-20.3
  marljax sweep experiments/sharing_ablation.yaml
  marljax report runs/sweeps/sharing_ablation
  marljax compare runs/a runs/b runs/sweeps/lr_sweep:lr=0.001 --metric eval_return --out runs/compare_ab"""


def _wrapped(name: str, text: str, width: int = 12) -> list[str]:
    """`  name  text`, the text wrapped to 100 columns under its own indent (on the next line
    when the name is too long for the column)."""
    indent = " " * (width + 2)
    if len(name) < width:
        return textwrap.wrap(text, 100, initial_indent=f"  {name:<{width}}", subsequent_indent=indent)
    return [f"  {name}", *textwrap.wrap(text, 100, initial_indent=indent, subsequent_indent=indent)]


def usage() -> str:
    """`marljax --help`: every command's usage line and summary, every bench's, from COMMANDS."""
    lines = [f"{'usage:' if i == 0 else '      '} marljax {c.name} {c.args}" for i, c in enumerate(COMMANDS)]
    lines += [
        "       marljax COMMAND --help     (train --help lists every setting; algo=NAME --help another algorithm's)",
        "       marljax help [COMMAND [NAME]]",
        "       marljax --version",
        "",
    ]
    for command in COMMANDS:
        lines += _wrapped(command.name, command.summary, 8)
    for command in COMMANDS:
        if command.subcommands:
            lines += ["", f"{command.name} NAME (marljax {command.name} NAME --help says more):"]
            for sub in command.subcommands:
                lines += _wrapped(sub.name, sub.summary)
    return "\n".join([*lines, "", "examples:", EXAMPLES])


def command_usage(path: tuple[Command, ...], algo: str | None = None, env: str | None = None) -> str:
    """`marljax bench target --help` and the like: the usage line and the command's help; for a
    command that trains, every setting of algo's schema (its defaults for env's family); for one
    with subcommands, their list."""
    command = path[-1]
    name = " ".join(c.name for c in path)
    if command.settings:
        return config_help(name, command.args, command.help, algo or "ippo", env)
    lines = [f"usage: marljax {name} {command.args}", "", command.help]
    if command.subcommands:
        lines += ["", f"marljax {name} NAME [ARGS ...], where NAME is:"]
        for sub in command.subcommands:
            lines += _wrapped(sub.name, sub.summary)
        lines += [
            "",
            *textwrap.wrap(
                f"marljax {name} NAME --help: NAME's arguments (and every setting, for those "
                f"that train); {command.subcommands[0].name} is the default.",
                100,
            ),
        ]
    return "\n".join(lines)


def config_help(name: str, args: str, description: str, algo: str, env: str | None = None) -> str:
    """`marljax COMMAND --help` for a command that trains: every setting of the core schema and of
    algo's sections, with its default for that algorithm on env (its family's defaults marked) and
    its help line, generated from the config's dataclasses."""
    from marljax.config import device_defaults, family_defaults, load_config, schema_fields
    from marljax.families import family_of
    from marljax.schema import algorithm_schema, algorithms, to_flat

    schema = algorithm_schema(algo)
    chosen = load_config(None, [f"algo={algo}", *([f"env={env}"] if env else [])])
    family, kept = family_defaults(chosen)
    device, on_device = device_defaults(chosen)
    declared = "; ".join(
        f"{f}: " + ", ".join(f"{k}={v}" for k, v in to_flat(dict(o)).items())
        for f, o in sorted(schema.family_defaults.items())
    )
    lines = [
        f"usage: marljax {name} {args}",
        "",
        description,
        f"Settings of algo={algo} ({schema.summary}), with its defaults on env={chosen.env} "
        f"(family {family or family_of(chosen.env)}); `algo=NAME --help` and `env=ID --help` show others'.",
        f"algorithms: {', '.join(algorithms())}",
        f"Defaults per env family (family_defaults=auto; * below: this env's): {declared or 'none declared'}.",
        f"Defaults this machine's {device or 'device'} chose (device_defaults=auto; (device) below): "
        + (", ".join(f"{k}={v}" for k, v in on_device.items()) or "none"),
        "Nested keys take dots (mesh.data=4, ppo.clip_eps=0.1, env_kwargs.scenario=3m).",
    ]
    heading = None
    for key, field, default in schema_fields(algo, env):
        section = key.split(".")[0] if key.split(".")[0] in schema.sections else "core"
        if section != heading:
            heading = section
            doc = (
                "settings every algorithm has"
                if section == "core"
                else schema.sections[section].__doc__.strip().splitlines()[0]
            )
            lines += ["", f"{section}: {re.sub(r'^`[a-z_]+[.][*]`: ', '', doc)}"]
        shown = "''" if default == "" else str(default).lower() if isinstance(default, bool) else str(default)
        shown += " *" if key in kept else ""
        shown += " (device)" if key in on_device else ""
        lines.append(f"  {key:<30} {shown:<21} {field.metadata.get('help', '')}")
    return "\n".join(lines)


def resolve(argv: Sequence[str]) -> tuple[tuple[Command, ...], list[str]]:
    """(the command path argv names, the arguments left): ("bench", "target") for `bench target
    ...`; (bench,) alone when no bench is named; () for an unknown command."""
    if not argv:
        return (), []
    names = list(argv)
    command = BY_NAME.get(names[0])
    if command is None:
        return (), list(argv)
    rest = names[1:]
    sub = next((s for s in command.subcommands if rest and rest[0] == s.name), None)
    return ((command, sub), rest[1:]) if sub else ((command,), rest)


def _runnable(path: tuple[Command, ...], rest: list[str]) -> tuple[Command, ...] | None:
    """The path with the default subcommand where a command with subcommands names none (`bench
    num_envs=4`); None, after the line `_unknown` prints, when its first argument is a mistyped one."""
    if not path[-1].subcommands:
        return path
    if rest and _looks_like_a_name(rest[0]):
        _unknown(path[-1].name, rest[0], path[-1].subcommands, prefix=f"{path[-1].name} ")
        return None
    return (*path, path[-1].subcommands[0])


def _config_error(exc: ConfigError) -> int:
    """A bad setting or option value: one line naming it, exit code 2."""
    print(f"marljax: config error: {exc}", file=sys.stderr)
    return 2


def _parsed(path: tuple[Command, ...], rest: list[str]) -> Parsed | None:
    """The command's arguments parsed; None after the one line a wrong shape or a bad value prints."""
    name = " ".join(c.name for c in path)
    try:
        return path[-1].arguments.parse(rest)
    except UsageError as exc:
        print(f"marljax: {name}: {path[-1].arguments.refusal(f'marljax {name}', exc)}", file=sys.stderr)
    except ConfigError as exc:
        _config_error(exc)
    return None


def _help_choice(args: Parsed) -> tuple[str, str | None]:
    """(the algorithm, the env) a help request is about: algo=NAME / env=ID, else the config file's,
    else the default (None for the env)."""
    from marljax.schema import parse_overrides, read_yaml_mapping

    values = read_yaml_mapping(args.config, "config", "a mapping of keys to values") if args.config else {}
    given = {**values, **parse_overrides([a for a in args.overrides if a.startswith(("algo=", "env="))])}
    return str(given.get("algo", "ippo")), None if given.get("env") is None else str(given["env"])


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. Every failure ends in one line naming its cause, exit 1 (at run time)
    or 2 (usage, config); MARLJAX_DEBUG=1 shows the traceback of an unexpected one."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("marljax: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout's reader left (`marljax --help | head`): no one to tell, nothing wrong here
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's own flush must not fail too
        return 141  # what a shell reports of a process that SIGPIPE ended
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no traceback for the user
        if os.environ.get("MARLJAX_DEBUG") == "1":
            raise
        from marljax.files import disk_full
        from marljax.parallel.peer_watch import settle
        from marljax.process_env import backend_failure

        settle(exc)  # a collective a lost peer failed (gloo): its watch's line instead (it exits the process)

        if (line := backend_failure(exc)) is not None:
            print(f"marljax: {line}", file=sys.stderr)
            return 2
        if (line := disk_full(exc)) is not None:
            print(f"marljax: {line}", file=sys.stderr)
            return 1
        text = str(exc).strip().splitlines()
        print(
            f"marljax: {type(exc).__name__}: {text[0][:500] if text else 'no message'} "
            "(MARLJAX_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["train"]
    if argv[0] in ("-h", "--help", "help"):
        if argv[0] == "help" and argv[1:]:  # marljax help COMMAND [NAME]
            return _command_help(argv[1:] + ["--help"])
        print(usage())
        return 0
    if argv[0] in ("--version", "-V", "version"):
        import jax

        from marljax.version import __version__

        print(f"marljax {__version__} (jax {jax.__version__})")
        return 0
    if "--help" in argv[1:] or "-h" in argv[1:]:
        return _command_help(argv)
    named, rest = resolve(argv)
    if not named:
        return _unknown("command", argv[0], COMMANDS)
    path = _runnable(named, rest)
    args = None if path is None else _parsed(path, rest)
    if path is None or args is None:
        return 2
    from marljax.process_env import check_environment

    try:
        check_environment()  # before JAX or matplotlib reads XLA_FLAGS or MPLBACKEND
    except ConfigError as exc:
        print(f"marljax: {exc}", file=sys.stderr)
        return 2
    run = path[-1].run
    assert run is not None  # only a command with subcommands has none, and one of them was chosen
    try:
        return run(args)
    except ConfigError as exc:  # the arguments, the config, a run that refuses them
        return _config_error(exc)


def _command_help(argv: list[str]) -> int:
    """`marljax COMMAND [NAME] [CONFIG.yaml] [algo=A] --help`: the command's usage (for one that
    trains, every setting of the algorithm the arguments choose)."""
    named, rest = resolve(argv)
    if not named:
        return _unknown("command", argv[0], COMMANDS)
    rest = [a for a in rest if a not in ("--help", "-h")]
    # bench algo=qmix --help: the default bench's settings for qmix; an unknown bench is refused as running it would be
    path = _runnable(named, rest) if named[-1].subcommands and rest else named
    if path is None:
        return 2
    if not path[-1].settings:
        print(command_usage(path))
        return 0
    args = _parsed(path, rest)
    if args is None:
        return 2
    try:
        print(command_usage(path, *_help_choice(args)))
    except ConfigError as exc:
        return _config_error(exc)
    return 0


def run() -> None:
    """The `marljax` executable: `main()`, then the process ends as soon as its output is flushed and
    the atexit handlers have run, without tearing down every module one by one (1-2 s of a
    command's wall time once jax, orbax and jaxmarl are imported; nothing is left to write then:
    files are closed, checkpoints waited for, trackers finished)."""
    code = main()
    import atexit
    import threading

    for thread in threading.enumerate():  # what Python would wait for at exit (a plot being written)
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
