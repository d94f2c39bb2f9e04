"""`marljax bench`: throughput, FLOPs, MFU, compile time and memory of one config.

`run_bench(config)` measures, in one process and one run:

* **training throughput** of the real program `marljax train` runs: the
  sharded chunk of updates from `marljax.parallel.mesh.shard_trainer`,
  compiled once (compile time reported apart), one warm-up chunk, then a few
  timed chunks;
* **the rollout ceiling**: the same environments stepped with uniformly
  random (mask-respecting) actions inside one jitted `lax.scan`, at the same
  number of environments and seeds, with no policy and no learning;
* **FLOPs per environment step** from XLA's cost analysis of the unscanned
  pieces of one update, the algorithm's `cost_pieces` (see `count_flops`);
* **a peak to compare with**: a float32 matmul timed on the same devices,
  so that MFU = achieved / measured peak (not a datasheet number);
* **peak resident memory** of the process;
* **the agent-parallel swap** (`mesh.agent` > 1): bytes each device receives
  per update when parameters go to the acting layout and trajectories to the
  learning layout, the swap's time as a share of an update (the swap alone,
  timed beside the training chunk), and the learner bytes (parameters + Adam)
  held per device, read from the arrays' addressable shards.

It prints an aligned table, then, LAST, one JSON line (a flat dict) that
scripts can read with `json.loads(output.splitlines()[-1])`.

The number of timed chunks and their size are fixed here (not config keys):
`TIMED_CHUNKS` chunks of `min(updates_per_chunk, MAX_UPDATES_PER_CHUNK)`
updates, cut short once `TIME_BUDGET_S` seconds have been timed, so that a
bench stays bounded whatever `total_timesteps` says.
"""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from marljax.algos.api import Trainer
from marljax.config import Config, ConfigError, replace
from marljax.envs.adapter import EnvAdapter
from marljax.parallel.mesh import AGENT, DATA, SEED, mesh_layout, seed_keys, shard_trainer, split_groups, state_specs
from marljax.train.wiring import make_trainer, prepare

Array = jax.Array

TIMED_CHUNKS = 3  # chunks timed after the warm-up chunk
MAX_UPDATES_PER_CHUNK = 10  # a bench chunk holds min(config.updates_per_chunk, this) updates
TIME_BUDGET_S = 30.0  # stop timing more chunks / rollouts once this much has been timed
ENV_ONLY_REPS = 3  # timed random-action rollouts
MATMUL_REPS = 10  # timed matmuls per size (the best is kept)
MATMUL_SIZES = {"cpu": (1024, 2048), "default": (4096, 8192)}


# ---------------------------------------------------------------- helpers
def _timed(fn: Callable[[], Any]) -> float:
    """Wall seconds of `fn()`, waiting for every array it returns."""
    t = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t


def _flops(fn: Callable, *args: Any) -> float:
    """FLOPs XLA's cost analysis reports for `jit(fn)(*args)` (args may be ShapeDtypeStructs).

    Older JAX returns a list with one dict per program, newer a dict; a scan or
    while body inside `fn` is counted ONCE, whatever its trip count.
    """
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    if isinstance(cost, (list, tuple)):
        return float(sum(c.get("flops", 0.0) for c in cost if c))
    return float(cost.get("flops", 0.0)) if cost else 0.0


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def _platform(mesh: Mesh) -> str:
    return mesh.devices.flat[0].platform


def _random_actions(env: EnvAdapter, key: Array, state: Any) -> dict[str, Array]:
    """Uniformly random actions for ONE env: among the available ones where a group has masks."""
    masks = env.action_mask(state)
    actions = {}
    for gi, g in enumerate(env.groups):
        k = jax.random.fold_in(key, gi)
        if g.discrete and g.has_mask:
            actions[g.name] = jax.random.categorical(k, jnp.where(masks[g.name], 0.0, -jnp.inf))
        elif g.discrete:
            actions[g.name] = jax.random.randint(k, (g.size,), 0, g.action_dim)
        else:
            low = -1.0 if g.action_low is None else g.action_low
            high = 1.0 if g.action_high is None else g.action_high
            actions[g.name] = jax.random.uniform(k, (g.size, g.action_dim), minval=low, maxval=high)
    return actions


