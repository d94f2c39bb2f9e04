"""Flax actor-critic networks and the action distributions they emit.

* `ActorCritic`: feed-forward actor and critic (separate torsos, as in JaxMARL's
  IPPO), masked categorical head for Discrete actions, diagonal Gaussian for Box.
* `RecurrentActorCritic`: an embedding, a GRU whose hidden state resets where
  `reset` is true (the observation starts a new episode), then the two heads.
* `QNetwork` / `RecurrentQNetwork`: per-agent action values for the Q-learning family, with
  LayerNorm (or batch norm, `BatchNorm`) in every hidden layer.
* The torso is an MLP, or a small CNN for image-like `[H, W, C]` observations.
* `dtype`: the compute dtype. "float32" (the default) leaves flax's own ops untouched. With
  "bfloat16" the MLP torsos' hidden layers compute and return bf16 (flax's `dtype`, parameters
  cast per call): their activations, and the gradients flowing back through them, travel in bf16,
  half the bytes per env step; every other matmul/conv (the heads, the GRU, the Q-networks' layers,
  the CNN) casts its two operands to bf16 and returns float32 (`preferred_element_type`).
  Parameters stay float32 (the master weights, and Adam's state with them), and every output
  (logits, values, Q-values), LayerNorm and the GRU's gates stay float32, so the losses, GAE,
  softmax and the optimizer all run in float32.

Both take an optional agent-id one-hot that is joined to the torso's features.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from marljax.nn.backend import choices

Array = jax.Array
_NEG = -1e9  # logit for an unavailable action (finite, so gradients stay finite)


# ------------------------------------------------------------------ distributions
class Categorical(NamedTuple):
    """Categorical over the last axis; unavailable actions carry `_NEG` logits."""

    logits: Array  # [..., n]

    @staticmethod
    def masked(logits: Array, mask: Array | None) -> Categorical:
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


def _low_precision(op: Callable, dtype: str) -> Callable | None:
    """`op` (lax.dot_general or lax.conv_general_dilated) with both operands cast to `dtype` and
    a float32 result (accumulated in float32); None for float32, so flax keeps its own op."""
    if dtype == "float32":
        return None
    low = jnp.dtype(dtype)

    def cast(lhs: Array, rhs: Array, *args, **kwargs) -> Array:
        kwargs["preferred_element_type"] = jnp.float32
        return op(lhs.astype(low), rhs.astype(low), *args, **kwargs)

    return cast


def dense(features: int, dtype: str = "float32", **kwargs) -> nn.Dense:
    """nn.Dense whose matmul runs in `dtype` (float32 parameters, bias and output)."""
    return nn.Dense(features, dot_general=_low_precision(lax.dot_general, dtype), **kwargs)


def einsum(spec: str, a: Array, b: Array, dtype: str = "float32") -> Array:
    """jnp.einsum of two operands, in `dtype` with a float32 result (as `dense`)."""
    if dtype == "float32":
        return jnp.einsum(spec, a, b)
    return jnp.einsum(spec, a.astype(dtype), b.astype(dtype), preferred_element_type=jnp.float32)


STATS = "batch_stats"  # the variable collection of BatchNorm's running statistics


BN_MOMENTUM = 0.99  # of every BatchNorm's running statistics (flax's default)


class BatchNorm(nn.Module):
    """Batch norm that learns its statistics only when asked to: applied with
    `mutable=["batch_stats"]` (a learning step) it normalises by the batch's own mean and variance
    (every axis but the last) and returns the running averages moved towards them (flax's
    `nn.BatchNorm`, momentum 0.99, epsilon 1e-5: JaxMARL's PQN and TransfQMix); applied without
    (acting, evaluation, targets) it normalises by the running averages. Its statistics live in the
    parameter tree's "batch_stats" collection beside "params"; the learner keeps them there and
    replaces them after each step (`marljax.algos.acting.with_stats`), so they need no other state."""

    @nn.compact
    def __call__(self, x: Array) -> Array:
        return nn.BatchNorm(
            use_running_average=not self.is_mutable_collection(STATS), momentum=BN_MOMENTUM, epsilon=1e-5
        )(x)


def normalise(x: Array, norm: str) -> Array:
    """x [..., F] through `norm`: layer_norm | batch_norm | none (inside a compact module)."""
    if norm == "layer_norm":
        return nn.LayerNorm()(x)
    return BatchNorm()(x) if norm == "batch_norm" else x


def _dense(features: int, scale: float, dtype: str = "float32") -> nn.Dense:
    return dense(features, dtype, kernel_init=orthogonal(scale), bias_init=nn.initializers.zeros)


def _hidden_dense(features: int, scale: float, dtype: str) -> nn.Dense:
    """A hidden layer whose output stays in `dtype` (bf16 activations end to end; float32
    parameters, cast per call): the same parameters as `_dense`'s, so checkpoints do not change."""
    if dtype == "float32":
        return _dense(features, scale)
    return nn.Dense(features, dtype=jnp.dtype(dtype), kernel_init=orthogonal(scale), bias_init=nn.initializers.zeros)


def _patch_conv(dtype: str) -> Callable:
    """A stand-in for `lax.conv_general_dilated` as nn.Conv calls it (NHWC input, HWIO kernel, stride
    1, "SAME" padding, no dilation or groups): the input's k x k neighbourhoods concatenated on the
    feature axis, then one matmul with the kernel flattened to `[k*k*C, F]`.

    Why not the convolution itself: where agents have parameters of their own, the algorithms vmap
    the network over the stacked parameters, and a vmapped kernel becomes a grouped convolution
    whose gradient XLA's CPU backend runs 6-10x slower than this matmul's (docs/performance.md
    section 2, the CNN torso); a batched matmul is what the per-agent Dense layers compile to. The parameters are nn.Conv's own,
    so checkpoints and initialisation are unchanged; the sums run in another order."""
    dot = _low_precision(lax.dot_general, dtype) or lax.dot_general

    def conv(
        lhs: Array,
        rhs: Array,
        window_strides,
        padding,
        lhs_dilation=None,
        rhs_dilation=None,
        dimension_numbers=None,
        feature_group_count=1,
        precision=None,
    ) -> Array:
        kh, kw, c, f = rhs.shape  # HWIO
        if padding != "SAME" or tuple(window_strides) != (1, 1) or feature_group_count != 1:
            raise NotImplementedError("_patch_conv: stride 1, SAME padding, one group only")
        if any(d != 1 for d in (*(lhs_dilation or ()), *(rhs_dilation or ()))):
            raise NotImplementedError("_patch_conv: no dilation")
        if dimension_numbers != lax.conv_dimension_numbers(lhs.shape, rhs.shape, ("NHWC", "HWIO", "NHWC")):
            raise NotImplementedError("_patch_conv: NHWC input and HWIO kernel only")
        _, h, w, _ = lhs.shape
        padded = jnp.pad(lhs, ((0, 0), ((kh - 1) // 2, kh // 2), ((kw - 1) // 2, kw // 2), (0, 0)))
        patches = jnp.concatenate(
            [padded[:, i : i + h, j : j + w, :] for i in range(kh) for j in range(kw)], axis=-1
        )  # [B, H, W, kh*kw*C], in the kernel's (i, j, c) order
        return dot(patches, rhs.reshape(kh * kw * c, f), (((3,), (0,)), ((), ())), precision=precision)  # [B, H, W, F]

    return conv


class CNNEncoder(nn.Module):
    """Small conv torso for `[B, H, W, C]` observations -> `[B, F]`."""

    channels: Sequence[int] = (32, 32)
    activation: str = "relu"
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        act = _act(self.activation)
        # the backend's choice (nn/backend.py): patches on a CPU, the convolution itself on a card
        conv = (
            _patch_conv(self.dtype)
            if choices().conv == "patch"
            else _low_precision(lax.conv_general_dilated, self.dtype)
        )
        for c in self.channels:
            x = act(
                nn.Conv(c, (3, 3), padding="SAME", kernel_init=orthogonal(np.sqrt(2)), conv_general_dilated=conv)(x)
            )
        return x.reshape(x.shape[0], -1)


class MLP(nn.Module):
    hidden_size: int
    num_layers: int
    activation: str
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        for _ in range(self.num_layers):
            x = _act(self.activation)(_hidden_dense(self.hidden_size, np.sqrt(2), self.dtype)(x))
        return x


class Head(nn.Module):
    """Policy head: logits (Discrete) or a Gaussian mean with a learned log-std (Box)."""

    discrete: bool
    action_dim: int
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x: Array, mask: Array | None) -> Distribution:
        out = _dense(self.action_dim, 0.01, self.dtype)(x)
        if self.discrete:
            return Categorical.masked(out, mask)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        return DiagGaussian(out, jnp.broadcast_to(log_std, out.shape))


def _features(obs: Array, agent_id: Array | None, cnn: bool, activation: str, name: str, dtype: str) -> Array:
    x = (
        CNNEncoder(activation=activation, dtype=dtype, name=f"{name}_cnn")(obs)
        if cnn
        else obs.reshape(obs.shape[0], -1)
    )
    return x if agent_id is None else jnp.concatenate([x, agent_id], axis=-1)


class GRUCell(nn.Module):
    """A GRU step, (h [B, H], x [B, F]) -> (h', h'), the equations and parameters of flax's
    `nn.GRUCell` (kernels ir, iz, in on the input with biases; hr, hz, hn on the state, only hn
    with a bias; orthogonal recurrent kernels), written out so that its matmuls take `dtype`
    (flax's cell builds its Dense layers without a matmul hook). The gates stay float32."""

    features: int
    dtype: str = "float32"

    @nn.compact
    def __call__(self, h: Array, x: Array) -> tuple[Array, Array]:
        def layer(name: str, on_input: bool) -> nn.Dense:
            init = nn.initializers.lecun_normal() if on_input else orthogonal()
            return dense(
                self.features,
                self.dtype,
                use_bias=on_input or name == "hn",
                kernel_init=init,
                bias_init=nn.initializers.zeros,
                name=name,
            )

        r = nn.sigmoid(layer("ir", True)(x) + layer("hr", False)(h))
        z = nn.sigmoid(layer("iz", True)(x) + layer("hz", False)(h))
        n = nn.tanh(layer("in", True)(x) + r * layer("hn", False)(h))
        h = (1.0 - z) * n + z * h
        return h, h


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
    dtype: str = "float32"  # the matmuls' compute dtype (module docstring)

    @nn.compact
    def __call__(self, obs: Array, agent_id: Array | None = None, mask: Array | None = None):
        mlp = lambda name: MLP(self.hidden_size, self.num_layers, self.activation, self.dtype, name=name)  # noqa: E731
        actor_x = mlp("actor")(_features(obs, agent_id, self.cnn, self.activation, "actor", self.dtype))
        dist = Head(self.discrete, self.action_dim, self.dtype, name="pi")(actor_x, mask)
        if not self.critic:
            return dist, jnp.zeros(obs.shape[:1], jnp.float32)
        critic_x = mlp("critic")(_features(obs, agent_id, self.cnn, self.activation, "critic", self.dtype))
        return dist, _dense(1, 1.0, self.dtype)(critic_x)[:, 0]


class Critic(nn.Module):
    """State-value MLP: x [B, F] -> value [B] (MAPPO's centralised critic)."""

    hidden_size: int = 64
    num_layers: int = 2
    activation: str = "tanh"
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        x = MLP(self.hidden_size, self.num_layers, self.activation, self.dtype)(x)
        return _dense(1, 1.0, self.dtype)(x)[:, 0]


class RecurrentActorCritic(nn.Module):
    """GRU actor-critic, one time step: (h [B, H], obs [B, ...], reset [B]) -> (h', dist, value)."""

    discrete: bool
    action_dim: int
    hidden_size: int = 64
    gru_hidden_size: int = 128
    activation: str = "relu"
    cnn: bool = False
    critic: bool = True  # False: the actor alone (value is zeros), as for MAPPO
    dtype: str = "float32"

    @nn.compact
    def __call__(self, h: Array, obs: Array, reset: Array, agent_id: Array | None = None, mask: Array | None = None):
        dense = lambda features, scale=np.sqrt(2): _dense(features, scale, self.dtype)  # noqa: E731, B008 (the default is a float)
        x = _features(obs, agent_id, self.cnn, self.activation, "embed", self.dtype)
        x = _act(self.activation)(dense(self.gru_hidden_size)(x))
        h = jnp.where(reset[:, None], jnp.zeros_like(h), h)
        h, x = GRUCell(self.gru_hidden_size, self.dtype, name="gru")(h, x)
        actor_x = _act(self.activation)(dense(self.hidden_size)(x))
        dist = Head(self.discrete, self.action_dim, self.dtype, name="pi")(actor_x, mask)
        if not self.critic:
            return h, dist, jnp.zeros(obs.shape[:1], jnp.float32)
        critic_x = _act(self.activation)(dense(self.hidden_size)(x))
        return h, dist, dense(1, 1.0)(critic_x)[:, 0]


class QNetwork(nn.Module):
    """Per-agent action values, PQN style: MLP with LayerNorm before each activation (`norm`:
    batch_norm or none instead; `norm_input`: batch norm of the observation first). obs
    [B, *obs_shape] (+ one-hot id) -> q [B, action_dim]."""

    action_dim: int
    hidden_size: int = 64
    num_layers: int = 2
    activation: str = "relu"
    cnn: bool = False
    dtype: str = "float32"
    norm: str = "layer_norm"  # layer_norm | batch_norm | none
    dueling: bool = False  # values as V(s) + A(s, a) - mean_a A(s, a)
    init_scale: float = 0.0  # 0: orthogonal sqrt(2) hidden layers, 1 heads; > 0: every Dense orthogonal(init_scale)
    norm_input: bool = False  # batch norm of the observation (JaxMARL's NORM_INPUT)

    @nn.compact
    def __call__(self, obs: Array, agent_id: Array | None = None) -> Array:
        x = _features(
            BatchNorm()(obs) if self.norm_input else obs, agent_id, self.cnn, self.activation, "q", self.dtype
        )
        for _ in range(self.num_layers):
            x = _normed(x, self.hidden_size, self.activation, self.dtype, self.norm, self.init_scale or np.sqrt(2))
        head = _dense(self.action_dim, self.init_scale or 1.0, self.dtype)
        return _q_head(x, head, self.dueling, self.dtype, self.init_scale or 1.0)


class RecurrentQNetwork(nn.Module):
    """GRU action values, one time step: (h [B, H], obs [B, ...], reset [B]) -> (h', q [B, action_dim]).

    A LayerNorm'd embedding, a GRU whose state resets where `reset` is true (the observation
    starts a new episode), then a LayerNorm'd layer and the value head (`norm`, `norm_input`: as QNetwork's)."""

    action_dim: int
    hidden_size: int = 64
    gru_hidden_size: int = 128
    activation: str = "relu"
    cnn: bool = False
    dtype: str = "float32"
    norm: str = "layer_norm"
    dueling: bool = False
    init_scale: float = 0.0  # as QNetwork's (the GRU keeps its own initialisers)
    norm_input: bool = False

    @nn.compact
    def __call__(self, h: Array, obs: Array, reset: Array, agent_id: Array | None = None):
        hidden, out = self.init_scale or np.sqrt(2), self.init_scale or 1.0
        x = _features(
            BatchNorm()(obs) if self.norm_input else obs, agent_id, self.cnn, self.activation, "q", self.dtype
        )
        x = _normed(x, self.hidden_size, self.activation, self.dtype, self.norm, hidden)
        h = jnp.where(reset[:, None], jnp.zeros_like(h), h)
        h, x = GRUCell(self.gru_hidden_size, self.dtype, name="gru")(h, x)
        head = _dense(self.action_dim, out, self.dtype)  # named before the last layer, as it always was
        x = _normed(x, self.hidden_size, self.activation, self.dtype, self.norm, hidden)
        return h, _q_head(x, head, self.dueling, self.dtype, out)


def _q_head(x: Array, head: nn.Dense, dueling: bool, dtype: str, scale: float = 1.0) -> Array:
    """x [B, F] -> q [B, action_dim] from `head` (built by the caller where its parameter names stay
    what they were), or dueling: V + A - mean(A), head giving A (JaxMARL's PQN on Hanabi), V's
    kernel orthogonal(scale)."""
    adv = head(x)
    if not dueling:
        return adv
    return _dense(1, scale, dtype)(x) + adv - jnp.mean(adv, axis=-1, keepdims=True)


def _normed(
    x: Array, features: int, activation: str, dtype: str, norm: str = "layer_norm", scale: float = np.sqrt(2)
) -> Array:
    """Dense (orthogonal(scale)) -> LayerNorm (`norm`) -> activation: PQN's layer, which keeps bootstrapped
    targets stable."""
    return _act(activation)(normalise(_dense(features, scale, dtype)(x), norm))
