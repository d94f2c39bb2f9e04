"""Sable's network (Mahjoub et al. 2024, "Sable: a Performant, Efficient and Scalable Sequence
Model for MARL"), feed-forward: one environment step's agents form a sequence of N tokens.

* **Encoder**: each agent's observation embedded (a layer per group: groups differ in
  observation size), then `num_blocks` blocks of full retention over the agents (every agent
  sees every agent) and a feed-forward layer; a value per agent from its encoded token.
* **Decoder**: autoregressive over the agents in a fixed order (groups as the env lists them,
  then agents): token i is the embedded action of agent i - 1 (a learned start token for the
  first), mixed by causal retention over the earlier tokens; then agent i's encoded observation
  queries them (causal cross-retention, the stream continuing from the observation), and a
  policy head per group reads the result: logits (Discrete actions) or a Gaussian's mean beside a
  learned log-std per action dimension (Box actions; `distribution` makes either one).

Training (`decode`) takes every agent's taken action at once, in chunks of `chunk` agents
(memory linear in N for a fixed chunk); acting (`decode_step`) runs one agent at a time with
the retention states as carry. Both give the same log-probabilities (tests/test_sable.py).

Recurrent (the `*_with_memory` methods): every retention also reads a memory of the earlier time
steps of its episode (`marljax.nn.retention`, decayed once per step), and returns it updated.
Learning replays a run of consecutive steps with `over_steps`: every layer on all its steps at once,
the memory's part as retention's chunked form over the steps (`retention.across_steps`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from marljax.nn.networks import Categorical, DiagGaussian, Distribution, dense, orthogonal
from marljax.nn.retention import MultiScaleRetention, decays, memory_after, zero_state

Array = jax.Array


class GroupShape(NamedTuple):
    """What the network needs to know of one agent group."""

    name: str
    size: int  # A_g
    obs_dim: int  # one agent's flattened observation
    num_actions: int  # Discrete: the number of actions; Box: the action vector's length
    discrete: bool = True


class FeedForward(nn.Module):
    embed_dim: int
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        x = nn.gelu(dense(2 * self.embed_dim, self.dtype, kernel_init=orthogonal(2**0.5))(x))
        return dense(self.embed_dim, self.dtype, kernel_init=orthogonal(0.01))(x)


class EncoderBlock(nn.Module):
    embed_dim: int
    num_heads: int
    dtype: str = "float32"

    def setup(self) -> None:
        self.norm_mix, self.norm_ff = nn.LayerNorm(), nn.LayerNorm()
        self.mix = MultiScaleRetention(self.embed_dim, self.num_heads, causal=False, dtype=self.dtype)
        self.ff = FeedForward(self.embed_dim, self.dtype)

    def __call__(self, x: Array) -> Array:  # [B, N, D]
        x = x + self.mix(self.norm_mix(x))
        return x + self.ff(self.norm_ff(x))

    def with_memory(self, memory: Array, x: Array) -> tuple[Array, Array]:
        """x [B, N, D] after the earlier steps' memory [B, H, dk, dv] -> (memory', [B, N, D])."""
        return self._wired(partial(self.mix.with_memory, memory), x)

    def over_steps(self, memory: Array, starts: Array, x: Array) -> tuple[Array, Array]:
        """`with_memory` over L steps at once (`MultiScaleRetention.over_steps`): x [L, E, N, D]."""
        return self._wired(partial(self.mix.over_steps, memory, starts), x)

    def _wired(self, mix: Callable, x: Array) -> tuple[Array, Array]:
        """The block around a retention that returns (its memory', its output)."""
        memory, mixed = mix(self.norm_mix(x))
        x = x + mixed
        return memory, x + self.ff(self.norm_ff(x))


class DecoderBlock(nn.Module):
    embed_dim: int
    num_heads: int
    chunk: int
    dtype: str = "float32"

    def setup(self) -> None:
        D, H = self.embed_dim, self.num_heads
        self.norm_self, self.norm_cross, self.norm_obs, self.norm_ff = (nn.LayerNorm() for _ in range(4))
        self.self_mix = MultiScaleRetention(D, H, causal=True, chunk=self.chunk, dtype=self.dtype)
        self.cross_mix = MultiScaleRetention(D, H, causal=True, chunk=self.chunk, dtype=self.dtype)
        self.ff = FeedForward(D, self.dtype)

    def __call__(self, x: Array, rep: Array) -> Array:  # x, rep [B, N, D]
        x = x + self.self_mix(self.norm_self(x))
        # the agent's own encoded observation asks the actions so far (MAT's decoder does the same):
        # the stream continues from rep, so each token knows its agent without a position code
        y = rep + self.cross_mix(self.norm_obs(rep), self.norm_cross(x))
        return y + self.ff(self.norm_ff(y))

    def _wired(self, mix_self: Callable, mix_cross: Callable, x: Array, rep: Array) -> tuple[tuple, Array]:
        """__call__'s wiring for one token or one step, each retention a callable returning
        (its state', its output): mix_self(x), mix_cross(queries, keys and values)."""
        s_self, mixed = mix_self(self.norm_self(x))
        x = x + mixed
        s_cross, mixed = mix_cross(self.norm_obs(rep), self.norm_cross(x))
        y = rep + mixed
        return (s_self, s_cross), y + self.ff(self.norm_ff(y))

    def step(self, state: tuple[Array, Array], x: Array, rep: Array) -> tuple[tuple[Array, Array], Array]:
        """One agent: x, rep [B, D]; state (self, cross), each [B, H, dk, dv]."""
        return self._wired(partial(self.self_mix.step, state[0]), partial(self.cross_mix.step, state[1]), x, rep)

    def zero_state(self, batch: int) -> tuple[Array, Array]:
        return self.self_mix.zero_state(batch), self.cross_mix.zero_state(batch)

    def with_memory(self, memory: tuple[Array, Array], x: Array, rep: Array) -> tuple[tuple[Array, Array], Array]:
        """As __call__ after the earlier steps' memory (self, cross), each [B, H, dk, dv] -> (memory', out)."""
        mix_self, mix_cross = (
            partial(self.self_mix.with_memory, memory[0]),
            partial(self.cross_mix.with_memory, memory[1]),
        )
        return self._wired(mix_self, mix_cross, x, rep)

    def over_steps(
        self, memory: tuple[Array, Array], starts: Array, x: Array, rep: Array
    ) -> tuple[tuple[Array, Array], Array]:
        """`with_memory` over L steps at once (`MultiScaleRetention.over_steps`): x, rep [L, E, N, D]."""
        mix_self = partial(self.self_mix.over_steps, memory[0], starts)
        mix_cross = partial(self.cross_mix.over_steps, memory[1], starts)
        return self._wired(mix_self, mix_cross, x, rep)

    def step_with_memory(self, state: tuple, memory: tuple[Array, Array], x: Array, rep: Array) -> tuple[tuple, Array]:
        """As `step` after the earlier steps' memory; state per retention (within, written)."""
        mix_self = partial(self.self_mix.step_with_memory, state[0], memory[0])
        mix_cross = partial(self.cross_mix.step_with_memory, state[1], memory[1])
        return self._wired(mix_self, mix_cross, x, rep)


def _head(features: int, embed_dim: int, scale: float, dtype: str) -> nn.Sequential:
    return nn.Sequential(
        [
            dense(embed_dim, dtype, kernel_init=orthogonal(2**0.5)),
            nn.gelu,
            nn.LayerNorm(),
            dense(features, dtype, kernel_init=orthogonal(scale)),
        ]
    )


class SableNetwork(nn.Module):
    groups: tuple[GroupShape, ...]
    embed_dim: int = 64
    num_blocks: int = 1
    num_heads: int = 1
    chunk: int = 64  # agents per chunk of the decoder's parallel form
    dtype: str = "float32"

    def setup(self) -> None:
        D, dt = self.embed_dim, self.dtype
        # no LayerNorm on the raw observation (MAT has one): it drops the vector's scale, which in MPE
        # is the distance to the landmarks, and learning on spread stalled with it
        self.obs_in = [nn.Sequential([dense(D, dt, kernel_init=orthogonal(2**0.5)), nn.gelu]) for _ in self.groups]
        self.encoder = [EncoderBlock(D, self.num_heads, dt) for _ in range(self.num_blocks)]
        self.norm_rep = nn.LayerNorm()
        self.value_out = [_head(1, D, 1.0, dt) for _ in self.groups]
        self.action_in = [
            nn.Sequential([dense(D, dt, use_bias=False, kernel_init=orthogonal(2**0.5)), nn.gelu]) for _ in self.groups
        ]
        self.start = self.param("start", nn.initializers.normal(0.02), (D,))
        self.decoder = [DecoderBlock(D, self.num_heads, self.chunk, dt) for _ in range(self.num_blocks)]
        self.norm_out = nn.LayerNorm()
        self.policy_out = [_head(g.num_actions, D, 0.01, dt) for g in self.groups]
        # Box groups: a state-independent log-std per action dimension, as the PPO family's Gaussian head
        self.log_std = {
            g.name: self.param(f"log_std_{g.name}", nn.initializers.zeros, (g.num_actions,))
            for g in self.groups
            if not g.discrete
        }

    def _split(self, x: Array) -> list[Array]:
        """[B, N, ...] -> one [B, A_g, ...] per group."""
        bounds = [sum(g.size for g in self.groups[:i]) for i in range(len(self.groups) + 1)]
        return [x[:, a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def _embed(self, obs: tuple[Array, ...]) -> Array:
        return jnp.concatenate([embed(o) for embed, o in zip(self.obs_in, obs, strict=True)], axis=1)

    def _values(self, x: Array) -> tuple[tuple[Array, ...], Array]:
        rep = self.norm_rep(x)
        return tuple(head(r)[..., 0] for head, r in zip(self.value_out, self._split(rep), strict=True)), rep

    def encode(self, obs: tuple[Array, ...]) -> tuple[tuple[Array, ...], Array]:
        """obs: per group [B, A_g, O_g] -> (values per group [B, A_g], encoded agents [B, N, D])."""
        x = self._embed(obs)
        for block in self.encoder:
            x = block(x)
        return self._values(x)

    def encode_with_memory(self, memory: tuple[Array, ...], obs: tuple[Array, ...]):
        """As `encode` after the earlier steps' memory (one [B, H, dk, dv] per block) ->
        (values, rep, memory')."""
        x, out = self._embed(obs), []
        for block, m in zip(self.encoder, memory, strict=True):
            m, x = block.with_memory(m, x)
            out.append(m)
        values, rep = self._values(x)
        return values, rep, tuple(out)

    def embed_action(self, group: int, action: Array) -> Array:
        """Group `group`'s actions, [...] int (Discrete) or [..., d] float (Box) -> their embedding [..., D]."""
        g = self.groups[group]
        return self.action_in[group](jax.nn.one_hot(action, g.num_actions) if g.discrete else action)

    def _tokens(self, rep: Array, actions: tuple[Array, ...]) -> Array:
        """The decoder's input: the start token, then every agent's taken action but the last [B, N, D]."""
        taken = jnp.concatenate([self.embed_action(i, a) for i, a in enumerate(actions)], axis=1)  # [B, N, D]
        start = jnp.broadcast_to(self.start, (rep.shape[0], 1, self.embed_dim))
        return jnp.concatenate([start, taken[:, :-1]], axis=1)

    def _policy(self, group: int, x: Array) -> Array:
        """One group's policy output from its decoded tokens [..., D] (after norm_out): logits
        [..., n] (Discrete) or the Gaussian's mean and log-std side by side [..., 2d] (Box)."""
        g, out = self.groups[group], self.policy_out[group](x)
        if g.discrete:
            return out
        return jnp.concatenate([out, jnp.broadcast_to(self.log_std[g.name], out.shape).astype(out.dtype)], axis=-1)

    def _policies(self, x: Array) -> tuple[Array, ...]:
        x = self.norm_out(x)
        return tuple(self._policy(i, y) for i, y in enumerate(self._split(x)))

    def decode(self, rep: Array, actions: tuple[Array, ...]) -> tuple[Array, ...]:
        """Every agent's policy output (`distribution`) given the actions of the agents before it
        (teacher forcing): rep [B, N, D], actions per group [B, A_g(, d)] -> per group [B, A_g, n_g | 2d]."""
        x = self._tokens(rep, actions)
        for block in self.decoder:
            x = block(x, rep)
        return self._policies(x)

    def decode_with_memory(self, memory: tuple, rep: Array, actions: tuple[Array, ...]):
        """As `decode` after the earlier steps' memory (per block (self, cross)) -> (policy outputs, memory')."""
        x, out = self._tokens(rep, actions), []
        for block, m in zip(self.decoder, memory, strict=True):
            m, x = block.with_memory(m, x, rep)
            out.append(m)
        return self._policies(x), tuple(out)

    def over_steps(self, memory: dict, starts: Array, obs: tuple[Array, ...], actions: tuple[Array, ...]):
        """The recurrent network through L consecutive steps of E environments, as `encode_with_memory`
        and `decode_with_memory` step after step (the memory forgotten where `starts`), with every layer
        run on all L steps at once: memory as `zero_memory` [E, ...] before the first step, starts
        [L, E], obs per group [L, E, A_g, O_g], actions per group [L, E, A_g(, d)] -> (values per group
        [L, E, A_g], policy outputs per group [L, E, A_g, n_g | 2d]). Learning's replay."""
        L, E = starts.shape
        flat = lambda x: x.reshape((L * E,) + x.shape[2:])  # noqa: E731 [L, E, ...] -> [L*E, ...]
        steps = lambda x: x.reshape((L, E) + x.shape[1:])  # noqa: E731 and back
        x = steps(self._embed(tuple(flat(o) for o in obs)))  # [L, E, N, D]
        for encoder, m in zip(self.encoder, memory["encoder"], strict=True):
            x = encoder.over_steps(m, starts, x)[1]
        values, rep = self._values(flat(x))
        rep = steps(rep)
        x = steps(self._tokens(flat(rep), tuple(flat(a) for a in actions)))
        for decoder, m in zip(self.decoder, memory["decoder"], strict=True):
            x = decoder.over_steps(m, starts, x, rep)[1]
        return tuple(steps(v) for v in values), tuple(steps(p) for p in self._policies(flat(x)))

    def zero_state(self, batch: int) -> tuple:
        return tuple(block.zero_state(batch) for block in self.decoder)

    def start_token(self, batch: int) -> Array:
        return jnp.broadcast_to(self.start, (batch, self.embed_dim))

    def _decode_step(self, steps: list[Callable], state: tuple, x: Array, group: int) -> tuple[tuple, Array]:
        """One agent through every decoder block, `steps` each block's (state, x) -> (state', x')."""
        out = []
        for step, s in zip(steps, state, strict=True):
            s, x = step(s, x)
            out.append(s)
        return tuple(out), self._policy(group, self.norm_out(x))

    def decode_step(self, state: tuple, x: Array, rep: Array, group: int) -> tuple[tuple, Array]:
        """One agent of group `group`: x (the previous agent's embedded action, or the start token)
        and rep (this agent's encoded observation) [B, D] -> (state', policy output [B, n_g | 2d])."""
        return self._decode_step([partial(b.step, rep=rep) for b in self.decoder], state, x, group)

    def decode_step_with_memory(self, state: tuple, memory: tuple, x: Array, rep: Array, group: int):
        """`decode_step` after the earlier steps' decoder memory -> (state', policy output [B, n_g | 2d])."""
        steps = [
            lambda s, x, b=b, m=m: b.step_with_memory(s, m, x, rep) for b, m in zip(self.decoder, memory, strict=True)
        ]
        return self._decode_step(steps, state, x, group)

    def __call__(self, obs: tuple[Array, ...], actions: tuple[Array, ...]):
        """Every parameter touched once (for init): (values, policy outputs) per group."""
        values, rep = self.encode(obs)
        return values, self.decode(rep, actions)


def distribution(group: GroupShape, out: Array, mask: Array | None = None) -> Distribution:
    """A group's action distribution from the network's policy output for it (`SableNetwork.decode`)."""
    if group.discrete:
        return Categorical.masked(out, mask)
    d = group.num_actions
    return DiagGaussian(out[..., :d], out[..., d:])


def zero_memory(net: SableNetwork, batch: int) -> dict:
    """The recurrent Sable's memory of B environments before an episode's first step (no
    parameters needed): {"encoder": one [B, H, dk, dv] per block, "decoder": per block (self, cross)}."""
    z = zero_state(batch, net.embed_dim, net.num_heads)  # [B, H, dk, dv]
    return {"encoder": tuple(z for _ in range(net.num_blocks)), "decoder": tuple((z, z) for _ in range(net.num_blocks))}


def zero_step_state(net: SableNetwork, batch: int) -> tuple:
    """`decode_step_with_memory`'s state before a step's first agent: per block, per retention,
    (within the step, this step's sum of k v^T)."""
    z = zero_state(batch, net.embed_dim, net.num_heads)  # [B, H, dk, dv]
    return tuple(((z, z), (z, z)) for _ in range(net.num_blocks))


def decoder_memory_after(net: SableNetwork, memory: tuple, state: tuple) -> tuple:
    """The decoder's memory after a step acted agent by agent, from the step's final state."""
    gamma = jnp.asarray(decays(net.num_heads))  # [H], as each retention's
    return tuple(
        tuple(memory_after(m, written, gamma) for m, (_, written) in zip(mb, sb, strict=True))
        for mb, sb in zip(memory, state, strict=True)
    )