def _random_step(env: EnvAdapter, key: Array, state: Any) -> tuple[Any, Array]:
    """One env, one random step -> (state, checksum of obs and rewards, so nothing is dead code)."""
    k_act, k_env = jax.random.split(key)
    res = env.step(k_env, state, _random_actions(env, k_act, state))
    checksum = sum(jnp.sum(res.obs[g.name]) + jnp.sum(res.reward[g.name]) for g in env.groups)
    return res.state, checksum


# ---------------------------------------------------------------- training throughput
def bench_train(config: Config, mesh: Mesh, trainer: Trainer) -> dict[str, float]:
    """Compile the sharded chunk as `marljax.train.loop.train` does, warm up once, time a few chunks."""
    fns = shard_trainer(trainer, mesh)
    state = fns.init(seed_keys(config.seed, config.num_seeds))
    n = max(1, min(config.updates_per_chunk, MAX_UPDATES_PER_CHUNK))
    t = time.perf_counter()
    compiled = fns.chunk.lower(state, n).compile()
    compile_s = time.perf_counter() - t

    state, metrics = compiled(state)  # warm-up chunk (first-run allocations, caches)
    jax.block_until_ready((state, metrics))
    times: list[float] = []
    for _ in range(TIMED_CHUNKS):
        t = time.perf_counter()
        state, metrics = compiled(state)
        jax.block_until_ready((state, metrics))
        times.append(time.perf_counter() - t)
        if sum(times) > TIME_BUDGET_S:
            break
    updates = n * len(times)
    return {
        "train_env_steps_per_s": updates * config.env_steps_per_update / sum(times),
        "compile_s": compile_s,
        "bench_updates": updates,
        "updates_per_chunk": n,
        "train_chunk_s_min": min(times),
        "train_chunk_s_max": max(times),
    }


# ---------------------------------------------------------------- rollout ceiling
def bench_env_only(config: Config, mesh: Mesh, env: EnvAdapter) -> dict[str, float]:
    """Random-action stepping: [num_seeds, num_envs] envs, `num_steps` steps in one jitted scan.

    The env states are laid out like the trainer's actor state (split over the
    `seed` and `data` mesh axes), so this is the ceiling a rollout could reach.
    """
    S, E, T = config.num_seeds, config.num_envs, config.num_steps
    sharding = NamedSharding(mesh, P(SEED, (DATA, AGENT)))
    keys = jax.vmap(lambda k: jax.random.split(k, E))(seed_keys(config.seed + 1, S))  # [S, E, 2]
    keys = jax.device_put(keys, sharding)
    reset = jax.jit(jax.vmap(jax.vmap(lambda k: env.reset(k)[1])), out_shardings=sharding)
    states = reset(keys)

    def rollout(states: Any, keys: Array) -> tuple[Any, Array]:
        def step(carry, t):
            states, total = carry
            step_keys = jax.vmap(jax.vmap(jax.random.fold_in, (0, None)), (0, None))(keys, t)
            states, checksum = jax.vmap(jax.vmap(lambda k, s: _random_step(env, k, s)))(step_keys, states)
            return (states, total + checksum), None

        (states, total), _ = jax.lax.scan(step, (states, jnp.zeros((S, E))), jnp.arange(T))
        return states, total

    fn = jax.jit(rollout, out_shardings=(sharding, sharding), donate_argnums=0)
    compiled = fn.lower(states, keys).compile()
    states, _ = compiled(states, keys)  # warm-up
    times: list[float] = []
    for i in range(ENV_ONLY_REPS):
        keys_i = jax.device_put(jax.vmap(jax.vmap(jax.random.fold_in, (0, None)), (0, None))(keys, i + 1), sharding)
        t = time.perf_counter()
        states, total = compiled(states, keys_i)
        jax.block_until_ready((states, total))
        times.append(time.perf_counter() - t)
        if sum(times) > TIME_BUDGET_S:
            break
    return {"env_only_env_steps_per_s": len(times) * S * E * T / sum(times)}


