"""MAICQ (`maicq`): multi-agent implicit constraint Q-learning from an offline dataset, one-step form.

Yang et al. (2021) keep the learned joint policy close to the data's by never valuing an action
the dataset did not take, and extract each agent's policy by weighted behaviour cloning. Here, as
in that paper's decomposed form:

* **critic**: each agent's Q_i(o_i, a_i) (the Q family's networks, `q.*`) mixed into the team's
  Q_tot(s, a) by QMIX's monotonic mixer on the global state (`mixer.*`; the dataset's state, else
  every agent's observation concatenated), learned by one-step TD on the dataset's own next joint
  action: y = r_team + gamma * Q_tot_target(s', a'_data), no bootstrap after a terminal step and no
  target after a truncated one (in-sample: no action outside the data is ever valued);
* **actors**: each agent's policy pi_i (IPPO's actor-critic network, as `bc`) learns the recorded
  actions weighted by exp(k_i (Q_i(o_i, a_i) - sum_a pi_i(a | o_i) Q_i(o_i, a)) / `maicq.alpha`),
  normalised over the batch (a softmax times its size), where k_i = dQ_tot / dQ_i >= 0 is the
  mixer's slope at the data (MAICQ's per-agent weight of the team's advantage);
* a target network (critics and mixer) copied every `maicq.target_update_interval` updates or
  Polyak-averaged with `maicq.tau`.

What differs from the paper: the critic's target is one-step and evaluates the data's next action
(the behaviour's value, as "one-step" offline RL does), where MAICQ's evaluates the implicitly
constrained policy with a lambda-return over whole trajectories reweighted by the same exponential
weights; and the networks are feed-forward (MAICQ's are recurrent). Discrete actions.

Offline (marljax/algos/offline.py): one update is one gradient step on `num_envs` sequences of
`num_steps` transitions of `offline.dataset`. The actors act (evaluation, export, `finetune`).
"""

from __future__ import annotations

import dataclasses
from typing import cast

import jax
import jax.numpy as jnp
from flax import struct

from marljax.algos import offline
from marljax.algos.api import Algorithm, AlgorithmSpec
from marljax.algos.bc import group_policy, init_policies, make_act, policy_networks
from marljax.algos.learning import adam, descend
from marljax.algos.mixers import MixerConfig, qmixer
from marljax.algos.offline_q import Q_DEFAULTS, TargetConfig, check_q, q_of_windows
from marljax.algos.q_acting import QConfig, make_q_acting
from marljax.config import AlgorithmSchema, Config, Supports
from marljax.envs.adapter import EnvAdapter
from marljax.parallel.layouts import Layout
from marljax.schema import setting
from marljax.types import HParams, traced

Array = jax.Array
CRITICS = "__q__"  # params[CRITICS]: group -> the agents' Q-networks
MIXER = "__mixer__"  # params[MIXER]: the mixer's parameters


@dataclasses.dataclass(frozen=True)
class MAICQConfig(TargetConfig):
    """`maicq.*`: the temperature of MAICQ's policy weights and its target network."""

    alpha: float = setting(
        1.0,
        "temperature of the actors' weights exp(k_i advantage_i / alpha): lower follows the "
        "critic more, higher the data more",
        above=0.0,
        traced=True,
    )


@struct.dataclass
class MAICQHParams(HParams):
    """MAICQ's traced hyperparameters: the core's and the actors' weight temperature."""

    alpha: Array = traced("maicq.alpha")


