"""IQL+CQL (`iql_cql`): independent Q-learners from an offline dataset, each with a conservative penalty.

Offline (marljax/algos/offline.py): one update is one gradient step on `num_envs` sequences of
`num_steps` transitions sampled from `offline.dataset` (each window reads one step more, for the
next observation). Every agent learns its own Q-values from its own reward (IQL), with
* one-step double-Q targets r + gamma * Q_target(o', argmax_{a' available} Q(o', a')), no
  bootstrap after a terminal step, and no target at all after a truncated one (the dataset does not
  hold the observation that followed it: that transition is left out of the TD loss);
* CQL's penalty, `cql.alpha` x (logsumexp of Q over the available actions - Q of the recorded
  action), which pushes down the values of actions the dataset did not take (Kumar et al., 2020);
* a target network copied every `cql.target_update_interval` updates (or Polyak-averaged with
  `cql.tau` when that is 0), kept in the extra state beside the dataset.

The Q-networks, their settings (`q.norm`, `q.dueling`, `q.reward_scale`, ...) and the acting
(greedy among the available actions; epsilon `q.eps_finish` when evaluated with
`eval_greedy=false`) are the Q family's (`marljax.algos.q_acting`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from marljax.algos import offline
from marljax.algos.acting import flat
from marljax.algos.api import Algorithm, AlgorithmSpec
from marljax.algos.learning import adam, descend
from marljax.algos.q_acting import QActing, QConfig, make_q_acting
from marljax.config import AlgorithmSchema, Config, Supports
from marljax.envs.adapter import AgentGroup, EnvAdapter
from marljax.nn import ops
from marljax.parallel.layouts import Layout
from marljax.schema import ConfigError, setting
from marljax.types import HParams, traced

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class TargetConfig:
    """Section fields of the offline Q-learners' target network."""

    target_update_interval: int = setting(
        200, "updates (gradient steps) between target-network copies; 0: Polyak averaging with tau", minimum=0
    )
    tau: float = setting(
        0.005, "Polyak rate of the target network (target_update_interval=0)", minimum=0.0, maximum=1.0
    )


@dataclasses.dataclass(frozen=True)
class CQLConfig(TargetConfig):
    """`cql.*`: the conservative penalty of IQL+CQL and its target network."""

    alpha: float = setting(
        1.0,
        "weight of the conservative penalty: logsumexp of Q over the available actions minus Q of the recorded action",
        minimum=0.0,
        traced=True,
    )


@struct.dataclass
class CQLHParams(HParams):
    """IQL+CQL's traced hyperparameters: the core's and the conservative penalty's weight."""

    alpha: Array = traced("cql.alpha")


def check_q(config: Config) -> None:
    """The Q family's settings an offline Q-learner takes: one-step targets, no batch norm."""
    q_cfg = config.section(QConfig)
    if q_cfg.td_lambda != 0:
        raise ConfigError(
            "q.td_lambda",
            f"algo={config.algo} learns one-step targets from the dataset's windows "
            f"(a truncated episode leaves no next observation); allowed: 0, got {q_cfg.td_lambda}",
        )
    if q_cfg.norm == "batch_norm" or q_cfg.norm_input:
        field = "q.norm" if q_cfg.norm == "batch_norm" else "q.norm_input"
        raise ConfigError(
            field, f"algo={config.algo} has no batch norm; allowed: q.norm=layer_norm or none, q.norm_input=false"
        )


def q_of_windows(q: QActing, params: dict, g: AgentGroup, obs: Array) -> Array:
    """Group g's Q-values on windows obs [E, S, N, *obs] -> [E, S, A_g, n]."""
    o = offline.group_slice(obs, g)
    values, _ = q.q_values(params, g, flat(o, 2))  # [E*S, A_g, n]
    return values.reshape(o.shape[:3] + values.shape[-1:])


