"""ISAC and MASAC: off-policy soft actor-critic for continuous (Box) actions.

Each update: `num_steps` of acting in `num_envs` environments with the squashed Gaussian policy
(uniformly random actions until `sac.learning_starts` env steps have passed), whose sequences (one
per environment, as IQL keeps them) go into the replay buffer on the device
(`marljax.algos.replay`); then `sac.gradient_steps` gradient steps, each on `sac.batch_size`
transitions drawn uniformly from it. One gradient step, from one backward pass:

* critics: twin Q-networks regressed on the soft target
  y = r + gamma (1 - done) (min_j Q'_j(s', a') - alpha log pi(a'|o')), a' ~ pi(.|o'),
  Q' the target critics (Polyak-averaged with `sac.tau` after every gradient step);
* actors: minimise alpha log pi(a|o) - min_j Q_j(s, a), a ~ pi(.|o) reparameterised;
* temperature: log alpha learned towards the target entropy `sac.target_entropy` x action_dim
  (-|A| by default) with loss -log alpha (log pi(a|o) + target) (`sac.autotune=false`: fixed).

The policy is a Gaussian squashed by tanh into (-1, 1) per dimension, then scaled affinely to the
env's Box bounds (an unbounded side is taken as 1) when the env steps; critics and log-probs work
in the squashed (-1, 1) space, so the target entropy does not depend on the bounds.

* `isac`: each group's critics (shared, per role or per agent as `param_sharing` says, like the
  actors) see the agent's own observation and action, and learn its own reward.
* `masac`: one central pair of critics sees the world state (`EnvAdapter.world_state`: the env's
  global state where JaxMARL has one, else every agent's observation), every agent's action and a
  one-hot id of the agent whose value it is; agent i's critic learns agent i's reward. Actors
  stay decentralised; an actor's loss takes every agent's fresh action from the current policies,
  so the gradient of the team's mean value reaches each actor through its own action.

Feed-forward only: a recurrent SAC needs stored hidden states and burn-in over sampled sequences,
which this first version leaves out. Without an agent-parallel learner (`mesh.agent`=1); with
`mesh.data` = D each data shard keeps buffer_size/D transitions of its own environments, samples
batch_size/D of them, and the gradients are averaged over the shards.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from marljax.algos import replay
from marljax.algos.acting import GroupNetworks, VecEnv, act_by_group, uses_cnn
from marljax.algos.api import (
    ENVS,
    REPLICATED,
    Algorithm,
    AlgorithmSpec,
    CostPiece,
    ExtraPart,
    Placed,
    hparams_from_config,
)
from marljax.algos.learning import adam, init_keys, schedule
from marljax.algos.q_acting import through_final
from marljax.config import AlgorithmSchema, Config, Supports
from marljax.envs.adapter import AgentGroup, EnvAdapter
from marljax.nn import ops
from marljax.nn.networks import MLP, CNNEncoder, dense, orthogonal
from marljax.parallel.layouts import Layout
from marljax.schema import ConfigError, setting
from marljax.types import ActorState, EpisodeStats, HParams, LearnerState, TrainState, UpdateMetrics, traced

Array = jax.Array
CRITIC = "__critic__"  # params[CRITIC]: isac: group -> that group's critics; masac: the central critics
LOG_ALPHA = "__log_alpha__"  # params[LOG_ALPHA]: group -> log of its entropy temperature []
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # the policy's log std, squashed into this range


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """`sac.*`: the replay, the target critics and the entropy temperature of isac and masac. The
    critics' learning rate is the core `lr`; `anneal_lr` and `lr_warmup` shape all three rates."""

    buffer_size: int = setting(
        200_000,
        "transitions kept per seed (whole rollouts of num_steps per environment; the oldest are overwritten)",
        minimum=1,
    )
    batch_size: int = setting(256, "transitions per gradient step (each with every agent's sample)", minimum=1)
    gradient_steps: int = setting(
        8,
        "gradient steps per update, each on a fresh sample (the replay ratio is "
        "gradient_steps*batch_size/(num_envs*num_steps))",
        minimum=1,
    )
    learning_starts: int = setting(
        10_000, "env steps of one seed with uniformly random actions before the first gradient step", minimum=0
    )
    tau: float = setting(
        0.005, "Polyak rate of the target critics, after every gradient step", minimum=0.0, maximum=1.0, traced=True
    )
    actor_lr: float = setting(1e-3, "Adam learning rate of the actors (the critics': lr)", above=0.0, traced=True)
    alpha_lr: float = setting(1e-3, "Adam learning rate of log alpha, the entropy temperature", above=0.0, traced=True)
    init_alpha: float = setting(0.1, "the entropy temperature alpha at the start", above=0.0)
    autotune: bool = setting(True, "learn alpha towards the target entropy; false: alpha stays init_alpha")
    target_entropy: float = setting(
        -1.0, "target entropy per action dimension (of the squashed policy); -1: the usual -|A|", traced=True
    )

    def check(self, config: Config) -> None:
        slots = self.buffer_size // config.num_steps
        if slots < config.num_envs:
            raise ConfigError(
                "sac.buffer_size",
                f"must hold at least one rollout: >= num_envs*num_steps="
                f"{config.num_envs * config.num_steps} transitions, got {self.buffer_size}",
            )


