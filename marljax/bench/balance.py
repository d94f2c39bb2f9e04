"""The balance controller's effect: dropped batches with `async.balance=off` and `rate` on a run
whose actors could produce `ratio` times (default 3) more batches than the learner consumes.

    marljax bench balance [ratio=3] [key=value ...]
    marljax bench balance async.micro_batches=2    # the controller counting slices

`staleness_policy=drop`, 2 actor threads, K=1, buffer of 2. Generation and learning are timed
alone first; the learner is then padded with a host sleep so that the threads' generation
capacity is `ratio` x consumption (num_actor_threads x learn time / one batch's generation
time). Both settings run the same number of updates on the same runner (compiled once). Prints
a table (drop share = stale drops / produced; the batches still held at the end are dropped
with the reason "end of run" and shown apart), then one JSON line. Figures, not assertions.
With `async.micro_batches=M` every count (produced, dropped, the window) is in slices, M per
update, and the padding of a batch's generation is spread over its M slices.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax

from marljax.bench.measure import six_digits
from marljax.bench.pipeline import _Padded  # a collector whose rollouts end with a host sleep
from marljax.bench.table import Row, report
from marljax.config import Config, replace
from marljax.parallel.placement import copy_to
from marljax.pipeline.micro_batches import join_slices
from marljax.train.actor_learner import AsyncRun
from marljax.train.wiring import make_adapter, make_trainer

DEFAULTS = [
    "mode=async",
    "num_envs=8",
    "num_steps=16",
    "hidden_size=32",
    "progress=false",
    "async.num_actor_threads=2",
    "async.staleness_policy=drop",
    "async.buffer_capacity=2",
    "async.max_staleness=1",
]
UPDATES = 120
LEARN_S = 0.03  # seconds per learner update (padded up to it): well above thread-switching noise


def pad_learning(runner: AsyncRun, seconds: float) -> None:
    """Make every learner update take `seconds` more (a host sleep after it finishes: a slower
    learner without using a core, which this 2-core machine's actors need)."""
    real = runner.learn

    def padded(learner, traj):
        out = real(learner, traj)
        jax.block_until_ready(out)
        time.sleep(seconds)
        return out

    runner.learn = padded


def pad_generation(runner: AsyncRun, seconds: float) -> None:
    """Make every batch's rollout take `seconds` more (a host sleep after each of its M slices)."""
    real, per_slice = runner.make_collector, seconds / runner.micro_batches

    def make(i: int):
        return _Padded(real(i), per_slice) if seconds else real(i)

    runner.make_collector = make  # type: ignore[method-assign]  # padded on this run only


def stage_seconds(runner: AsyncRun, batches: int = 6) -> tuple[float, float]:
    """(seconds per batch of one collector's generation, of one learner update), after compiling.
    With micro-batches a batch is M slices, rolled out in turn and joined (as the learner joins them)."""
    collector = runner.make_collector(0)
    params = copy_to(runner.learner.params, collector.device)
    M = runner.micro_batches

    def batch(k: int):
        slices = [collector.collect(params, k * M + j)[0] for j in range(M)]
        return slices[0] if M == 1 else join_slices(slices)

    traj = batch(0)
    runner.learner, _ = runner.learn(runner.learner, runner.to_learner_mesh(traj))  # compile both
    jax.block_until_ready(runner.learner)
    t = time.perf_counter()
    for k in range(batches):
        traj = batch(k + 1)
    jax.block_until_ready(traj)
    gen = (time.perf_counter() - t) / batches
    t = time.perf_counter()
    for _ in range(batches):
        runner.learner, _ = runner.learn(runner.learner, runner.to_learner_mesh(traj))
    jax.block_until_ready(runner.learner)
    if hasattr(collector, "close"):
        collector.close()
    return gen, (time.perf_counter() - t) / batches


def balanced_run(runner: AsyncRun, config: Config, updates: int) -> dict[str, Any]:
    """One `runner.run` with `config` (only its async.balance fields differ between calls): the final
    counters and the controller's setting over the rows."""
    runner.config = config  # the compiled pieces do not depend on the balance fields
    rows: list[dict] = []
    final = runner.run(updates, lambda m, wall, row, learner: rows.append(row), chunk=max(1, updates // 10))
    stale = final.dropped.get("stale", 0)
    return {
        "produced": final.produced,
        "consumed": final.consumed,
        "dropped_stale": stale,
        "dropped_end_of_run": final.dropped.get("end of run", 0),
        "drop_share": stale / max(1, final.produced),
        "active_actors": [r["active_actors"] for r in rows],
        "batch_window": [r["batch_window"] for r in rows],
    }


def run_balance_bench(
    config: Config,
    ratio: float = 3.0,
    updates: int = UPDATES,
    learn_s: float = LEARN_S,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    n = config.async_.num_actor_threads
    runner = AsyncRun(config, make_adapter(config), make_trainer, log=lambda s: None)
    gen, learn = stage_seconds(runner)
    # the learner padded to learn_s per update, the generation to ratio x that per thread
    learn_pad = max(0.0, learn_s - learn)
    gen_pad = max(0.0, n * (learn + learn_pad) / ratio - gen)
    pad_learning(runner, learn_pad)
    pad_generation(runner, gen_pad)
    capacity = n * (learn + learn_pad) / (gen + gen_pad)
    log(
        f"marljax bench (balance): {n} actor threads, generation {1e3 * gen:.1f} + {1e3 * gen_pad:.1f} ms padding per "
        f"batch, learning {1e3 * learn:.1f} + {1e3 * learn_pad:.1f} ms padding per update: capacity / consumption = "
        f"{capacity:.1f}; {updates} updates, drop mode, K={config.async_.max_staleness}, "
        f"M={runner.micro_batches}"
    )
    result: dict[str, Any] = {
        "ratio": capacity,
        "generation_ms": 1e3 * gen,
        "generation_pad_ms": 1e3 * gen_pad,
        "learning_ms": 1e3 * learn,
        "learning_pad_ms": 1e3 * learn_pad,
        "updates": updates,
        "micro_batches": runner.micro_batches,
    }
    rows: list[Row] = []
    for mode in ("off", "rate"):
        r = balanced_run(runner, replace(config, **{"async": {"balance": mode}}), updates)
        result.update({f"{mode}_{k}": v for k, v in r.items()})
        rows.append(
            (
                f"balance={mode}",
                f"{100 * r['drop_share']:.1f}%",
                f"dropped stale {r['dropped_stale']} of {r['produced']} produced (+{r['dropped_end_of_run']} "
                f"at the end); active threads {r['active_actors'][-1]}, window {r['batch_window'][-1]}",
            )
        )
    return report(rows, six_digits(result), log)
