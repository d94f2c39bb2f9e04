"""`marljax bench mode=async`: generation and learning alone, then the sync and async loops, fairly.

All four are measured in this one process on the same placement, with the same actor threads and
the same env copies, in samples (env steps) per second after compilation:

* generation = the `num_actor_threads` actor threads' rollouts, no learner;
* learning = the learner's update repeated on one batch;
* sync = the same threads each collect one batch with the current parameters, then the learner
  updates on each batch in turn, then the parameters go back to the actors: no overlap, the
  same parallelism in generation as the async run (a one-collector baseline would credit the
  pipeline with what is only a second thread);
* async = the pipeline.

A batch takes 1/generation + 1/learning seconds per sample in the sync loop and, at best,
max(1/generation, 1/learning) in the async one, so the ideal async rate is
min(generation, learning) (`overlap_efficiency` = async / that) and the ideal async/sync is
(1/generation + 1/learning) / max(1/generation, 1/learning): 1 when one stage costs nothing,
2 when both cost the same.

Two stage-cost settings are measured: `configured` (the config as given) and `equal`, where the
cheaper stage is padded with a host sleep (which holds no core, like a stage on its own
accelerator) until both stages take the same time per batch, the case overlap helps most. The
final JSON line holds every figure; the `equal` ones are prefixed `equal_`.

Micro-batches: with `async.micro_batches=M` > 1 the four stages are measured at M = 1 as above,
and the pipeline again at M (same threads, envs and pads; a generation pad is cut in M per
slice): `micro_async_samples_per_s` and `micro_over_one` = that / the M = 1 pipeline, side by
side in one sitting. M > 1 gains where an update's slices can be rolled out in parallel and
M = 1 cannot, e.g. `async.max_staleness=0` with 2 actor threads (M = 1: the second thread waits
for the next version; M = 2: both roll out half of the update's environments at once).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import jax

from marljax.bench.measure import six_digits
from marljax.bench.table import Row, report
from marljax.config import Config, replace
from marljax.parallel.placement import copy_to
from marljax.train.actor_learner import AsyncRun
from marljax.train.wiring import make_adapter, make_trainer

ASYNC_BATCHES = 40  # batches timed for each of generation, learning, sync and async
SCENARIOS = ("configured", "equal")


class Pads(NamedTuple):
    """Host seconds added to each stage, per batch (generation: per batch of one actor thread)."""

    generation_s: float = 0.0
    learning_s: float = 0.0


class _Padded:
    """A collector whose every rollout (a batch, or a slice of one) ends with a sleep of `pad_s`
    (the `equal` setting)."""

    def __init__(self, inner, pad_s: float):
        self.inner, self.pad_s, self.device = inner, pad_s, inner.device

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("beat", "newest", "cancelled"):  # set by the actor thread: the wrapped collector uses them
            setattr(self.inner, name, value)
        object.__setattr__(self, name, value)

    def collect(self, params, ticket: int, **kw):
        out = jax.block_until_ready(self.inner.collect(params, ticket, **kw))
        time.sleep(self.pad_s)
        return out

    def close(self) -> None:
        getattr(self.inner, "close", lambda: None)()


def _ideal_ratio(generation: float, learning: float) -> float:
    """async/sync of a perfect overlap: (1/g + 1/l) / max(1/g, 1/l)."""
    return (1 / generation + 1 / learning) / max(1 / generation, 1 / learning)


@contextlib.contextmanager
def _padded(runner: AsyncRun, pads: Pads):
    """`runner` with `pads` added to its stages (a generation pad shared by the M slices of a batch)."""
    real_learn, real_make = runner.learn, runner.make_collector

    def padded_learn(learner, traj):
        out = real_learn(learner, traj)
        if pads.learning_s:
            jax.block_until_ready(out)
            time.sleep(pads.learning_s)
        return out

    def make(i: int):
        c = real_make(i)
        return _Padded(c, pads.generation_s / runner.micro_batches) if pads.generation_s else c

    runner.learn, runner.make_collector = padded_learn, make  # type: ignore[method-assign]  # padded on this run only
    try:
        yield
    finally:
        runner.learn, runner.make_collector = real_learn, real_make  # type: ignore[method-assign]  # the run's own again


def measure_async(runner: AsyncRun, pads: Pads) -> dict[str, Any]:
    """The pipeline's rate (samples per second) with `pads`, after a warm-up of 2 updates, and its counters."""
    with _padded(runner, pads):
        if runner.micro_batches > 1:
            _compile_slices(runner)
        runner.run(2, lambda *a: None, chunk=2)  # the pipeline's own warm-up
        t = time.perf_counter()
        final = runner.run(ASYNC_BATCHES, lambda *a: None, chunk=ASYNC_BATCHES)
        asynch = final.consumed * runner.samples_per_batch / runner.micro_batches / (time.perf_counter() - t)
    return {
        "async_samples_per_s": asynch,
        "staleness_max": final.staleness_max,
        "produced": final.produced,
        "consumed": final.consumed,
        "dropped": sum(final.dropped.values()),
    }