# ---------------------------------------------------------------- FLOPs
def count_flops(config: Config, trainer: Trainer) -> dict[str, float]:
    """FLOPs per environment step of one update, from XLA's cost analysis.

    XLA counts a `scan`/`while` body once, not once per trip, so the update is not analysed
    whole: each of the algorithm's unscanned pieces (`Trainer.cost_pieces`: one rollout step,
    one gradient step, ...; what each counts is in its docstring) is compiled alone and its
    FLOPs multiplied by its trips per update. The pieces come from an unsharded twin built from
    the same config (the same code without the mesh's collectives), for ONE seed with all
    `num_envs` environments (sharding splits the work but does not change its total).

    Returns `flops_per_env_step` = (rollout + learn FLOPs of one update) / (num_steps * num_envs),
    the same per env step for any number of seeds, with its parts, and `env_flops_per_env_step`
    (the env step alone, with random actions).
    """
    env, E = trainer.env, config.num_envs
    twin = make_trainer(config, env)  # unsharded: no collectives, all E environments
    state = jax.eval_shape(twin.init, jax.random.PRNGKey(0))
    totals = {"rollout": 0.0, "learn": 0.0}
    for piece in twin.cost_pieces(state):
        totals[piece.part] += _flops(piece.fn, *piece.args) * piece.trips

    def env_step(actors, key):
        return jax.vmap(lambda k, s: _random_step(env, k, s))(jax.random.split(key, E), actors.env_state)

    env_only = _flops(env_step, state.actors, jax.ShapeDtypeStruct((2,), jnp.uint32))
    steps = config.num_steps * E
    return {
        "flops_per_env_step": (totals["rollout"] + totals["learn"]) / steps,
        "rollout_flops_per_env_step": totals["rollout"] / steps,
        "learn_flops_per_env_step": totals["learn"] / steps,
        "env_flops_per_env_step": env_only / E,
        "flops_per_update_per_seed": totals["rollout"] + totals["learn"],
    }


# ---------------------------------------------------------------- agent-parallel swap
def _bytes_on_first_device(tree) -> int:
    """Bytes of `tree` that the first device holds (its addressable shards)."""
    device = jax.tree.leaves(tree)[0].addressable_shards[0].device
    return sum(
        shard.data.nbytes for leaf in jax.tree.leaves(tree) for shard in leaf.addressable_shards if shard.device == device
    )


