"""IPPO (independent PPO), feed-forward or recurrent, as pure functions.

`make_train(config, env)` returns a `Trainer` whose pieces are pure and jittable:

* `init(key) -> TrainState` for one seed (vmap it over seeds);
* `update(state) -> (state, metrics)`: one rollout of `num_steps` on every
  environment, GAE, then `update_epochs` x `num_minibatches` gradient steps;
* `run_updates(state, n)`: `n` updates in one `lax.scan` (the jitted chunk);
* `train(key)`: init plus every update, PureJaxRL's `train(rng)` contract.

Device-independence. `layout` (see `marljax.parallel.layouts`) says which mesh
axes split the environments and, with `param_sharing=independent`, the agents.
Every random draw that concerns one environment comes from a key split per
*global* environment index, and a minibatch takes `num_steps / num_minibatches`
time steps of *every* environment (a per-environment shuffle), so batches never
cross a device boundary and a run gives the same numbers, to float tolerance, on
1 or 8 devices, whatever the mesh. Each update gathers the agents' parameters
into the acting layout for the rollout, and swaps the trajectories to the
agent-major learning layout for the gradient steps.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from marljax.nn import ops
from marljax.algos.api import AlgorithmSpec, EpochSchedule, hparams_from_config
from marljax.config import AlgorithmSchema, Config, Supports, setting
from marljax.envs.adapter import AgentGroup, EnvAdapter
from marljax.nn.networks import ActorCritic, RecurrentActorCritic
from marljax.parallel.layouts import Layout
from marljax.types import ActorState, EpisodeStats, GroupBatch, HParams, LearnerState, TrainState, Trajectory

Array = jax.Array
CORRECTIONS = ("none", "ppo_clip", "vtrace")


@dataclasses.dataclass(frozen=True)
class PPOConfig(EpochSchedule):
    """`ppo.*`: the clipped surrogate of IPPO and MAPPO, learned in epochs of minibatches."""

    gae_lambda: float = setting(0.95, "GAE lambda", minimum=0.0, maximum=1.0, traced=True)
    clip_eps: float = setting(0.2, "clip range of the probability ratio", minimum=0.0, traced=True)
    ent_coef: float = setting(0.01, "entropy bonus coefficient", minimum=0.0, traced=True)
    vf_coef: float = setting(0.5, "value loss coefficient", minimum=0.0, traced=True)


class Trainer(NamedTuple):
    config: Config
    env: EnvAdapter
    networks: dict  # group -> flax module
    init: Callable[[Array], TrainState]
    update: Callable[[TrainState], tuple[TrainState, dict]]
    run_updates: Callable[[TrainState, int], tuple[TrainState, dict]]
    train: Callable[[Array], tuple[TrainState, dict]]
    act: Callable  # (params, obs, reset, hidden, mask, key) -> (actions, hidden) for evaluation
    policy: Callable  # (group_params, group, obs [B, A_g, ...], mask, hidden, reset) -> (dist, value, hidden)
    rollout_step: Callable  # (params, (actors, stats), key) -> ((actors, stats), batch): one env step
    minibatch_step: Callable  # (params, opt_state, minibatch, hparams, lr) -> ((params, opt_state), aux)
    collect: Callable  # (acting params, actors, key) -> (actors, Trajectory): one rollout, acting layout
    init_learner: Callable  # key -> LearnerState (the parameters `init(key)` makes)
    policy_step: Callable  # (params, obs, reset, hidden, key) -> group -> (action, logp, value, hidden)
    learn: Callable  # (learner, Trajectory, key) -> (learner, metrics): one update on that rollout


def _flat(x: Array, k: int) -> Array:
    """Merge the first k axes into one."""
    return x.reshape((-1,) + x.shape[k:])


def _agent_ids(group: AgentGroup, lead: tuple[int, ...], enabled: bool) -> Array | None:
    """One-hot agent ids [prod(lead) * A_g, A_g] in the order of a flattened [*lead, A_g] batch."""
    if not enabled or group.size == 1:
        return None
    eye = jnp.eye(group.size, dtype=jnp.float32)
    return jnp.broadcast_to(eye, lead + eye.shape).reshape(-1, group.size)


def _local_keys(key: Array, n_global: int, n_local: int, axes: str | tuple[str, ...] | None) -> Array:
    """This shard's slice of `split(key, n_global)`: one key per global environment index."""
    keys = jax.random.split(key, n_global)
    if axes is None or n_local == n_global:
        return keys
    start = jax.lax.axis_index(axes) * n_local
    return jax.lax.dynamic_slice_in_dim(keys, start, n_local)