def _compile_slices(runner: AsyncRun) -> None:
    """Roll out every slice once in every actor thread's collector: each slice is its own program,
    compiled per actor device, which a 2-update warm-up may not reach (it would compile while timed)."""
    for i in range(runner.config.async_.num_actor_threads):
        collector = runner.make_collector(i)
        params = copy_to(runner.learner.params, collector.device)
        for ticket in range(runner.micro_batches):
            jax.block_until_ready(collector.collect(params, ticket)[0])
        getattr(collector, "close", lambda: None)()  # host envs: their copies' worker threads


def measure_stages(runner: AsyncRun, config: Config, pads: Pads) -> dict[str, Any]:
    """Generation, learning, sync and async rates of `runner` (M = 1) with `pads` added to the stages."""
    spb, n_threads = runner.samples_per_batch, config.async_.num_actor_threads
    with _padded(runner, pads):
        generation, learning, sync = _measure_alone_and_sync(runner, n_threads, spb)
    pipeline = measure_async(runner, pads)
    asynch = pipeline["async_samples_per_s"]
    return {
        "generation_samples_per_s": generation,
        "learning_samples_per_s": learning,
        "sync_samples_per_s": sync,
        "async_samples_per_s": asynch,
        "overlap_efficiency": asynch / min(generation, learning),
        "async_over_sync": asynch / sync,
        "ideal_async_over_sync": _ideal_ratio(generation, learning),
        "generation_pad_ms": 1e3 * pads.generation_s,
        "learning_pad_ms": 1e3 * pads.learning_s,
        **{k: v for k, v in pipeline.items() if k != "async_samples_per_s"},
    }


