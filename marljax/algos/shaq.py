"""SHAQ: Shapley Q-learning (Wang et al. 2022, "SHAQ: Incorporating Shapley Value Theory into
Multi-Agent Q-Learning"), built on the replay-based Q-learners' pieces (`algos/qlearning.py`:
the replay buffer, the target network, double-Q and Q(lambda) targets, FF or GRU agents).

The agents' Q-networks are those of IQL/VDN/QMIX. The team value of the taken actions weighs
each agent's value by its Shapley-Q weight:

    Q_tot(s, a) = sum_i w_i Q_i(o_i, a_i),   w_i = 1 where a_i is agent i's greedy action, else alpha_i,
    alpha_i = 1 + mean over `shaq.sample_size` random orders of the agents of |f_s(q_C, Q_i)|,

where q_C is the mean value of the agents before i in the sampled order (its coalition; 0 when
empty) and f_s a one-hidden-layer network whose non-negative weights hypernetworks make from the
world state s (the alpha network, sized by `mixer.*`, learned at its own rate `shaq.lr_alpha`).
The bootstrap is the sum of the target network's double-Q values (alpha is 1 at greedy actions).
`shaq.manual_alpha` > 0 fixes every alpha to that value instead (the paper's Appendix C.4; 1 is VDN).

Differences from JaxMARL's shaq.py: the coalitions are drawn afresh at every gradient step (its
key is fixed when the mixer is built, so it reuses one draw), the greedy action is taken among the
available actions, the world state is LayerNorm'd as QMIX's mixer does (SMAX's is unnormalised),
and the hypernetworks run once per state rather than once per sampled coalition (same values).
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from marljax.algos import qlearning
from marljax.algos.api import Algorithm, AlgorithmSpec
from marljax.algos.mixers import MixerConfig
from marljax.algos.q_acting import QConfig
from marljax.algos.qlearning import MPE_TARGETS, REPLAY_DEFAULTS, ReplayConfig, TeamValue
from marljax.config import AlgorithmSchema, Config, Supports
from marljax.envs.adapter import EnvAdapter
from marljax.nn.networks import dense, einsum, orthogonal
from marljax.parallel.layouts import Layout
from marljax.schema import ConfigError, setting

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class ShaqConfig:
    """`shaq.*`: the Shapley-Q weights of the agents' values."""

    sample_size: int = setting(
        5,
        "random orders of the agents sampled per step to estimate each agent's alpha",
        minimum=1,
        jaxmarl="SAMPLE_SIZE",
    )
    lr_alpha: float = setting(
        1e-3, "the alpha network's learning rate (on lr's schedule; lr is the agents')", above=0.0, jaxmarl="LR_ALPHA"
    )
    manual_alpha: float = setting(
        0.0,
        "0: alpha learned by the alpha network; > 0: every non-greedy agent's alpha "
        "fixed to this (no alpha network; 1 is VDN)",
        minimum=0.0,
        jaxmarl="MANUAL_ALPHA_ESTIMATES",
    )

    def check(self, config: Config) -> None:
        if 0.0 < self.manual_alpha < 1.0:
            raise ConfigError(
                "shaq.manual_alpha",
                f"alpha is at least 1 (the paper's range); allowed: 0 (learned) or >= 1, got {self.manual_alpha}",
            )


def coalition_inputs(q: Array, key: Array, samples: int) -> Array:
    """The alpha network's inputs: q [B, N] -> [B, S, N, 2], for each of S random orders of the
    agents and each agent i, (mean value of the agents before i, 0 when none; Q_i)."""
    order = jax.random.uniform(key, (q.shape[0], samples, q.shape[1]))  # [B, S, N]: agent j's place in the order
    before = (order[:, :, None, :] < order[:, :, :, None]).astype(q.dtype)  # [B, S, N(i), N(j)]: j precedes i
    count = jnp.sum(before, axis=-1)  # [B, S, N]
    mean = jnp.einsum("bsij,bj->bsi", before, q) / jnp.maximum(count, 1.0)  # [B, S, N]
    return jnp.stack([mean, jnp.broadcast_to(q[:, None, :], mean.shape)], axis=-1)