class CentralCritic(NamedTuple):
    """A critic that replaces each group's own value head (MAPPO; see algos/mappo.py)."""

    init: Callable[[Array], Any]  # key -> critic params
    value: Callable  # (params, world [B, W], ids [A, N] one-hot agent ids) -> values [B, A]


CRITIC_KEY = "__critic__"  # params[CRITIC_KEY] holds a central critic's parameters


def track_episodes(env: EnvAdapter, actors: ActorState, stats: EpisodeStats, res, hidden: dict) -> tuple[ActorState, EpisodeStats]:
    """After one vmapped env step `res` of E environments: count the episodes that ended (their
    return, length and whether they were won) and move the actors on to the next step."""
    reward_all = jnp.concatenate([res.reward[g.name] for g in env.groups], axis=1)  # [E, N]
    ep_return, ep_length = actors.ep_return + reward_all, actors.ep_length + 1
    stats = stats.add(ep_return, ep_length, res.episode_done, jax.vmap(env.won)(res.reward, res.episode_done))
    actors = actors.replace(
        env_state=res.state, obs=res.obs, reset=res.done, hidden=hidden,
        ep_return=jnp.where(res.episode_done[:, None], 0.0, ep_return),
        ep_length=jnp.where(res.episode_done, 0, ep_length),
    )  # fmt: skip
    return actors, stats


def make_network(config: Config, group: AgentGroup, critic: bool = True) -> nn.Module:
    cnn = config.torso == "cnn" or (config.torso == "auto" and len(group.obs_shape) == 3)
    if config.recurrent:
        return RecurrentActorCritic(
            group.discrete, group.action_dim, config.hidden_size, config.gru_hidden_size, config.activation, cnn, critic
        )
    return ActorCritic(
        group.discrete, group.action_dim, config.hidden_size, config.num_layers, config.activation, cnn, critic
    )


