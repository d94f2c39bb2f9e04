"""Value-decomposition mixers for the Q-learning family: VDN's sum and QMIX's monotonic mixer.

Both take per-agent chosen-action values `q [B, N]` and return the team value `[B]`. QMIX
conditions on the world state `[B, W]` through hypernetworks whose mixing weights pass
through `abs`, so dQ_tot/dQ_i >= 0 for every agent: the greedy joint action is each agent's
greedy action (the property that makes decentralised execution consistent).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from marljax.nn.networks import dense, einsum

Array = jax.Array


def vdn(q: Array) -> Array:
    """Q_tot = sum_i Q_i. q [B, N] -> [B]."""
    return jnp.sum(q, axis=-1)


class QMixer(nn.Module):
    """QMIX's mixer: a one-hidden-layer network over the agents' values with non-negative weights
    produced from the world state by hypernetworks."""

    embed_dim: int = 32  # the mixing layer's width
    hyper_hidden: int = 64  # hidden width of the hypernetworks for the weights
    dtype: str = "float32"  # the matmuls' compute dtype (marljax.nn.networks)

    @nn.compact
    def __call__(self, q: Array, world: Array) -> Array:
        """q [B, N] chosen-action values, world [B, W] -> Q_tot [B]."""
        n, Dense = q.shape[-1], lambda features: dense(features, self.dtype)  # noqa: E731
        world = nn.LayerNorm()(world)  # world states come unnormalised (SMAX: up to ~25)
        w1 = Dense(n * self.embed_dim)(nn.relu(Dense(self.hyper_hidden)(world)))  # [B, N*E]
        w1 = jnp.abs(w1).reshape(-1, n, self.embed_dim)
        b1 = Dense(self.embed_dim)(world)  # [B, E]
        hidden = nn.elu(einsum("bn,bne->be", q, w1, self.dtype) + b1)  # [B, E]
        w2 = jnp.abs(Dense(self.embed_dim)(nn.relu(Dense(self.hyper_hidden)(world))))  # [B, E]
        b2 = Dense(1)(nn.relu(Dense(self.embed_dim)(world)))[:, 0]  # [B]: V(s)
        return einsum("be,be->b", hidden, w2, self.dtype) + b2
