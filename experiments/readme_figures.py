"""Regenerate the measured tables of README.md from scratch, one section per table.

    python experiments/readme_figures.py --list                 # sections and what each costs
    python experiments/readme_figures.py SECTION [SECTION ...]  # run them; `all` runs every one
    python experiments/readme_figures.py SECTION --quick        # tiny budgets: checks the plumbing only
    python experiments/readme_figures.py SECTION --work DIR     # keep the runs; rerun to continue

Each section runs the public commands a user would (`marljax train | sweep | bench | bench sweep |
bench checkpoint` in a subprocess, or `experiments/jaxmarl_side_by_side.py`), reads their JSON
line or `metrics.jsonl`, and prints the README's table in its markdown format, followed by the
command that printed it. `--quick` numbers mean nothing: they only show that every step runs.
The runs go to a temporary directory, removed at the end; with `--work DIR` they are kept there,
and the same command run again continues where it stopped: a training run that is already in DIR
resumes from its newest checkpoint (`resume=true`; a finished one just reads back its rows), a sweep
skips its finished programs. So a section of many hours (qlearning) can be run in several sittings.
Timings of a continued run are not comparable; the bench sections always measure afresh.
Timings vary from run to run (on the project's shared 2-core CPU by 15-30%); compare ratios
taken in one session.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TWO_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
QUIET = ["progress=false", "plot=false"]


@dataclass(frozen=True)
class Options:
    quick: bool
    work: Path  # a scratch directory for run outputs
    jaxmarl: Path | None  # a checkout of FLAIROx/JaxMARL (side-by-side only)
    only: tuple[str, ...] = ()  # the fresh-seeds sections: only the test nodes holding one of these


@dataclass(frozen=True)
class Section:
    name: str
    table: str  # the README table (or sentence) it backs
    cost: str  # estimated on the project's 2-core CPU, full budgets
    run: Callable[[Options], str]  # returns the markdown it prints


# ---------------------------------------------------------------------------------------------
# running the public commands


def marljax(args: Sequence[str], env: dict[str, str] | None = None) -> str:
    """`python -m marljax.cli ARGS` in a subprocess from the repository root; its stdout."""
    cmd = [sys.executable, "-m", "marljax.cli", *args]
    print("$", " ".join(cmd[2:]), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout


def last_json(stdout: str) -> dict:
    """The JSON line every bench prints last."""
    return json.loads(stdout.strip().splitlines()[-1])


def train_rows(overrides: Sequence[str], out_dir: Path, path: str | None = None) -> list[dict]:
    """`marljax train [path] overrides out_dir=...`; the rows of its metrics.jsonl."""
    again = "resume=true" if out_dir.exists() else "overwrite=true"  # in a kept --work DIR: continue it
    marljax(["train", *([path] if path else []), *overrides, *QUIET, f"out_dir={out_dir}", again])
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def kilo(x: float) -> str:
    """136k, 3.2k: thousands, one decimal below 10k."""
    return f"{x / 1e3:.1f}k" if x < 1e4 else f"{x / 1e3:.0f}k"


# ---------------------------------------------------------------------------------------------
# defaults: the table of per-algorithm defaults

DEFAULTS_ROWS = [  # algo, its defaults column (as in the README), seeds
    (
        "ippo",
        "`ppo.*`: 4 epochs x 4 minibatches, clip 0.2, entropy 0.01; on the MPE family (this env) 64-step rollouts "
        "and lr 4e-3 (`family_defaults`)",
        2,
    ),
    ("mappo", "as ippo; on MPE its critic also sees the time (`critic.time`)", 2),
    (
        "pqn_vdn",
        "relu, lr 1e-3, 32 envs x 32 steps, `pqn.*` 4 epochs x 2 minibatches, epsilon over 250k steps, 1M steps",
        2,
    ),
    (
        "iql",
        "relu, 16 envs x 32 steps, gamma 0.9, epsilon over 200k steps, `replay.*` batch 32, 4 gradient steps, 1M steps; "
        "on the MPE family one-step targets that bootstrap past the time limit (`family_defaults`)",
        2,
    ),
    ("vdn", "relu, lr 1e-3, 16 envs x 32 steps, gamma 0.9, epsilon over 200k steps, 1M steps; as iql on MPE", 2),
    ("qmix", "relu, lr 1e-3, 16 envs x 32 steps, gamma 0.9, epsilon over 200k steps, 1M steps; as iql on MPE", 1),
    (
        "happo",
        "`param_sharing=independent`; `ppo.*` as ippo; a fresh random update order each update; on MPE its "
        "critic sees the time, as mappo's",
        2,
    ),
]  # isac and masac train on Box actions (env_kwargs.action_type=Continuous): their row is measured by tests/test_sac.py


def defaults(o: Options) -> str:
    """`marljax train algo=NAME total_timesteps=1e6 num_seeds=2 eval_episodes=64 eval_every=1000000`:
    one greedy evaluation after the last update; its eval_return_per_seed."""
    budget = ["total_timesteps=2e4", "eval_episodes=4"] if o.quick else ["total_timesteps=1e6", "eval_episodes=64"]
    rows = []
    for algo, text, seeds in DEFAULTS_ROWS:
        run = train_rows([f"algo={algo}", f"num_seeds={seeds}", *budget, "eval_every=1000000", "checkpoint_every=0"],
                         o.work / f"defaults_{algo}")  # fmt: skip
        per_seed = next(r for r in reversed(run) if "eval_return_per_seed" in r)["eval_return_per_seed"]
        cell = ", ".join(f"{v:.2f}" for v in per_seed) + (" (seed 0 of `num_seeds=1`)" if seeds == 1 else "")
        rows.append((f"`{algo}`", text, cell))
    header = ("algo", "its defaults, where they differ from the core's (tanh, lr 2e-3, 64 envs x 128 steps, hidden 64, "
              "gamma 0.99, 5M steps)", "greedy return per agent after 1M steps, seeds 0 and 1")  # fmt: skip
    return md_table(header, rows)


# ---------------------------------------------------------------------------------------------
# fresh-seeds: each default-learning case of tests/test_defaults_learn.py on its 3 fresh seeds

PER_SEED = re.compile(r"per seed \(index: learned, no-op, random\): (.*)")


def per_seed_run(test: str) -> tuple[list[list[float]], str, float]:
    """Run one learning test node by pytest as the nightly rotation runs it (`-m nightly -s`): each seed's
    (learned, no-op, random) return as `tests/_learning.py` prints them, its outcome, its wall seconds."""
    print("$ python -m pytest -m nightly -s", test, file=sys.stderr, flush=True)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "nightly or not nightly", "-s", "-q", test],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - start
    found = PER_SEED.search(done.stdout)
    if found is None:
        raise RuntimeError(f"{test} printed no per-seed line (exit {done.returncode}):\n{done.stdout[-3000:]}")
    seeds = [[float(v) for v in part.split(":")[1].split(",")] for part in found.group(1).split(";")]
    return seeds, "passed" if done.returncode == 0 else f"exit {done.returncode}", wall


def chosen(node: str, only: Sequence[str]) -> bool:
    """Whether `--only` keeps a test node: without it every node, with it those holding one of its texts."""
    return not only or any(text in node for text in only)


def fresh_seeds(o: Options) -> str:
    """Each case of `tests/test_defaults_learn.py` that trains fresh seeds, run by pytest as CI runs it
    (`-m nightly -s`; `seed=7919 num_seeds=3`): each seed's greedy and no-op return on the same
    episodes, as the test prints them, and the margin it asserts. Needs the dev extras (pytest)."""
    sys.path.insert(0, str(ROOT))
    from tests import test_defaults_learn as cases

    runs: dict[str, tuple[tuple[str, bool], list[list[float]], list[str]]] = {}  # case -> its seeds, its outcomes
    for param in cases.CASES:
        algo, recurrent, steps, part = param.values
        case = f"{algo}-{recurrent}-{steps}"  # a case split by seed (part: its seed) is one row of its 3 tests
        test = f"{case}-seed{part}" if part is not None else case
        node = f"tests/test_defaults_learn.py::test_the_defaults_learn[{test}]"
        if not chosen(node, o.only):
            continue
        seeds, outcome, _ = per_seed_run(node)
        _, got, outcomes = runs.setdefault(case, ((algo, recurrent), [], []))
        got.extend(seeds)
        outcomes.append(outcome)
    rows = []
    for case, ((algo, recurrent), seeds, outcomes) in runs.items():
        learned, noop = [s[0] for s in seeds], [s[1] for s in seeds]
        gains = [a - b for a, b in zip(learned, noop)]
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        rows.append(
            (
                f"`{case}`",
                " / ".join(f"{v:.2f}" for v in learned),
                f"{mean(learned):.2f}",
                " / ".join(f"{v:.2f}" for v in noop),
                f"{mean(noop):.2f}",
                f"{mean(gains):+.2f} ({' '.join(f'{g:+.2f}' for g in gains)})",
                (
                    f"{cases.PER_SEED_FLOORS[algo, recurrent]} per seed"
                    if (algo, recurrent) in cases.PER_SEED_FLOORS
                    else f"{cases.MARGINS[algo, recurrent]}"
                ),
                ", ".join(outcomes),
            )
        )
    header = (
        "CASE",
        "greedy return, seeds 0 / 1 / 2",
        "mean",
        "no-op, seeds 0 / 1 / 2",
        "no-op mean",
        "mean gain (per seed)",
        "margin asserted",
        "pytest",
    )
    return md_table(header, rows)


# ---------------------------------------------------------------------------------------------
# fresh-seeds-families: each family learning case of tests/test_learns.py on its 3 fresh seeds


def rederived_margin(gains: Sequence[float], floor: float = 1.0, step: float = 0.5) -> float:
    """The fresh-seeds rule (tests/test_defaults_learn.py): the mean gain less the larger of `floor` and two
    standard errors of the per-seed gains, rounded down to a multiple of `step`."""
    spread = 2 * statistics.stdev(gains) / len(gains) ** 0.5
    return step * ((statistics.fmean(gains) - max(floor, spread)) // step)


# Each module's learning cases that train the fresh seeds: (module, test function, its list of pytest.params, the
# param's values -> (overrides, margin, win-rate floor or None))
FAMILY_LEARNING = [
    ("test_learns", "test_learns_above_no_op_and_random", "CASES", lambda v: v),
    ("test_sac", "test_learns_above_no_op_and_random", "LEARNS", lambda v: ([*v[1], f"algo={v[0]}"], v[3], None)),
    ("test_happo", "test_learns", "LEARNS", lambda v: (*v, None)),
    ("test_sable", "test_learns", "LEARNS", lambda v: v),
    ("test_sable_recurrent", "test_learns", "LEARNS", lambda v: (*v, None)),
    ("test_jumanji", "test_ippo_learns_above_no_op_and_random", "LEARNS", lambda v: (*v, None)),
    ("test_async", "test_async_learns_on_separate_actor_and_learner_devices", "LEARNS", lambda v: (*v, None)),
    ("test_async", "test_async_learns_a_host_pettingzoo_env", "LEARNS_HOST", lambda v: (*v, None)),
]


def family_cases() -> list[tuple[str, Any, list[str], float, float | None]]:
    """(test node, case, its overrides, margin, win-rate floor or None) of every family learning case
    (FAMILY_LEARNING)."""
    import importlib

    sys.path.insert(0, str(ROOT))
    found = []
    for module, function, cases, values in FAMILY_LEARNING:
        for param in getattr(importlib.import_module(f"tests.{module}"), cases):
            overrides, margin, win_floor = values(param.values)
            found.append((f"tests/{module}.py::{function}[{param.id}]", param, overrides, margin, win_floor))
    return found


def fresh_family_cases(only: Sequence[str] = ()) -> list[tuple[str, Any, float, float | None]]:
    """(test node, case, margin, win-rate floor or None) of each family learning case whose settings hold the fresh
    seeds (tests/_learning.py's FRESH); with `only`, those whose node contains one of its texts."""
    sys.path.insert(0, str(ROOT))
    from tests._learning import holds_fresh_seeds

    return [
        (test, param, margin, win_floor)
        for test, param, overrides, margin, win_floor in family_cases()
        if holds_fresh_seeds(overrides) and chosen(test, only)
    ]


# A case split by seed (tests/_learning.py's fresh_seed_alone) is one test a seed, its id ending so: one row of them all
SPLIT_SEED = re.compile(r"-seed\d+$")


def fresh_seeds_families(o: Options) -> str:
    """Each case of `tests/test_learns.py` and `tests/test_sac.py` that trains fresh seeds (`seed=7919 num_seeds=3`),
    run by pytest as the nightly rotation runs it: each seed's greedy (or sampled, where the case says) return and the baseline it is
    compared with (the better mean of no-op and random, each on that seed's same episodes), as the test prints
    them; the margin it asserts beside the margin the rule gives (the case's comment says which floor it takes);
    the wall time of the pytest process (of a case split by seed, its tests' together). Needs the dev extras
    (pytest)."""
    runs: dict[str, tuple[str, str, list[list[float]], list[str], float]] = {}  # a case split by seed: one row
    for test, param, margin, win_floor in fresh_family_cases(o.only):
        seeds, outcome, wall = per_seed_run(test)
        case = SPLIT_SEED.sub("", param.id)
        xfail = any(m.name == "xfail" for m in param.marks)
        asserted = (f"{margin}" + (" per seed" if case != param.id else "") + (", xfail" if xfail else "")
                    + (f"; wins >= {win_floor}" if win_floor is not None else ""))  # fmt: skip
        _, _, got, outcomes, walls = runs.get(case, (test, asserted, [], [], 0.0))
        runs[case] = (test, asserted, got + seeds, [*outcomes, outcome], walls + wall)
    rows = []
    for case, (test, asserted, seeds, outcomes, wall) in runs.items():
        learned = [s[0] for s in seeds]
        kind, index = max((("no-op", 1), ("random", 2)), key=lambda k: statistics.fmean(s[k[1]] for s in seeds))
        baseline = [s[index] for s in seeds]
        gains = [a - b for a, b in zip(learned, baseline)]
        rows.append(
            (
                f"`{case}`" + ("" if test.startswith("tests/test_learns.py") else f" ({test[6:].split('::')[0]})"),
                " / ".join(f"{v:.2f}" for v in learned),
                f"{statistics.fmean(learned):.2f}",
                f"{kind} " + " / ".join(f"{v:.2f}" for v in baseline),
                f"{statistics.fmean(baseline):.2f}",
                f"{statistics.fmean(gains):+.2f} ({' '.join(f'{g:+.2f}' for g in gains)})",
                asserted,
                f"{rederived_margin(gains):g} / {rederived_margin(gains, 0.1, 0.05):g}",
                f"{wall:.0f} s, {', '.join(outcomes)}",
            )
        )
    header = (
        "CASE",
        "return, seeds 0 / 1 / 2",
        "mean",
        "baseline, seeds 0 / 1 / 2",
        "baseline mean",
        "mean gain (per seed)",
        "margin asserted",
        "rule: floor 1.0 / 0.1",
        "pytest",
    )
    return md_table(header, rows)


# ---------------------------------------------------------------------------------------------
# mpe-targets: the replay learners' MPE family default (one-step targets past the time limit) on MPE's other
# cooperative envs, against the settings before it

MPE_TARGET_ENVS = [
    ("MPE_simple_reference_v3", ("iql", "qmix", "shaq")),
    ("MPE_simple_speaker_listener_v4", ("iql", "vdn", "qmix", "shaq")),
]
BEFORE_MPE_TARGETS = ["q.td_lambda=0.65", "replay.bootstrap_time_limit=false"]


def fresh_gain(o: Options, name: str, overrides: list[str]) -> str:
    """One run of `overrides` with `total_timesteps=1e6 seed=7919 num_seeds=3` (tests/_learning.py's
    learned_vs_baselines, in this process; needs the dev extras): the mean greedy return per agent, then the mean
    of each seed's gain over no-op on that seed's same 64 episodes, and the gains."""
    sys.path.insert(0, str(ROOT))
    from tests._learning import FRESH, learned_vs_baselines

    steps = "2e4" if o.quick else "1e6"
    s = learned_vs_baselines([*overrides, f"total_timesteps={steps}", *FRESH], o.work / name)
    gains = [a - b for a, b in zip(s.learned_per_seed, s.noop_per_seed)]
    return f"{s.learned:.2f}, {statistics.fmean(gains):+.2f} ({' '.join(f'{g:+.2f}' for g in gains)})"


def mpe_targets(o: Options) -> str:
    """Each (env, algo) of MPE_TARGET_ENVS from its defaults and with BEFORE_MPE_TARGETS (`fresh_gain`)."""

    def cell(env: str, algo: str, extra: list[str]) -> str:
        name = f"mpe_targets_{env}_{algo}_{'before' if extra else 'default'}"
        return fresh_gain(o, name, [f"algo={algo}", f"env={env}", *extra])

    rows = [(f"`{env}`", algo, cell(env, algo, []), cell(env, algo, BEFORE_MPE_TARGETS))
            for env, algos in MPE_TARGET_ENVS for algo in algos]  # fmt: skip
    return md_table(("env", "algo", "default (lambda 0, bootstrap)", "old (lambda 0.65, cut)"), rows)


# ---------------------------------------------------------------------------------------------
# mpe-lambda: a lambda over the time-limit bootstrap (the return stops at each cut), on spread

LAMBDA_OVER_BOOTSTRAP = ["q.td_lambda=0.65"]  # MPE's family default keeps replay.bootstrap_time_limit on


def mpe_lambda(o: Options) -> str:
    """IQL, VDN, QMIX and SHAQ on spread from their defaults (one-step targets past the time limit) and with
    LAMBDA_OVER_BOOTSTRAP (`fresh_gain` each)."""
    rows = [(algo, fresh_gain(o, f"mpe_lambda_{algo}_default", [f"algo={algo}"]),
             fresh_gain(o, f"mpe_lambda_{algo}_lambda", [f"algo={algo}", *LAMBDA_OVER_BOOTSTRAP]))
            for algo in ("iql", "vdn", "qmix", "shaq")]  # fmt: skip
    return md_table(("algo", "default (lambda 0, bootstrap)", "lambda 0.65, bootstrap, stopped at each cut"), rows)


# ---------------------------------------------------------------------------------------------
# sweep: the shipped sharing ablation's report


def sweep(o: Options) -> str:
    """`marljax sweep experiments/sharing_ablation.yaml`; the table of its report.md."""
    out = o.work / "sharing_ablation"
    quick = ["seeds=2", "total_timesteps=16384", "eval_every=2", "eval_episodes=4"] if o.quick else []
    again = [] if out.exists() else ["overwrite=true"]  # in a kept --work DIR: the sweep continues
    marljax(["sweep", "experiments/sharing_ablation.yaml", *quick, f"out_dir={out}", "progress=false", *again])
    return "\n".join(line for line in (out / "report" / "report.md").read_text().splitlines() if line.startswith("|"))


# ---------------------------------------------------------------------------------------------
# bench: `marljax bench` rows

BENCH_ROWS = [
    (
        "`marljax bench experiments/jaxmarl_ippo_ff_mpe.yaml` (JaxMARL's settings, 16 envs)",
        ["experiments/jaxmarl_ippo_ff_mpe.yaml"],
    ),
    ("`marljax bench num_envs=1024`", ["num_envs=1024"]),
    ("`marljax bench num_envs=1024 num_seeds=4`", ["num_envs=1024", "num_seeds=4"]),
]


def bench(o: Options) -> str:
    rows = []
    for label, args in BENCH_ROWS:
        r = last_json(marljax(["bench", *args, *(["num_steps=16"] if o.quick else [])]))
        rows.append((label, kilo(r["train_env_steps_per_s"]), f"{r['mfu']:.2f}", f"{r['compile_s']:.1f} s",
                     f"{r['peak_rss_mb']:.0f} MiB"))  # fmt: skip
    return md_table(("command", "train env-steps/s", "MFU", "compile", "peak RSS"), rows)


# ---------------------------------------------------------------------------------------------
# async: `marljax bench mode=async` on 2 fake CPU devices (actors on one, learner on the other)

ASYNC_ROWS = [
    ("`marljax.testing.host_bound:make_env` (MPE + 0.15 ms host cost per step), 64 envs",
     ["env=marljax.testing.host_bound:make_env", "env_kwargs.step_cost_s=0.00015"]),
    ("`pettingzoo:marljax.testing.host_spread:parallel_env` (0.5 ms per copy-step), 2 actor threads",
     ["env=pettingzoo:marljax.testing.host_spread:parallel_env", "env_kwargs.step_cost_s=0.0005", "async.num_actor_threads=2"]),
]  # fmt: skip
ASYNC_COMMON = ["mode=async", "async.actor_devices=1", "async.learner_devices=1"]


def async_bench(o: Options) -> str:
    rows = []
    for label, args in ASYNC_ROWS:
        quick = ["num_envs=8", "num_steps=8"] if o.quick else []
        r = last_json(marljax(["bench", *ASYNC_COMMON, *args, *quick], env=TWO_DEVICES))
        rows.append((label, f"{kilo(r['generation_samples_per_s'])} / {kilo(r['learning_samples_per_s'])}",
                     kilo(r["sync_samples_per_s"]), kilo(r["async_samples_per_s"]), f"{r['overlap_efficiency']:.2f}",
                     f"{r['async_over_sync']:.2f}x"))  # fmt: skip
    header = ("env", "generation / learning alone", "sync loop", "async", "overlap efficiency", "async / sync")
    return md_table(header, rows)


# ---------------------------------------------------------------------------------------------
# bench sweep: one vmapped program vs 32 runs one after another

SWEEP_BENCH_ROWS = [
    ("default, 32 envs (`marljax bench sweep`)", []),
    ("JaxMARL's, 16 envs (`bench sweep experiments/jaxmarl_ippo_ff_mpe.yaml total_timesteps=2.5e5`)",
     ["experiments/jaxmarl_ippo_ff_mpe.yaml", "total_timesteps=2.5e5"]),
]  # fmt: skip


def _sweep_bench_quick(args: list[str]) -> dict:
    """--quick: the same function `marljax bench sweep` calls, at 2 learning rates x 1 seed and 2 updates."""
    from marljax.bench.sweep import DEFAULTS, run_sweep_bench
    from marljax.config import load_config

    path = args[0] if args and args[0].endswith(".yaml") else None
    overrides = [*([] if path else DEFAULTS), *args[1 if path else 0 :], *QUIET]
    config = load_config(str(ROOT / path) if path else None, overrides)
    config = load_config(
        str(ROOT / path) if path else None, [*overrides, f"total_timesteps={2 * config.env_steps_per_update}"]
    )
    return run_sweep_bench(config, log=lambda s: print(s, file=sys.stderr), lrs=(1e-3, 2e-3), seeds=1)


def sweep_bench(o: Options) -> str:
    rows = []
    for label, args in SWEEP_BENCH_ROWS:
        r = _sweep_bench_quick(args) if o.quick else last_json(marljax(["bench", "sweep", *args]))
        rows.append((label, f"{r['vmapped_compile_s']:.1f} s + {r['vmapped_run_s']:.1f} s",
                     f"{r['sequential_compile_s']:.1f} s + {r['sequential_run_s']:.1f} s", f"{r['speedup_total']:.1f}x",
                     f"{r['speedup_run_only']:.1f}x"))  # fmt: skip
    header = ("per-run config", "vmapped: compile + run", "sequential: compile + run", "end to end", "run only")
    return md_table(header, rows)


# ---------------------------------------------------------------------------------------------
# qlearning: Q-learning beside IPPO on MPE simple_spread and SMAX 3m, every cell's config explicit

# tests/test_qlearning.py's settings for the replay family, written out (not the algorithms' defaults)
# family_defaults=none: the MPE cells were measured before the replay learners' MPE defaults (one-step targets
# bootstrapping past the time limit)
REPLAY = ["family_defaults=none", "activation=relu", "lr=1e-3", "gamma=0.99", "hidden_size=64", "num_envs=16", "num_steps=26",
          "replay.gradient_steps=4", "replay.batch_size=32", "q.eps_decay_steps=3e5", "replay.learning_starts=1e4"]  # fmt: skip
PQN = ["algo=pqn_vdn", "activation=relu", "lr=2e-3", "num_envs=64", "num_steps=32", "pqn.update_epochs=2",
       "pqn.num_minibatches=2", "q.eps_decay_steps=5e5"]  # fmt: skip
SMAX = ["env=HeuristicEnemySMAX", "env_kwargs.scenario=3m", "num_steps=32"]
EVAL = ["eval_every=100", "eval_episodes=32"]


@dataclass(frozen=True)
class Cell:
    overrides: list[str]
    seeds: int
    steps: str
    path: str | None = None  # a config file given before the overrides


def _q_row(algo: str, gru: bool) -> tuple[Cell | None, Cell]:
    """(MPE cell, SMAX cell) of one Q-learning row."""
    rec = ["recurrent=true"] if gru else []
    if algo == "pqn_vdn":
        return (None if gru else Cell([*PQN], 2, "2e6")), Cell([*PQN, *rec, *SMAX], 1 if gru else 2, "2e6")
    base = [*REPLAY, f"algo={algo}", *rec]
    return Cell(base, 1, "6e5"), Cell([*base, *SMAX], 1 if gru else 2, "1e6")


Q_ROWS: list[tuple[str, Cell | None, Cell]] = [
    ("IPPO, GRU (`experiments/smax_3m_rnn.yaml`)", None, Cell([], 2, "2e6", "experiments/smax_3m_rnn.yaml")),
    ("PQN-VDN (64 envs x 32 steps; MPE 2 seeds x 2M)", *_q_row("pqn_vdn", False)),
    ("PQN-VDN, GRU", *_q_row("pqn_vdn", True)),
    *[(f"{name}", *_q_row(name.lower(), False)) for name in ("IQL", "VDN", "QMIX")],
    *[(f"{name}, GRU", *_q_row(name.lower(), True)) for name in ("IQL", "VDN", "QMIX")],
]


def _evals(cell: Cell, out: Path, quick: bool) -> list[dict]:
    budget = (
        ["total_timesteps=2e4", "eval_every=2", "eval_episodes=4"]
        if quick
        else [f"total_timesteps={cell.steps}", *EVAL]
    )
    rows = train_rows([*cell.overrides, f"num_seeds={cell.seeds}", *budget], out, cell.path)
    return [r for r in rows if "eval_return" in r]


def _first_last(evals: list[dict], key: str, digits: int) -> str:
    return f"{evals[0][key]:.{digits}f} -> {evals[-1][key]:.{digits}f}"


def _budget(cell: Cell) -> str:
    seeds = f"{cell.seeds} seed{'s' if cell.seeds > 1 else ''}"
    return f"{seeds} x {float(cell.steps) / 1e6:g}M"


def qlearning(o: Options) -> str:
    rows = []
    for i, (label, mpe, smax) in enumerate(Q_ROWS):
        mpe_cell = "(not measured)"
        if mpe is not None:
            mpe_cell = _first_last(_evals(mpe, o.work / f"q{i}_mpe", o.quick), "eval_return", 1)
        ev = _evals(smax, o.work / f"q{i}_smax", o.quick)
        won = ev[-1]["eval_win_rate_per_seed"]
        per_seed = f" ({', '.join(f'{w:.2f}' for w in won)})" if len(won) > 1 else ""
        rows.append((label, mpe_cell, f"{_first_last(ev, 'eval_return', 2)} ({_budget(smax)})",
                     _first_last(ev, "eval_win_rate", 2) + per_seed))  # fmt: skip
    return md_table(("algo", "MPE simple_spread (600k, 1 seed)", "SMAX 3m return", "SMAX 3m win rate"), rows)


# ---------------------------------------------------------------------------------------------
# q-bench: throughput of the Q-learning family beside IPPO

Q_BENCH_ROWS = [
    ("PQN-VDN / GRU", ["algo=pqn_vdn", "num_envs=64", "num_steps=32", "pqn.update_epochs=2", "pqn.num_minibatches=2"]),
    *[(f"{a} / GRU", [f"algo={a.lower()}", "num_envs=16", "num_steps=26", "replay.gradient_steps=4", "replay.batch_size=32"])
      for a in ("IQL", "VDN", "QMIX")],
]  # fmt: skip


def q_bench(o: Options) -> str:
    quick = ["num_steps=8"] if o.quick else []  # the last value of a key wins

    def measure(args: list[str]) -> dict:
        return last_json(marljax(["bench", *args, *quick]))

    ippo = measure([])
    rows = [("IPPO (defaults: 64 envs x 128 steps, 4 x 4 minibatches)", f"{ippo['train_env_steps_per_s']:,.0f}",
             f"{ippo['updates_per_s']:.1f}", f"{ippo['gradient_steps_per_s']:.0f}")]  # fmt: skip
    for label, args in Q_BENCH_ROWS:
        ff, gru = measure(args), measure([*args, "recurrent=true"])
        rows.append((label, f"{ff['train_env_steps_per_s']:,.0f} / {gru['train_env_steps_per_s']:,.0f}",
                     f"{ff['updates_per_s']:.1f} / {gru['updates_per_s']:.1f}",
                     f"{ff['gradient_steps_per_s']:.0f} / {gru['gradient_steps_per_s']:.0f}"))  # fmt: skip
    return md_table(("algo", "env-steps/s", "updates/s", "gradient steps/s"), rows)


# ---------------------------------------------------------------------------------------------
# side-by-side: JaxMARL's ippo_ff_mpe.py and marljax at its settings (README prose: 1.32x)


def side_by_side(o: Options) -> str:
    """experiments/jaxmarl_side_by_side.py at JaxMARL's settings (16 envs, 2M steps, 1 seed), run 6
    times (each run: JaxMARL, then marljax); the median and range of the paired ratios."""
    if o.jaxmarl is None:
        raise SystemExit(
            "side-by-side needs --jaxmarl PATH, a checkout of FLAIROx/JaxMARL (see experiments/jaxmarl_side_by_side.py)"
        )
    runs, steps = (2, "2e4") if o.quick else (6, "2e6")
    results = []
    for _ in range(runs):
        cmd = [sys.executable, "experiments/jaxmarl_side_by_side.py", "--jaxmarl", str(o.jaxmarl), "--num-envs", "16",
               "--timesteps", steps, "--seeds", "1"]  # fmt: skip
        print("$", " ".join(cmd[1:]), file=sys.stderr, flush=True)
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        results.append(last_json(done.stdout))
    rows = [(str(i + 1), f"{r['jaxmarl']['env_steps_per_s'] / 1e3:.1f}k", f"{r['marljax']['env_steps_per_s'] / 1e3:.1f}k",
             f"{r['speedup']:.2f}x") for i, r in enumerate(results)]  # fmt: skip
    ratios = [r["speedup"] for r in results]
    final = {side: statistics.mean(r[side]["final_return"] for r in results) for side in ("marljax", "jaxmarl")}
    summary = (f"median of paired ratios {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}x); final "
               f"return per agent marljax {final['marljax']:.2f} vs JaxMARL {final['jaxmarl']:.2f}")  # fmt: skip
    return md_table(("run", "JaxMARL env-steps/s", "marljax env-steps/s", "marljax / JaxMARL"), rows) + "\n\n" + summary


# ---------------------------------------------------------------------------------------------
# parity: JaxMARL's own MPE baseline scripts beside `marljax train FILE` on their config files


def parity(o: Options) -> str:
    """experiments/jaxmarl_parity.py: the six combinations of JaxMARL's minimal MPE set, 5 seeds a side, 1e6
    env steps per seed (a tenth of the files' budget), then IPPO's three (spread, reference, tag), VDN and QMIX at
    the files' own 1e7."""
    if o.jaxmarl is None:
        raise SystemExit(
            "parity needs --jaxmarl PATH, a checkout of FLAIROx/JaxMARL (see experiments/jaxmarl_parity.py)"
        )
    runs = {"1e6 env steps per seed": ["--seeds", "5", "--timesteps", "1e6"],
            "the file's 1e7 env steps per seed": ["--seeds", "5", "--combos", "ippo_ff_spread", "ippo_ff_reference",
                                                  "ippo_ff_tag", "vdn_rnn_spread", "qmix_rnn_spread"]}  # fmt: skip
    if o.quick:
        runs = {"4e4 env steps per seed": ["--seeds", "2", "--timesteps", "4e4", "--combos", "ippo_ff_spread"]}
    sys.path.insert(0, str(ROOT / "experiments"))
    import jaxmarl_parity

    tables = []
    for i, (budget, sizes) in enumerate(runs.items()):
        cmd = [sys.executable, "experiments/jaxmarl_parity.py", "--jaxmarl", str(o.jaxmarl),
               "--work", str(o.work / f"parity{i}"), *sizes]  # fmt: skip
        print("$", " ".join(cmd[1:]), file=sys.stderr, flush=True)
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        tables.append(f"{budget}:\n\n" + jaxmarl_parity.table(last_json(done.stdout)["results"]))
    return "\n\n".join(tables)


# ---------------------------------------------------------------------------------------------
# async-k1: async IPPO at staleness bound 1 against the on-device loop (README prose)


def async_k1(o: Options) -> str:
    """`marljax train total_timesteps=3e6 num_seeds=4 num_chunks=15`, on device and with
    mode=async async.max_staleness=1; the mean over seeds of the last chunk's training return."""
    budget = (
        ["total_timesteps=2e4", "num_seeds=2", "num_chunks=2"]
        if o.quick
        else ["total_timesteps=3e6", "num_seeds=4", "num_chunks=15"]
    )
    rows = []
    for label, extra in (("on device", []), ("async, K=1", ["mode=async", "async.max_staleness=1"])):
        last = train_rows([*budget, *extra, "checkpoint_every=0"], o.work / f"k1_{label[:5]}")[-1]
        per_seed = last["return_per_seed"]
        rows.append((label, f"{last['return_mean']:.2f}", ", ".join(f"{v:.2f}" for v in per_seed)))
    return md_table(("IPPO, 4 seeds x 3M steps", "final return per agent", "per seed"), rows)


# ---------------------------------------------------------------------------------------------
# bench checkpoint: the cost of periodic checkpoints (README prose: -0.4%)


def bench_checkpoint(o: Options) -> str:
    r = last_json(marljax(["bench", "checkpoint", *(["total_timesteps=4e4", "checkpoint_every=2"] if o.quick else [])]))
    return md_table(("checkpoint_every", "periodic saves", "overhead (median of rounds)"),
                    [(str(r["checkpoint_every"]), str(r["periodic_saves"]), f"{100 * r['overhead']:+.1f}%")])  # fmt: skip


# ---------------------------------------------------------------------------------------------
# algo-pairs: algorithms side by side, 4 seeds each, `marljax compare` (docs/benchmarks.md, README)

PAIRS = [  # task, its settings, budget (env steps per seed), algorithms, the metrics compared
    ("SMAX 3m", ["env=HeuristicEnemySMAX", "env_kwargs.scenario=3m"], "1e6", ("sable", "happo", "mappo"),
     ("eval_return", "eval_win_rate")),
    ("speaker-listener", ["env=MPE_simple_speaker_listener_v4", "param_sharing=per_role"], "3e5", ("happo", "mappo"),
     ("eval_return",)),
    ("continuous spread", ["env_kwargs.action_type=Continuous"], "2e5", ("ippo", "isac", "masac"), ("eval_return",)),
]  # fmt: skip


def _ci(row: dict, what: str) -> str:
    return f"{float(row[f'final_{what}']):.2f} [{float(row[f'final_{what}_low']):.2f}, {float(row[f'final_{what}_high']):.2f}]"


def algo_pairs(o: Options) -> str:
    """Per task: `marljax train algo=A SETTINGS num_seeds=4 total_timesteps=S eval_every=1000000000
    eval_episodes=64` per algorithm (one greedy evaluation, after the last update), then `marljax
    compare` of the runs: the final values' IQM and mean with 95% bootstrap CIs, per seed, and the
    probability of improvement of the first algorithm over each other."""
    out = []
    for task, settings, steps, algos, metrics in PAIRS:
        budget = (
            ["total_timesteps=2e4", "eval_episodes=4"] if o.quick else [f"total_timesteps={steps}", "eval_episodes=64"]
        )
        dirs = []
        for algo in algos:
            run = o.work / f"pair_{task.replace(' ', '_')}_{algo}"
            train_rows([f"algo={algo}", *settings, "num_seeds=4", *budget, "eval_every=1000000000", "checkpoint_every=0"],
                       run)  # fmt: skip
            dirs.append(str(run))
        finals: dict[str, list[dict]] = {}
        better: list[str] = []
        for metric in metrics:
            where = o.work / f"compare_{task.replace(' ', '_')}_{metric}"
            marljax(["compare", *dirs, "--metric", metric, "--out", str(where)])
            with open(where / "final.csv") as f:
                finals[metric] = list(csv.DictReader(f))
            with open(where / "improvement.csv") as f:
                better += [f"P({Path(r['run_a']).name.split('_')[-1]} > {Path(r['run_b']).name.split('_')[-1]}, {metric}) = "
                           f"{float(r['p_a_beats_b']):.2f} [{float(r['low']):.2f}, {float(r['high']):.2f}]"
                           for r in csv.DictReader(f) if r["run_a"] == dirs[0]]  # fmt: skip
        header = ["algo", "env steps per seed", "greedy return per agent, IQM [95% CI]", "mean [95% CI]", "per seed"]
        if "eval_win_rate" in metrics:
            header.insert(4, "win rate, IQM [95% CI]")
        rows = []
        for i, algo in enumerate(algos):
            r = finals["eval_return"][i]
            per_seed = ", ".join(f"{v:.2f}" for v in json.loads(r["final_per_seed"]))
            row = [algo, f"{int(r['env_steps']):,}", _ci(r, "iqm"), _ci(r, "mean"), per_seed]
            if "eval_win_rate" in metrics:
                row.insert(4, _ci(finals["eval_win_rate"][i], "iqm"))
            rows.append(row)
        out.append(f"**{task}**, {steps} env steps per seed\n\n{md_table(header, rows)}\n\n" + "; ".join(better))
    return "\n\n".join(out)


# ---------------------------------------------------------------------------------------------
# bench-sequence: Sable's memory and time per update over the agent count


def bench_sequence(o: Options) -> str:
    """`marljax bench sequence --agents 4,16,64,128`: its two tables as printed."""
    agents = "4,8" if o.quick else "4,16,64,128"
    printed = marljax(["bench", "sequence", "--agents", agents, *(["num_steps=4"] if o.quick else [])])
    return "\n".join(line for line in printed.splitlines() if line.startswith("|") or not line.strip()).strip()


# ---------------------------------------------------------------------------------------------
# default-run: the one place the default run's figures come from

DEFAULT_RUN = ROOT / "docs" / "benchmarks" / "default_run.json"


def default_run(o: Options) -> str:
    """`marljax train` as a new user runs it, twice from an empty compile cache (cold, then warm),
    each in its own process: its summary lines, compile time and whole-process time. Writes
    docs/benchmarks/default_run.json (not with --quick), which README.md and docs/getting-started.md
    quote (tests/test_readme_figures.py holds them to it)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(o.work / "default_run_cache")}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    runs = []
    for name in ("cold", "warm"):
        cwd = o.work / f"default_run_{name}"
        cwd.mkdir(parents=True, exist_ok=True)
        args = ["train", *(["total_timesteps=5e4"] if o.quick else [])]
        print("$ marljax", " ".join(args), f"(in {cwd})", file=sys.stderr, flush=True)
        done = subprocess.run(
            [sys.executable, "-m", "marljax.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"marljax train exited with {done.returncode}:\n{done.stderr[-3000:]}")
        out_dir = next(cwd.glob("runs/ippo_MPE_simple_spread_v3_*"))
        summary = json.loads((out_dir / "summary.json").read_text())
        compiled = next(line for line in done.stdout.splitlines() if line.startswith("compiled in "))
        runs.append({"name": name, "stdout": done.stdout, "compiled": compiled, "summary": summary})
    record = {
        "command": "marljax train",
        "made_by": "python experiments/readme_figures.py default-run",
        "machine": machine(),
        "runs": runs,
    }
    if not o.quick:
        DEFAULT_RUN.write_text(json.dumps(record, indent=1) + "\n")
    rows = [
        (r["name"], r["summary"]["returns"], r["compiled"], f"{r['summary']['timing']['total_s']:.1f} s") for r in runs
    ]
    return md_table(("compile cache", "summary", "compile", "whole process"), rows)


def machine() -> dict:
    """The CPU and jax a figure was measured on."""
    import platform

    import jax

    from marljax.train.compile_cache import machine_tag

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    # XLA compiles for the host's instruction set, so one "AMD EPYC" may round differently from another: the
    # compile cache's tag of the CPU (its model name and feature flags) tells the generations apart
    return {"cpu": cpu, "cpu_tag": machine_tag(), "cores": os.cpu_count(), "jax": jax.__version__,
            "python": platform.python_version()}  # fmt: skip


# offline: datasets from a trained policy and from random play, each offline algorithm learning from them

OFFLINE_ALGOS = ("bc", "iql_cql", "maicq")
SMAX_3M = ["env=HeuristicEnemySMAX", "env_kwargs.scenario=3m"]


def offline_datasets(o: Options, task: str, env: Sequence[str], behaviour: Sequence[str],
                     medium: Sequence[str], qualities: Sequence[str] = ("Medium", "Poor")) -> tuple[Path, str]:  # fmt: skip
    """The behaviour run (`marljax train ENV BEHAVIOUR`), its Medium dataset (`marljax record RUN VAULT
    MEDIUM seed=1`, MEDIUM's seed where it gives one) and random play's Poor one (`marljax record random
    VAULT ENV seed=2`), each of `qualities` made once in the work directory; -> (the .vlt directory, the
    table of their return distributions)."""
    work = o.work / f"offline_{task}"
    size = ["transitions=2048", "num_envs=16"] if o.quick else ["transitions=100000", "num_envs=64"]
    train_rows([*env, *(["total_timesteps=2e4"] if o.quick else behaviour)], work / "behaviour")
    vault = work / f"{task}.vlt"
    for quality, args in (
        (
            "Medium",
            [str(work / "behaviour"), *medium, *([] if any(a.startswith("seed=") for a in medium) else ["seed=1"])],
        ),
        ("Poor", ["random", *env, "seed=2"]),
    ):
        if quality in qualities and not (vault / quality).exists():
            marljax(["record", args[0], str(vault), *size, *args[1:]])
    rows = []
    for quality in qualities:
        r = json.loads((vault / quality / "marljax.json").read_text())["returns"]
        q = r["quantiles"]
        rows.append((quality, str(r["episodes"]), f"{r['mean']:.2f} +- {r['std']:.2f}",
                     f"{q['5']:.2f} / {q['50']:.2f} / {q['95']:.2f}"))  # fmt: skip
    return vault, md_table(("dataset", "episodes", "mean +- std", "quantiles 5 / 50 / 95"), rows)


def offline_results(o: Options, task: str, vault: Path, env: Sequence[str], evaluation: Sequence[str],
                    extra: Sequence[tuple[str, str, list[str]]] = (),
                    qualities: Sequence[str] = ("Medium", "Poor"), prefix: str = "") -> str:  # fmt: skip
    """Each offline algorithm on each of `qualities` (and each `extra` (quality, label, settings) row), 3 seeds,
    at its defaults: the final row's eval_return beside the dataset's mean; `prefix` goes before a quality's name."""
    budget = ["total_timesteps=5120", "eval_every=10", "eval_episodes=4"] if o.quick else list(evaluation)
    wins, rows = False, []
    cases = [(q, f"`{a}`", [f"algo={a}"]) for q in qualities for a in OFFLINE_ALGOS] + list(extra)
    for quality, label, settings in cases:
        data = json.loads((vault / quality / "marljax.json").read_text())["returns"]
        name = "_".join(s.split("=")[1] for s in settings if s.startswith(("algo=", "eval_greedy=")))
        run = train_rows([*settings, f"offline.dataset={vault / quality}", *env, "num_seeds=3", *budget],
                         o.work / f"offline_{task}" / f"{quality}_{name}")  # fmt: skip
        last = next(r for r in reversed(run) if "eval_return_per_seed" in r)
        row = [f"{prefix}{quality} ({data['mean']:.2f}, {data['episodes']})", label, f"{last['eval_return']:.2f}",
               ", ".join(f"{v:.2f}" for v in last["eval_return_per_seed"])]  # fmt: skip
        if "eval_win_rate" in last:
            wins = True
            row.append(f"{last['eval_win_rate']:.2f}")
        rows.append((*row, f"{last['eval_return'] - data['mean']:+.2f}"))
    header = ("dataset (its mean, episodes)", "algorithm", "final return, mean of 3 seeds", "per seed",
              *(("win rate",) if wins else ()), "over the dataset's mean")  # fmt: skip
    return md_table(header, rows)


def offline_spread(o: Options) -> str:
    """MPE spread: Medium from a 2M-step IPPO run with epsilon 0.4, Poor from random play; each offline
    algorithm, 3 seeds, greedy return on 128 episodes per seed after its 20k gradient steps."""
    vault, datasets = offline_datasets(o, "spread", [], ["total_timesteps=2e6", "eval_every=50"], ["epsilon=0.4"])
    return datasets + "\n\n" + offline_results(o, "spread", vault, [], ["eval_episodes=128"])


def offline_smax(o: Options) -> str:
    """SMAX 3m: Medium from a 1M-step IPPO run sampling its actions, Poor from random play; each offline
    algorithm and BC evaluated sampling, 3 seeds, 64 episodes per seed every 2000 updates."""
    vault, datasets = offline_datasets(o, "smax", SMAX_3M, ["total_timesteps=1e6", "eval_every=20"], ["greedy=false"])
    sampled = [("Medium", "`bc`, evaluated sampling (`eval_greedy=false`)", ["algo=bc", "eval_greedy=false"])]
    results = offline_results(o, "smax", vault, SMAX_3M, ["eval_every=2000", "eval_episodes=64"], sampled)
    return datasets + "\n\n" + results


def offline_smax_strong(o: Options) -> str:
    """SMAX 3m from a stronger behaviour policy: IPPO's seed 3 (1M steps) sampling its actions, recorded
    with seed 3; each offline algorithm and BC evaluated sampling, on that Medium dataset only."""
    vault, _ = offline_datasets(o, "smax_s3", SMAX_3M, ["total_timesteps=1e6", "eval_every=20", "seed=3"],
                                ["greedy=false", "seed=3"], qualities=("Medium",))  # fmt: skip
    sampled = [("Medium", "`bc`, evaluated sampling (`eval_greedy=false`)", ["algo=bc", "eval_greedy=false"])]
    return offline_results(o, "smax_s3", vault, SMAX_3M, ["eval_every=2000", "eval_episodes=64"], sampled,
                           qualities=("Medium",), prefix="seed 3's ")  # fmt: skip


def offline_bench(o: Options) -> str:
    """`marljax bench` (IPPO) and `marljax bench algo=A offline.dataset=<spread Medium>`, three rounds
    one after another: FLOPs per transition, the fastest timed chunk's batches per second, each round's
    updates_per_s and the fastest chunk's transitions learned per second."""
    vault, _ = offline_datasets(o, "spread", [], ["total_timesteps=2e6", "eval_every=50"], ["epsilon=0.4"])
    algos = ("bc", "iql_cql", "maicq", "ippo")
    runs: dict[str, list[dict]] = {a: [] for a in algos}
    for _ in range(1 if o.quick else 3):
        for a in algos:
            args = [] if a == "ippo" else [f"algo={a}", f"offline.dataset={vault / 'Medium'}"]
            runs[a].append(last_json(marljax(["bench", *args, *(["total_timesteps=4096"] if o.quick else [])])))
    rows = []
    for a in algos:
        first = runs[a][0]
        steps = first["gradient_steps_per_update"]
        fastest = first["updates_per_chunk"] / min(r["train_chunk_s_min"] for r in runs[a])  # updates/s
        label = f"`{a}`" + (f" (online: {steps} gradient steps per update)" if a == "ippo" else "")
        rows.append((label, f"{first['flops_per_env_step']:,.0f}", f"{fastest * steps:,.0f}",
                     ", ".join(f"{r['updates_per_s']:,.1f}" for r in runs[a]), kilo(fastest * steps * first["batch"])))  # fmt: skip
    header = ("algorithm", "FLOPs per transition learned", "batches (gradient steps) per second, fastest chunk",
              "`updates_per_s`, each round", "transitions learned per second, fastest chunk")  # fmt: skip
    return md_table(header, rows)


SECTIONS = [
    Section("defaults", "per-algorithm defaults: greedy return after 1M steps", "about 2 h (6 runs of 1M steps)", defaults),
    Section("fresh-seeds", "every default-learning case on its 3 fresh seeds (docs/guide/algorithms.md)",
            "about 2 h (13 cases: Sable's two 20 min each, TransfQMix's 40)", fresh_seeds),
    Section("fresh-seeds-families", "every family learning case of tests/test_learns.py on its 3 fresh seeds "
            "(docs/guide/algorithms.md)", "about 50 min (18 cases)", fresh_seeds_families),
    Section("mpe-targets", "the replay learners' MPE default on reference and speaker-listener against the settings "
            "before it (docs/guide/algorithms.md)", "about 25 min (14 runs)", mpe_targets),
    Section("mpe-lambda", "a lambda over the replay learners' time-limit bootstrap on spread, against their "
            "defaults (docs/guide/algorithms.md)", "about 20 min (8 runs)", mpe_lambda),
    Section("sweep", "the shipped ablation's report (IQM, mean, median, absolute)", "about 15 min", sweep),
    Section("bench", "`marljax bench` rows", "about 3 min", bench),
    Section("side-by-side", "JaxMARL's ippo_ff_mpe.py beside marljax (prose: 1.32x); needs --jaxmarl PATH",
            "about 15 min", side_by_side),
    Section("parity", "JaxMARL's MPE baseline scripts beside `marljax train FILE`, 5 seeds a side (docs/benchmarks.md); "
            "needs --jaxmarl PATH", "about 6.6 h on one core", parity),
    Section("async", "`marljax bench mode=async` on 2 fake CPU devices", "about 30 min", async_bench),
    Section("bench-sweep", "`marljax bench sweep`: vmapped vs sequential", "about 15 min", sweep_bench),
    Section("qlearning", "Q-learning beside IPPO on MPE simple_spread and SMAX 3m", "about 10 h (24 runs)", qlearning),
    Section("q-bench", "throughput of the Q-learning family (`marljax bench algo=...`)", "about 6 min", q_bench),
    Section("async-k1", "async IPPO at K=1 vs on device (prose)", "about 1 h", async_k1),
    Section("bench-checkpoint", "periodic checkpoint cost (prose)", "about 5 min", bench_checkpoint),
    Section("algo-pairs", "algorithms side by side, 4 seeds each: SMAX 3m, speaker-listener, continuous spread",
            "about 1 h (8 runs)", algo_pairs),
    Section("bench-sequence", "`marljax bench sequence`: Sable and MAPPO over 4-128 agents", "about 10 min",
            bench_sequence),
    Section("default-run", "the default run's summary, compile and whole-process time, cold and warm "
            "(README, getting started)", "about 8 min", default_run),
    Section("offline-spread", "offline datasets and algorithms on MPE spread (docs/guide/offline.md)",
            "about 45 min (1 behaviour run, 6 offline runs)", offline_spread),
    Section("offline-smax", "offline datasets and algorithms on SMAX 3m (docs/guide/offline.md)",
            "about 1 h (1 behaviour run, 7 offline runs)", offline_smax),
    Section("offline-smax-strong", "SMAX 3m's offline algorithms on a stronger behaviour policy's data "
            "(docs/guide/offline.md)", "about 20 min (1 behaviour run, 4 offline runs)", offline_smax_strong),
    Section("offline-bench", "offline training speed beside IPPO's (`marljax bench`, docs/guide/offline.md)",
            "about 30 min (12 benches)", offline_bench),
]  # fmt: skip
BY_NAME = {s.name: s for s in SECTIONS}


def list_sections() -> str:
    width = max(len(s.name) for s in SECTIONS)
    return "\n".join(f"{s.name:<{width}}  {s.cost:<32}  {s.table}" for s in SECTIONS)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sections", nargs="*", metavar="SECTION", help="section names, or all")
    parser.add_argument("--list", action="store_true", help="list the sections with their estimated cost")
    parser.add_argument("--quick", action="store_true", help="tiny budgets: check the plumbing, not the figures")
    parser.add_argument("--jaxmarl", type=Path, help="a checkout of FLAIROx/JaxMARL, for side-by-side")
    parser.add_argument(
        "--only", action="append", default=[], metavar="TEXT",
        help="fresh-seeds sections: only the test nodes that contain TEXT (repeatable: any of them)",
    )  # fmt: skip
    parser.add_argument(
        "--work", type=Path, help="keep the runs in this directory; the same command again continues them"
    )
    args = parser.parse_args(argv)
    if args.list or not args.sections:
        print(list_sections())
        return 0
    names = [s.name for s in SECTIONS] if args.sections == ["all"] else args.sections
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; --list shows them")
    with tempfile.TemporaryDirectory(prefix="readme_figures_") as scratch:
        work = (args.work / "quick" if args.quick else args.work) if args.work else Path(scratch)  # quick runs apart
        work.mkdir(parents=True, exist_ok=True)
        for name in names:
            table = BY_NAME[name].run(Options(args.quick, work, args.jaxmarl, tuple(args.only)))
            flag = (" --quick" if args.quick else "") + "".join(f" --only {shlex.quote(text)}" for text in args.only)
            print(
                f"## {name}{' (--quick: the figures mean nothing)' if args.quick else ''}\n\n{table}\n\n"
                f"Printed by `python experiments/readme_figures.py {name}{flag}`\n",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
