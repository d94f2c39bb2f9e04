"""`marljax bench`: throughput, FLOPs, MFU, compile time and memory of one config, any algorithm.

`run_bench(config)` measures, in one process and one run, through the algorithm contract alone
(`marljax.algos.api`; no algorithm is named here):

* **training throughput** of the real program `marljax train` runs: the
  sharded chunk of updates from `marljax.parallel.mesh.shard_trainer`,
  compiled once (compile time reported apart), one warm-up chunk, then a few
  timed chunks; with updates and gradient steps per second;
* **the rollout ceiling** (`env_only.py`): the same environments stepped with random actions;
* **FLOPs per environment step** from XLA's cost analysis of the unscanned
  pieces of one update, the algorithm's `cost_pieces` (see `count_flops`);
* **a peak to compare with**: a matmul of the networks' dtype timed on the same devices, so that
  MFU = achieved / measured peak, and beside it the device kind's datasheet peak where
  `measure.DATASHEET` knows it;
* **bytes per env step**, XLA's model of what the pieces read and write, and the traffic achieved;
* **sequential loop trips per update**, counted in the compiled chunk (`measure.loop_trips`);
* **peak resident memory** of the process;
* **each agent group's parameters and forward FLOPs per agent step** (`groups.py`);
* **the agent-parallel swap** (`swap.py`) and the learner bytes per device.
* **with mesh.agent > 1, each agent device's parameters, FLOPs and bytes** under the naive and
  the balanced placement and the update time of each that runs (`placement.py`).

An algorithm with a learning warm-up (a `learning_starts` field in one of its sections: the
replay family) is timed with it at 0, so that every timed update learns. mode=async runs the
pipeline's bench (`pipeline.py`) instead. The number of timed chunks and their size are fixed
here (not config keys): `TIMED_CHUNKS` chunks of `min(updates_per_chunk, MAX_UPDATES_PER_CHUNK)`
updates, cut short once `TIME_BUDGET_S` seconds have been timed, so that a bench stays bounded
whatever `total_timesteps` says.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from marljax.algos.api import CostPiece, EpochSchedule, Trainer
from marljax.bench.env_only import bench_env_only, random_step
from marljax.bench.groups import group_costs, group_rows
from marljax.bench.measure import (
    TIME_BUDGET_S,
    bytes_accessed,
    datasheet,
    flops,
    loop_trips,
    peak_device_mb,
    peak_matmul_gflops,
    peak_rss_mb,
    six_digits,
    timed,
)
from marljax.bench.pipeline import run_async_bench
from marljax.bench.placement import group_cost_list, placement_figures, placement_rows, timed_placements
from marljax.bench.swap import bench_swap
from marljax.bench.table import Row, report
from marljax.config import Config, replace
from marljax.envs.adapter import EnvAdapter
from marljax.parallel.mesh import replicated_groups, seed_keys, shard_trainer
from marljax.parallel.placement import platform
from marljax.train import compile_cache
from marljax.train.wiring import make_trainer, prepare

TIMED_CHUNKS = 3  # chunks timed after the warm-up chunk
MAX_UPDATES_PER_CHUNK = 10  # a bench chunk holds min(config.updates_per_chunk, this) updates


def bench_train(config: Config, mesh: Mesh, trainer: Trainer) -> dict[str, float]:
    """Compile the sharded chunk as `marljax.train.loop.train` does, warm up once, time a few chunks."""
    fns = shard_trainer(trainer, mesh)
    state = fns.init(seed_keys(config.seed, config.num_seeds))
    n = max(1, min(config.updates_per_chunk, MAX_UPDATES_PER_CHUNK))
    compiled, compile_s, compile_warm = _compile_cold_and_warm(lambda: fns.chunk.lower(state, n).compile())
    trips = loop_trips(compiled.as_text()) / n  # the chunk's own loop runs one trip per update

    _, (state, _) = timed(partial(compiled, state))  # warm-up chunk (first-run allocations, caches)
    times: list[float] = []
    for _ in range(TIMED_CHUNKS):
        seconds, (state, _) = timed(partial(compiled, state))
        times.append(seconds)
        if sum(times) > TIME_BUDGET_S:
            break
    updates = n * len(times)
    return {
        "train_env_steps_per_s": updates * config.env_steps_per_update / sum(times),
        "compile_s": compile_s,
        **compile_warm,
        "bench_updates": updates,
        "updates_per_chunk": n,
        "train_chunk_s_min": min(times),
        "train_chunk_s_max": max(times),
        "loop_trips_per_update": trips,
    }


def _seconds(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f}"


def _compile_cold_and_warm(compile_chunk: Callable[[], Any]) -> tuple[Any, float, dict[str, Any]]:
    """Compile the chunk: (the compiled chunk, its seconds, {compile_cache, compile_cold_s,
    compile_warm_s}). A compile that JAX's persistent cache missed is the cold one, and it is
    compiled once more, after the in-memory caches are cleared, to read it back (the warm one); a
    compile the cache already held (a run compiled it before) is the warm one, the cold unseen
    (None); with the cache off (compile_cache=false, or a program JAX does not cache) there is no
    warm one."""
    with compile_cache.CacheEvents() as first:
        compiled, compile_s = _timed_compile(compile_chunk)
    if first.hits:
        return compiled, compile_s, {"compile_cache": "hit", "compile_cold_s": None, "compile_warm_s": compile_s}
    figures: dict[str, Any] = {
        "compile_cache": "miss" if first.misses else "off",
        "compile_cold_s": compile_s,
        "compile_warm_s": None,
    }
    if first.misses:
        jax.clear_caches()  # so that the second compile goes to the persistent cache, not to memory
        with compile_cache.CacheEvents() as second:
            compiled, warm_s = _timed_compile(compile_chunk)
        figures["compile_warm_s"] = warm_s if second.hits else None
    return compiled, compile_s, figures


def _timed_compile(compile_chunk: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    compiled = compile_chunk()
    return compiled, time.perf_counter() - t


def unsharded_pieces(config: Config, trainer: Trainer) -> tuple[Any, list[CostPiece]]:
    """(state shapes of one seed, the algorithm's `cost_pieces` of one update) from an unsharded twin
    built from the same config: the same code without the mesh's collectives, for ONE seed with all
    `num_envs` environments (sharding splits the work but does not change its total)."""
    twin = make_trainer(config, trainer.env)
    state = jax.eval_shape(twin.init, jax.random.PRNGKey(0))
    return state, twin.cost_pieces(state)


def count_flops(config: Config, env: EnvAdapter, state: Any, pieces: list[CostPiece]) -> dict[str, float]:
    """FLOPs per environment step of one update, from XLA's cost analysis.

    XLA counts a `scan`/`while` body once, not once per trip, so the update is not analysed
    whole: each of the algorithm's unscanned pieces (`Trainer.cost_pieces`: one rollout step,
    one gradient step, ...; what each counts is in its docstring) is compiled alone and its
    FLOPs multiplied by its trips per update (`state` and `pieces` from `unsharded_pieces`).

    Returns `flops_per_env_step` = (rollout + learn FLOPs of one update) / (num_steps * num_envs),
    the same per env step for any number of seeds, with its parts, `env_flops_per_env_step`
    (the env step alone, with random actions) and `bytes_per_env_step`, XLA's model of the bytes
    the same pieces read and write, compiled for the default backend.
    """
    E = config.num_envs
    totals = {"rollout": 0.0, "learn": 0.0}
    moved = 0.0
    for piece in pieces:
        totals[piece.part] += flops(piece.fn, *piece.args) * piece.trips
        moved += bytes_accessed(piece.fn, *piece.args) * piece.trips

    def env_step(actors, key):
        return jax.vmap(lambda k, s: random_step(env, k, s))(jax.random.split(key, E), actors.env_state)

    env_only = flops(env_step, state.actors, jax.ShapeDtypeStruct((2,), jnp.uint32))
    steps = config.num_steps * E
    return {
        "flops_per_env_step": (totals["rollout"] + totals["learn"]) / steps,
        "rollout_flops_per_env_step": totals["rollout"] / steps,
        "learn_flops_per_env_step": totals["learn"] / steps,
        "env_flops_per_env_step": env_only / E,
        "flops_per_update_per_seed": totals["rollout"] + totals["learn"],
        "bytes_per_env_step": moved / steps,
    }


def gradient_steps(config: Config, pieces: list[CostPiece]) -> dict[str, int]:
    """Gradient steps per update and the transitions each learns from (per seed), from the cost
    pieces; with an epoch schedule's settings where the algorithm learns in epochs of minibatches."""
    steps = [p for p in pieces if p.transitions]
    out = {
        "gradient_steps_per_update": sum(p.trips for p in steps),
        "batch": max((p.transitions for p in steps), default=0),
    }
    for section in config.sections.values():
        if isinstance(section, EpochSchedule):
            out |= {"update_epochs": section.update_epochs, "num_minibatches": section.num_minibatches}
    return out