def bench_swap(config: Config, mesh: Mesh, trainer: Trainer, update_s: float) -> dict[str, float]:
    """The swap between the learning and acting layouts, measured alone beside an update's time.

    Times one jitted program that does exactly what an update does between layouts (gather the
    parameters; move one update's trajectories from environment-major to agent-major) on arrays
    shaped like the real ones, and reports it as a share of `update_s`.
    """
    lay, split = mesh_layout(mesh), split_groups(trainer)
    fns = shard_trainer(trainer, mesh)
    state = fns.init(seed_keys(config.seed, config.num_seeds))
    learner = (state.learner.params, state.learner.opt_state)
    result = {
        "learner_bytes_per_device": _bytes_on_first_device(learner),
        "learner_bytes_total": sum(x.nbytes for x in jax.tree.leaves(learner)),
    }
    if not lay.agent_parallel:
        return result | {"swap_param_bytes": 0, "swap_traj_bytes": 0, "swap_share_of_update": 0.0}

    # what `learn` hands to `to_learning` in one update, per seed: the batch [T, E, A_g, ...] and the
    # bootstrap value as a 1-step leaf (global E, sharded below), from the unsharded twin's collect
    twin = make_trainer(config, trainer.env)
    twin_state = jax.eval_shape(twin.init, jax.random.PRNGKey(0))

    def learning_input(params, actors, key):
        _, traj = twin.collect(params, actors, key)
        per_agent = {g: (b._replace(world=None), traj.last_value[g][None]) for g, b in traj.batch.items()}
        return per_agent, next(iter(traj.batch.values())).world

    shapes = jax.eval_shape(learning_input, twin_state.learner.params, twin_state.actors, jax.random.PRNGKey(0))
    S, T = config.num_seeds, config.num_steps
    per_agent, per_env = jax.tree.map(lambda x: jax.ShapeDtypeStruct((S,) + x.shape, x.dtype), shapes)
    specs = state_specs(jax.eval_shape(lambda: state), split).learner.params
    traj_spec = P(SEED, None, (DATA, AGENT))

    def swap(params, per_agent, per_env):  # local: [S_local, ...]
        def one(p, a, e):
            acting = lay.to_acting(p, split)
            a, e = lay.to_learning(a, e)
            return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves((acting, a, e)))

        return jax.vmap(one)(params, per_agent, per_env)

    program = jax.jit(
        jax.shard_map(swap, mesh=mesh, in_specs=(specs, traj_spec, traj_spec), out_specs=P(SEED), check_vma=False)
    )
    make = jax.jit(
        lambda: jax.tree.map(lambda s: jnp.ones(s.shape, s.dtype), (per_agent, per_env)),
        out_shardings=NamedSharding(mesh, traj_spec),
    )
    a, e = make()
    jax.block_until_ready(program(state.learner.params, a, e))  # compile + warm-up
    swap_s = min(_timed(lambda: program(state.learner.params, a, e)) for _ in range(5))
    # bytes from one seed's local shapes, times the seeds on a device
    local = lambda x: jax.ShapeDtypeStruct(  # noqa: E731
        (T, x.shape[2] // lay.num_env_shards) + x.shape[3:], x.dtype
    )
    one_seed_params = jax.eval_shape(lambda p: jax.tree.map(lambda x: x[0], p), state.learner.params)
    one_seed_params = {
        k: jax.tree.map(lambda x: jax.ShapeDtypeStruct((x.shape[0] // lay.num_agent,) + x.shape[1:], x.dtype), v)
        if k in split else v
        for k, v in one_seed_params.items()
    }  # fmt: skip
    moved = lay.swap_bytes(one_seed_params, split, jax.tree.map(local, per_agent), jax.tree.map(local, per_env))
    seeds_per_device = S // mesh.shape[SEED]
    return result | {
        "swap_param_bytes": moved["params"] * seeds_per_device,
        "swap_traj_bytes": moved["trajectories"] * seeds_per_device,
        "swap_s": swap_s,
        "swap_share_of_update": swap_s / update_s,
    }


# ---------------------------------------------------------------- peak
def peak_matmul_gflops(mesh: Mesh, sizes: tuple[int, ...] | None = None, reps: int = MATMUL_REPS) -> dict:
    """Best float32 matmul GFLOP/s on the mesh's devices: one n x n @ n x n per device, 2 n^3 each."""
    devices = mesh.devices.size
    sizes = sizes or MATMUL_SIZES.get(_platform(mesh), MATMUL_SIZES["default"])
    axes = P((SEED, DATA, AGENT))
    sharding = NamedSharding(mesh, axes)

    def local(a, b):  # each device multiplies its own pair, as a plain 2-D matmul
        return (a[0] @ b[0])[None]

    matmul = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(axes, axes), out_specs=axes))
    best, best_n = 0.0, 0
    for n in sizes:
        make = jax.jit(
            lambda k: jax.random.normal(k, (devices, n, n), jnp.float32), out_shardings=sharding  # noqa: B023
        )
        a, b = make(jax.random.PRNGKey(1)), make(jax.random.PRNGKey(2))
        jax.block_until_ready(matmul(a, b))  # compile + warm-up
        seconds = min(_timed(lambda: matmul(a, b)) for _ in range(reps))
        gflops = devices * 2 * n**3 / seconds / 1e9
        if gflops > best:
            best, best_n = gflops, n
        del a, b
    return {"peak_matmul_gflops": best, "peak_matmul_n": best_n}


# ---------------------------------------------------------------- report
def _table(result: dict[str, Any]) -> str:
    rows = [
        ("env", result["env"], ""),
        ("devices", f"{result['devices']} x {result['platform']}", f"mesh {result['mesh']}"),
        ("seeds x envs x steps", f"{result['num_seeds']} x {result['num_envs']} x {result['num_steps']}",
         "recurrent" if result["recurrent"] else "feed-forward"),
        ("train throughput", f"{result['train_env_steps_per_s']:,.0f}", "env steps/s"),
        ("  timed", f"{result['bench_updates']} updates", f"chunks of {result['updates_per_chunk']}, "
         f"{result['train_chunk_s_min']:.2f}-{result['train_chunk_s_max']:.2f} s each"),
        ("env-only (random actions)", f"{result['env_only_env_steps_per_s']:,.0f}", "env steps/s"),
        ("  train / env-only", f"{result['train_over_env_only']:.3f}", ""),
        ("FLOPs per env step", f"{result['flops_per_env_step']:,.0f}",
         f"rollout {result['rollout_flops_per_env_step']:,.0f} (env {result['env_flops_per_env_step']:,.0f})"
         f" + learn {result['learn_flops_per_env_step']:,.0f}"),
        ("achieved", f"{result['achieved_gflops']:.2f}", "GFLOP/s"),
        ("peak f32 matmul", f"{result['peak_matmul_gflops']:.1f}", f"GFLOP/s (n={result['peak_matmul_n']})"),
        ("MFU", f"{100 * result['mfu']:.2f}%", "achieved / measured matmul peak"),
        ("compile", f"{result['compile_s']:.1f}", "s (training chunk)"),
        ("peak RSS", f"{result['peak_rss_mb']:,.0f}", "MiB"),
        ("learner bytes / device", f"{result['learner_bytes_per_device']:,}",
         f"params + Adam; {result['learner_bytes_total']:,} in all"),
    ]  # fmt: skip
    if result["swap_param_bytes"]:
        rows += [
            ("swap: params in", f"{result['swap_param_bytes']:,}", "bytes per device per update (all-gather)"),
            ("swap: trajectories", f"{result['swap_traj_bytes']:,}", "bytes per device per update (all-to-all)"),
            ("swap / update", f"{100 * result['swap_share_of_update']:.2f}%",
             f"{1000 * result['swap_s']:.2f} ms alone, timed beside the training chunk"),
        ]  # fmt: skip
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(str(r[1])) for r in rows)
    return "\n".join(f"{a:<{w0}}  {str(b):>{w1}}  {c}".rstrip() for a, b, c in rows)


def run_bench(config: Config, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure `config` (see the module docstring); print a table, then one JSON line; return the dict."""
    if "q" in config.sections:  # the Q family
        return run_q_bench(config, log)
    if config.mode == "async":
        return run_async_bench(config, log)
    env, mesh, trainer = prepare(config)
    log(f"marljax bench: {config.algo} on {env.describe()}")
    result: dict[str, Any] = {
        "algo": config.algo,
        "env": config.env,
        "num_envs": config.num_envs,
        "num_seeds": config.num_seeds,
        "num_steps": config.num_steps,
        "update_epochs": config.ppo.update_epochs,
        "num_minibatches": config.ppo.num_minibatches,
        "recurrent": config.recurrent,
        "devices": int(mesh.devices.size),
        "platform": _platform(mesh),
        "mesh": "x".join(f"{k}{v}" for k, v in mesh.shape.items()),
    }
    result.update(bench_train(config, mesh, trainer))
    result.update(bench_swap(config, mesh, trainer, result["train_chunk_s_min"] / result["updates_per_chunk"]))
    result.update(bench_env_only(config, mesh, env))
    result["train_over_env_only"] = result["train_env_steps_per_s"] / result["env_only_env_steps_per_s"]
    result.update(count_flops(config, trainer))
    result["achieved_gflops"] = result["flops_per_env_step"] * result["train_env_steps_per_s"] / 1e9
    result.update(peak_matmul_gflops(mesh))
    result["mfu"] = result["achieved_gflops"] / result["peak_matmul_gflops"]
    result["peak_rss_mb"] = peak_rss_mb()
    result = {k: (float(f"{v:.6g}") if isinstance(v, float) and math.isfinite(v) else v) for k, v in result.items()}
    log(_table(result))
    log(json.dumps(result))
    return result


def run_q_bench(config: Config, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The Q-learning family: training and env-only throughput, gradient steps per second, FLOPs.

    Replay-based algorithms are timed with replay.learning_starts=0, so that every timed update learns.
    """
    if "replay" in config.sections:
        config = replace(config, replay={"learning_starts": 0})
    env, mesh, trainer = prepare(config)
    log(f"marljax bench: {config.algo} on {env.describe()}")
    per_update = config.pqn.update_epochs * config.pqn.num_minibatches if "pqn" in config.sections else config.replay.gradient_steps
    result: dict[str, Any] = {
        "algo": config.algo, "env": config.env, "recurrent": config.recurrent, "param_sharing": config.param_sharing,
        "num_envs": config.num_envs, "num_seeds": config.num_seeds, "num_steps": config.num_steps,
        "gradient_steps_per_update": per_update,
        "batch": config.pqn.minibatch_steps(config) * config.num_envs if "pqn" in config.sections
        else config.replay.batch_size * config.num_steps,  # transitions per gradient step, per seed
        "devices": int(mesh.devices.size), "platform": _platform(mesh),
    }  # fmt: skip
    result.update(bench_train(config, mesh, trainer))
    updates_per_s = result["train_env_steps_per_s"] / config.env_steps_per_update
    result["updates_per_s"] = updates_per_s
    result["gradient_steps_per_s"] = updates_per_s * per_update * config.num_seeds
    result.update(bench_env_only(config, mesh, env))
    result.update(count_flops(config, trainer))
    result["achieved_gflops"] = result["flops_per_env_step"] * result["train_env_steps_per_s"] / 1e9
    result["peak_rss_mb"] = peak_rss_mb()
    result = {k: (float(f"{v:.6g}") if isinstance(v, float) and math.isfinite(v) else v) for k, v in result.items()}
    for label, key, unit in (
        ("train", "train_env_steps_per_s", "env-steps/s"), ("updates", "updates_per_s", "/s"),
        ("gradient steps", "gradient_steps_per_s", "/s (all seeds)"), ("env only", "env_only_env_steps_per_s", "env-steps/s"),
        ("FLOPs", "flops_per_env_step", "per env step"), ("  rollout", "rollout_flops_per_env_step", "per env step"),
        ("  learn", "learn_flops_per_env_step", "per env step"), ("achieved", "achieved_gflops", "GFLOP/s"),
        ("compile", "compile_s", "s"), ("peak RSS", "peak_rss_mb", "MiB"),
    ):  # fmt: skip
        log(f"  {label:<15} {result[key]:>14,.1f} {unit}")
    log(json.dumps(result))
    return result


# ---------------------------------------------------------------- async mode
ASYNC_BATCHES = 40  # batches timed for each of generation, learning, sync and async


def run_async_bench(config: Config, log: Callable[[str], None] = print) -> dict[str, Any]:
    """`marljax bench mode=async`: generation and learning rates alone, then the sync and async loops.

    All four are measured in this one process on the same placement, in samples (env steps) per
    second after compilation: generation = actor threads' rollouts with no learner; learning = the
    learner's update repeated on one batch; sync = rollout then update, alternating in one thread;
    async = the pipeline. overlap_efficiency = async / min(generation, learning); a perfect overlap
    gives 1. The final JSON line holds every figure.
    """
    import threading

    from marljax.pipeline.actor_learner import AsyncRun
    from marljax.train.wiring import make_adapter

    env = make_adapter(config)
    runner = AsyncRun(config, env, make_trainer, log=lambda s: None)
    spb = runner.samples_per_batch
    devices = runner.placement.actor_devices
    n_threads = config.num_actor_threads
    log(f"marljax bench (async): {config.algo} on {env.describe()}")

    collectors = [runner.make_collector(i) for i in range(n_threads)]
    params = [jax.device_put(runner.learner.params, c.device, may_alias=False) for c in collectors]

    # warm-up: compile collect (per device) and learn
    traj = collectors[0].collect(params[0], 0)
    runner.learner, _ = runner.learn(runner.learner, jax.device_put(traj, runner.traj_shardings))
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
        runner.learner, _ = runner.learn(runner.learner, jax.device_put(traj, runner.traj_shardings))
    jax.block_until_ready(runner.learner)
    learning = ASYNC_BATCHES * spb / (time.perf_counter() - t)

    # synchronous: rollout, then update, in one thread
    p0 = params[0]
    t = time.perf_counter()
    for j in range(ASYNC_BATCHES):
        traj = collectors[0].collect(p0, 100 + j)
        runner.learner, _ = runner.learn(runner.learner, jax.device_put(traj, runner.traj_shardings))
        p0 = jax.device_put(runner.learner.params, collectors[0].device, may_alias=False)
    jax.block_until_ready(runner.learner)
    sync = ASYNC_BATCHES * spb / (time.perf_counter() - t)

    # the pipeline, after a short warm-up run of it
    runner.run(2, lambda *a: None, chunk=2)
    t = time.perf_counter()
    final = runner.run(ASYNC_BATCHES, lambda *a: None, chunk=ASYNC_BATCHES)
    asynch = final.consumed * spb / (time.perf_counter() - t)

    ideal = min(generation, learning)
    result = {
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
    }
    result = {k: (float(f"{v:.6g}") if isinstance(v, float) else v) for k, v in result.items()}
    rows = [
        ("generation alone", f"{generation:,.0f}", "samples/s (actor threads, no learner)"),
        ("learning alone", f"{learning:,.0f}", "samples/s (updates on one batch)"),
        ("synchronous loop", f"{sync:,.0f}", "samples/s (rollout then update)"),
        ("async pipeline", f"{asynch:,.0f}", f"samples/s; {result['async_over_sync']:.2f}x the sync loop"),
        ("overlap efficiency", f"{result['overlap_efficiency']:.3f}", "async / min(generation, learning)"),
        ("counters", f"{final.produced}/{final.consumed}/{result['dropped']}", "produced/consumed/dropped"),
    ]
    w0, w1 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    log("\n".join(f"{a:<{w0}}  {b:>{w1}}  {c}" for a, b, c in rows))
    log(json.dumps(result))
    return result


# ---------------------------------------------------------------- checkpoint overhead
def run_checkpoint_bench(config: Config, rounds: int = 2, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Training time with periodic checkpoints (`checkpoint_every`) vs only the final one, side by side.

    Runs `marljax.train.loop.train` 2 x `rounds` times, alternating without / with, each into a fresh
    temporary out_dir, and times the run after compilation (training, metrics, saves and the
    final wait for them). overhead = median over rounds of with / without - 1. Prints a JSON line last.
    """
    import tempfile

    from marljax.config import replace
    from marljax.train.loop import train

    if config.checkpoint_every == 0:
        raise ConfigError("checkpoint_every", "must be > 0 to measure periodic checkpoints against none")
    times: dict[str, list[float]] = {"without": [], "with": []}
    saves = 0
    with tempfile.TemporaryDirectory(prefix="marljax_ckpt_bench_") as root:
        for r in range(rounds):
            for mode, every in (("without", 0), ("with", config.checkpoint_every)):
                run = replace(config, out_dir=f"{root}/{mode}{r}", checkpoint_every=every, progress=False, plot=False)
                t = time.perf_counter()
                res = train(run, log=lambda s: None)
                times[mode].append(time.perf_counter() - t - res.compile_s)
                if mode == "with":
                    saves = len(res.checkpoints) - 1  # the final save happens in both modes
                log(f"round {r} {mode:>7} checkpoints: {times[mode][-1]:.2f} s")
    ratios = sorted(w / wo for w, wo in zip(times["with"], times["without"]))
    result = {
        "env": config.env,
        "total_timesteps": config.total_timesteps,
        "checkpoint_every": config.checkpoint_every,
        "periodic_saves": saves,
        "seconds_without": [round(x, 3) for x in times["without"]],
        "seconds_with": [round(x, 3) for x in times["with"]],
        "overhead": round(ratios[len(ratios) // 2] - 1.0, 4),
    }
    log(f"checkpoint overhead at checkpoint_every={config.checkpoint_every}: {100 * result['overhead']:+.2f}% "
        f"(median of {rounds} paired runs; {saves} periodic saves per run)")
    log(json.dumps(result))
    return result


__all__ = [
    "run_checkpoint_bench", "run_async_bench",
    "run_bench", "bench_train", "bench_env_only", "bench_swap", "count_flops", "peak_matmul_gflops", "peak_rss_mb",
]
