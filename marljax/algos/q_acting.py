"""What the Q-learning family shares: Q-networks per group, epsilon-greedy acting, the rollout.

`make_q_acting(config, env, layout)` returns the pieces that PQN-VDN (algos/pqn_vdn.py) and
the replay-based IQL / VDN / QMIX (algos/qlearning.py) build on. Discrete actions only;
action masks are honoured both when acting and in every max over actions.

* Parameters per group carry a leading parameter-set axis, as in IPPO: 1 (shared by the
  group's agents, told apart by a one-hot id; `param_sharing=per_role` makes one group per
  role) or A_g (`param_sharing=independent`: one network per agent, vmapped over agents).
* `recurrent=true`: a GRU Q-network whose hidden state rides in `ActorState.hidden` and
  resets where an observation starts a new episode; `unroll` replays a stored sequence from
  the hidden state recorded at its start.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from marljax.algos.ippo import _agent_ids, _flat, _local_keys, track_episodes
from marljax.config import Config, ConfigError, setting
from marljax.envs.adapter import AgentGroup, EnvAdapter
from marljax.nn.networks import QNetwork, RecurrentQNetwork
from marljax.parallel.layouts import Layout
from marljax.types import ActorState, EpisodeStats

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class QConfig:
    """`q.*`: epsilon-greedy acting and Q(lambda) targets, for every algorithm of the Q family."""

    eps_start: float = setting(1.0, "exploration rate at the start", minimum=0.0, maximum=1.0)
    eps_finish: float = setting(0.05, "exploration rate after eps_decay_steps (and when evaluating with eval_greedy=false)",
                                minimum=0.0, maximum=1.0)  # fmt: skip
    eps_decay_steps: int = setting(1_000_000, "env steps of one seed over which epsilon falls linearly", minimum=1)
    td_lambda: float = setting(0.65, "lambda of Peng's Q(lambda) targets (0: one-step targets)", minimum=0.0, maximum=1.0)

    def check(self, config: Config) -> None:
        if self.eps_finish > self.eps_start:
            raise ConfigError("q.eps_finish", f"must be <= q.eps_start={self.eps_start}, got {self.eps_finish}")


class QActing(NamedTuple):
    nets: dict  # group -> QNetwork | RecurrentQNetwork
    # (params, group, obs [B, A_g, ...], hidden [B, A_g, H] | None, reset [B, A_g] | None)
    #   -> (q [B, A_g, n_actions], hidden' | None): one time step
    q_values: Callable
    # (params, group, obs [T, B, A_g, ...], reset [T, B, A_g], hidden0 [B, A_g, H] | None)
    #   -> q [T, B, A_g, n_actions]: whole sequences, time-major (the GRU starts from hidden0)
    unroll: Callable
    epsilon: Callable  # update [] -> epsilon []
    act: Callable  # evaluation: (params, obs, reset, hidden, mask, key, greedy) -> (actions, hidden)
    init_params: Callable  # key -> group -> params with leaves [1 or A_g, ...]
    init_actors: Callable  # key -> ActorState of num_envs environments
    rollout: Callable  # (params, eps, actors, key) -> (actors, EpisodeStats, traj [T, E_local, ...], final)


def make_q_acting(config: Config, env: EnvAdapter, layout: Layout, world: bool = False) -> QActing:
    """`world`: also record the env's world state (QMIX's mixer conditions on it)."""
    groups = env.groups
    bad = [g.name for g in groups if not g.discrete]
    if bad:
        raise ConfigError("algo", f"{config.algo} needs discrete actions; groups with Box actions: {', '.join(bad)}")
    rnn, independent, H = config.recurrent, config.param_sharing == "independent", config.gru_hidden_size
    if layout.agent_parallel and not independent:
        raise ConfigError("mesh.agent", "splits per-agent Q-networks: it needs param_sharing=independent")
    cnn = lambda g: config.torso == "cnn" or (config.torso == "auto" and len(g.obs_shape) == 3)  # noqa: E731
    nets = {
        g.name: RecurrentQNetwork(g.action_dim, config.hidden_size, H, config.activation, cnn(g)) if rnn
        else QNetwork(g.action_dim, config.hidden_size, config.num_layers, config.activation, cnn(g))
        for g in groups
    }  # fmt: skip
    T, E = config.num_steps, config.num_envs
    E_local = E // layout.num_env_shards
    decay_updates = max(config.q.eps_decay_steps / (T * E), 1e-9)  # epsilon falls over this many updates

    def apply(net, p, obs, ids, hidden, reset):
        """One network on a flat batch: obs [B, ...] -> (q [B, n], hidden' [B, H] | None)."""
        if rnn:
            h, q = net.apply(p, hidden, obs, reset, ids)
            return q, h
        return net.apply(p, obs, ids), None

    def q_values(params, g: AgentGroup, obs: Array, hidden: Array | None = None, reset: Array | None = None):
        net, lead = nets[g.name], obs.shape[:2]
        if not independent:
            p = jax.tree.map(lambda x: x[0], params[g.name])
            ids = _agent_ids(g, obs.shape[:1], config.agent_id)
            flat = lambda x: None if x is None else _flat(x, 2)  # noqa: E731
            q, h = apply(net, p, _flat(obs, 2), ids, flat(hidden), flat(reset))
            return q.reshape(lead + (g.action_dim,)), None if h is None else h.reshape(lead + h.shape[1:])
        axis = lambda x: None if x is None else 1  # noqa: E731 - the agent axis of [B, A_g, ...]
        one_agent = lambda p, o, h, r: apply(net, p, o, None, h, r)  # noqa: E731
        return jax.vmap(one_agent, in_axes=(0, 1, axis(hidden), axis(reset)), out_axes=1)(params[g.name], obs, hidden, reset)

    def unroll(params, g: AgentGroup, obs: Array, reset: Array | None, hidden0: Array | None) -> Array:
        """Time-major sequences: obs [T, B, A_g, ...], reset [T, B, A_g] -> q [T, B, A_g, n]."""
        if not rnn:  # every step on its own: one flat batch
            q, _ = q_values(params, g, _flat(obs, 2))
            return q.reshape(obs.shape[:3] + q.shape[2:])

        def step(h, x):
            q, h = q_values(params, g, x[0], h, x[1])
            return h, q

        return jax.lax.scan(step, hidden0, (obs, reset))[1]

    def epsilon(update: Array) -> Array:
        frac = jnp.minimum(update.astype(jnp.float32) / decay_updates, 1.0)
        return config.q.eps_start + frac * (config.q.eps_finish - config.q.eps_start)

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
        out, new_hidden = {}, {}
        for gi, g in enumerate(groups):
            q, h = q_values(params, g, obs[g.name], hidden.get(g.name), reset.get(g.name) if rnn else None)
            m = mask.get(g.name, jnp.ones(q.shape, bool))
            out[g.name] = choose(q, m, jax.vmap(jax.random.fold_in, (0, None))(keys, gi), 0.0 if greedy else config.q.eps_finish)
            if rnn:
                new_hidden[g.name] = h
        return out, new_hidden

    def init_params(key: Array) -> dict:
        params = {}
        for gi, g in enumerate(groups):
            n = 1 if independent else g.size  # the batch one set of parameters sees at init
            obs = jnp.zeros((n,) + g.obs_shape, jnp.float32)
            ids = None if independent else _agent_ids(g, (1,), config.agent_id)
            if rnn:
                init = lambda k, g=g, obs=obs, ids=ids, n=n: nets[g.name].init(k, jnp.zeros((n, H)), obs, jnp.zeros(n, bool), ids)  # noqa: E731
            else:
                init = lambda k, g=g, obs=obs, ids=ids: nets[g.name].init(k, obs, ids)  # noqa: E731
            k = jax.random.fold_in(key, gi)
            keys = jax.random.split(k, g.size) if independent else k[None]
            params[g.name] = jax.vmap(init)(keys)  # leaves [1 or A_g, ...]
        return params

    def init_actors(key: Array) -> ActorState:
        obs, env_state = jax.vmap(env.reset)(jax.random.split(key, E))
        return ActorState(
            env_state=env_state, obs=obs, reset={g.name: jnp.ones((E, g.size), bool) for g in groups},
            hidden={g.name: jnp.zeros((E, g.size, H)) for g in groups} if rnn else {},
            ep_return=jnp.zeros((E, env.num_agents), jnp.float32), ep_length=jnp.zeros((E,), jnp.int32),
        )  # fmt: skip

    def step(params, eps, carry, key_t):
        actors, stats = carry
        k_act, k_env = jax.random.split(key_t)
        act_keys = _local_keys(k_act, E, E_local, layout.env_axes)
        env_keys = _local_keys(k_env, E, E_local, layout.env_axes)
        masks = jax.vmap(env.action_mask)(actors.env_state)
        actions, hidden = {}, {}
        for gi, g in enumerate(groups):
            q, h = q_values(params, g, actors.obs[g.name], actors.hidden.get(g.name), actors.reset[g.name] if rnn else None)
            actions[g.name] = choose(q, masks[g.name], jax.vmap(jax.random.fold_in, (0, None))(act_keys, gi), eps)
            if rnn:
                hidden[g.name] = h
        res = jax.vmap(env.step)(env_keys, actors.env_state, actions)
        reward_all = jnp.concatenate([res.reward[g.name] for g in groups], axis=1)  # [E, N]
        record = dict(obs=actors.obs, action=actions, mask=masks, reward=reward_all, done=res.episode_done, reset=actors.reset)
        if world:
            record["world"] = jax.vmap(env.world_state)(actors.env_state, actors.obs)  # [E, W]
        if rnn:
            record["hidden"] = actors.hidden  # the GRU's state before this step's observation
        return track_episodes(env, actors, stats, res, hidden), record

    def rollout(params, eps, actors: ActorState, key: Array):
        """num_steps of epsilon-greedy acting. traj leaves [T, E_local, ...] (reward [T, E, N] per
        agent, done [T, E], reset: the observation starts an episode, hidden: the GRU's state
        before the step, when recurrent); `final` holds what follows
        the last step (obs, mask, reset, world)."""
        zero = EpisodeStats.zero(env.num_agents)
        (actors, stats), traj = jax.lax.scan(partial(step, params, eps), (actors, zero), jax.random.split(key, T))
        final = dict(obs=actors.obs, mask=jax.vmap(env.action_mask)(actors.env_state), reset=actors.reset)
        if world:
            final["world"] = jax.vmap(env.world_state)(actors.env_state, actors.obs)
        return actors, stats, traj, final

    return QActing(nets, q_values, unroll, epsilon, act, init_params, init_actors, rollout)


def through_final(traj: dict, final: dict) -> dict:
    """Every field that `final` continues, over all T + 1 steps: traj[k] [T, ...] then final[k]."""
    return {k: jax.tree.map(lambda s, x: jnp.concatenate([s, x[None]]), traj[k], final[k]) for k in final}
