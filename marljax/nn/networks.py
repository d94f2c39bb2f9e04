"""Flax actor-critic networks and the action distributions they emit.

* `ActorCritic`: feed-forward actor and critic (separate torsos, as in JaxMARL's
  IPPO), masked categorical head for Discrete actions, diagonal Gaussian for Box.
* `RecurrentActorCritic`: an embedding, a GRU whose hidden state resets where
  `reset` is true (the observation starts a new episode), then the two heads.
* `QNetwork` / `RecurrentQNetwork`: per-agent action values for the Q-learning family, with
  LayerNorm in every hidden layer.
* The torso is an MLP, or a small CNN for image-like `[H, W, C]` observations.

Both take an optional agent-id one-hot that is joined to the torso's features.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
_NEG = -1e9  # logit for an unavailable action (finite, so gradients stay finite)


# ------------------------------------------------------------------ distributions
class Categorical(NamedTuple):
    """Categorical over the last axis; unavailable actions carry `_NEG` logits."""

    logits: Array  # [..., n]

    @staticmethod
    def masked(logits: Array, mask: Array | None) -> "Categorical":
        if mask is not None:
            logits = jnp.where(mask, logits, _NEG)
        return Categorical(jax.nn.log_softmax(logits, axis=-1))

    def sample(self, key: Array) -> Array:
        return jax.random.categorical(key, self.logits, axis=-1)

    def log_prob(self, action: Array) -> Array:
        return jnp.take_along_axis(self.logits, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> Array:
        p = jnp.exp(self.logits)
        return -jnp.sum(jnp.where(p > 0, p * self.logits, 0.0), axis=-1)

    def mode(self) -> Array:
        return jnp.argmax(self.logits, axis=-1)


class DiagGaussian(NamedTuple):
    mean: Array  # [..., d]
    log_std: Array  # [..., d] (broadcast to the mean's shape)

    def sample(self, key: Array) -> Array:
        return self.mean + jnp.exp(self.log_std) * jax.random.normal(key, self.mean.shape)

    def log_prob(self, action: Array) -> Array:
        z = (action - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * z**2 - self.log_std - 0.5 * np.log(2 * np.pi), axis=-1)

    def entropy(self) -> Array:
        ent = self.log_std + 0.5 * (1.0 + np.log(2 * np.pi))
        return jnp.sum(jnp.broadcast_to(ent, self.mean.shape), axis=-1)

    def mode(self) -> Array:
        return self.mean


Distribution = Categorical | DiagGaussian


# ------------------------------------------------------------------------ modules
def _act(name: str):
    return {"tanh": nn.tanh, "relu": nn.relu}[name]


def orthogonal(scale: float = 1.0):
    """Orthogonal initializer that stays unbatched under `vmap` (e.g. over seeds).

    flax's orthogonal init calls LAPACK's QR. Batched over seeds, jaxlib's CPU QR kernel
    splits the batch over XLA's thread pool and can wait forever for those tasks (seen on a
    2-core machine with 2 vmapped seeds). `sequential_vmap` runs one QR per seed instead.
    """
    base = nn.initializers.orthogonal(scale)

    def init(key, shape, dtype=jnp.float32):
        return jax.custom_batching.sequential_vmap(lambda k: base(k, shape, dtype))(key)

    return init


def _dense(features: int, scale: float) -> nn.Dense:
    return nn.Dense(features, kernel_init=orthogonal(scale), bias_init=nn.initializers.zeros)


class CNNEncoder(nn.Module):
    """Small conv torso for `[B, H, W, C]` observations -> `[B, F]`."""

    channels: Sequence[int] = (32, 32)
    activation: str = "relu"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        act = _act(self.activation)
        for c in self.channels:
            x = act(nn.Conv(c, (3, 3), padding="SAME", kernel_init=orthogonal(np.sqrt(2)))(x))
        return x.reshape(x.shape[0], -1)


class MLP(nn.Module):
    hidden_size: int
    num_layers: int
    activation: str

    @nn.compact
    def __call__(self, x: Array) -> Array:
        for _ in range(self.num_layers):
            x = _act(self.activation)(_dense(self.hidden_size, np.sqrt(2))(x))
        return x


class Head(nn.Module):
    """Policy head: logits (Discrete) or a Gaussian mean with a learned log-std (Box)."""

    discrete: bool
    action_dim: int

    @nn.compact
    def __call__(self, x: Array, mask: Array | None) -> Distribution:
        out = _dense(self.action_dim, 0.01)(x)
        if self.discrete:
            return Categorical.masked(out, mask)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        return DiagGaussian(out, jnp.broadcast_to(log_std, out.shape))


def _features(obs: Array, agent_id: Array | None, cnn: bool, activation: str, name: str) -> Array:
    x = CNNEncoder(activation=activation, name=f"{name}_cnn")(obs) if cnn else obs.reshape(obs.shape[0], -1)
    return x if agent_id is None else jnp.concatenate([x, agent_id], axis=-1)


class ActorCritic(nn.Module):
    """Feed-forward actor and critic. obs [B, *obs_shape] -> (dist over [B], value [B]).

    `critic=False` builds the actor alone (value is zeros): MAPPO's critic lives elsewhere.
    """

    discrete: bool
    action_dim: int
    hidden_size: int = 64
    num_layers: int = 2
    activation: str = "tanh"
    cnn: bool = False
    critic: bool = True

    @nn.compact
    def __call__(self, obs: Array, agent_id: Array | None = None, mask: Array | None = None):
        mlp = lambda name: MLP(self.hidden_size, self.num_layers, self.activation, name=name)  # noqa: E731
        actor_x = mlp("actor")(_features(obs, agent_id, self.cnn, self.activation, "actor"))
        dist = Head(self.discrete, self.action_dim, name="pi")(actor_x, mask)
        if not self.critic:
            return dist, jnp.zeros(obs.shape[:1], jnp.float32)
        critic_x = mlp("critic")(_features(obs, agent_id, self.cnn, self.activation, "critic"))
        return dist, _dense(1, 1.0)(critic_x)[:, 0]


class Critic(nn.Module):
    """State-value MLP: x [B, F] -> value [B] (MAPPO's centralised critic)."""

    hidden_size: int = 64
    num_layers: int = 2
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        return _dense(1, 1.0)(MLP(self.hidden_size, self.num_layers, self.activation)(x))[:, 0]


class RecurrentActorCritic(nn.Module):
    """GRU actor-critic, one time step: (h [B, H], obs [B, ...], reset [B]) -> (h', dist, value)."""

    discrete: bool
    action_dim: int
    hidden_size: int = 64
    gru_hidden_size: int = 128
    activation: str = "relu"
    cnn: bool = False
    critic: bool = True  # False: the actor alone (value is zeros), as for MAPPO

    @nn.compact
    def __call__(self, h: Array, obs: Array, reset: Array, agent_id: Array | None = None, mask: Array | None = None):
        x = _features(obs, agent_id, self.cnn, self.activation, "embed")
        x = _act(self.activation)(_dense(self.gru_hidden_size, np.sqrt(2))(x))
        h = jnp.where(reset[:, None], jnp.zeros_like(h), h)
        h, x = nn.GRUCell(self.gru_hidden_size, recurrent_kernel_init=orthogonal(), name="gru")(h, x)
        actor_x = _act(self.activation)(_dense(self.hidden_size, np.sqrt(2))(x))
        dist = Head(self.discrete, self.action_dim, name="pi")(actor_x, mask)
        if not self.critic:
            return h, dist, jnp.zeros(obs.shape[:1], jnp.float32)
        critic_x = _act(self.activation)(_dense(self.hidden_size, np.sqrt(2))(x))
        return h, dist, _dense(1, 1.0)(critic_x)[:, 0]


class QNetwork(nn.Module):
    """Per-agent action values, PQN style: MLP with LayerNorm before each activation.
    obs [B, *obs_shape] (+ one-hot id) -> q [B, action_dim]."""

    action_dim: int
    hidden_size: int = 64
    num_layers: int = 2
    activation: str = "relu"
    cnn: bool = False

    @nn.compact
    def __call__(self, obs: Array, agent_id: Array | None = None) -> Array:
        x = _features(obs, agent_id, self.cnn, self.activation, "q")
        for _ in range(self.num_layers):
            x = _normed(x, self.hidden_size, self.activation)
        return _dense(self.action_dim, 1.0)(x)


class RecurrentQNetwork(nn.Module):
    """GRU action values, one time step: (h [B, H], obs [B, ...], reset [B]) -> (h', q [B, action_dim]).

    A LayerNorm'd embedding, a GRU whose state resets where `reset` is true (the observation
    starts a new episode), then a LayerNorm'd layer and the value head."""

    action_dim: int
    hidden_size: int = 64
    gru_hidden_size: int = 128
    activation: str = "relu"
    cnn: bool = False

    @nn.compact
    def __call__(self, h: Array, obs: Array, reset: Array, agent_id: Array | None = None):
        x = _normed(_features(obs, agent_id, self.cnn, self.activation, "q"), self.hidden_size, self.activation)
        h = jnp.where(reset[:, None], jnp.zeros_like(h), h)
        h, x = nn.GRUCell(self.gru_hidden_size, recurrent_kernel_init=orthogonal(), name="gru")(h, x)
        return h, _dense(self.action_dim, 1.0)(_normed(x, self.hidden_size, self.activation))


def _normed(x: Array, features: int, activation: str) -> Array:
    """Dense -> LayerNorm -> activation: PQN's layer, which keeps bootstrapped targets stable."""
    return _act(activation)(nn.LayerNorm()(_dense(features, np.sqrt(2))(x)))
