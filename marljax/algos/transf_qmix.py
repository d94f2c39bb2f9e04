"""TransfQMix (Gallici et al. 2023, "TransfQMix: Transformers for Leveraging the Graph Structure of
Multi-Agent Reinforcement Learning Problems"), built on the replay-based Q-learners' pieces
(`algos/qlearning.py`: replay buffer, target network, double-Q and Q(lambda) targets).

* Agents: a transformer over the entities an agent observes (`marljax.envs.entities`: its flat
  observation as [n_e, F]) and one more token, its hidden state h_{t-1} (zeros where an episode
  starts); the token's output is h_t, the recurrent state, and Q(o_t, .) = Dense(h_t). So the
  agents are recurrent by construction (`recurrent=true`; `hidden_size` is the transformer's
  width and the hidden state's). Entities an agent cannot see (SMAX: all-zero rows) are masked.
* Mixer: a transformer over a learned token, the world state's entities [n_s, F_s] and the N
  agents' hidden states h_t. The agents' outputs give the mixing weights W1 = |.| [N, H], the
  token's output z gives b1 = z, w2 = |z| / H and b2 = Dense(relu(z)):
  Q_tot = w2 . elu(q W1 + b1) + b2, monotonic in every agent's value as QMIX's.
  The mixer reads h_t without training the agents through it (`qlearning` stops that gradient,
  as JaxMARL's script does): they learn from their values only.

Normalisation: LayerNorm after the entity embedding (`transf.embed_norm=batch_norm`: batch norm, as
JaxMARL's), and `transf.scale_inputs`: batch norm of the raw entity features first (JaxMARL's
SCALE_INPUTS), both in the agents and the mixer. Batch norm learns its running statistics in the
learning steps (`marljax.nn.networks.BatchNorm`); acting and the target network use them. A learning
sequence's steps are normalised by the moments of the whole sequence as one batch (the agents' norms
all precede their hidden state: `norms_before_state`, `q_acting.unroll`), as JaxMARL's are.

Differences from JaxMARL's transf_qmix.py: LayerNorm after the entity embedding by default (its
batch norm with `transf.embed_norm=batch_norm`; a JaxMARL file translates to that), softmax
attention by default (`transf.fast_attention=true`: its "fast attention", relu linear attention,
with the mask honoured where it ignores it), the layers' outputs not doubled (it adds x to x after
each norm), w2 scaled by 1/H (the mixer starts near the agents' sum rather than H times it), the
mixer's token learned and not carried over time, the target network normalising with its own
batch statistics (its uses the online network's), a spread agent's own row carrying its velocity,
and the agents' Q-values all from h_t (its SMAX agent values attacks from the enemies' embeddings).
Its script resets every environment after each update: `replay.reset_each_update`, which a JaxMARL
file and the MPE family's defaults (`JAXMARL_SPREAD`) turn on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from marljax.algos import qlearning
from marljax.algos.acting import GroupNetworks
from marljax.algos.api import Algorithm, AlgorithmSpec
from marljax.algos.q_acting import QConfig
from marljax.algos.qlearning import REPLAY_DEFAULTS, ReplayConfig, TeamValue
from marljax.config import AlgorithmSchema, Config, Supports
from marljax.envs.adapter import EnvAdapter
from marljax.envs.entities import EntityView, entity_view
from marljax.nn.networks import STATS, BatchNorm, dense, normalise, orthogonal
from marljax.parallel.layouts import Layout
from marljax.schema import ConfigError, setting

Array = jax.Array
XAVIER = nn.initializers.xavier_uniform()


@dataclasses.dataclass(frozen=True)
class TransfConfig:
    """`transf.*`: TransfQMix's transformers (`hidden_size` is their width)."""

    agent_layers: int = setting(2, "transformer layers of an agent", minimum=1, jaxmarl="AGENT_TRANSF_NUM_LAYERS")
    agent_heads: int = setting(
        8, "attention heads of an agent (must divide hidden_size)", minimum=1, jaxmarl="AGENT_TRANSF_NUM_HEADS"
    )
    agent_ff: int = setting(128, "feed-forward width of an agent's layers", minimum=1, jaxmarl="AGENT_TRANSF_DIM_FF")
    mixer_layers: int = setting(2, "transformer layers of the mixer", minimum=1, jaxmarl="MIXER_TRANSF_NUM_LAYERS")
    mixer_heads: int = setting(
        8, "attention heads of the mixer (must divide hidden_size)", minimum=1, jaxmarl="MIXER_TRANSF_NUM_HEADS"
    )
    mixer_ff: int = setting(128, "feed-forward width of the mixer's layers", minimum=1, jaxmarl="MIXER_TRANSF_DIM_FF")
    relu_embed: bool = setting(True, "relu on the entity embeddings", jaxmarl="EMBEDDER_USE_RELU")
    mixer_init_scale: float = setting(
        1.0, "orthogonal scale of the mixer's embedding and its b2 layer", above=0.0, jaxmarl="MIXER_INIT_SCALE"
    )
    embed_norm: str = setting(
        "layer_norm",
        "normalisation of the entity embeddings: layer_norm | batch_norm (JaxMARL's)",
        choices=("layer_norm", "batch_norm"),
    )
    scale_inputs: bool = setting(
        False, "batch norm of the raw entity features before the embedding", jaxmarl="SCALE_INPUTS"
    )
    fast_attention: bool = setting(
        False,
        "linear attention with relu features (JaxMARL's USE_FAST_ATTENTION) instead of softmax attention",
        jaxmarl="USE_FAST_ATTENTION",
    )

    def check(self, config: Config) -> None:
        if not config.recurrent:
            raise ConfigError(
                "recurrent",
                "transf_qmix's agents are recurrent (their hidden state is a token of the transformer); allowed: true",
            )
        for key in ("agent_heads", "mixer_heads"):
            if config.hidden_size % getattr(self, key):
                raise ConfigError(
                    f"transf.{key}",
                    f"must divide hidden_size={config.hidden_size} (the transformer's width); got {getattr(self, key)}",
                )
        if config.gru_hidden_size != config.hidden_size:  # evaluation and export size the recurrent state by it
            raise ConfigError(
                "gru_hidden_size",
                f"transf_qmix's hidden state is a token of the transformer: set it "
                f"to hidden_size={config.hidden_size}, got {config.gru_hidden_size}",
            )


