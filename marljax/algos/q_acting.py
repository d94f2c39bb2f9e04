"""What the Q-learning family shares: Q-networks per group, epsilon-greedy acting, the rollout.

`make_q_acting(config, env, layout)` returns the pieces that PQN-VDN (algos/pqn_vdn.py) and
the replay-based IQL / VDN / QMIX (algos/qlearning.py) build on. One shared network per group
(agents told apart by a one-hot id); discrete actions only; action masks are honoured both
when acting and in every max over actions.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from marljax.algos.ippo import _agent_ids, _flat, _local_keys
from marljax.config import Config, ConfigError
from marljax.envs.adapter import AgentGroup, EnvAdapter
from marljax.networks import QNetwork
from marljax.parallel.layouts import Layout
from marljax.types import ActorState, EpisodeStats

Array = jax.Array


class QActing(NamedTuple):
    nets: dict  # group -> QNetwork
    q_values: Callable  # (params, group, obs [B, A_g, ...]) -> q [B, A_g, n_actions]
    epsilon: Callable  # update [] -> epsilon []
    act: Callable  # evaluation: (params, obs, reset, hidden, mask, key, greedy) -> (actions, {})
    init_params: Callable  # key -> group -> params with leaves [1, ...]
    init_actors: Callable  # key -> ActorState of num_envs environments
    rollout: Callable  # (params, eps, actors, key) -> (actors, EpisodeStats, traj [T, E_local, ...], final)


def make_q_acting(config: Config, env: EnvAdapter, layout: Layout, world: bool = False) -> QActing:
    """`world`: also record the env's world state (QMIX's mixer conditions on it)."""
    groups = env.groups
    bad = [g.name for g in groups if not g.discrete]
    if bad:
        raise ConfigError("algo", f"{config.algo} needs discrete actions; groups with Box actions: {', '.join(bad)}")
    if layout.agent_parallel:
        raise ConfigError("mesh.agent", f"algo={config.algo} has no agent-parallel layout yet; allowed: 1")
    cnn = lambda g: config.torso == "cnn" or (config.torso == "auto" and len(g.obs_shape) == 3)  # noqa: E731
    nets = {g.name: QNetwork(g.action_dim, config.hidden_size, config.num_layers, config.activation, cnn(g)) for g in groups}
    T, E = config.num_steps, config.num_envs
    E_local = E // layout.num_env_shards
    decay_updates = max(config.eps_decay_steps / (T * E), 1e-9)  # epsilon falls over this many updates

    def q_values(params, g: AgentGroup, obs: Array) -> Array:
        p = jax.tree.map(lambda x: x[0], params[g.name])
        ids = _agent_ids(g, obs.shape[:1], config.agent_id)
        return nets[g.name].apply(p, _flat(obs, 2), ids).reshape(obs.shape[:2] + (g.action_dim,))

    def epsilon(update: Array) -> Array:
        frac = jnp.minimum(update.astype(jnp.float32) / decay_updates, 1.0)
        return config.eps_start + frac * (config.eps_finish - config.eps_start)

    def choose(q: Array, mask: Array, key: Array, eps) -> Array:
        """epsilon-greedy among available actions, one key per environment: q [B, A, n], key [B]."""

        def one_env(q_e, m_e, k):
            k_explore, k_random = jax.random.split(k)
            greedy = jnp.argmax(jnp.where(m_e, q_e, -jnp.inf), axis=-1)  # [A]
            random = jax.random.categorical(k_random, jnp.where(m_e, 0.0, -jnp.inf))  # [A]
            return jnp.where(jax.random.uniform(k_explore, greedy.shape) < eps, random, greedy)

        return jax.vmap(one_env)(q, mask, key)

    def act(params, obs, reset, hidden, mask, key, greedy: bool = False):
        keys = jax.random.split(key, obs[groups[0].name].shape[0])
        out = {}
        for gi, g in enumerate(groups):
            q = q_values(params, g, obs[g.name])
            m = mask.get(g.name, jnp.ones(q.shape, bool))
            out[g.name] = choose(q, m, jax.vmap(jax.random.fold_in, (0, None))(keys, gi), 0.0 if greedy else config.eps_finish)
        return out, {}

    def init_params(key: Array) -> dict:
        params = {}
        for gi, g in enumerate(groups):
            obs = jnp.zeros((g.size,) + g.obs_shape, jnp.float32)
            ids = _agent_ids(g, (1,), config.agent_id)
            params[g.name] = jax.vmap(lambda k, g=g, obs=obs, ids=ids: nets[g.name].init(k, obs, ids))(
                jax.random.fold_in(key, gi)[None]
            )  # leaves [1, ...]: one shared set per group
        return params

    def init_actors(key: Array) -> ActorState:
        obs, env_state = jax.vmap(env.reset)(jax.random.split(key, E))
        return ActorState(
            env_state=env_state, obs=obs, reset={g.name: jnp.ones((E, g.size), bool) for g in groups}, hidden={},
            ep_return=jnp.zeros((E, env.num_agents), jnp.float32), ep_length=jnp.zeros((E,), jnp.int32),
        )  # fmt: skip

    def step(params, eps, carry, key_t):
        actors, stats = carry
        k_act, k_env = jax.random.split(key_t)
        act_keys = _local_keys(k_act, E, E_local, layout.env_axes)
        env_keys = _local_keys(k_env, E, E_local, layout.env_axes)
        masks = jax.vmap(env.action_mask)(actors.env_state)
        actions = {}
        for gi, g in enumerate(groups):
            q = q_values(params, g, actors.obs[g.name])
            actions[g.name] = choose(q, masks[g.name], jax.vmap(jax.random.fold_in, (0, None))(act_keys, gi), eps)
        res = jax.vmap(env.step)(env_keys, actors.env_state, actions)
        reward_all = jnp.concatenate([res.reward[g.name] for g in groups], axis=1)  # [E, N]
        ep_return, ep_length = actors.ep_return + reward_all, actors.ep_length + 1
        fin = res.episode_done.astype(jnp.float32)
        stats = EpisodeStats(
            stats.return_sum + jnp.sum(fin[:, None] * ep_return, axis=0),
            stats.length_sum + jnp.sum(fin * ep_length),
            stats.count + jnp.sum(fin),
        )
        record = dict(obs=actors.obs, action=actions, mask=masks, reward=reward_all, done=res.episode_done)
        if world:
            record["world"] = jax.vmap(env.world_state)(actors.env_state, actors.obs)  # [E, W]
        actors = actors.replace(
            env_state=res.state, obs=res.obs, reset=res.done,
            ep_return=jnp.where(res.episode_done[:, None], 0.0, ep_return),
            ep_length=jnp.where(res.episode_done, 0, ep_length),
        )  # fmt: skip
        return (actors, stats), record

    def rollout(params, eps, actors: ActorState, key: Array):
        """num_steps of epsilon-greedy acting. traj leaves [T, E_local, ...] (reward [T, E, N] per
        agent, done [T, E]); `final` holds what follows the last step (obs, mask, world)."""
        zero = EpisodeStats(jnp.zeros(env.num_agents), jnp.float32(0), jnp.float32(0))
        (actors, stats), traj = jax.lax.scan(partial(step, params, eps), (actors, zero), jax.random.split(key, T))
        final = dict(obs=actors.obs, mask=jax.vmap(env.action_mask)(actors.env_state))
        if world:
            final["world"] = jax.vmap(env.world_state)(actors.env_state, actors.obs)
        return actors, stats, traj, final

    return QActing(nets, q_values, epsilon, act, init_params, init_actors, rollout)


def shift_in(seq, last):
    """The value after each step: seq[1:] followed by `last` (pytrees of [T, ...] and [...])."""
    return jax.tree.map(lambda s, x: jnp.concatenate([s[1:], x[None]]), seq, last)