@struct.dataclass
class SACHParams(HParams):
    """SAC's traced hyperparameters: the core's (lr: the critics') and `sac.*`'s."""

    tau: Array = traced("sac.tau")
    actor_lr: Array = traced("sac.actor_lr")
    alpha_lr: Array = traced("sac.alpha_lr")
    target_entropy: Array = traced("sac.target_entropy")


class SACRollout(NamedTuple):
    """What `collect` hands to `learn`: one rollout in the acting layout."""

    traj: dict  # obs: group -> [T, E, A_g, ...]; action: group -> [T, E, A_g, d] in (-1, 1); reward [T, E, N];
    # done [T, E]; world [T, E, W] (masac)
    final: dict  # what follows the last step: obs (, world)
    stats: EpisodeStats  # of the episodes that ended during the rollout


@struct.dataclass
class SACExtra:
    target: Any  # the target critics' parameters (the tree of params[CRITIC])
    # one sequence per environment and update, [slots, T(+1), ...]: obs group -> [slots, T + 1, A_g, ...],
    # action group -> [slots, T, A_g, d], reward [slots, T, N], done [slots, T], world [slots, T + 1, W] (masac)
    buffer: replay.ReplayState

    if TYPE_CHECKING:  # added by flax.struct.dataclass; declared for the type checker

        def replace(self, **changes: Any) -> SACExtra: ...


# ------------------------------------------------------------------ networks
def _torso(obs: Array, cnn: bool, activation: str, dtype: str) -> Array:
    """obs [B, *obs_shape] -> features [B, F] (inside a compact module)."""
    return CNNEncoder(activation=activation, dtype=dtype)(obs) if cnn else obs.reshape(obs.shape[0], -1)


class GaussianActor(nn.Module):
    """obs [B, *obs_shape] (+ one-hot id [B, A]) -> (mean [B, d], log_std [B, d]) of the Gaussian that
    tanh squashes (`squash`); log_std is squashed into [LOG_STD_MIN, LOG_STD_MAX]."""

    action_dim: int
    hidden_size: int = 128
    num_layers: int = 2
    activation: str = "relu"
    cnn: bool = False
    dtype: str = "float32"

    @nn.compact
    def __call__(self, obs: Array, agent_id: Array | None = None) -> tuple[Array, Array]:
        x = _torso(obs, self.cnn, self.activation, self.dtype)
        x = x if agent_id is None else jnp.concatenate([x, agent_id], axis=-1)
        x = MLP(self.hidden_size, self.num_layers, self.activation, self.dtype)(x)
        head = lambda: dense(self.action_dim, self.dtype, kernel_init=orthogonal(0.01), bias_init=nn.initializers.zeros)  # noqa: E731
        mean, raw = head()(x), head()(x)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (jnp.tanh(raw) + 1.0)
        return mean, log_std


