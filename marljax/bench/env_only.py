"""The rollout ceiling: the environments stepped with uniformly random (mask-respecting) actions
inside one jitted `lax.scan`, laid out like the trainer's actors, with no policy and no learning."""

from __future__ import annotations

from functools import partial
from typing import Any, cast

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from marljax.bench.measure import TIME_BUDGET_S, timed
from marljax.config import Config
from marljax.envs.adapter import EnvAdapter
from marljax.parallel.mesh import ACTING, seed_keys
from marljax.parallel.placement import place, shardings

Array = jax.Array

ENV_ONLY_REPS = 3  # timed random-action rollouts


def random_actions(env: EnvAdapter, key: Array, state: Any) -> dict[str, Array]:
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


def random_step(env: EnvAdapter, key: Array, state: Any) -> tuple[Any, Array]:
    """One env, one random step -> (state, checksum of obs and rewards, so nothing is dead code)."""
    k_act, k_env = jax.random.split(key)
    res = env.step(k_env, state, random_actions(env, k_act, state))
    checksum = sum(jnp.sum(res.obs[g.name]) + jnp.sum(res.reward[g.name]) for g in env.groups)
    return res.state, cast(Array, checksum)  # an env has at least one group, so not sum's start 0


def bench_env_only(config: Config, mesh: Mesh, env: EnvAdapter) -> dict[str, float]:
    """Random-action stepping: [num_seeds, num_envs] envs, `num_steps` steps in one jitted scan.

    The env states are laid out like the trainer's actor state (split over the
    `seed` and `data` mesh axes), so this is the ceiling a rollout could reach.
    """
    S, E, T = config.num_seeds, config.num_envs, config.num_steps
    sharding = shardings(mesh, ACTING)
    fold = jax.vmap(jax.vmap(jax.random.fold_in, (0, None)), (0, None))  # keys [S, E, 2], one int
    keys = jax.vmap(lambda k: jax.random.split(k, E))(seed_keys(config.seed + 1, S))  # [S, E, 2]
    keys = place(keys, sharding)
    reset = jax.jit(jax.vmap(jax.vmap(lambda k: env.reset(k)[1])), out_shardings=sharding)
    states = reset(keys)

    def rollout(states: Any, keys: Array) -> tuple[Any, Array]:
        def step(carry, t):
            states, total = carry
            states, checksum = jax.vmap(jax.vmap(lambda k, s: random_step(env, k, s)))(fold(keys, t), states)
            return (states, total + checksum), None

        (states, total), _ = jax.lax.scan(step, (states, jnp.zeros((S, E))), jnp.arange(T))
        return states, total

    fn = jax.jit(rollout, out_shardings=(sharding, sharding), donate_argnums=0)
    compiled = fn.lower(states, keys).compile()
    states, _ = compiled(states, keys)  # warm-up
    times: list[float] = []
    for i in range(ENV_ONLY_REPS):
        keys_i = place(fold(keys, i + 1), sharding)
        seconds, (states, _) = timed(partial(compiled, states, keys_i))
        times.append(seconds)
        if sum(times) > TIME_BUDGET_S:
            break
    return {"env_only_env_steps_per_s": len(times) * S * E * T / sum(times)}
