"""`marljax bench sweep`: 8 seeds x 4 learning rates as one vmapped program vs 32 runs one after another.

Both sides train the same 32 runs (row (lr, seed i) starts from seed index i's key)
with the same chunking, and nothing else: no evaluation, no files. The sequential
side is what `marljax train` does 32 times in one process: build, compile, run.
Times are taken side by side in one process; the ratio is what this machine says,
the absolute times mean little on a shared CPU. The last line is JSON.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from marljax.bench.table import report
from marljax.config import Config, replace
from marljax.parallel.mesh import compile_chunks, seed_keys, shard_trainer
from marljax.parallel.placement import place, platform
from marljax.sweeps.runner import row_hparams
from marljax.sweeps.spec import expand
from marljax.train.chunks import chunk_sizes, run_chunks
from marljax.train.wiring import prepare
from marljax.types import HParams

LRS = (3e-4, 1e-3, 2e-3, 3e-3)
SEEDS = 8
# bench sweep's own defaults without a config file (key=value overrides them): 61 updates of 32 envs per run
DEFAULTS = ("total_timesteps=2.5e5", "num_envs=32", "progress=false", "plot=false")


def _timed_run(
    config: Config, keys: jax.Array, hparams: Callable[[type[HParams]], HParams] | None = None
) -> tuple[float, float, dict, np.ndarray]:
    """(build+compile seconds, run seconds, final params on the host, last chunk's return per row [R]);
    `hparams(the algorithm's class of them)`: every row's, in place of the config's."""
    t0 = time.perf_counter()
    _, mesh, trainer = prepare(config)
    fns = shard_trainer(trainer, mesh)
    state = fns.init(keys)
    if hparams is not None:
        rows = hparams(type(state.learner.hparams))
        state = state.replace(learner=state.learner.replace(hparams=place(rows, fns.shardings.learner.hparams)))
    schedule = chunk_sizes(config.num_updates, config.updates_per_chunk)
    compiled = compile_chunks(fns, state, schedule)
    jax.block_until_ready(state)
    t1 = time.perf_counter()
    chunk_metrics = []
    state, _ = run_chunks(compiled, state, schedule, lambda _s, metrics, _n, _w: chunk_metrics.append(metrics))
    params = jax.device_get(state.learner.params)
    ep = chunk_metrics[-1].episodes
    returns = ep.return_sum.sum(axis=(1, 2)) / np.maximum(ep.count.sum(axis=1), 1) / ep.return_sum.shape[-1]
    return t1 - t0, time.perf_counter() - t1, params, np.asarray(returns)


def run_sweep_bench(config: Config, log=print, lrs: tuple = LRS, seeds: int = SEEDS) -> dict:
    """Time `len(lrs) * seeds` runs both ways; print the figures and a JSON line; return its dict."""
    base = {
        k: v
        for k, v in config.to_dict().items()
        if k not in ("num_seeds", "out_dir", "resume", "overwrite", "progress", "lr")
    }
    sweep = expand({"base": base, "axes": {"lr": list(lrs)}, "seeds": seeds})
    (program,) = sweep.programs
    runs, steps = program.rows, config.num_updates * config.num_steps * config.num_envs
    log(
        f"bench sweep: {len(lrs)} learning rates x {seeds} seeds = {runs} runs of {config.num_updates} updates "
        f"({steps} env steps each) on {config.env}, {platform()}"
    )
    keys = seed_keys(config.seed, seeds)
    vm_compile, vm_run, vm_params, vm_returns = _timed_run(
        program.config, jnp.tile(keys, (len(lrs), 1)), lambda kind: row_hparams(program, seeds, kind)
    )
    log(f"  vmapped: {vm_compile + vm_run:.1f}s; now the same {runs} runs one after another")

    seq_compile = seq_run = 0.0
    max_rel, seq_returns = 0.0, []
    for ci, cell in enumerate(program.cells):
        one = replace(cell.config, num_seeds=1)
        for i in range(seeds):
            c, r, params, ret = _timed_run(one, keys[i : i + 1])
            seq_returns.append(float(ret[0]))
            seq_compile, seq_run = seq_compile + c, seq_run + r
            row = ci * seeds + i
            for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(vm_params)):
                a, b = np.asarray(a[0]), np.asarray(b[row])
                max_rel = max(max_rel, float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-12)))
    total_ratio = (seq_compile + seq_run) / (vm_compile + vm_run)
    run_ratio = seq_run / vm_run
    result = {
        "bench": "sweep",
        "runs": runs,
        "learning_rates": list(lrs),
        "seeds": seeds,
        "updates": config.num_updates,
        "env_steps_per_run": steps,
        "num_envs": config.num_envs,
        "device": platform(),
        "vmapped_compile_s": vm_compile,
        "vmapped_run_s": vm_run,
        "sequential_compile_s": seq_compile,
        "sequential_run_s": seq_run,
        "speedup_total": total_ratio,
        "speedup_run_only": run_ratio,
        "vmapped_env_steps_per_s": runs * steps / vm_run,
        "sequential_env_steps_per_s": runs * steps / seq_run,
        "return_vmapped": float(np.mean(vm_returns)),
        "return_sequential": float(np.mean(seq_returns)),
        "max_param_rel_diff": max_rel,
    }
    rows = [
        ("vmapped", f"{vm_compile + vm_run:.1f}", f"s: compile {vm_compile:.1f} + run {vm_run:.1f}"),
        ("sequential", f"{seq_compile + seq_run:.1f}", f"s: compile {seq_compile:.1f} + run {seq_run:.1f}"),
        ("speed-up", f"{total_ratio:.1f}x", f"end to end; {run_ratio:.1f}x counting run time only"),
        (
            "last-chunk return",
            f"{np.mean(vm_returns):.2f}",
            f"vmapped; {np.mean(seq_returns):.2f} sequential (mean of {runs} runs)",
        ),
        (
            "largest parameter difference",
            f"{max_rel:.1e}",
            "of the largest parameter (the runs start equal to ~1e-6 and part as float rounding flips a sampled "
            "action, as any two float orderings do)",
        ),
    ]
    return report(rows, result, log)
