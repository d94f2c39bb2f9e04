"""Value-decomposition mixers for the Q-learning family: VDN's sum and QMIX's monotonic mixer.

Both take per-agent chosen-action values `q [B, N]` and return the team value `[B]`. QMIX
conditions on the world state `[B, W]` through hypernetworks whose mixing weights pass
through `abs`, so dQ_tot/dQ_i >= 0 for every agent: the greedy joint action is each agent's
greedy action (the property that makes decentralised execution consistent).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from marljax.nn.networks import dense, einsum, orthogonal
from marljax.schema import setting

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class MixerConfig:
    """`mixer.*`: QMIX's mixing network."""

    embed_dim: int = setting(32, "width of the mixing layer", minimum=1, jaxmarl="MIXER_EMBEDDING_DIM")
    hyper_hidden: int = setting(
        64,
        "hidden width of the hypernetworks that make the mixing weights",
        minimum=1,
        jaxmarl="MIXER_HYPERNET_HIDDEN_DIM",
    )
    init_scale: float = setting(
        0.0,
        "0: flax's default (lecun-normal) kernels; > 0: orthogonal kernels of this "
        "scale and zero biases in every layer of the mixer",
        minimum=0.0,
        jaxmarl="MIXER_INIT_SCALE",
    )


def vdn(q: Array) -> Array:
    """Q_tot = sum_i Q_i. q [B, N] -> [B]."""
    return jnp.sum(q, axis=-1)


class QMixer(nn.Module):
    """QMIX's mixer: a one-hidden-layer network over the agents' values with non-negative weights
    produced from the world state by hypernetworks."""

    embed_dim: int = 32  # the mixing layer's width
    hyper_hidden: int = 64  # hidden width of the hypernetworks for the weights
    dtype: str = "float32"  # the matmuls' compute dtype (marljax.nn.networks)
    init_scale: float = 0.0  # 0: flax's default kernels; > 0: orthogonal(init_scale), as JaxMARL's QMIX

    @nn.compact
    def __call__(self, q: Array, world: Array) -> Array:
        """q [B, N] chosen-action values, world [B, W] -> Q_tot [B]."""
        init = (
            {}
            if self.init_scale == 0
            else {"kernel_init": orthogonal(self.init_scale), "bias_init": nn.initializers.zeros}
        )
        n, Dense = q.shape[-1], lambda features: dense(features, self.dtype, **init)  # noqa: E731
        world = nn.LayerNorm()(world)  # world states come unnormalised (SMAX: up to ~25)
        w1 = Dense(n * self.embed_dim)(nn.relu(Dense(self.hyper_hidden)(world)))  # [B, N*E]
        w1 = jnp.abs(w1).reshape(-1, n, self.embed_dim)
        b1 = Dense(self.embed_dim)(world)  # [B, E]
        hidden = nn.elu(einsum("bn,bne->be", q, w1, self.dtype) + b1)  # [B, E]
        w2 = jnp.abs(Dense(self.embed_dim)(nn.relu(Dense(self.hyper_hidden)(world))))  # [B, E]
        b2 = Dense(1)(nn.relu(Dense(self.embed_dim)(world)))[:, 0]  # [B]: V(s)
        return einsum("be,be->b", hidden, w2, self.dtype) + b2


def qmixer(settings: MixerConfig, dtype: str) -> QMixer:
    """QMIX's mixer as `mixer.*` sizes it (QMIX's team value and MAICQ's critic mixer)."""
    return QMixer(settings.embed_dim, settings.hyper_hidden, dtype, settings.init_scale)