def make_train(
    config: Config,
    env: EnvAdapter,
    *,
    layout: Layout = Layout(),
    critic: CentralCritic | None = None,
    correction: str = "none",
) -> Trainer:
    """Build IPPO's pure pieces for `env`; `layout` names the mesh axes it runs under (none: one device).

    With `critic`, every group's value comes from that central critic on the global state
    (`env.world_state`) instead of its own value head: MAPPO, built from the same pieces.

    `correction` says how `learn` treats a rollout made by older parameters (the async mode):
    `none`: GAE on the behaviour values and PPO's ratio against the behaviour policy, as on-policy;
    `ppo_clip`: decoupled PPO: the ratio is taken against the learner's policy at the start of the
    update (the proximal policy) and the surrogate weighted by the truncated importance weight
    min(1, pi_prox / mu); `vtrace`: the same surrogate on V-trace advantages and value targets
    (rho_bar = c_bar = 1) computed with the proximal policy's values.
    """
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {CORRECTIONS}, got {correction!r}")
    groups = env.groups
    nets = {g.name: make_network(config, g, critic=critic is None) for g in groups}
    rnn = config.recurrent
    independent = config.param_sharing == "independent"
    T, E, M = config.num_steps, config.num_envs, config.ppo.num_minibatches
    L = config.ppo.minibatch_steps(config)
    E_act = E // layout.num_env_shards  # environments per device while acting
    E_learn = E // layout.num_data  # ... and while learning (agent-major: a device's agents only)
    split = frozenset(g.name for g in groups) if layout.agent_parallel else frozenset()
    if split and not independent:
        raise ValueError("an agent-parallel layout needs param_sharing=independent")
    adam = optax.scale_by_adam(eps=1e-5)
    num_updates = max(config.num_updates, 1)

    # ------------------------------------------------------------------ acting
    def policy(params, g: AgentGroup, obs, mask, hidden=None, reset=None):
        """Apply group g's network(s) to obs [B, A_g, *obs] -> (dist over [B*A_g], value [B*A_g], hidden).

        params leaves carry a leading parameter-set axis: 1 (shared by the group's agents, who
        get a one-hot id) or A_g (`independent`: one network per agent, vmapped over agents).
        """
        net = nets[g.name]
        if not independent:
            p = jax.tree.map(lambda x: x[0], params)
            ids = _agent_ids(g, obs.shape[:1], config.agent_id)
            x = _flat(obs, 2)
            m = None if mask is None else _flat(mask, 2)
            if rnn:
                h, dist, value = net.apply(p, _flat(hidden, 2), x, _flat(reset, 2), ids, m)
                return dist, value, h.reshape(hidden.shape)
            dist, value = net.apply(p, x, ids, m)
            return dist, value, None

        def one_agent(p, o, m, h, r):  # o [B, *obs]: one agent's slice
            if rnn:
                h, dist, value = net.apply(p, h, o, r, None, m)
                return dist, value, h
            dist, value = net.apply(p, o, None, m)
            return dist, value, None

        axes = lambda x: None if x is None else 1  # noqa: E731
        dist, value, h = jax.vmap(one_agent, in_axes=(0, 1, axes(mask), axes(hidden), axes(reset)), out_axes=1)(
            params, obs, mask, hidden, reset
        )  # leaves [B, A_g, ...]
        return jax.tree.map(lambda v: _flat(v, 2), dist), _flat(value, 2), h

    all_ids = jnp.eye(env.num_agents, dtype=jnp.float32)

    def evaluate(params, g: AgentGroup, obs, mask, hidden, reset, world, learning: bool = False):
        """Group g's policy; its value comes from the central critic where there is one.

        world [B, W] (or None) pairs with obs [B, A, ...], where A is A_g in the acting layout
        and this device's agents of g in the learning layout; value is [B*A] either way.
        """
        dist, value, h = policy(params[g.name], g, obs, mask, hidden, reset)
        if critic is not None:
            first, count = layout.local_agents(g.size) if learning else (0, g.size)
            ids = jax.lax.dynamic_slice_in_dim(all_ids[jnp.array(g.indices)], first, count)  # [A, N]
            value = critic.value(params[CRITIC_KEY], world, ids).reshape(-1)
        return dist, value, h

    def sample(dist, key: Array, lead: tuple[int, int]) -> tuple[Array, Array]:
        """Sample one action per agent with one key per environment: keys [E]."""
        dist_e = jax.tree.map(lambda v: v.reshape(lead + v.shape[1:]), dist)
        actions = jax.vmap(lambda d, k: d.sample(k))(dist_e, key)
        logp = dist.log_prob(_flat(actions, 2))
        return actions, logp.reshape(lead)

    def act(params, obs, reset, hidden, mask, key, greedy: bool = False):
        """Actions for every group on a batch of envs (obs: group -> [B, A_g, ...])."""
        out, new_hidden = {}, {}
        keys = jax.random.split(key, obs[groups[0].name].shape[0])
        for gi, g in enumerate(groups):
            dist, _, h = policy(
                params[g.name], g, obs[g.name], mask.get(g.name), hidden.get(g.name), reset.get(g.name)
            )
            if greedy:
                out[g.name] = dist.mode().reshape(obs[g.name].shape[:2] + dist.mode().shape[1:])
            else:
                out[g.name], _ = sample(dist, jax.vmap(jax.random.fold_in, (0, None))(keys, gi), obs[g.name].shape[:2])
            if h is not None:
                new_hidden[g.name] = h
        return out, new_hidden

    def policy_step(params, obs, reset, hidden, key):
        """One acting step for a host-side rollout (every group, E envs; no masks, no central critic).

        obs: group -> [E, A_g, ...]; returns group -> (action [E, A_g(, d)], logp [E, A_g],
        value [E, A_g], hidden [E, A_g, H] or None). Keys per env, as in `rollout_step`.
        """
        n_env = obs[groups[0].name].shape[0]
        keys = jax.random.split(key, n_env)
        out = {}
        for gi, g in enumerate(groups):
            dist, value, h = evaluate(params, g, obs[g.name], None, hidden.get(g.name), reset.get(g.name), None)
            action, logp = sample(dist, jax.vmap(jax.random.fold_in, (0, None))(keys, gi), (n_env, g.size))
            out[g.name] = (action, logp, value.reshape(n_env, g.size), h)
        return out

    # -------------------------------------------------------------------- init
    def init_group_params(key: Array, g: AgentGroup):
        """Parameters of group g with a leading parameter-set axis: [1, ...] or [A_g, ...]."""
        n_agents = 1 if independent else g.size
        obs = jnp.zeros((n_agents,) + g.obs_shape, jnp.float32)
        mask = jnp.ones((n_agents, g.action_dim), bool) if g.discrete else None
        ids = None if independent else _agent_ids(g, (1,), config.agent_id)

        def one(k):
            if rnn:
                h = jnp.zeros((n_agents, config.gru_hidden_size))
                return nets[g.name].init(k, h, obs, jnp.zeros(n_agents, bool), ids, mask)
            return nets[g.name].init(k, obs, ids, mask)

        n_sets = g.size if independent else 1
        return jax.vmap(one)(jax.random.split(key, n_sets))

    def init_learner(key: Array) -> LearnerState:
        """The learner's half of `init(key)` (same parameters): no environment is touched."""
        k_net, _, k_run = jax.random.split(key, 3)
        params = {g.name: init_group_params(jax.random.fold_in(k_net, gi), g) for gi, g in enumerate(groups)}
        if critic is not None:
            params[CRITIC_KEY] = critic.init(jax.random.fold_in(k_net, len(groups)))
        return LearnerState(params, adam.init(params), hparams_from_config(config), k_run, jnp.int32(0))

    def init(key: Array) -> TrainState:
        _, k_env, _ = jax.random.split(key, 3)
        obs, env_state = jax.vmap(env.reset)(jax.random.split(k_env, E))
        actors = ActorState(
            env_state=env_state,
            obs=obs,
            reset={g.name: jnp.ones((E, g.size), bool) for g in groups},
            hidden={g.name: jnp.zeros((E, g.size, config.gru_hidden_size)) for g in groups} if rnn else {},
            ep_return=jnp.zeros((E, env.num_agents), jnp.float32),
            ep_length=jnp.zeros((E,), jnp.int32),
        )
        return TrainState(init_learner(key), actors)

    # ----------------------------------------------------------------- rollout
    def rollout_step(params, carry: tuple[ActorState, EpisodeStats], key_t: Array):
        """One env step of every local environment (the body of the rollout scan).

        Returns ((actors, stats), batch) with batch: group -> GroupBatch of leaves [E, A_g, ...].
        """
        actors, stats = carry
        k_act, k_env = jax.random.split(key_t)
        act_keys = _local_keys(k_act, E, E_act, layout.env_axes)
        env_keys = _local_keys(k_env, E, E_act, layout.env_axes)
        masks = jax.vmap(env.action_mask)(actors.env_state)
        world = None if critic is None else jax.vmap(env.world_state)(actors.env_state, actors.obs)  # [E, W]
        actions, batch, hidden = {}, {}, {}
        for gi, g in enumerate(groups):
            mask = masks.get(g.name) if g.has_mask else None
            dist, value, h = evaluate(params, g, actors.obs[g.name], mask, actors.hidden.get(g.name), actors.reset[g.name], world)
            keys_g = jax.vmap(jax.random.fold_in, (0, None))(act_keys, gi)
            actions[g.name], logp = sample(dist, keys_g, (E_act, g.size))
            batch[g.name] = dict(
                obs=actors.obs[g.name], action=actions[g.name], logp=logp,
                value=value.reshape(E_act, g.size), mask=mask,
                reset=actors.reset[g.name] if rnn else None,
                hidden=actors.hidden[g.name] if rnn else None, world=world,
            )  # fmt: skip
            if rnn:
                hidden[g.name] = h
        res = jax.vmap(env.step)(env_keys, actors.env_state, actions)
        for g in groups:
            batch[g.name].update(reward=res.reward[g.name], done=res.done[g.name])
        actors, stats = track_episodes(env, actors, stats, res, hidden)
        return (actors, stats), {g: GroupBatch(**b) for g, b in batch.items()}

    def rollout(params, actors: ActorState, key: Array):
        zero = EpisodeStats.zero(env.num_agents)
        (actors, stats), traj = jax.lax.scan(partial(rollout_step, params), (actors, zero), jax.random.split(key, T))
        return actors, stats, traj

    # ------------------------------------------------------------------ update
    def evaluate_seq(params, g: AgentGroup, b: GroupBatch):
        """Policy and value on a time-major stretch b (leaves [L, E_learn, A, ...]), learning layout.

        Returns (dist over [L*E*A], value [L*E*A]); the GRU restarts from b.hidden[0].
        """
        if rnn:
            def rnn_step(h, x):
                obs, reset, mask, world = x
                dist, value, h = evaluate(params, g, obs, mask, h, reset, world, learning=True)
                return h, (dist, value)

            _, (dist, value) = jax.lax.scan(rnn_step, b.hidden[0], (b.obs, b.reset, b.mask, b.world))
            return jax.tree.map(lambda v: _flat(v, 2), dist), _flat(value, 2)
        merge = lambda x: None if x is None else x.reshape((-1,) + x.shape[2:])  # noqa: E731
        dist, value, _ = evaluate(params, g, merge(b.obs), merge(b.mask), None, None, merge(b.world), True)
        return dist, value

    def loss_fn(params, minibatch, hp: HParams):
        total, parts = 0.0, []
        for g in groups:
            b, adv, target, weight = minibatch[g.name]  # leaves [L, E_learn, A, ...] (A: this device's agents)
            dist, value = evaluate_seq(params, g, b)
            logp = dist.log_prob(_flat(b.action, 3))
            loss = ops.ppo_loss(
                logp, _flat(b.logp, 3), dist.entropy(), value, _flat(b.value, 3),
                ops.normalize(_flat(adv, 3), layout.env_axes), _flat(target, 3),
                hp["ppo.clip_eps"], hp["ppo.vf_coef"], hp["ppo.ent_coef"], None if weight is None else _flat(weight, 3),
            )  # fmt: skip
            total = total + loss.total
            parts.append(loss)
        mean_parts = jax.tree.map(lambda *xs: jnp.mean(jnp.stack(xs)), *parts)
        return total, mean_parts

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def minibatch_step(params, opt_state, minibatch, hp: HParams, lr: Array):
        """One gradient step on one minibatch (group -> (GroupBatch, adv, target, weight|None), leaves [L, E, A_g, ...])."""
        (_, parts), grads = grad_fn(params, minibatch, hp)
        grads, grad_norm = layout.reduce_grads(grads, split)
        params, opt_state = ops.descend(params, opt_state, grads, grad_norm, adam, lr, hp["max_grad_norm"])
        return (params, opt_state), (parts, grad_norm)

    def shuffle_minibatches(data, key: Array):
        """Per-environment shuffle of time (FF) or of whole L-step chunks (recurrent).

        Returns leaves shaped [M, L, E_learn, ...]; minibatch m holds L steps of every env.
        """
        keys = _local_keys(key, E, E_learn, layout.data_axis)
        env_idx = jnp.arange(E_learn)
        if rnn:
            perm = jax.vmap(lambda k: jax.random.permutation(k, M))(keys)  # [E_learn, M]
            idx = (perm.T[:, None, :], jnp.arange(L)[None, :, None], env_idx[None, None, :])
            return jax.tree.map(lambda x: x.reshape((M, L) + x.shape[1:])[idx], data)
        perm = jax.vmap(lambda k: jax.random.permutation(k, T))(keys)  # [E_learn, T]
        return jax.tree.map(lambda x: x[perm.T, env_idx[None, :]].reshape((M, L) + x.shape[1:]), data)

    def collect(params, actors: ActorState, key: Array) -> tuple[ActorState, Trajectory]:
        """One rollout of num_steps on every local env with `params` in the acting layout."""
        actors, stats, batch = rollout(params, actors, key)
        masks = jax.vmap(env.action_mask)(actors.env_state)
        world = None if critic is None else jax.vmap(env.world_state)(actors.env_state, actors.obs)
        last_value = {}
        for g in groups:  # bootstrap: the value of the observation after the last step
            _, v, _ = evaluate(
                params, g, actors.obs[g.name], masks.get(g.name) if g.has_mask else None,
                actors.hidden.get(g.name), actors.reset[g.name], world,
            )  # fmt: skip
            last_value[g.name] = v.reshape(E_act, g.size)
        return actors, Trajectory(batch, last_value, stats)

    def advantages(params, b: GroupBatch, last_value: Array, g: AgentGroup, hp: HParams):
        """(batch, advantages, value targets, importance weight or None), learning layout, [T, E, A]."""
        if correction == "none":
            adv, target = ops.gae(b.reward, b.value, b.done, last_value, hp["gamma"], hp["ppo.gae_lambda"])
            return b, adv, target, None
        dist, value = evaluate_seq(params, g, b)  # the proximal policy: the learner now
        shape = b.reward.shape
        prox_logp = jax.lax.stop_gradient(dist.log_prob(_flat(b.action, 3)).reshape(shape))
        weight = jnp.minimum(1.0, jnp.exp(prox_logp - b.logp))  # truncated importance weight pi_prox / mu
        prox_value = jax.lax.stop_gradient(value.reshape(shape))
        b = b._replace(logp=prox_logp, value=prox_value)
        if correction == "ppo_clip":
            adv, target = ops.gae(b.reward, prox_value, b.done, last_value, hp["gamma"], hp["ppo.gae_lambda"])
            return b, adv, target, weight
        target, adv = ops.vtrace(b.reward, prox_value, b.done, last_value, weight, hp["gamma"])
        return b, adv, target, jnp.ones_like(weight)  # V-trace's advantages already carry rho

    def learn(learner: LearnerState, traj: Trajectory, k_epochs: Array) -> tuple[LearnerState, dict]:
        """One PPO update on `traj` (acting layout): swap to agent-major, advantages, epochs of minibatches."""
        hp = learner.hparams
        # environment-major -> agent-major (the world state, shared by all groups, travels once)
        per_agent = {
            g.name: (traj.batch[g.name]._replace(world=None), traj.last_value[g.name][None]) for g in groups
        }
        per_agent, world_traj = layout.to_learning(per_agent, traj.batch[groups[0].name].world)
        data = {}
        for g in groups:
            b, last_value = per_agent[g.name]
            data[g.name] = advantages(learner.params, b._replace(world=world_traj), last_value[0], g, hp)

        # clamped at 0, so updates past the budget (a benchmark, a resumed run) never flip its sign
        lr = ops.linear_schedule(hp["lr"], learner.update, num_updates, config.anneal_lr)

        def epoch(carry, key_e):
            step = lambda c, minibatch: minibatch_step(*c, minibatch, hp, lr)  # noqa: E731
            return jax.lax.scan(step, carry, shuffle_minibatches(data, key_e))

        (params, opt_state), (parts, grad_norm) = jax.lax.scan(
            epoch, (learner.params, learner.opt_state), jax.random.split(k_epochs, config.ppo.update_epochs)
        )
        # one collective for all metrics: loss means are averaged, episode counts summed
        parts, stats = ops.psum_tree(
            (jax.tree.map(lambda x: jnp.mean(x) / layout.num_env_shards, parts), traj.stats), layout.env_axes
        )
        metrics = {
            "loss_total": parts.total,
            "loss_actor": parts.actor,
            "loss_value": parts.value,
            "entropy": parts.entropy,
            "approx_kl": parts.approx_kl,
            "clip_frac": parts.clip_frac,
            "grad_norm": jnp.mean(grad_norm),
            "lr": lr,
            "episodes": stats,
        }
        return learner.replace(params=params, opt_state=opt_state, update=learner.update + 1), metrics

    def update(state: TrainState) -> tuple[TrainState, dict]:
        """collect with the learner's parameters gathered to the acting layout, then learn."""
        key, k_roll, k_epochs = jax.random.split(state.learner.key, 3)
        acting = layout.to_acting(state.learner.params, split)  # every agent's parameters, beside every env
        actors, traj = collect(acting, state.actors, k_roll)
        learner, metrics = learn(state.learner.replace(key=key), traj, k_epochs)
        return TrainState(learner, actors), metrics

    def run_updates(state: TrainState, n: int) -> tuple[TrainState, dict]:
        return jax.lax.scan(lambda s, _: update(s), state, None, length=n)

    def train(key: Array) -> tuple[TrainState, dict]:
        if layout.num_env_shards != 1:
            raise ValueError("train(key) runs unsharded; use marljax.train.loop for a device mesh")
        return run_updates(init(key), config.num_updates)

    return Trainer(
        config, env, nets, init, update, run_updates, train, act, policy, rollout_step, minibatch_step, collect,
        init_learner, policy_step, learn,
    )


SPEC = AlgorithmSpec(
    AlgorithmSchema(
        "ippo", "independent PPO: one actor-critic per group, role or agent", {"ppo": PPOConfig},
        supports=Supports(actions=("discrete", "continuous"), agent_axis=True, async_mode=True, host_envs=True),
    ),
    make_train,
)