RELU_FEATURE_FLOOR = 1e-3  # added to every relu feature, so no query's weights all vanish (JaxMARL's kernel_epsilon)


def relu_linear_attention(query: Array, key: Array, value: Array, mask: Array | None = None) -> Array:
    """Linear attention with the feature map phi(x) = relu(x) + 1e-3 (no 1/sqrt(d) scaling):
    out_i = sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j), over the keys `mask` lets through.
    What JaxMARL's USE_FAST_ATTENTION computes (its Performer code with deterministic features and
    renormalisation), except that the mask is honoured here (it ignores it). Costs O(L d^2), not O(L^2 d).

    query [B, L, heads, d], key [B, S, heads, d], value [B, S, heads, dv], mask broadcastable to
    [B, heads, L, S] and the same for every query (key padding) -> [B, L, heads, dv]."""
    phi_q = nn.relu(query) + RELU_FEATURE_FLOOR
    phi_k = nn.relu(key) + RELU_FEATURE_FLOOR  # [B, S, heads, d]
    if mask is not None:
        keys = jnp.broadcast_to(mask, (*mask.shape[:-1], key.shape[1]))[..., 0, :]  # [B, heads | 1, S]
        phi_k = phi_k * jnp.moveaxis(keys, -1, -2)[..., None].astype(phi_k.dtype)
    # One [heads*d, heads*dv] product per batch row, its cross-head blocks zeroed, in place of a
    # product per (row, head): XLA:CPU runs 8x fewer tiny matmuls (docs/benchmarks.md).
    B, S, H, M = phi_k.shape  # noqa: N806
    L, D = query.shape[1], value.shape[-1]  # noqa: N806
    same_head = jnp.kron(jnp.eye(H, dtype=phi_k.dtype), jnp.ones((M, D), phi_k.dtype))  # [H*M, H*D]
    kv = jnp.einsum("bsi,bsj->bij", phi_k.reshape(B, S, H * M), value.reshape(B, S, H * D)) * same_head
    flat_q = phi_q.reshape(B, L, H * M)
    numerator = jnp.einsum("bli,bij->blj", flat_q, kv)  # [B, L, H*D]
    denominator = (flat_q * phi_k.sum(axis=1).reshape(B, 1, H * M)) @ same_head  # [B, L, H*D], per head
    return (numerator / denominator).reshape(B, L, H, D)


