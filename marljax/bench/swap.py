"""The agent-parallel swap (`mesh.agent` > 1): bytes each device receives per update when parameters
go to the acting layout and trajectories to the learning layout, the swap's time alone as a share
of an update, and the learner bytes (parameters + Adam) each device holds."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from marljax.algos.api import AsyncTrainer, Trainer
from marljax.bench.measure import timed
from marljax.config import Config
from marljax.parallel.mesh import (
    ACTING_TRAJECTORY,
    SEED,
    mesh_layout,
    seed_keys,
    shard_seeds,
    shard_trainer,
    split_groups,
    state_specs,
)
from marljax.parallel.placement import bytes_on_one_device, shardings
from marljax.train.wiring import make_trainer

SWAP_REPS = 5  # timed swaps (the fastest is kept)


def bench_swap(config: Config, mesh: Mesh, trainer: Trainer, update_s: float) -> dict[str, float]:
    """The swap between the learning and acting layouts, measured alone beside an update's time.

    Times one jitted program that does exactly what an update does between layouts (gather the
    parameters; move one update's trajectories from environment-major to agent-major) on arrays
    shaped like the real ones, and reports it as a share of `update_s`. The trajectories are
    shaped by the trainer's `collect`, so the swap is measured for trainers whose update splits
    into `collect` and `learn` (`AsyncTrainer`); other agent-parallel ones report learner bytes only.
    """
    lay, split = mesh_layout(mesh), split_groups(trainer)
    fns = shard_trainer(trainer, mesh)
    state = fns.init(seed_keys(config.seed, config.num_seeds))
    learner = (state.learner.params, state.learner.opt_state)
    result = {
        "learner_bytes_per_device": bytes_on_one_device(learner),
        "learner_bytes_total": sum(x.nbytes for x in jax.tree.leaves(learner)),
    }
    if not lay.agent_parallel or not split:  # no group split over `agent`: nothing swaps
        return result | {"swap_param_bytes": 0, "swap_traj_bytes": 0, "swap_share_of_update": 0.0}
    if not isinstance(trainer, AsyncTrainer):
        return result

    # what `learn` hands to `to_learning` in one update, per seed: the batch [T, E, A_g, ...] and the
    # bootstrap value as a 1-step leaf (global E, sharded below), from the unsharded twin's collect
    twin = make_trainer(config, trainer.env)
    twin_state = jax.eval_shape(twin.init, jax.random.PRNGKey(0))

    def learning_input(params, actors, key):
        _, traj = twin.collect(params, actors, key)
        # replicated groups (mesh.placement, mesh.replicate) learn environment-major: no swap
        per_agent = {g: (b._replace(world=None), traj.last_value[g][None]) for g, b in traj.batch.items() if g in split}
        return per_agent, next(iter(traj.batch.values())).world

    shapes = jax.eval_shape(learning_input, twin_state.learner.params, twin_state.actors, jax.random.PRNGKey(0))
    S, T = config.num_seeds, config.num_steps
    per_agent, per_env = jax.tree.map(lambda x: jax.ShapeDtypeStruct((S,) + x.shape, x.dtype), shapes)
    param_specs = state_specs(fns.shapes, split).learner.params

    def swap(params, per_agent, per_env):  # local: [S_local, ...]
        def one(p, a, e):
            acting = lay.to_acting(p, split)
            a, e = lay.to_learning(a, e)
            return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves((acting, a, e)))

        return jax.vmap(one)(params, per_agent, per_env)

    program = shard_seeds(swap, mesh, (param_specs, ACTING_TRAJECTORY, ACTING_TRAJECTORY))
    make = jax.jit(
        lambda: jax.tree.map(lambda s: jnp.ones(s.shape, s.dtype), (per_agent, per_env)),
        out_shardings=shardings(mesh, ACTING_TRAJECTORY),
    )
    a, e = make()
    jax.block_until_ready(program(state.learner.params, a, e))  # compile + warm-up
    swap_s = min(timed(lambda: program(state.learner.params, a, e))[0] for _ in range(SWAP_REPS))

    # bytes from one seed's local shapes, times the seeds on a device
    def local(x):
        return jax.ShapeDtypeStruct((T, x.shape[2] // lay.num_env_shards) + x.shape[3:], x.dtype)

    one_seed_params = jax.eval_shape(lambda p: jax.tree.map(lambda x: x[0], p), state.learner.params)
    one_seed_params = {
        k: jax.tree.map(lambda x: jax.ShapeDtypeStruct((x.shape[0] // lay.num_agent,) + x.shape[1:], x.dtype), v)
        if k in split
        else v
        for k, v in one_seed_params.items()
    }
    moved = lay.swap_bytes(one_seed_params, split, jax.tree.map(local, per_agent), jax.tree.map(local, per_env))
    seeds_per_device = S // mesh.shape[SEED]
    return result | {
        "swap_param_bytes": moved["params"] * seeds_per_device,
        "swap_traj_bytes": moved["trajectories"] * seeds_per_device,
        "swap_s": swap_s,
        "swap_share_of_update": swap_s / update_s,
    }