class TwinQ(nn.Module):
    """Two independent Q-networks: (x [B, *shape], id [B, A] | None, action [B, d]) -> q [B, 2]."""

    hidden_size: int = 128
    num_layers: int = 2
    activation: str = "relu"
    cnn: bool = False
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x: Array, agent_id: Array | None, action: Array) -> Array:
        feats = _torso(x, self.cnn, self.activation, self.dtype)
        parts = [feats, action] if agent_id is None else [feats, agent_id, action]
        h = jnp.concatenate(parts, axis=-1)
        qs = [
            dense(1, self.dtype, kernel_init=orthogonal(1.0), bias_init=nn.initializers.zeros)(
                MLP(self.hidden_size, self.num_layers, self.activation, self.dtype)(h)
            )[:, 0]
            for _ in range(2)
        ]
        return jnp.stack(qs, axis=-1)


# ------------------------------------------------------------------ the squashed Gaussian, by hand
def squash(mean: Array, log_std: Array, noise: Array) -> tuple[Array, Array]:
    """Reparameterised sample of tanh(N(mean, std)) and its log-density (summed over the last axis):
    mean, log_std, noise [..., d] -> (action [..., d] in (-1, 1), log pi [...]).
    log pi = log N(u) - sum log(1 - tanh(u)^2), with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))."""
    u = mean + jnp.exp(log_std) * noise
    log_normal = -0.5 * noise**2 - log_std - 0.5 * math.log(2 * math.pi)
    log_jacobian = 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))
    return jnp.tanh(u), jnp.sum(log_normal - log_jacobian, axis=-1)


def soft_target(reward: Array, done: Array, q_next: Array, logp_next: Array, alpha: Array, gamma: Array) -> Array:
    """y = r + gamma (1 - done) (min over the twin q_next [..., 2] - alpha log pi'); every array [...]."""
    return reward + gamma * (1.0 - done) * (jnp.min(q_next, axis=-1) - alpha * logp_next)


def temperature_loss(log_alpha: Array, logp: Array, target_entropy: Array) -> Array:
    """-log alpha (log pi + target), averaged; the log-probs carry no gradient. Its gradient in
    log alpha is -(mean log pi + target) = entropy - target: alpha falls while the entropy exceeds
    the target and rises below it."""
    return -jnp.mean(log_alpha * jax.lax.stop_gradient(logp + target_entropy))


def polyak(online: Any, target: Any, tau: Array) -> Any:
    """target <- tau online + (1 - tau) target, leaf by leaf."""
    return jax.tree.map(lambda p, t: tau * p + (1.0 - tau) * t, online, target)


def box_bounds(group: AgentGroup) -> tuple[float, float]:
    """The group's Box bounds; an unbounded side is taken as 1."""
    low = -1.0 if group.action_low is None or not math.isfinite(group.action_low) else float(group.action_low)
    high = 1.0 if group.action_high is None or not math.isfinite(group.action_high) else float(group.action_high)
    return low, high


def to_env(action: Array, group: AgentGroup) -> Array:
    """A squashed action in (-1, 1) -> the env's bounds, affinely."""
    low, high = box_bounds(group)
    return low + 0.5 * (action + 1.0) * (high - low)