class Encoder(nn.Module):
    """A transformer encoder layer (post-norm): x + attention, LayerNorm, x + MLP, LayerNorm."""

    heads: int
    ff: int
    dtype: str = "float32"
    fast_attention: bool = False  # relu_linear_attention in place of softmax attention

    @nn.compact
    def __call__(self, x: Array, valid: Array | None = None) -> Array:
        """x [B, L, H], valid [B, L] (the keys attended to; None: all) -> [B, L, H]."""
        mask = None if valid is None else valid[:, None, None, :]  # [B, 1 head, 1 query, L keys]
        how = relu_linear_attention if self.fast_attention else nn.dot_product_attention  # (flax's default)
        att = nn.MultiHeadDotProductAttention(
            num_heads=self.heads, use_bias=False, kernel_init=XAVIER, attention_fn=how
        )(x, x, mask=mask)
        x = nn.LayerNorm()(x + att)
        mlp = dense(x.shape[-1], self.dtype, kernel_init=XAVIER)(
            nn.relu(dense(self.ff, self.dtype, kernel_init=XAVIER)(x))
        )
        return nn.LayerNorm()(x + mlp)


def _embed(
    x: Array,
    width: int,
    relu: bool,
    dtype: str,
    scale: float = 1.0,
    norm: str = "layer_norm",
    scale_inputs: bool = False,
) -> Array:
    """Entities [B, n, F] -> [B, n, H]: batch norm of the features (`scale_inputs`), Dense, relu
    (optional), `norm` (layer_norm | batch_norm)."""
    x = dense(width, dtype, kernel_init=orthogonal(scale), bias_init=nn.initializers.zeros)(
        BatchNorm()(x) if scale_inputs else x
    )
    return normalise(nn.relu(x) if relu else x, norm)