def learning_from_the_start(config: Config) -> Config:
    """`config` with every section's `learning_starts` (a replay warm-up) at 0."""
    warm = {name: {"learning_starts": 0} for name, s in config.sections.items() if hasattr(s, "learning_starts")}
    return replace(config, **warm) if warm else config


def run_bench(config: Config, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure `config` (see the module docstring); print a table, then one JSON line; return the dict."""
    if config.mode == "async":
        return run_async_bench(config, log)
    config = learning_from_the_start(config)
    compile_cache.use(config.compile_cache, log)  # before anything compiles
    env, mesh, trainer = prepare(config)
    log(f"marljax bench: {config.algo} on {env.describe()}")
    shapes, pieces = unsharded_pieces(config, trainer)
    result: dict[str, Any] = {
        "algo": config.algo,
        "env": config.env,
        "num_envs": config.num_envs,
        "num_seeds": config.num_seeds,
        "num_steps": config.num_steps,
        "recurrent": config.recurrent,
        "param_sharing": config.param_sharing,
        **gradient_steps(config, pieces),
        "devices": int(mesh.devices.size),
        "platform": platform(mesh),
        "mesh": "x".join(f"{k}{v}" for k, v in mesh.shape.items()),
    }
    result.update(bench_train(config, mesh, trainer))
    result["updates_per_s"] = result["train_env_steps_per_s"] / config.env_steps_per_update
    result["gradient_steps_per_s"] = result["updates_per_s"] * result["gradient_steps_per_update"] * config.num_seeds
    result.update(bench_swap(config, mesh, trainer, result["train_chunk_s_min"] / result["updates_per_chunk"]))
    result.update(bench_env_only(config, mesh, env))
    result["train_over_env_only"] = result["train_env_steps_per_s"] / result["env_only_env_steps_per_s"]
    result.update(count_flops(config, env, shapes, pieces))
    result.update(group_costs(config, trainer, shapes))
    if config.mesh.agent > 1:
        result.update(placement_figures(group_cost_list(trainer, shapes, result), config.mesh.agent))
        sizes = {g.name: g.size for g in env.groups}
        result.update(timed_placements(config, partial(_update_s, config, sizes, result)))
    result["achieved_gflops"] = result["flops_per_env_step"] * result["train_env_steps_per_s"] / 1e9
    result.update(peak_matmul_gflops(mesh, dtype=config.dtype))  # MFU against the peak of the networks' dtype
    result["mfu"] = result["achieved_gflops"] / result["peak_matmul_gflops"]
    result.update(datasheet(mesh, config.dtype))
    sheet = result["datasheet_matmul_gflops"]
    result["mfu_datasheet"] = None if sheet is None else result["achieved_gflops"] / sheet
    result["achieved_gb_s"] = result["bytes_per_env_step"] * result["train_env_steps_per_s"] / 1e9
    result["peak_rss_mb"] = peak_rss_mb()
    result["peak_device_mb"] = peak_device_mb(mesh)  # None on CPU
    result = six_digits(result)
    return report(_rows(result), result, log)


def _update_s(own: Config, sizes: dict[str, int], timed_own: dict[str, Any], config: Config) -> float:
    """Seconds per update of `config`: `own`'s timing when it places the groups (name -> count)
    the same way (the same program), else benched anew."""
    if replicated_groups(config.mesh, sizes) == replicated_groups(own.mesh, sizes):
        return timed_own["train_chunk_s_min"] / timed_own["updates_per_chunk"]
    _, mesh, trainer = prepare(config)
    timing = bench_train(config, mesh, trainer)
    return timing["train_chunk_s_min"] / timing["updates_per_chunk"]


def _rows(r: dict[str, Any]) -> list[Row]:
    rows = [
        ("env", r["env"], ""),
        ("devices", f"{r['devices']} x {r['platform']}", f"mesh {r['mesh']}"),
        (
            "seeds x envs x steps",
            f"{r['num_seeds']} x {r['num_envs']} x {r['num_steps']}",
            f"{'recurrent' if r['recurrent'] else 'feed-forward'}, param_sharing={r['param_sharing']}",
        ),
        ("train throughput", f"{r['train_env_steps_per_s']:,.0f}", "env steps/s"),
        (
            "  timed",
            f"{r['bench_updates']} updates",
            f"chunks of {r['updates_per_chunk']}, {r['train_chunk_s_min']:.2f}-{r['train_chunk_s_max']:.2f} s each",
        ),
        ("  updates", f"{r['updates_per_s']:,.1f}", "/s"),
        (
            "  gradient steps",
            f"{r['gradient_steps_per_s']:,.1f}",
            f"/s, all seeds ({r['gradient_steps_per_update']} per update on {r['batch']:,} transitions each)",
        ),
        ("env-only (random actions)", f"{r['env_only_env_steps_per_s']:,.0f}", "env steps/s"),
        ("  train / env-only", f"{r['train_over_env_only']:.3f}", ""),
        (
            "FLOPs per env step",
            f"{r['flops_per_env_step']:,.0f}",
            f"rollout {r['rollout_flops_per_env_step']:,.0f} (env {r['env_flops_per_env_step']:,.0f})"
            f" + learn {r['learn_flops_per_env_step']:,.0f}",
        ),
        ("achieved", f"{r['achieved_gflops']:.2f}", "GFLOP/s"),
        (
            f"peak {r['peak_matmul_dtype']} matmul",
            f"{r['peak_matmul_gflops']:.1f}",
            f"GFLOP/s (n={r['peak_matmul_n']})",
        ),
        ("MFU", f"{100 * r['mfu']:.2f}%", "achieved / measured matmul peak"),
        (
            "MFU (datasheet)",
            "n/a" if r["mfu_datasheet"] is None else f"{100 * r['mfu_datasheet']:.2f}%",
            f"achieved / {r['device_kind']}'s datasheet {r['peak_matmul_dtype']} peak"
            + ("" if r["datasheet_matmul_gflops"] is None else f" ({r['datasheet_matmul_gflops']:,.0f} GFLOP/s)"),
        ),
        ("bytes per env step", f"{r['bytes_per_env_step']:,.0f}", "modelled (XLA's bytes accessed of the pieces)"),
        (
            "achieved memory traffic",
            f"{r['achieved_gb_s']:,.1f}",
            "GB/s of that model"
            + ("" if r["datasheet_memory_gb_s"] is None else f" (datasheet {r['datasheet_memory_gb_s']:,.0f})"),
        ),
        (
            "loop trips per update",
            f"{r['loop_trips_per_update']:,.0f}",
            "sequential while-loop trips, compiled program",
        ),
        ("compile", f"{r['compile_s']:.1f}", f"s (training chunk; compile cache {r['compile_cache']})"),
        (
            "compile cold / warm",
            f"{_seconds(r['compile_cold_s'])} / {_seconds(r['compile_warm_s'])}",
            "s (compiled / read back from the persistent cache; - where not seen)",
        ),
        ("peak RSS", f"{r['peak_rss_mb']:,.0f}", "MiB"),
        (
            "peak device memory",
            "n/a" if r["peak_device_mb"] is None else f"{r['peak_device_mb']:,.0f}",
            "MiB (largest over the devices)" if r["peak_device_mb"] is not None else "the CPU runtime keeps no count",
        ),
        (
            "learner bytes / device",
            f"{r['learner_bytes_per_device']:,}",
            f"params + Adam; {r['learner_bytes_total']:,} in all",
        ),
    ]
    rows += group_rows(
        r, [k[len("group_") : -len("_params")] for k in r if k.startswith("group_") and k.endswith("_params")]
    )
    if "placement_naive_imbalance" in r:
        rows += placement_rows(r)
    if r.get("swap_param_bytes"):
        rows += [
            ("swap: params in", f"{r['swap_param_bytes']:,}", "bytes per device per update (all-gather)"),
            ("swap: trajectories", f"{r['swap_traj_bytes']:,}", "bytes per device per update (all-to-all)"),
            (
                "swap / update",
                f"{100 * r['swap_share_of_update']:.2f}%",
                f"{1000 * r['swap_s']:.2f} ms alone, timed beside the training chunk",
            ),
        ]
    return rows
