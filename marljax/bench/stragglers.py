"""Host env copies at several step costs, with and without a straggler: the async pipeline's
env-steps/s for each `async.host_stepping`.

    marljax bench stragglers [key=value ...]     # e.g. num_envs=8 num_steps=32
    marljax bench stragglers step_costs=0,0.0005,0.005 slow_factor=10
    marljax bench stragglers step_costs=0 repeats=5   # 5 pairs per row, modes alternating first

The env is `marljax.testing.host_straggler` (host_spread whose step sleeps `step_cost_s`; the
numpy work itself is about 30 us); "straggler": 1 copy in 8 `slow_factor` times slower. The
rate is consumed samples per second of `AsyncRun.run` over BATCHES batches, after a 2-batch
warm-up run (it compiles) and the timed run's first START batches, whose rate is shown apart: a
run's collectors start on workers and probe which way to step (its one-off cost). Lockstep steps
the copies one after another, so its rate falls with the copies' summed cost; independent
stepping (the default) steps cheap equal copies on the collector's thread when that is measured
faster (marljax/pipeline/stepping.py) and the rest side by side on workers. Each row: the
default's rate over the faster of the two (with repeats=N, of the medians of N pairs, and the
range of the pairs' own ratios: the two modes' rates move by about 10% from run to run on a
shared 2-core machine). Prints a table, then one JSON line.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from marljax.bench.measure import six_digits
from marljax.bench.table import Row, report
from marljax.config import Config, replace
from marljax.train.actor_learner import AsyncRun
from marljax.train.wiring import make_adapter, make_trainer

ENV = "pettingzoo:marljax.testing.host_straggler:parallel_env"
DEFAULTS = ["mode=async", f"env={ENV}", "num_envs=8", "num_steps=32", "hidden_size=32", "progress=false"]
BATCHES = 40  # timed batches per run, after its first START
START = 8  # a run's first batches, timed apart: its collectors start on workers and probe how to step (stepping.py)
STEP_COSTS = (0.0, 0.0005, 0.005)  # seconds of sleep per copy-step: cheap, 0.5 ms, 5 ms


def pipeline_rate(config: Config) -> tuple[float, dict, float]:
    """(consumed samples/s of the pipeline over BATCHES batches, after a warm-up run that compiles
    and the timed run's first START batches; its env-health counters; the rate of those START)."""
    runner = AsyncRun(config, make_adapter(config), make_trainer, log=lambda s: None)
    runner.run(2, lambda *a: None, chunk=2)
    marks = [time.perf_counter()]  # the start, then the end of every START batches consumed
    final = runner.run(START + BATCHES, lambda *a: marks.append(time.perf_counter()), chunk=START)
    assert final.consumed == START + BATCHES and len(marks) == 2 + BATCHES // START, (final.consumed, len(marks))
    per_batch = runner.samples_per_batch
    return (
        BATCHES * per_batch / (marks[-1] - marks[1]),
        runner.health.snapshot(),
        START * per_batch / (marks[1] - marks[0]),
    )


def run_straggler_bench(
    config: Config,
    step_costs: tuple[float, ...] = STEP_COSTS,
    slow_factor: float = 10.0,
    repeats: int = 1,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Each row: `repeats` pairs of runs, the two modes alternating which goes first (drift on a
    shared machine then favours neither); the rates shown are the medians, and with repeats > 1
    the range of the pairs' default/faster ratios."""
    kwargs = dict(config.env_kwargs)
    slow_every = kwargs.pop("slow_every", 8)
    log(
        f"marljax bench (host stepping): {config.num_envs} copies x {config.num_steps} steps; step costs "
        f"{', '.join(f'{c * 1e3:g} ms' for c in step_costs)}; straggler: 1 copy in {slow_every} {slow_factor:g}x slower"
        + (f"; medians of {repeats} pairs" if repeats > 1 else "")
    )
    result: dict[str, Any] = {
        "env": ENV,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "slow_every": slow_every,
        "slow_factor": slow_factor,
        "repeats": repeats,
    }
    rows: list[Row] = []
    modes = ("independent", "lockstep")
    for cost in step_costs:
        for label, every in (("all fast", 0), ("straggler", slow_every)):
            runs: dict[str, list[tuple[float, float, dict]]] = {m: [] for m in modes}  # (rate, first START, health)
            env_kwargs = {**kwargs, "step_cost_s": cost, "slow_every": every, "slow_factor": slow_factor}
            for r in range(repeats):
                for stepping in modes if r % 2 == 0 else modes[::-1]:
                    cfg = replace(config, env=ENV, env_kwargs=env_kwargs, **{"async": {"host_stepping": stepping}})
                    rate, health, first = pipeline_rate(cfg)
                    runs[stepping].append((rate, first, health))
            row = f"{cost * 1e3:g}ms_{label.replace(' ', '_')}"
            rates = {m: statistics.median(x[0] for x in runs[m]) for m in modes}
            starts = {m: statistics.median(x[1] for x in runs[m]) for m in modes}
            pairs = [a[0] / max(a[0], b[0]) for a, b in zip(runs["independent"], runs["lockstep"])]
            for m in modes:
                result[f"{row}_{m}_samples_per_s"] = rates[m]
                result[f"{row}_{m}_first_{START}_samples_per_s"] = starts[m]
                result[f"{row}_{m}_env_steps_discarded"] = runs[m][-1][2]["env_steps_discarded"]
                result[f"{row}_{m}_env_steps_inline"] = runs[m][-1][2]["env_steps_inline"]
                if repeats > 1:
                    result[f"{row}_{m}_samples_per_s_all"] = [x[0] for x in runs[m]]
            share = rates["independent"] / max(rates.values())
            result[f"{row}_default_over_faster"] = share
            spread = f" (pairs {min(pairs):.2f}-{max(pairs):.2f})" if repeats > 1 else ""
            rows.append(
                (
                    f"{cost * 1e3:g} ms, {label}",
                    f"{rates['independent']:,.0f} | {rates['lockstep']:,.0f}",
                    f"env-steps/s independent (default) | lockstep; default/faster {share:.2f}{spread}",
                )
            )
            rows.append(
                (
                    f"  first {START} batches",
                    f"{starts['independent']:,.0f} | {starts['lockstep']:,.0f}",
                    f"env-steps/s; default/faster {starts['independent'] / max(starts.values()):.2f}",
                )
            )
        fast = result[f"{cost * 1e3:g}ms_all_fast_independent_samples_per_s"]
        slow = result[f"{cost * 1e3:g}ms_straggler_independent_samples_per_s"]
        result[f"{cost * 1e3:g}ms_default_straggler_over_fast"] = slow / fast
        rows.append((f"{cost * 1e3:g} ms: default, straggler / all fast", f"{slow / fast:.2f}x", ""))
    return report(rows, six_digits(result), log)