class TransformerQNetwork(nn.Module):
    """One agent's step, recurrent signature (marljax.algos.acting): (h [B, H], obs [B, D], reset [B],
    one-hot id [B, A] | None) -> (h' [B, H], q [B, action_dim])."""

    # its batch norms (the entity embedding's) all precede the hidden state: learning normalises a sequence's
    # steps by the whole sequence's moments (q_acting.unroll), as JaxMARL's embedder does
    norms_before_state: ClassVar[bool] = True

    action_dim: int
    width: int
    layers: int
    heads: int
    ff: int
    relu_embed: bool
    view: Callable[[Array], Array]  # obs [B, D] -> entities [B, n_e, F]
    dtype: str = "float32"
    init_scale: float = 1.0  # orthogonal scale of the entity embedding and the head (JaxMARL's AGENT_INIT_SCALE)
    norm: str = "layer_norm"  # of the entity embeddings (TransfConfig.embed_norm)
    scale_inputs: bool = False
    fast_attention: bool = False

    @nn.compact
    def __call__(self, h: Array, obs: Array, reset: Array, agent_id: Array | None = None) -> tuple[Array, Array]:
        ents = self.view(obs)  # [B, n_e, F]
        seen = jnp.any(ents != 0, axis=-1)  # [B, n_e]: SMAX zeroes the units an agent cannot see
        tokens = [jnp.where(reset[:, None], 0.0, h)[:, None]]  # the hidden state, zeros at an episode's start
        if agent_id is not None:  # shared parameters told apart by an id token
            tokens.append(dense(self.width, self.dtype)(agent_id)[:, None])
        embedded = _embed(ents, self.width, self.relu_embed, self.dtype, self.init_scale, self.norm, self.scale_inputs)
        x = jnp.concatenate([*tokens, embedded], axis=1)  # [B, L, H]
        valid = jnp.concatenate([jnp.ones((obs.shape[0], len(tokens)), bool), seen], axis=1)
        for _ in range(self.layers):
            x = Encoder(self.heads, self.ff, self.dtype, self.fast_attention)(x, valid)
        h = x[:, 0]
        q = dense(
            self.action_dim, self.dtype, kernel_init=orthogonal(self.init_scale), bias_init=nn.initializers.zeros
        )(h)
        return h, q


class TransformerMixer(nn.Module):
    """q [B, N], the agents' hidden states [B, N, H], world [B, W] -> Q_tot [B], monotonic in q."""

    width: int
    layers: int
    heads: int
    ff: int
    relu_embed: bool
    view: Callable[[Array], Array]  # world [B, W] -> entities [B, n_s, F_s]
    init_scale: float = 1.0
    dtype: str = "float32"
    norm: str = "layer_norm"
    scale_inputs: bool = False
    fast_attention: bool = False

    @nn.compact
    def __call__(self, q: Array, hs: Array, world: Array) -> Array:
        B, N = q.shape
        state = _embed(
            self.view(world), self.width, self.relu_embed, self.dtype, self.init_scale, self.norm, self.scale_inputs
        )  # [B, n_s, H]
        token = jnp.broadcast_to(self.param("token", nn.initializers.zeros, (self.width,)), (B, 1, self.width))
        x = jnp.concatenate([token, state, hs], axis=1)  # [B, 1 + n_s + N, H]
        for _ in range(self.layers):
            x = Encoder(self.heads, self.ff, self.dtype, self.fast_attention)(x)
        z, w1 = x[:, 0], jnp.abs(x[:, -N:])  # [B, H], [B, N, H]
        hidden = nn.elu(jnp.einsum("bn,bnh->bh", q, w1) + z)  # b1 = z
        b2 = dense(1, self.dtype, kernel_init=orthogonal(self.init_scale), bias_init=nn.initializers.zeros)(nn.relu(z))
        # w2 = |z| / H: the weights' entries are O(1) (post-norm outputs), so without the 1/H the team value
        # would start at ~H times the sum of the agents' values, and their gradients H times larger
        return jnp.einsum("bh,bh->b", hidden, jnp.abs(z)) / self.width + b2[:, 0]


