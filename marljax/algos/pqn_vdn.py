"""PQN-VDN: replay-free, vectorised Q-learning with a VDN team value, as pure functions.

Each update: `num_steps` of epsilon-greedy acting in `num_envs` environments; Peng's
Q(lambda) targets for the team value Q_tot = sum_i Q_i(o_i, a_i) from the current network
(no target network: LayerNorm in the Q-network keeps the bootstrapped targets stable);
then `update_epochs` x `num_minibatches` gradient steps on 0.5 (Q_tot - G)^2. The team
reward is the sum of the agents' rewards, so that it matches the sum of their values.

The pieces share IPPO's state types, layouts and host loop: `make_train` returns an
`ippo.Trainer` whose PPO-only fields are None. Minibatches take `num_steps/num_minibatches`
time steps of every environment (a per-environment shuffle keyed by global env index), so
the numbers do not depend on `mesh.data`.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import optax

from marljax import ops
from marljax.algos.ippo import Trainer, _agent_ids, _flat, _local_keys, hparams_from_config
from marljax.config import Config, ConfigError
from marljax.envs.adapter import AgentGroup, EnvAdapter
from marljax.networks import QNetwork
from marljax.parallel.layouts import Layout
from marljax.types import ActorState, EpisodeStats, LearnerState, TrainState

Array = jax.Array


def make_train(config: Config, env: EnvAdapter, *, layout: Layout = Layout(), correction: str = "none") -> Trainer:
    del correction  # on-policy rollouts on device only
    groups = env.groups
    bad = [g.name for g in groups if not g.discrete]
    if bad:
        raise ConfigError("algo", f"pqn_vdn needs discrete actions; groups with Box actions: {', '.join(bad)}")
    if layout.agent_parallel:
        raise ConfigError("mesh.agent", "algo=pqn_vdn has no agent-parallel layout yet; allowed: 1")
    cnn = lambda g: config.torso == "cnn" or (config.torso == "auto" and len(g.obs_shape) == 3)  # noqa: E731
    nets = {g.name: QNetwork(g.action_dim, config.hidden_size, config.num_layers, config.activation, cnn(g)) for g in groups}
    T, E, M = config.num_steps, config.num_envs, config.num_minibatches
    L = config.minibatch_steps
    E_local = E // layout.num_env_shards
    adam = optax.scale_by_adam(eps=1e-5)
    num_updates = max(config.num_updates, 1)
    decay_updates = max(config.eps_decay_steps / (T * E), 1e-9)  # epsilon falls over this many updates

    def q_values(params, g: AgentGroup, obs: Array) -> Array:
        """obs [B, A_g, ...] -> q [B, A_g, n_actions] (one shared network, one-hot agent ids)."""
        p = jax.tree.map(lambda x: x[0], params[g.name])
        ids = _agent_ids(g, obs.shape[:1], config.agent_id)
        return nets[g.name].apply(p, _flat(obs, 2), ids).reshape(obs.shape[:2] + (g.action_dim,))

    def epsilon(update: Array) -> Array:
        frac = jnp.minimum(update.astype(jnp.float32) / decay_updates, 1.0)
        return config.eps_start + frac * (config.eps_finish - config.eps_start)

    def choose(q: Array, mask: Array, key: Array, eps: Array | float) -> Array:
        """epsilon-greedy among available actions, one key per environment: q [B, A, n], keys [B]."""

        def one_env(q_e, m_e, k):
            k_explore, k_random = jax.random.split(k)
            greedy = jnp.argmax(jnp.where(m_e, q_e, -jnp.inf), axis=-1)  # [A]
            random = jax.random.categorical(k_random, jnp.where(m_e, 0.0, -jnp.inf))  # [A]
            explore = jax.random.uniform(k_explore, greedy.shape) < eps
            return jnp.where(explore, random, greedy)

        return jax.vmap(one_env)(q, mask, key)

    def act(params, obs, reset, hidden, mask, key, greedy: bool = False):
        """Evaluation: greedy actions (or epsilon_finish-greedy); obs group -> [B, A_g, ...]."""
        keys = jax.random.split(key, obs[groups[0].name].shape[0])
        out = {}
        for gi, g in enumerate(groups):
            q = q_values(params, g, obs[g.name])
            m = mask.get(g.name, jnp.ones(q.shape, bool))
            out[g.name] = choose(q, m, jax.vmap(jax.random.fold_in, (0, None))(keys, gi), 0.0 if greedy else config.eps_finish)
        return out, {}

    def init_learner(key: Array) -> LearnerState:
        k_net, _, k_run = jax.random.split(key, 3)
        params = {}
        for gi, g in enumerate(groups):
            obs = jnp.zeros((g.size,) + g.obs_shape, jnp.float32)
            ids = _agent_ids(g, (1,), config.agent_id)
            params[g.name] = jax.vmap(lambda k, g=g, obs=obs, ids=ids: nets[g.name].init(k, obs, ids))(
                jax.random.fold_in(k_net, gi)[None]
            )  # leaves [1, ...]: one shared set per group
        return LearnerState(params, adam.init(params), hparams_from_config(config), k_run, jnp.int32(0))

    def init(key: Array) -> TrainState:
        _, k_env, _ = jax.random.split(key, 3)
        obs, env_state = jax.vmap(env.reset)(jax.random.split(k_env, E))
        actors = ActorState(
            env_state=env_state, obs=obs, reset={g.name: jnp.ones((E, g.size), bool) for g in groups}, hidden={},
            ep_return=jnp.zeros((E, env.num_agents), jnp.float32), ep_length=jnp.zeros((E,), jnp.int32),
        )  # fmt: skip
        return TrainState(init_learner(key), actors)

    def rollout_step(params, eps, carry, key_t):
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
        step = dict(obs=actors.obs, action=actions, mask=masks, reward=jnp.sum(reward_all, axis=1), done=res.episode_done)
        actors = actors.replace(
            env_state=res.state, obs=res.obs, reset=res.done,
            ep_return=jnp.where(res.episode_done[:, None], 0.0, ep_return),
            ep_length=jnp.where(res.episode_done, 0, ep_length),
        )  # fmt: skip
        return (actors, stats), step

    def team_q(params, obs: dict, action: dict) -> Array:
        """Q_tot of the taken actions: obs/action group -> [B, A_g, ...] -> [B]."""
        total = 0.0
        for g in groups:
            q = q_values(params, g, obs[g.name])
            total = total + jnp.sum(jnp.take_along_axis(q, action[g.name][..., None], axis=-1)[..., 0], axis=-1)
        return total

    def team_max(params, obs: dict, mask: dict) -> Array:
        """sum_i max_a Q_i over available actions: [B]."""
        return sum(jnp.sum(ops.masked_max(q_values(params, g, obs[g.name]), mask[g.name]), axis=-1) for g in groups)

    def loss_fn(params, batch, target):
        q = jax.vmap(partial(team_q, params))(batch["obs"], batch["action"])  # [L, E_local]
        td = q - target
        return 0.5 * jnp.mean(td**2), jnp.mean(q)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def minibatch_step(carry, minibatch, lr, max_grad_norm):
        params, opt_state = carry
        batch, target = minibatch
        (loss, q_mean), grads = grad_fn(params, batch, target)
        grads, grad_norm = layout.reduce_grads(grads, frozenset())
        grads = ops.clip_by_norm(grads, grad_norm, max_grad_norm)
        updates, opt_state = adam.update(grads, opt_state)
        params = jax.tree.map(lambda p, u: p - lr * u, params, updates)
        return (params, opt_state), (loss, q_mean, grad_norm)

    def shuffle(data, key):
        """[T, E_local, ...] -> [M, L, E_local, ...]: L time steps of every environment per minibatch."""
        keys = _local_keys(key, E, E_local, layout.data_axis)
        perm = jax.vmap(lambda k: jax.random.permutation(k, T))(keys)  # [E_local, T]
        env_idx = jnp.arange(E_local)
        return jax.tree.map(lambda x: x[perm.T, env_idx[None, :]].reshape((M, L) + x.shape[1:]), data)

    def update(state: TrainState):
        learner = state.learner
        key, k_roll, k_epochs = jax.random.split(learner.key, 3)
        eps = epsilon(learner.update)
        zero = EpisodeStats(jnp.zeros(env.num_agents), jnp.float32(0), jnp.float32(0))
        (actors, stats), traj = jax.lax.scan(
            partial(rollout_step, learner.params, eps), (state.actors, zero), jax.random.split(k_roll, T)
        )
        # targets from the network as it is now: Q(s_{t+1}) for every step, the last from the final obs
        next_obs = jax.tree.map(lambda seq, last: jnp.concatenate([seq[1:], last[None]]), traj["obs"], actors.obs)
        last_mask = jax.vmap(env.action_mask)(actors.env_state)
        next_mask = jax.tree.map(lambda seq, last: jnp.concatenate([seq[1:], last[None]]), traj["mask"], last_mask)
        next_q = jax.vmap(partial(team_max, learner.params))(next_obs, next_mask)  # [T, E_local]
        target = ops.q_lambda_returns(traj["reward"], traj["done"], next_q, learner.hparams.gamma, config.td_lambda)

        frac = jnp.maximum(1.0 - learner.update.astype(jnp.float32) / num_updates, 0.0)
        lr = learner.hparams.lr * frac if config.anneal_lr else learner.hparams.lr
        data = ({"obs": traj["obs"], "action": traj["action"]}, jax.lax.stop_gradient(target))

        def epoch(carry, key_e):
            step = lambda c, mb: minibatch_step(c, mb, lr, learner.hparams.max_grad_norm)  # noqa: E731
            return jax.lax.scan(step, carry, shuffle(data, key_e))

        (params, opt_state), (loss, q_mean, grad_norm) = jax.lax.scan(
            epoch, (learner.params, learner.opt_state), jax.random.split(k_epochs, config.update_epochs)
        )
        n = layout.num_env_shards
        (loss, q_mean), stats = ops.psum_tree(((jnp.mean(loss) / n, jnp.mean(q_mean) / n), stats), layout.env_axes)
        metrics = {"loss_total": loss, "q_mean": q_mean, "grad_norm": jnp.mean(grad_norm), "lr": lr, "epsilon": eps,
                   "episodes": stats}  # fmt: skip
        learner = learner.replace(params=params, opt_state=opt_state, key=key, update=learner.update + 1)
        return TrainState(learner, actors), metrics

    def run_updates(state: TrainState, n: int):
        return jax.lax.scan(lambda s, _: update(s), state, None, length=n)

    def train(key: Array):
        if layout.num_env_shards != 1:
            raise ValueError("train(key) runs unsharded; use marljax.run for a device mesh")
        return run_updates(init(key), config.num_updates)

    return Trainer(
        config, env, nets, init, update, run_updates, train, act, None, None, None, None, init_learner, None, None,
    )