def _measure_alone_and_sync(runner: AsyncRun, n_threads: int, spb: int) -> tuple[float, float, float]:
    """(generation, learning, sync) samples per second of `runner`'s (padded) pieces."""
    make = runner.make_collector
    collectors = [make(i) for i in range(n_threads)]
    try:
        params = [copy_to(runner.learner.params, c.device) for c in collectors]

        def learn(traj) -> None:
            runner.learner, _ = runner.learn(runner.learner, runner.to_learner_mesh(traj))

        def collect(i: int, ticket: int):
            return jax.block_until_ready(collectors[i].collect(params[i], ticket)[0])

        # warm-up: compile collect (per device) and learn
        traj = collect(0, 0)
        learn(traj)
        for i in range(1, n_threads):
            collect(i, 0)
        jax.block_until_ready(runner.learner)
        rounds = max(1, ASYNC_BATCHES // n_threads)

        with ThreadPoolExecutor(n_threads) as pool:
            # generation alone: every actor thread collects `rounds` batches
            t = time.perf_counter()
            list(pool.map(lambda i: [collect(i, 1 + j) for j in range(rounds)], range(n_threads)))
            generation = rounds * n_threads * spb / (time.perf_counter() - t)

            # learning alone: the same batch, again and again
            t = time.perf_counter()
            for _ in range(ASYNC_BATCHES):
                learn(traj)
            jax.block_until_ready(runner.learner)
            learning = ASYNC_BATCHES * spb / (time.perf_counter() - t)

            # synchronous: all threads collect one batch each, then one update per batch, then publish
            t = time.perf_counter()
            for r in range(rounds):
                for batch in pool.map(collect, range(n_threads), [100 + r] * n_threads):
                    learn(batch)
                params = [copy_to(runner.learner.params, c.device) for c in collectors]
            jax.block_until_ready(runner.learner)
            sync = rounds * n_threads * spb / (time.perf_counter() - t)
    finally:
        for c in collectors:
            getattr(c, "close", lambda: None)()
    return generation, learning, sync


def equalising_pads(figures: dict[str, Any], spb: int, n_threads: int) -> Pads:
    """Pads that make the cheaper stage as slow as the other, from measured rates."""
    t_gen, t_learn = spb / figures["generation_samples_per_s"], spb / figures["learning_samples_per_s"]
    if t_learn < t_gen:
        return Pads(learning_s=t_gen - t_learn)
    return Pads(generation_s=n_threads * (t_learn - t_gen))  # each thread makes 1/n_threads of the batches


def _rows(name: str, r: dict[str, Any], micro_batches: int = 1) -> list[Row]:
    pads = ""
    if r["learning_pad_ms"] or r["generation_pad_ms"]:
        pads = (
            f" (padded: generation +{r['generation_pad_ms']:.1f} ms, learning +{r['learning_pad_ms']:.1f} ms per batch)"
        )
    return [
        (f"[{name}]", "", f"stage costs{pads}"),
        ("generation alone", f"{r['generation_samples_per_s']:,.0f}", "samples/s (actor threads, no learner)"),
        ("learning alone", f"{r['learning_samples_per_s']:,.0f}", "samples/s (updates on one batch)"),
        ("synchronous loop", f"{r['sync_samples_per_s']:,.0f}", "samples/s (same threads collect, then update)"),
        ("async pipeline", f"{r['async_samples_per_s']:,.0f}", "samples/s"),
        ("overlap efficiency", f"{r['overlap_efficiency']:.3f}", "async / min(generation, learning): 1 is ideal"),
        ("async / sync", f"{r['async_over_sync']:.2f}x", f"ideal {r['ideal_async_over_sync']:.2f}x"),
        ("counters", f"{r['produced']}/{r['consumed']}/{r['dropped']}", "produced/consumed/dropped"),
    ] + (
        []
        if micro_batches == 1
        else [
            ("async pipeline, M=1", f"{r['async_m1_samples_per_s']:,.0f}", "samples/s (measured in turns with M's)"),
            (
                f"async pipeline, M={micro_batches}",
                f"{r['micro_async_samples_per_s']:,.0f}",
                f"samples/s (async.micro_batches={micro_batches}; the other rows: M=1)",
            ),
            (f"M={micro_batches} / M=1", f"{r['micro_over_one']:.2f}x", "async pipeline, same threads, envs and pads"),
            (
                f"counters, M={micro_batches}",
                f"{r['micro_produced']}/{r['micro_consumed']}/{r['micro_dropped']}",
                "produced/consumed/dropped slices",
            ),
        ]
    )


def run_async_bench(
    config: Config, log: Callable[[str], None] = print, scenarios: tuple[str, ...] = SCENARIOS
) -> dict[str, Any]:
    """Measure the rates (see the module docstring) in each of `scenarios`; print a table, then one
    JSON line; return the dict."""
    env = make_adapter(config)
    M = config.async_.micro_batches
    one = replace(config, **{"async": {"micro_batches": 1}})
    runner = AsyncRun(one, env, make_trainer, log=lambda s: None)
    micro = AsyncRun(config, env, make_trainer, log=lambda s: None) if M > 1 else None
    n_threads = config.async_.num_actor_threads
    log(f"marljax bench (async): {config.algo} on {env.describe()}")
    result: dict[str, Any] = {
        "mode": "async",
        "env": config.env,
        "env_kwargs": config.env_kwargs,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "num_actor_threads": n_threads,
        "max_staleness": config.async_.max_staleness,
        "micro_batches": M,
        "actor_devices": len(runner.placement.actor_devices),
        "learner_devices": int(runner.placement.learner_mesh.devices.size),
    }
    rows: list[Row] = []
    for name in ("configured", *(s for s in scenarios if s != "configured")):  # `equal` pads from `configured`
        pads = Pads() if name == "configured" else equalising_pads(result, runner.samples_per_batch, n_threads)
        figures = measure_stages(runner, one, pads)
        if micro is not None:
            figures.update(_micro_figures(runner, micro, pads))
        result.update({(k if name == "configured" else f"{name}_{k}"): v for k, v in figures.items()})
        rows += _rows(name, figures, M)
    return report(rows, six_digits(result), log)


def _micro_figures(one: AsyncRun, micro: AsyncRun, pads: Pads, rounds: int = 2) -> dict[str, Any]:
    """The M > 1 pipeline against the M = 1 one, measured in turns (M=1, M, M=1, M, ...: a shared
    machine's load drifts): the mean rates, `micro_over_one` their ratio, and the last M run's
    counters, prefixed `micro_`."""
    rates: dict[str, list[float]] = {"one": [], "micro": []}
    for _ in range(rounds):
        rates["one"].append(measure_async(one, pads)["async_samples_per_s"])
        last = measure_async(micro, pads)
        rates["micro"].append(last["async_samples_per_s"])
    mean = {k: sum(v) / len(v) for k, v in rates.items()}
    return {
        "async_m1_samples_per_s": mean["one"],
        **{f"micro_{k}": v for k, v in last.items()},
        "micro_async_samples_per_s": mean["micro"],
        "micro_over_one": mean["micro"] / mean["one"],
    }


__all__ = ["run_async_bench", "measure_stages", "equalising_pads", "Pads", "ASYNC_BATCHES", "SCENARIOS"]