def transformer_team(config: Config, view: EntityView) -> TeamValue:
    """TransfQMix's team value for `qlearning.build`: the transformer mixer on the agents' values,
    their hidden states and the world state's entities (the target network's at t + 1 for the bootstrap)."""
    c = config.section(TransfConfig)
    mixer = TransformerMixer(
        config.hidden_size,
        c.mixer_layers,
        c.mixer_heads,
        c.mixer_ff,
        c.relu_embed,
        view.world,
        c.mixer_init_scale,
        config.dtype,
        c.embed_norm,
        c.scale_inputs,
        c.fast_attention,
    )
    learns_stats = c.embed_norm == "batch_norm" or c.scale_inputs

    def mixed(params, values: Array, world: Array, hs: Array, learning: bool = False):
        """values [B, T, N], world [B, T, W], hs [B, T, N, H] -> [B, T] (`learning`: and the batch-norm
        statistics moved towards this batch's)."""
        B, T, N = values.shape
        inputs = (values.reshape(B * T, N), hs.reshape(B * T, N, -1), world.reshape(B * T, -1))
        if not learning:
            return cast(Array, mixer.apply(params, *inputs)).reshape(B, T)
        out, mutated = mixer.apply(params, *inputs, mutable=[STATS])
        return cast(Array, out).reshape(B, T), mutated[STATS]

    def value(params, taken: Array, world: Array | None, greedy: Array, key: Array, hs: Array):
        return mixed(params, taken, cast(Array, world), hs, learning=learns_stats)

    def target(params, nxt: Array, world: Array | None, hs: Array) -> Array:
        return mixed(params, nxt, cast(Array, world), hs)

    def init(key: Array, q: Array, world: Array, hs: Array) -> Any:
        return mixer.init(key, q, hs, world)

    return TeamValue(True, value, target, init, states=True, stats=learns_stats)


def agent_networks(config: Config, env: EnvAdapter, view: EntityView) -> GroupNetworks:
    """Every group's transformer Q-network; the recurrent state is the transformer's width."""
    c = config.section(TransfConfig)
    nets = {
        g.name: TransformerQNetwork(
            g.action_dim,
            config.hidden_size,
            c.agent_layers,
            c.agent_heads,
            c.agent_ff,
            c.relu_embed,
            view.obs,
            config.dtype,
            config.section(QConfig).init_scale or 1.0,
            c.embed_norm,
            c.scale_inputs,
            c.fast_attention,
        )
        for g in env.groups
    }
    return GroupNetworks(nets, config.param_sharing == "independent", config.agent_id, config.hidden_size)


def build(config: Config, env: EnvAdapter, *, layout: Layout = Layout(), correction: str = "none") -> Algorithm:
    """qlearning's pieces (replay, target network) with transformer agents and mixer."""
    view = entity_view(env)
    if view is None:
        raise ConfigError(
            "env",
            f"transf_qmix attends over entities, and marljax splits into entities the "
            f"observations of MPE simple_spread and SMAX (unit_list) only, not {env.name}'s",
        )
    return qlearning.build(
        config,
        env,
        layout=layout,
        correction=correction,
        team=transformer_team(config, view),
        agents=agent_networks(config, env, view),
    )


# MPE (spread): JaxMARL's transf_qmix_mpe.yaml as its script runs it (every environment reset after each
# update), with layer norm where it has batch norm. Seed 0, greedy return per agent: -14.64 at 600k env steps,
# -11.09 at 760k, where JaxMARL's own script reaches -14.79 and -13.02 (docs/guide/algorithms.md)
JAXMARL_SPREAD = {
    "num_envs": 8,
    "num_steps": 25,
    "adam_eps": 1e-6,
    "max_grad_norm": 10.0,
    "q": {"eps_decay_steps": 800_000, "td_lambda": 0.6},
    "replay": {"gradient_steps": 1, "target_update_interval": 200, "reset_each_update": True},
    "transf": {"fast_attention": True, "mixer_init_scale": 0.01, "relu_embed": False},
}

SPEC = AlgorithmSpec(
    AlgorithmSchema(
        "transf_qmix",
        "TransfQMix: transformer agents over observed entities and a transformer mixer (replay, target network)",
        {"q": QConfig, "replay": ReplayConfig, "transf": TransfConfig},
        defaults={
            **REPLAY_DEFAULTS,
            "gamma": 0.9,
            "q": {"eps_decay_steps": 200_000},
            "recurrent": True,
            "hidden_size": 32,
            "gru_hidden_size": 32,
            "agent_id": False,
        },
        supports=Supports(),
        family_defaults={"mpe": JAXMARL_SPREAD},
    ),
    build,
    ("loss_total", "grad_norm", "lr", "q_mean"),
)
