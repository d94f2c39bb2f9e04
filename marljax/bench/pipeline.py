"""`marljax bench mode=async`: generation and learning rates alone, then the sync and async loops.

All four are measured in this one process on the same placement, in samples (env steps) per
second after compilation: generation = actor threads' rollouts with no learner; learning = the
learner's update repeated on one batch; sync = rollout then update, alternating in one thread;
async = the pipeline. overlap_efficiency = async / min(generation, learning); a perfect overlap
gives 1. The final JSON line holds every figure.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import jax

from marljax.bench.measure import six_digits
from marljax.bench.table import report
from marljax.config import Config
from marljax.parallel.placement import copy_to
from marljax.pipeline.actor_learner import AsyncRun
from marljax.train.wiring import make_adapter, make_trainer

ASYNC_BATCHES = 40  # batches timed for each of generation, learning, sync and async


def run_async_bench(config: Config, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure the four rates (see the module docstring); print a table, then one JSON line; return the dict."""
    env = make_adapter(config)
    runner = AsyncRun(config, env, make_trainer, log=lambda s: None)
    spb = runner.samples_per_batch
    devices = runner.placement.actor_devices
    n_threads = config.async_.num_actor_threads
    log(f"marljax bench (async): {config.algo} on {env.describe()}")

    collectors = [runner.make_collector(i) for i in range(n_threads)]
    params = [copy_to(runner.learner.params, c.device) for c in collectors]

    def learn(traj) -> None:
        runner.learner, _ = runner.learn(runner.learner, runner.to_learner_mesh(traj))

    # warm-up: compile collect (per device) and learn
    traj = collectors[0].collect(params[0], 0)
    learn(traj)
    jax.block_until_ready(runner.learner)

    # generation alone: every actor thread collects ASYNC_BATCHES / threads batches
    per_thread = max(1, ASYNC_BATCHES // n_threads)

    def generate(i: int):
        for j in range(per_thread):
            jax.block_until_ready(collectors[i].collect(params[i], 1 + j))

    for c, p in zip(collectors, params):  # warm-up of every thread's collector
        jax.block_until_ready(c.collect(p, 0))
    t = time.perf_counter()
    threads = [threading.Thread(target=generate, args=(i,)) for i in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    generation = per_thread * n_threads * spb / (time.perf_counter() - t)

    # learning alone: the same batch, again and again
    t = time.perf_counter()
    for _ in range(ASYNC_BATCHES):
        learn(traj)
    jax.block_until_ready(runner.learner)
    learning = ASYNC_BATCHES * spb / (time.perf_counter() - t)

    # synchronous: rollout, then update, in one thread
    p0 = params[0]
    t = time.perf_counter()
    for j in range(ASYNC_BATCHES):
        traj = collectors[0].collect(p0, 100 + j)
        learn(traj)
        p0 = copy_to(runner.learner.params, collectors[0].device)
    jax.block_until_ready(runner.learner)
    sync = ASYNC_BATCHES * spb / (time.perf_counter() - t)

    # the pipeline, after a short warm-up run of it
    runner.run(2, lambda *a: None, chunk=2)
    t = time.perf_counter()
    final = runner.run(ASYNC_BATCHES, lambda *a: None, chunk=ASYNC_BATCHES)
    asynch = final.consumed * spb / (time.perf_counter() - t)

    ideal = min(generation, learning)
    result = six_digits({
        "mode": "async",
        "env": config.env,
        "env_kwargs": config.env_kwargs,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "num_actor_threads": n_threads,
        "actor_devices": len(devices),
        "learner_devices": int(runner.placement.learner_mesh.devices.size),
        "generation_samples_per_s": generation,
        "learning_samples_per_s": learning,
        "sync_samples_per_s": sync,
        "async_samples_per_s": asynch,
        "overlap_efficiency": asynch / ideal,
        "async_over_sync": asynch / sync,
        "staleness_max": final.staleness_max,
        "produced": final.produced,
        "consumed": final.consumed,
        "dropped": sum(final.dropped.values()),
    })
    rows = [
        ("generation alone", f"{generation:,.0f}", "samples/s (actor threads, no learner)"),
        ("learning alone", f"{learning:,.0f}", "samples/s (updates on one batch)"),
        ("synchronous loop", f"{sync:,.0f}", "samples/s (rollout then update)"),
        ("async pipeline", f"{asynch:,.0f}", f"samples/s; {result['async_over_sync']:.2f}x the sync loop"),
        ("overlap efficiency", f"{result['overlap_efficiency']:.3f}", "async / min(generation, learning)"),
        ("counters", f"{final.produced}/{final.consumed}/{result['dropped']}", "produced/consumed/dropped"),
    ]
    return report(rows, result, log)