# ------------------------------------------------------------------ the algorithm
def build(
    config: Config, env: EnvAdapter, *, layout: Layout = Layout(), correction: str = "none", central: bool = False
) -> Algorithm:
    """ISAC's pieces, or with `central` MASAC's (central twin critics on the world state and every
    agent's action)."""
    del correction  # on device the data is on-policy for the rollout; replay is off-policy by design
    algo, sac = config.algo, config.section(SACConfig)
    groups = env.groups
    # Box actions only: make_adapter refuses Discrete groups from SUPPORTS.actions (train/wiring.py)
    if layout.agent_parallel:
        raise ConfigError("mesh.agent", f"algo={algo} has no agent-parallel learner; allowed: 1")
    T, E, N = config.num_steps, config.num_envs, env.num_agents
    D = layout.num_data  # data shards: each keeps slots/D sequences of its own environments
    slots = sac.buffer_size // T
    if slots % D:
        raise ConfigError(
            "sac.buffer_size",
            f"buffer_size/num_steps = {slots} sequences must divide over "
            f"mesh.data={D}; got buffer_size={sac.buffer_size}",
        )
    if sac.batch_size % D:
        raise ConfigError(
            "sac.batch_size",
            f"must divide over mesh.data={D} (each data shard samples its share); got {sac.batch_size}",
        )
    vec = VecEnv.of(config, env, layout)
    E_act = vec.local
    tx, sched = adam(config), schedule(config)
    start_update = sac.learning_starts // (T * E)  # the first update that learns
    hidden, layers = config.hidden_size, config.num_layers
    actors = GroupNetworks.of(
        config,
        {
            g.name: GaussianActor(
                g.action_dim, *config.group_network(g.name), config.activation, uses_cnn(config, g), config.dtype
            )
            for g in groups
        },
    )
    critics = GroupNetworks.of(
        config,
        {
            g.name: TwinQ(*config.group_network(g.name), config.activation, uses_cnn(config, g), config.dtype)
            for g in groups
        },
    )
    central_q = TwinQ(hidden, layers, config.activation, False, config.dtype)
    target_entropy = jnp.concatenate([jnp.full((g.size,), float(g.action_dim)) for g in groups])  # [N] times the scale
    swap = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731 - time-major [T, E, ...] <-> env-major [E, T, ...]

    def world_size() -> int:
        def world(key):
            obs, state = env.reset(key)
            return env.world_state(state, obs)

        return int(jax.eval_shape(world, jax.random.PRNGKey(0)).shape[0])

    W = world_size() if central else 0
    joint_dim = sum(g.size * g.action_dim for g in groups)

    # ---------------------------------------------------------------- pieces of the maths
    def policy(params, obs: dict, noise: dict) -> tuple[dict, dict]:
        """Every group's squashed sample: obs group -> [B, A_g, ...], noise group -> [B, A_g, d]
        -> (actions group -> [B, A_g, d] in (-1, 1), log pi group -> [B, A_g])."""
        out, logp = {}, {}
        for g in groups:
            (mean, log_std), _ = actors.apply(params[g.name], g, obs[g.name])
            out[g.name], logp[g.name] = squash(mean, log_std, noise[g.name])
        return out, logp

    def every_agent(per_group: dict) -> Array:
        """group -> [B, A_g] -> [B, N] in the concatenated order of the env's groups."""
        return jnp.concatenate([per_group[g.name] for g in groups], axis=1)

    def q_values(critic_params, obs: dict, world: Array | None, action: dict) -> Array:
        """Twin values of every agent: [B, N, 2]. isac: a group's critics on (obs, own action);
        masac: the central critics on (world [B, W], every action, the agent's one-hot id)."""
        if not central:
            return jnp.concatenate(
                [critics.apply(critic_params[g.name], g, obs[g.name], None, None, action[g.name])[0] for g in groups],
                axis=1,
            )
        assert world is not None
        B = world.shape[0]
        joint = jnp.concatenate([action[g.name].reshape(B, -1) for g in groups], axis=-1)  # [B, sum A_g d]
        x = jnp.broadcast_to(world[:, None], (B, N, W)).reshape(B * N, W)
        ids = jnp.broadcast_to(jnp.eye(N), (B, N, N)).reshape(B * N, N)
        a = jnp.broadcast_to(joint[:, None], (B, N, joint_dim)).reshape(B * N, joint_dim)
        return cast(Array, central_q.apply(critic_params, x, ids, a)).reshape(B, N, 2)

    def noise_like(key: Array, lead: tuple[int, ...]) -> dict:
        """Standard normal noise, group -> [*lead, A_g, d]."""
        return {
            g.name: jax.random.normal(jax.random.fold_in(key, i), lead + (g.size, g.action_dim))
            for i, g in enumerate(groups)
        }

    def loss_fn(params, target, batch: dict, key: Array, hp: SACHParams):
        """The three losses of one gradient step on `batch` (leaves [B, ...]), summed: each part's
        gradient reaches only its own parameters (the others are held by stop_gradient)."""
        B = batch["done"].shape[0]
        k_next, k_now = jax.random.split(key)
        log_alpha = jnp.concatenate([jnp.broadcast_to(params[LOG_ALPHA][g.name], (g.size,)) for g in groups])  # [N]
        alpha = jax.lax.stop_gradient(jnp.exp(log_alpha))
        frozen = jax.lax.stop_gradient(params)
        # critics: the soft target from the next observation, the current policy and the target critics
        next_action, next_logp = policy(frozen, batch["next_obs"], noise_like(k_next, (B,)))
        q_next = q_values(target, batch["next_obs"], batch.get("next_world"), next_action)  # [B, N, 2]
        y = soft_target(batch["reward"], batch["done"][:, None], q_next, every_agent(next_logp), alpha, hp.gamma)
        q_taken = q_values(params[CRITIC], batch["obs"], batch.get("world"), batch["action"])  # [B, N, 2]
        critic_loss = 0.5 * jnp.mean(jnp.sum((q_taken - jax.lax.stop_gradient(y)[..., None]) ** 2, axis=-1))
        # actors: every agent's fresh action, valued by the critics held fixed
        action, logp = policy(params, batch["obs"], noise_like(k_now, (B,)))
        logp_all = every_agent(logp)  # [B, N]
        q_pi = jnp.min(q_values(frozen[CRITIC], batch["obs"], batch.get("world"), action), axis=-1)  # [B, N]
        actor_loss = jnp.mean(alpha * logp_all - q_pi)
        alpha_loss = temperature_loss(log_alpha, logp_all, hp.target_entropy * target_entropy)
        total = critic_loss + actor_loss + (alpha_loss if sac.autotune else 0.0)
        aux = (critic_loss, actor_loss, alpha_loss, jnp.mean(q_taken), -jnp.mean(logp_all), jnp.mean(alpha))
        return total, aux

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def actor_tree(tree: dict) -> dict:
        return {g.name: tree[g.name] for g in groups}

    def gradient_step(params, opt_state, target, buffer: replay.ReplayState, key: Array, hp: SACHParams, lrs):
        """One gradient step on batch_size/D transitions sampled from `buffer`, then the target
        critics' Polyak step -> (params, opt_state, target, metrics of the step)."""
        k_sample, k_loss = jax.random.split(key)
        batch = sample(buffer, k_sample, sac.batch_size // D)
        (_, aux), grads = grad_fn(params, target, batch, k_loss, hp)
        grads, grad_norm = layout.reduce_grads(grads, frozenset())  # averaged over data shards
        parts = {
            "actor": (actor_tree(params), actor_tree(grads), lrs[0]),
            "critic": (params[CRITIC], grads[CRITIC], lrs[1]),
            "alpha": (params[LOG_ALPHA], grads[LOG_ALPHA], lrs[2]),
        }
        if not sac.autotune:
            del parts["alpha"]
        new, new_opt = dict(params), dict(opt_state)
        for name, (p, gr, lr) in parts.items():
            p, new_opt[name] = ops.descend(p, opt_state[name], gr, ops.global_norm(gr), tx, lr, hp.max_grad_norm)
            new.update(p if name == "actor" else {CRITIC if name == "critic" else LOG_ALPHA: p})
        target = polyak(new[CRITIC], target, hp.tau)
        return new, new_opt, target, (*aux, grad_norm)

    # ---------------------------------------------------------------- the buffer
    def example_sequence(key: Array) -> dict:
        """One environment's stored sequence, zeros (obs and world [T + 1, ...]: the last follows step T)."""
        obs, state = env.reset(key)
        seq = {
            "obs": {g.name: jnp.zeros((T + 1,) + obs[g.name].shape) for g in groups},
            "action": {g.name: jnp.zeros((T, g.size, g.action_dim)) for g in groups},
            "reward": jnp.zeros((T, N)),
            "done": jnp.zeros((T,)),
        }
        if central:
            seq["world"] = jnp.zeros((T + 1, W))
        return seq

    def sample(buffer: replay.ReplayState, key: Array, batch_size: int) -> dict:
        """`batch_size` transitions drawn uniformly from the valid sequences and their T steps:
        obs/world at t and t + 1, action, reward [B, N], done [B]."""
        k_slot, k_step = jax.random.split(key)
        slot = replay.draw(buffer, k_slot, batch_size)  # [B]
        t = jax.random.randint(k_step, (batch_size,), 0, T)
        at = lambda x, dt=0: x[slot, t + dt]  # noqa: E731
        data = buffer.data
        out = {
            "obs": jax.tree.map(at, data["obs"]),
            "next_obs": jax.tree.map(lambda x: at(x, 1), data["obs"]),
            "action": jax.tree.map(at, data["action"]),
            "reward": at(data["reward"]),
            "done": at(data["done"]),
        }
        if central:
            out["world"], out["next_world"] = at(data["world"]), at(data["world"], 1)
        return out

    # ---------------------------------------------------------------- init
    def init_params(key: Array) -> dict:
        params: dict[str, Any] = {}
        critic: dict[str, Any] = {}
        for gi, g in enumerate(groups):
            k_actor, k_critic = jax.random.split(jax.random.fold_in(key, gi))
            params[g.name] = actors.init(jax.random.split(k_actor, actors.num_sets(g)), g)
            critic[g.name] = critics.init(jax.random.split(k_critic, critics.num_sets(g)), g, jnp.zeros(g.action_dim))
        if central:
            k = jax.random.fold_in(key, len(groups))
            params[CRITIC] = central_q.init(k, jnp.zeros((1, W)), jnp.zeros((1, N)), jnp.zeros((1, joint_dim)))
        else:
            params[CRITIC] = critic
        params[LOG_ALPHA] = {g.name: jnp.log(jnp.float32(sac.init_alpha)) for g in groups}
        return params

    def learner_init(key: Array) -> LearnerState:
        """The actors, the critics and log alpha, each with its own Adam state; no env touched."""
        keys = init_keys(key)
        params = init_params(keys.net)
        opt_state = {
            "actor": tx.init(actor_tree(params)),
            "critic": tx.init(params[CRITIC]),
            "alpha": tx.init(params[LOG_ALPHA]),
        }
        return LearnerState(params, opt_state, hparams_from_config(config, SACHParams), keys.run, jnp.int32(0))

    def init_actors(key: Array) -> ActorState:
        return vec.init_actors(init_keys(key).env, None)

    def init_extra(key: Array, learner: LearnerState) -> SACExtra:
        """The target critics (the learner's first critics) and an empty buffer."""
        return SACExtra(learner.params[CRITIC], replay.init(slots, example_sequence(init_keys(key).env)))

    # ---------------------------------------------------------------- acting
    def choose(params, obs: dict, keys: Array, explore: Array | bool = False, greedy: bool = False) -> dict:
        """Squashed actions of every group in (-1, 1) on B envs with keys [B, 2] (one per env):
        sampled, tanh(mean) when `greedy`, uniform where `explore` (before learning starts)."""

        def one(g: AgentGroup, k: Array):
            (mean, log_std), _ = actors.apply(params[g.name], g, obs[g.name])  # [B, A_g, d] each
            if greedy:
                return jnp.tanh(mean), None
            noise = jax.vmap(lambda kk: jax.random.normal(kk, mean.shape[1:]))(k)
            sampled, _ = squash(mean, log_std, noise)
            uniform = jax.vmap(lambda kk: jax.random.uniform(jax.random.fold_in(kk, 1), mean.shape[1:], minval=-1.0))(k)
            return jnp.where(explore, uniform, sampled), None

        return act_by_group(groups, keys, one)[0]

    def act(params, obs, reset, hidden, mask, key, greedy: bool = False):
        """Actions in the env's bounds, group -> [B, A_g, d] (evaluation, policy export)."""
        del reset, mask
        chosen = choose(params, obs, jax.random.split(key, obs[groups[0].name].shape[0]), greedy=greedy)
        return {g.name: to_env(chosen[g.name], g) for g in groups}, hidden

    def step_policy(params, explore: Array | bool) -> Callable:
        def step(actors_: ActorState, masks: dict, keys: Array):
            chosen = choose(params, actors_.obs, keys, explore)
            before: dict[str, Any] = {"obs": actors_.obs, "action": chosen}
            if central:
                before["world"] = jax.vmap(env.world_state)(actors_.env_state, actors_.obs)  # [E, W]
            return {g.name: to_env(chosen[g.name], g) for g in groups}, {}, before

        return step

    def record(before: dict, res) -> dict:
        reward = jnp.concatenate([res.reward[g.name] for g in groups], axis=1)  # [E, N]
        return {**before, "reward": reward, "done": res.episode_done.astype(jnp.float32)}

    def rollout_step(params, actors_: ActorState, key: Array):
        return vec.step(step_policy(params, False), record, (actors_, EpisodeStats.zero(N)), key)

    def collect(params, actors_: ActorState, key: Array, update: Array | None = None) -> tuple[ActorState, SACRollout]:
        """One rollout; uniformly random actions until the update that learns first."""
        explore = jnp.asarray(False) if update is None else update < start_update
        actors_, stats, traj = vec.rollout(step_policy(params, explore), record, actors_, key, T, update)
        final: dict[str, Any] = {"obs": actors_.obs}
        if central:
            final["world"] = jax.vmap(env.world_state)(actors_.env_state, actors_.obs)
        return actors_, SACRollout(traj, final, stats)

    # ---------------------------------------------------------------- learning
    def rates(learner: LearnerState) -> tuple[Array, Array, Array]:
        """This update's (actor, critic, alpha) learning rates, on the run's schedule."""
        hp, u = cast(SACHParams, learner.hparams), learner.update
        return sched(hp.actor_lr, u), sched(hp.lr, u), sched(hp.alpha_lr, u)

    def learn(learner: LearnerState, extra: SACExtra, batch: SACRollout, key: Array):
        """The rollout into the buffer; once learning has started, gradient_steps on samples of it."""
        whole = through_final(batch.traj, batch.final)  # obs (, world): [T + 1, E_act, ...]
        seqs = jax.tree.map(swap, {**{k: batch.traj[k] for k in ("action", "reward", "done")}, **whole})
        buffer = replay.add(extra.buffer, seqs)  # [E_act, T(+1), ...] sequences
        lrs = rates(learner)
        if D > 1:  # each shard samples its own transitions; the gradients are averaged over shards
            key = jax.random.fold_in(key, jax.lax.axis_index(layout.data_axis))

        def learning(_):
            def one(carry, k):
                params, opt_state, target = carry
                params, opt_state, target, out = gradient_step(
                    params, opt_state, target, buffer, k, learner.hparams, lrs
                )
                return (params, opt_state, target), out

            carry, outs = jax.lax.scan(
                one, (learner.params, learner.opt_state, extra.target), jax.random.split(key, sac.gradient_steps)
            )
            return carry, tuple(jnp.mean(x) for x in outs)

        def wait(_):
            zeros = tuple(jnp.float32(0) for _ in range(7))
            return (learner.params, learner.opt_state, extra.target), zeros

        (params, opt_state, target), outs = jax.lax.cond(learner.update >= start_update, learning, wait, None)
        critic_loss, actor_loss, alpha_loss, q_mean, entropy, alpha, grad_norm = outs
        means = (critic_loss, actor_loss, alpha_loss, q_mean, entropy, alpha)
        means, (replay_size, stats) = ops.psum_tree(
            (tuple(x / D for x in means), (replay.size(buffer).astype(jnp.float32) * T, batch.stats)), layout.data_axis
        )  # over data shards: means of the losses, sums of the transitions kept and the episodes
        critic_loss, actor_loss, alpha_loss, q_mean, entropy, alpha = means
        metrics = UpdateMetrics(
            {
                "loss_total": critic_loss + actor_loss,
                "loss_critic": critic_loss,
                "loss_actor": actor_loss,
                "loss_alpha": alpha_loss,
                "alpha": alpha,
                "entropy": entropy,
                "q_mean": q_mean,
                "grad_norm": grad_norm,
                "lr": lrs[1],
                "replay_size": replay_size,
            },
            stats,
        )
        learner = learner.replace(params=params, opt_state=opt_state, update=learner.update + 1)
        return learner, SACExtra(target, buffer), metrics

    def cost_pieces(state: TrainState) -> list[CostPiece]:
        """(a) one rollout step (every group's actor, sampling, env.step, episode stats) x num_steps;
        (b) one gradient step (a sample of batch_size transitions, the three losses' value and
        gradient, Adam on each part, the target critics' Polyak step) x gradient_steps. Not counted:
        writing to the buffer. Run it on an unsharded trainer."""
        learner, extra = state.learner, state.extra
        key = jax.ShapeDtypeStruct((2,), jnp.uint32)
        scalar = jax.ShapeDtypeStruct((), jnp.float32)
        hp = hparams_from_config(config, SACHParams)

        def one_gradient_step(params, opt_state, target, buffer, key, lr):
            return gradient_step(params, opt_state, target, buffer, key, hp, (lr, lr, lr))

        return [
            CostPiece("rollout step", "rollout", rollout_step, (learner.params, state.actors, key), T),
            CostPiece(
                "gradient step",
                "learn",
                one_gradient_step,
                (learner.params, learner.opt_state, extra.target, extra.buffer, key, scalar),
                sac.gradient_steps,
                transitions=sac.batch_size,
            ),
        ]

    del E_act  # (the rollout's local width comes from VecEnv)
    layout_decl = SACExtra(REPLICATED, replay.ReplayState(Placed((ENVS,)), Placed((ENVS,)), REPLICATED))  # type: ignore[arg-type]
    return Algorithm(
        networks=actors.nets,
        init_learner=learner_init,
        init_actors=init_actors,
        collect=collect,
        learn=learn,
        act=act,
        cost_pieces=cost_pieces,
        init_extra=init_extra,
        extra_layout=layout_decl,
        extra_parts=(ExtraPart("replay buffer", ("sac.buffer_size",), lambda extra: extra.buffer),),
    )


# the metrics the NaN guard watches
LOSSES = ("loss_total", "loss_critic", "loss_actor", "alpha", "q_mean", "grad_norm", "lr")
SUPPORTS = Supports(actions=("continuous",), recurrent=False)
# shared by both; tuned on MPE_simple_spread_v3 with env_kwargs.action_type=Continuous
DEFAULTS = {
    "activation": "relu",
    "lr": 1e-3,
    "anneal_lr": False,
    "max_grad_norm": 10.0,
    "gamma": 0.95,
    "hidden_size": 128,
    "num_envs": 32,
    "num_steps": 8,
    "total_timesteps": 1_000_000,
}

ISAC = AlgorithmSpec(
    AlgorithmSchema(
        "isac",
        "independent SAC (Box actions): twin critics per group on each agent's own observation "
        "and action, replay, learned temperature",
        {"sac": SACConfig},
        defaults=DEFAULTS,
        supports=SUPPORTS,
    ),
    build,
    LOSSES,
)


def build_masac(config: Config, env: EnvAdapter, *, layout: Layout = Layout(), correction: str = "none") -> Algorithm:
    return build(config, env, layout=layout, correction=correction, central=True)


MASAC = AlgorithmSpec(
    AlgorithmSchema(
        "masac",
        "multi-agent SAC (Box actions): central twin critics on the world state and every "
        "agent's action, decentralised actors, replay, learned temperature",
        {"sac": SACConfig},
        defaults=DEFAULTS,
        supports=SUPPORTS,
    ),
    build_masac,
    LOSSES,
)