def td_parts(
    config: Config, q: QActing, params: dict, target: dict, g: AgentGroup, batch: offline.Transitions, gamma: Array
):
    """Group g on windows of L + 1 steps -> (Q of the recorded actions [E, L, A_g], their one-step
    double-Q targets [E, L, A_g] (no gradient), the transitions that have one [E, L, 1], Q of every
    action [E, L, A_g, n], the available actions [E, L, A_g, n])."""
    values = q_of_windows(q, params, g, batch.obs)  # [E, L+1, A_g, n]
    later = jax.lax.stop_gradient(q_of_windows(q, target, g, batch.obs[:, 1:]))  # [E, L, A_g, n]
    assert batch.legal is not None  # Discrete: the dataset's, or all available where it recorded none
    legal = offline.group_slice(batch.legal, g)  # [E, L+1, A_g, n]
    action = offline.group_slice(batch.action, g)[:, :-1]  # [E, L, A_g]
    now = values[:, :-1]
    taken = jnp.take_along_axis(now, action[..., None], axis=-1)[..., 0]
    bootstrap = ops.double_q_value(jax.lax.stop_gradient(values[:, 1:]), later, legal[:, 1:])  # [E, L, A_g]
    reward = offline.group_slice(batch.reward, g)[:, :-1] * config.section(QConfig).reward_scale
    alive = 1.0 - batch.terminal[:, :-1, None].astype(jnp.float32)
    target_value = jax.lax.stop_gradient(reward + gamma * alive * bootstrap)
    valid = (~batch.truncation[:, :-1, None]).astype(jnp.float32)
    return taken, target_value, valid, now, legal[:, :-1] | jax.nn.one_hot(action, g.action_dim, dtype=bool)


def conservative_penalty(values: Array, legal: Array, taken: Array) -> Array:
    """CQL's penalty per transition: logsumexp of Q over the available actions minus Q of the taken one."""
    return jax.nn.logsumexp(jnp.where(legal, values, -jnp.inf), axis=-1) - taken


def build(config: Config, env: EnvAdapter, *, layout: Layout = Layout(), correction: str = "none") -> Algorithm:
    """IQL+CQL's pieces for `env` on the dataset `offline.dataset` (read and checked here)."""
    del correction
    groups = env.groups
    source = offline.OfflineSource.of(config, env, layout, next_obs=True)
    q = make_q_acting(config, env, layout)

    def loss_fn(params, target, batch: offline.Transitions, hp: CQLHParams):
        td, cql, q_mean = [], [], []
        for g in groups:
            taken, goal, valid, values, legal = td_parts(config, q, params, target, g, batch, hp.gamma)
            td.append(0.5 * jnp.sum(valid * (taken - goal) ** 2) / jnp.maximum(jnp.sum(valid) * g.size, 1.0))
            cql.append(jnp.mean(conservative_penalty(values, legal, taken)))
            q_mean.append(jnp.mean(taken))
        td_loss, penalty = sum(td), sum(cql)
        return td_loss + hp.alpha * penalty, (td_loss, penalty, jnp.mean(jnp.stack(q_mean)))

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def gradient_step(params, opt_state, target, batch: offline.Transitions, hp: CQLHParams, lr: Array):
        (loss, (td, penalty, q_mean)), grads = grad_fn(params, target, batch, hp)
        params, opt_state, grad_norm = descend(adam(config), layout, frozenset(), params, opt_state, grads, lr, hp)
        return params, opt_state, (loss, td, penalty, q_mean, grad_norm)

    return offline.pieces(
        config,
        layout,
        source,
        networks=q.nets,
        init_params=q.init_params,
        act=q.act,
        gradient_step=gradient_step,
        metrics=("loss_total", "loss_td", "cql_penalty", "q_mean", "grad_norm"),
        target=offline.Target(config.section(CQLConfig)),
        hparams=CQLHParams,
    )


# the replay family's network defaults (relu, layer norm), one-step targets
Q_DEFAULTS = {**offline.DEFAULTS, "activation": "relu", "q": {"td_lambda": 0.0}}

SPEC = AlgorithmSpec(
    AlgorithmSchema(
        "iql_cql",
        "independent Q-learners with CQL's conservative penalty, from an offline dataset (offline.dataset=PATH)",
        {"offline": offline.OfflineConfig, "q": QConfig, "cql": CQLConfig},
        defaults=Q_DEFAULTS,
        supports=Supports(recurrent=False),
        check=check_q,
    ),
    build,
    ("loss_total", "grad_norm", "q_mean"),
)