class AlphaNetwork(nn.Module):
    """alpha - 1 per agent: the mean over sampled coalitions of |f_s(q_C, Q_i)|, where f_s is a
    one-hidden-layer network on the two inputs whose non-negative weights (and biases) come from
    hypernetworks of the world state (as QMIX's mixer makes its weights)."""

    embed_dim: int = 32  # f's hidden width
    hyper_hidden: int = 64  # the hypernetworks' hidden width
    dtype: str = "float32"
    init_scale: float = 0.0  # 0: flax's default kernels; > 0: orthogonal(init_scale), zero biases

    @nn.compact
    def __call__(self, x: Array, world: Array) -> Array:
        """x [B, S, N, 2] (`coalition_inputs`), world [B, W] -> [B, N] >= 0."""
        init = (
            {}
            if self.init_scale == 0
            else {"kernel_init": orthogonal(self.init_scale), "bias_init": nn.initializers.zeros}
        )
        E, Dense = self.embed_dim, lambda features: dense(features, self.dtype, **init)  # noqa: E731
        world = nn.LayerNorm()(world)
        w1 = jnp.abs(Dense(2 * E)(nn.relu(Dense(self.hyper_hidden)(world)))).reshape(-1, 2, E)  # [B, 2, E]
        b1 = Dense(E)(world)  # [B, E]
        w2 = jnp.abs(Dense(E)(nn.relu(Dense(self.hyper_hidden)(world))))  # [B, E]
        b2 = Dense(1)(nn.relu(Dense(E)(world)))  # [B, 1]
        hidden = nn.elu(einsum("bsnk,bke->bsne", x, w1, self.dtype) + b1[:, None, None, :])  # [B, S, N, E]
        y = einsum("bsne,be->bsn", hidden, w2, self.dtype) + b2[:, :, None]  # [B, S, N]
        return jnp.mean(jnp.abs(y), axis=1)


def shapley_team(config: Config) -> TeamValue:
    """SHAQ's team value for `qlearning.build`: Q_tot = sum_i w_i Q_i, w_i = 1 at the greedy
    action, alpha_i elsewhere; the bootstrap is the sum of the next double-Q values."""
    shaq, mix = config.section(ShaqConfig), config.section(MixerConfig)
    net = AlphaNetwork(mix.embed_dim, mix.hyper_hidden, config.dtype, mix.init_scale)
    S = shaq.sample_size

    def alpha(params, values: Array, world: Array, key: Array) -> Array:
        """values, [B, T, N]; world [B, T, W] -> alpha [B, T, N] >= 1."""
        if shaq.manual_alpha > 0:
            return jnp.full(values.shape, shaq.manual_alpha, values.dtype)
        B, T, N = values.shape
        x = coalition_inputs(values.reshape(B * T, N), key, S)  # [B*T, S, N, 2]
        return 1.0 + cast(Array, net.apply(params, x, world.reshape(B * T, -1))).reshape(B, T, N)

    def value(params, taken: Array, world: Array | None, greedy: Array, key: Array) -> Array:
        """taken [B, T, N], greedy [B, T, N] bool -> Q_tot [B, T]."""
        a = alpha(params, taken, cast(Array, world), key)
        return jnp.sum(jnp.where(greedy, 1.0, a) * taken, axis=-1)

    def target(params, nxt: Array, world: Array | None) -> Array:
        """The next steps' double-Q values [B, T, N] -> [B, T]: every agent greedy, every weight 1."""
        return jnp.sum(nxt, axis=-1)

    if shaq.manual_alpha > 0:  # no alpha network: neither its parameters nor the world state
        return TeamValue(False, value, target)

    def init(key: Array, q: Array, world: Array) -> Any:
        return net.init(key, coalition_inputs(q, key, S), world)

    return TeamValue(True, value, target, init, shaq.lr_alpha)


def build(config: Config, env: EnvAdapter, *, layout: Layout = Layout(), correction: str = "none") -> Algorithm:
    """qlearning's pieces (replay, target network, agents) with SHAQ's team value."""
    return qlearning.build(config, env, layout=layout, correction=correction, team=shapley_team(config))


SPEC = AlgorithmSpec(
    AlgorithmSchema(
        "shaq",
        "SHAQ: Shapley-Q weights on the agents' Q-values, alpha learned over sampled coalitions (replay, target network)",
        {"q": QConfig, "replay": ReplayConfig, "mixer": MixerConfig, "shaq": ShaqConfig},
        # the replay family's defaults (qlearning._spec), which learn on MPE_simple_spread_v3 in 1M steps
        defaults={
            **REPLAY_DEFAULTS,
            "gamma": 0.9,
            "q": {"eps_decay_steps": 200_000},
        },
        supports=Supports(agent_axis=True),
        family_defaults={"mpe": MPE_TARGETS},
    ),
    build,
    ("loss_total", "grad_norm", "lr", "q_mean"),
)
