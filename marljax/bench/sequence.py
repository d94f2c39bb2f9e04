"""`marljax bench sequence`: Sable's memory and time per update as the number of agents grows.

    marljax bench sequence [--agents 4,16,64,128] [key=value ...]

For every agent count N (MPE_simple_spread_v3 with N agents and N landmarks), one update of one
seed (a rollout of num_steps on num_envs environments, then PPO's epochs of minibatches) is
compiled and timed for three models:

* `sable` with `sable.chunk_size` agents per chunk (default 16): the decoder learns in chunks,
  so its retention's memory grows with N x chunk;
* `sable` with chunk_size = N: the fully parallel form, N x N scores per head (what an attention
  model such as MAT holds);
* `mappo` with shared parameters, as the reference a sequence model is weighed against (the
  `sable.*` settings given are left out of its row).

Memory is XLA's count for the compiled update (`memory_analysis`: its temporaries, the live
buffers at the program's peak besides its arguments and outputs), the same on every platform;
time is the fastest of a few updates after a warm-up. In spread each agent observes every other
agent and landmark, so the observations themselves grow as N^2: the chunked and the parallel
rows at one N differ only in the decoder's form, and at these sizes the decoder's N x N scores are a
small part of the update. A second table isolates them: the decoder's causal retention alone at
256, 1,024 and 4,096 agents (2 sequences, 2 heads), chunked and parallel (compiled, not run).
Prints the two markdown tables, then one JSON line.
Sizes are small (8 envs x 16 steps) so that it takes minutes on a 2-core CPU; times compare rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from marljax.algos.sable import SableConfig
from marljax.bench.table import markdown, report_text
from marljax.config import load_config
from marljax.nn import retention
from marljax.train.wiring import make_adapter, make_trainer

AGENTS = (4, 16, 64, 128)
DEFAULTS = [
    "num_envs=8",
    "num_steps=16",
    "ppo.num_minibatches=2",
    "ppo.update_epochs=2",
    "num_seeds=1",
    "progress=false",
    "plot=false",
]
TIMED = 3  # updates timed after the warm-up one
RETENTION_AGENTS = (256, 1024, 4096)


def models(n: int, chunk: int) -> list[tuple[str, list[str]]]:
    """(label, overrides) of the rows at N agents; no chunked row where one chunk holds every agent
    (it would be the parallel row's program)."""
    chunked = [(f"sable, chunk {chunk}", ["algo=sable", f"sable.chunk_size={chunk}"])] if chunk < n else []
    return [
        *chunked,
        (f"sable, chunk {n} (parallel)", ["algo=sable", f"sable.chunk_size={n}"]),
        ("mappo (shared)", ["algo=mappo", "param_sharing=shared"]),
    ]


def bench_update(overrides: list[str]) -> dict[str, Any]:
    """Compile one seed's update, read its memory, time it."""
    config = load_config(None, overrides)
    trainer = make_trainer(config, make_adapter(config))
    state = jax.jit(trainer.init)(jax.random.PRNGKey(config.seed))
    started = time.perf_counter()
    compiled = jax.jit(trainer.update).lower(state).compile()
    compile_s = time.perf_counter() - started
    memory = compiled.memory_analysis()
    state, _ = compiled(state)  # warm-up
    times = []
    for _ in range(TIMED):
        started = time.perf_counter()
        state, metrics = compiled(state)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - started)
    params = sum(int(x.size) for x in jax.tree.leaves(state.learner.params))
    return {
        "temp_mib": memory.temp_size_in_bytes / 2**20 if memory is not None else None,
        "update_s": min(times),
        "env_steps_per_s": config.env_steps_per_update / min(times),
        "compile_s": compile_s,
        "params": params,
    }


def retention_mib(n: int, chunk: int) -> float:
    """XLA's temporaries (MiB) of causal retention over n tokens: 2 sequences, 2 heads of width 4."""
    q = jax.ShapeDtypeStruct((2, n, 2, 4), jnp.float32)
    v = jax.ShapeDtypeStruct((2, n, 2, 4), jnp.float32)
    gamma = jnp.asarray(retention.decays(2))
    compiled = jax.jit(lambda q, k, v: retention.causal(q, k, v, gamma, chunk)).lower(q, q, v).compile()
    memory = compiled.memory_analysis()
    return memory.temp_size_in_bytes / 2**20 if memory is not None else float("nan")


def run_sequence_bench(agents: Sequence[int], overrides: list[str], log: Callable[[str], None] = print) -> dict:
    base = load_config(None, ["algo=sable", *DEFAULTS, *overrides])  # refused here, before anything compiles
    chunk = base.section(SableConfig).chunk_size
    rows, table = [], []
    for n in agents:
        env = [f"env_kwargs.num_agents={n}", f"env_kwargs.num_landmarks={n}"]
        for label, model in models(n, chunk):
            given = [o for o in overrides if not o.startswith("sable.")] if "algo=mappo" in model else overrides
            r = {"num_agents": n, "model": label, **bench_update([*DEFAULTS, *given, *model, *env])}
            rows.append(r)
            mem = "-" if r["temp_mib"] is None else f"{r['temp_mib']:,.1f}"
            table.append(
                [
                    str(n),
                    label,
                    f"{r['params']:,}",
                    mem,
                    f"{r['update_s'] * 1e3:,.0f}",
                    f"{r['env_steps_per_s']:,.0f}",
                    f"{r['compile_s']:.1f}",
                ]
            )
            log(f"N={n} {label}: {mem} MiB, {r['update_s'] * 1e3:,.0f} ms per update")
    header = ["agents", "model", "params", "update temp MiB", "update ms", "env-steps/s", "compile s"]
    alone = [
        {"num_agents": n, "chunk": chunk, "chunked_mib": retention_mib(n, chunk), "parallel_mib": retention_mib(n, n)}
        for n in RETENTION_AGENTS
    ]
    second = markdown(
        ["agents", f"retention temp MiB, chunks of {chunk}", "parallel (N x N)"],
        [[f"{r['num_agents']:,}", f"{r['chunked_mib']:.2f}", f"{r['parallel_mib']:.2f}"] for r in alone],
    )
    result = {"bench": "sequence", "platform": jax.default_backend(), "rows": rows, "retention_rows": alone}
    return report_text(markdown(header, table) + "\n\n" + second, result, log)