def build(config: Config, env: EnvAdapter, *, layout: Layout = Layout(), correction: str = "none") -> Algorithm:
    """MAICQ's pieces for `env` on the dataset `offline.dataset` (read and checked here)."""
    del correction
    groups = env.groups
    source = offline.OfflineSource.of(config, env, layout, next_obs=True)
    actors = policy_networks(config, env)
    q = make_q_acting(config, env, layout)
    mixer = qmixer(config.section(MixerConfig), config.dtype)
    N = env.num_agents

    def init_params(key: Array) -> dict:
        k_actor, k_q, k_mix = jax.random.split(key, 3)
        mix = mixer.init(k_mix, jnp.zeros((1, N)), jnp.zeros((1, offline.world_size(source.host))))
        return {**init_policies(actors, groups, k_actor), CRITICS: q.init_params(k_q), MIXER: mix}

    def critics(params: dict) -> dict:
        return {CRITICS: params[CRITICS], MIXER: params[MIXER]}

    def mixed(mix_params, values: Array, world: Array) -> Array:
        """Q_tot [E, L] of the agents' values [E, L, N] and the state [E, L, W]."""
        E, L = values.shape[:2]
        out = cast(Array, mixer.apply(mix_params, values.reshape(E * L, N), world.reshape(E * L, -1)))
        return out.reshape(E, L)

    def loss_fn(params, target, batch: offline.Transitions, hp: MAICQHParams):
        world = offline.world_of(batch)  # [E, L+1, W]
        now, taken, later_taken = [], [], []
        for g in groups:
            values = q_of_windows(q, params[CRITICS], g, batch.obs)  # [E, L+1, A_g, n]
            target_values = q_of_windows(q, target[CRITICS], g, batch.obs[:, 1:])  # [E, L, A_g, n]
            action = offline.group_slice(batch.action, g)  # [E, L+1, A_g]
            pick = lambda v, a: jnp.take_along_axis(v, a[..., None], axis=-1)[..., 0]  # noqa: E731
            taken.append(pick(values[:, :-1], action[:, :-1]))
            later_taken.append(pick(target_values, action[:, 1:]))
            now.append(values[:, :-1])
        q_taken = jnp.concatenate(taken, axis=-1)  # [E, L, N] (agents in group order, as the mixer sees them)
        q_tot = mixed(params[MIXER], q_taken, world[:, :-1])
        q_next = mixed(target[MIXER], jnp.concatenate(later_taken, axis=-1), world[:, 1:])
        reward = (
            jnp.sum(batch.reward[:, :-1], axis=-1) * config.section(QConfig).reward_scale
        )  # the team's, summed like the values
        alive = 1.0 - batch.terminal[:, :-1].astype(jnp.float32)
        goal = jax.lax.stop_gradient(reward + hp.gamma * alive * q_next)
        valid = (~batch.truncation[:, :-1]).astype(jnp.float32)
        critic_loss = 0.5 * jnp.sum(valid * (q_tot - goal) ** 2) / jnp.maximum(jnp.sum(valid), 1.0)

        # each agent's weight of the team's advantage: the mixer's slope at the data, k_i >= 0
        slope = jax.grad(lambda v: jnp.sum(mixed(params[MIXER], v, world[:, :-1])))(jax.lax.stop_gradient(q_taken))
        start, actor_loss, weight_max = 0, jnp.float32(0), []
        policy_batch = batch._replace(**{f: getattr(batch, f)[:, :-1] for f in ("obs", "action", "legal")})
        for g, values, q_a in zip(groups, now, taken):
            dist, action = group_policy(actors, params, g, policy_batch)  # over [E*L*A_g]
            logp = dist.log_prob(action)
            probs = jnp.exp(dist.logits).reshape(values.shape)  # [E, L, A_g, n]: 0 where unavailable
            baseline = jnp.sum(probs * values, axis=-1)  # the policy's expected Q_i
            k = slope[..., start : start + g.size]
            start += g.size
            z = jax.lax.stop_gradient(k * (q_a - baseline) / hp.alpha).reshape(-1)  # [E*L*A_g]
            w = jax.nn.softmax(z) * z.size  # normalised over the batch: mean 1
            actor_loss = actor_loss - jnp.mean(w * logp)
            weight_max.append(jnp.max(w))
        total = critic_loss + actor_loss
        return total, (critic_loss, actor_loss, jnp.mean(q_tot), jnp.max(jnp.stack(weight_max)))

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def gradient_step(params, opt_state, target, batch: offline.Transitions, hp: MAICQHParams, lr: Array):
        (loss, parts), grads = grad_fn(params, target, batch, hp)
        params, opt_state, grad_norm = descend(adam(config), layout, frozenset(), params, opt_state, grads, lr, hp)
        return params, opt_state, (loss, *parts, grad_norm)

    return offline.pieces(
        config,
        layout,
        source,
        networks=actors.nets,
        init_params=init_params,
        act=make_act(actors, groups),
        gradient_step=gradient_step,
        hparams=MAICQHParams,
        target=offline.Target(config.section(MAICQConfig), critics),
        metrics=("loss_total", "loss_critic", "loss_actor", "q_tot_mean", "weight_max", "grad_norm"),
    )


SPEC = AlgorithmSpec(
    AlgorithmSchema(
        "maicq",
        "MAICQ (one-step): mixed Q-learners valued in-sample and actors by advantage-weighted cloning, from an "
        "offline dataset (offline.dataset=PATH)",
        {"offline": offline.OfflineConfig, "q": QConfig, "mixer": MixerConfig, "maicq": MAICQConfig},
        defaults=Q_DEFAULTS,
        supports=Supports(recurrent=False),
        check=check_q,
    ),
    build,
    ("loss_total", "loss_critic", "loss_actor", "grad_norm"),
)
