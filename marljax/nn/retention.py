"""Retention (Sun et al. 2023, "Retentive Network"): the sequence mixer of Sable.

Per head h with decay gamma_h, token i of a sequence mixes the tokens j <= i as

    o_i = sum_{j <= i} gamma_h^(i - j) (q_i . k_j) v_j        (causal)
    o_i = sum_j (q_i . k_j) v_j                                 (full: every token, no decay)

Both are linear attention: the sum over j is a state S = sum_j gamma^(i-j) k_j v_j^T [dk, dv], so
one token at a time costs O(dk dv) whatever the sequence length, and memory grows linearly with
it. `causal` computes it in chunks of C tokens (within a chunk the quadratic form, C x C; across
chunks the state), `causal_step` one token at a time; the two agree to float reduction order
(tests/test_sable.py). C = N is the fully parallel form (memory N^2), C = 1 the recurrent one.

Across time steps (the recurrent Sable) each retention also keeps a memory of the earlier steps'
tokens, decayed once per step and reset at episode starts: M_t = gamma M_{t-1} + sum_j k_j v_j^T
over step t's tokens, and every token of step t adds q . (gamma M_{t-1}) to what it mixes within
its step (`memory_read`, `memory_write`). With a zero memory that is the feed-forward form.
`across_steps` computes the same for many consecutive steps at once (learning's replay).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from marljax.nn.networks import dense

Array = jax.Array


def decays(num_heads: int) -> np.ndarray:
    """RetNet's multi-scale decays, one per head: 1 - 2^(-5 - h) -> [H]."""
    return 1.0 - 2.0 ** (-5.0 - np.arange(num_heads, dtype=np.float32))


def causal(q: Array, k: Array, v: Array, gamma: Array, chunk: int) -> Array:
    """Causal retention in chunks of `chunk` tokens: q, k [B, N, H, dk], v [B, N, H, dv], gamma [H]
    -> o [B, N, H, dv]. The sequence is padded with zero keys at its end (they add nothing)."""
    B, N, H, _ = q.shape
    C = max(1, min(chunk, N))
    pad = (-N) % C
    if pad:
        q, k, v = (jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) for x in (q, k, v))
    chunks = (N + pad) // C
    by_chunk = lambda x: jnp.moveaxis(x.reshape((B, chunks, C) + x.shape[2:]), 1, 0)  # noqa: E731 [nc, B, C, H, d]
    t = jnp.arange(C, dtype=jnp.float32)
    lag = t[:, None] - t[None, :]  # [C, C]: i - j
    g = gamma[:, None, None]  # [H, 1, 1]
    within = jnp.where(lag >= 0, g ** jnp.maximum(lag, 0.0), 0.0)  # [H, C, C]: gamma^(i-j) for j <= i
    from_state = gamma[None, :] ** (t[:, None] + 1.0)  # [C, H]: the state's weight at token t of the chunk
    into_state = gamma[None, :] ** (C - 1.0 - t[:, None])  # [C, H]: token t's weight in the next state

    def one_chunk(state: Array, xs: tuple[Array, Array, Array]) -> tuple[Array, Array]:
        qc, kc, vc = xs  # [B, C, H, d]
        scores = jnp.einsum("bihd,bjhd->bhij", qc, kc) * within[None]  # [B, H, C, C]
        inner = jnp.einsum("bhij,bjhv->bihv", scores, vc)
        carried = jnp.einsum("bihd,bhdv->bihv", qc, state) * from_state[None, :, :, None]
        state = state * (gamma**C)[None, :, None, None] + jnp.einsum(
            "bjhd,bjhv->bhdv", kc * into_state[None, :, :, None], vc
        )
        return state, inner + carried

    state = jnp.zeros((B, H, q.shape[-1], v.shape[-1]), q.dtype)  # [B, H, dk, dv]
    _, out = jax.lax.scan(one_chunk, state, (by_chunk(q), by_chunk(k), by_chunk(v)))  # [nc, B, C, H, dv]
    return jnp.moveaxis(out, 0, 1).reshape((B, chunks * C, H, v.shape[-1]))[:, :N]


def causal_step(state: Array, q: Array, k: Array, v: Array, gamma: Array) -> tuple[Array, Array]:
    """One token of causal retention: state [B, H, dk, dv], q, k [B, H, dk], v [B, H, dv]
    -> (state', o [B, H, dv])."""
    state = state * gamma[None, :, None, None] + jnp.einsum("bhd,bhv->bhdv", k, v)
    return state, jnp.einsum("bhd,bhdv->bhv", q, state)


def memory_read(q: Array, memory: Array, gamma: Array) -> Array:
    """What the earlier time steps add to each token: q [B, N, H, dk], memory [B, H, dk, dv] ->
    gamma q . memory [B, N, H, dv] (the memory is one time step older than the tokens)."""
    return jnp.einsum("bihd,bhdv->bihv", q, memory * gamma[None, :, None, None])


def memory_write(memory: Array, k: Array, v: Array, gamma: Array) -> Array:
    """The memory after one time step of N tokens: gamma memory + sum_j k_j v_j^T; k [B, N, H, dk],
    v [B, N, H, dv] -> [B, H, dk, dv]. Every token of a step weighs the same: the decay is per step."""
    return memory_after(memory, jnp.einsum("bjhd,bjhv->bhdv", k, v), gamma)


def memory_after(memory: Array, written: Array, gamma: Array) -> Array:
    """gamma memory + the step's sum of k v^T `written` [B, H, dk, dv]: `memory_write` from the
    whole step at once, or after a step acted token by token (`step_with_memory` sums `written`)."""
    return memory * gamma[None, :, None, None] + written


STEP_CHUNK_TOKENS = 64  # tokens (steps x agents) of one chunk of `across_steps`: its scores grow as their square


def across_steps(
    q: Array, k: Array, v: Array, memory: Array, starts: Array, gamma: Array, chunk_tokens: int = STEP_CHUNK_TOKENS
) -> tuple[Array, Array]:
    """What the earlier steps add to each token of L consecutive steps (`memory_read` of each step's memory),
    and the memory after the last step (`memory_write` step after step), the memory forgotten before each
    step where `starts`: q, k [L, E, N, H, dk], v [L, E, N, H, dv], memory [E, H, dk, dv] before the first
    step, starts [L, E], gamma [H] -> (memory' [E, H, dk, dv], [L, E, N, H, dv]).

    Step t reads c_t M_0 + sum_{s<t} D[t, s] sum_j k_j(s) v_j(s)^T with D[t, s] = gamma^(t-s) where no episode
    starts in (s, t] (else 0) and c_t = gamma^(t+1) where none starts in [0, t]. In chunks of C steps (C N up
    to `chunk_tokens` tokens, C dividing L): within a chunk that sum is the decayed quadratic form over its
    C N tokens (batched matmuls), across chunks the memory carries it. Writing each step's sum of k v^T and
    reading it back, as the step-by-step form does, moves a [dk, dv] matrix per step and environment: on a
    CPU that was 40% of the recurrent Sable's learning step (docs/benchmarks.md)."""
    L, E, N, H, dk = q.shape
    C = max(c for c in range(1, L + 1) if L % c == 0 and (c * N <= chunk_tokens or c == 1))
    t = jnp.arange(C)
    lag = (t[:, None] - t[None, :]).astype(gamma.dtype)  # [C, C]: t - s
    decay = gamma[:, None, None] ** jnp.maximum(lag, 0.0)  # [H, C, C]
    power = gamma[None, :] ** (t[:, None] + 1.0)  # [C, H]: gamma^(t+1)
    last = gamma[None, :] ** (C - 1.0 - t[:, None])  # [C, H]: step s's weight in the memory after the chunk

    def tokens(x: Array) -> Array:  # [C, E, N, H, d] -> [E, H, C*N, d]
        return jnp.transpose(x, (1, 3, 0, 2, 4)).reshape((E, H, C * N, x.shape[-1]))

    def per_token(w: Array) -> Array:  # [E, H, C] -> [E, H, C*N, 1]: a step's weight for each of its tokens
        return jnp.repeat(w, N, axis=-1)[..., None]

    def one_chunk(m: Array, xs: tuple[Array, Array, Array, Array]) -> tuple[Array, Array]:
        qc, kc, vc, sc = xs  # [C, E, N, H, d], starts [C, E]
        episode = jnp.cumsum(sc.astype(jnp.int32), axis=0).T  # [E, C]: episodes started within the chunk so far
        Q, K, V = tokens(qc), tokens(kc), tokens(vc)
        fresh = (episode == 0)[:, None, :].astype(Q.dtype)  # [E, 1, C]: no start in [0, t]
        out = per_token(fresh * power.T[None]) * jnp.einsum("ehid,ehdv->ehiv", Q, m)  # [E, H, C*N, dv]
        if C > 1:  # (one step a chunk: no earlier step within it, and no N x N scores for many agents)
            same = episode[:, :, None] == episode[:, None, :]  # [E, C(t), C(s)]
            weights = jnp.where((same & (lag > 0))[:, None], decay[None], 0.0)  # [E, H, C, C]: D[t, s]
            weights = jnp.repeat(jnp.repeat(weights, N, axis=-1), N, axis=-2)  # [E, H, C*N, C*N]
            scores = jnp.einsum("ehid,ehjd->ehij", Q, K) * weights
            out = out + jnp.einsum("ehij,ehjv->ehiv", scores, V)
        kept = (episode == episode[:, -1:])[:, None, :] * last.T[None]  # [E, H, C]: step s's weight in m'
        m = fresh[..., -1:, None] * power[-1][None, :, None, None] * m + jnp.einsum(
            "ehid,ehiv->ehdv", K * per_token(kept), V
        )
        return m, jnp.transpose(out.reshape((E, H, C, N, -1)), (2, 0, 3, 1, 4))  # [C, E, N, H, dv]

    by_chunk = lambda x: x.reshape((L // C, C) + x.shape[1:])  # noqa: E731
    memory, out = jax.lax.scan(one_chunk, memory, (by_chunk(q), by_chunk(k), by_chunk(v), by_chunk(starts)))
    return memory, out.reshape((L,) + out.shape[2:])


def full(q: Array, k: Array, v: Array) -> Array:
    """Every token mixes every token, undecayed: q, k [B, N, H, dk], v [B, N, H, dv] -> [B, N, H, dv]."""
    return jnp.einsum("bihd,bhdv->bihv", q, jnp.einsum("bjhd,bjhv->bhdv", k, v))


class MultiScaleRetention(nn.Module):
    """Multi-head retention with RetNet's gate: out = W_o(swish(W_g x) * norm(retention)).

    `causal`: decayed and causal (parallel in chunks of `chunk`, or `step` one token at a time);
    else full. Queries come from x, keys and values from `kv` (cross-retention) or x."""

    embed_dim: int
    num_heads: int
    causal: bool
    chunk: int = 64
    dtype: str = "float32"

    def setup(self) -> None:
        D = self.embed_dim
        self.q, self.k, self.v = (dense(D, self.dtype, use_bias=False, name=n) for n in ("q", "k", "v"))
        self.gate = dense(D, self.dtype, name="gate")
        self.out = dense(D, self.dtype, name="out")
        self.norm = nn.LayerNorm(name="norm")  # per head, per token: the recurrent form needs no other tokens
        self.gamma = jnp.asarray(decays(self.num_heads))

    def _heads(self, x: Array) -> Array:
        return x.reshape(x.shape[:-1] + (self.num_heads, self.embed_dim // self.num_heads))

    def _qkv(self, x: Array, kv: Array) -> tuple[Array, Array, Array]:
        scale = (self.embed_dim // self.num_heads) ** -0.5
        return self._heads(self.q(x)) * scale, self._heads(self.k(kv)), self._heads(self.v(kv))

    def _finish(self, x: Array, mixed: Array) -> Array:
        mixed = self.norm(mixed).reshape(x.shape)  # [..., H, dv] -> [..., D]
        return self.out(nn.swish(self.gate(x)) * mixed)

    def _mix(self, q: Array, k: Array, v: Array) -> Array:
        return causal(q, k, v, self.gamma, self.chunk) if self.causal else full(q, k, v)

    def __call__(self, x: Array, kv: Array | None = None) -> Array:
        """x [B, N, D] (kv [B, N, D]) -> [B, N, D]."""
        q, k, v = self._qkv(x, x if kv is None else kv)
        return self._finish(x, self._mix(q, k, v))

    def with_memory(self, memory: Array, x: Array, kv: Array | None = None) -> tuple[Array, Array]:
        """One time step's N tokens after the earlier steps' memory [B, H, dk, dv]: x [B, N, D]
        (kv [B, N, D]) -> (memory', [B, N, D])."""
        q, k, v = self._qkv(x, x if kv is None else kv)
        mixed = self._mix(q, k, v) + memory_read(q, memory, self.gamma)
        return memory_write(memory, k, v, self.gamma), self._finish(x, mixed)

    def over_steps(self, memory: Array, starts: Array, x: Array, kv: Array | None = None) -> tuple[Array, Array]:
        """`with_memory` over L consecutive time steps at once: memory [E, H, dk, dv] before the first,
        starts [L, E] (the memory forgotten before that step), x [L, E, N, D] (kv [L, E, N, D]) ->
        (the memory after the last step, [L, E, N, D]). Every projection and mix runs on all L steps
        as one batch (`across_steps`)."""
        q, k, v = self._qkv(x, x if kv is None else kv)  # [L, E, N, H, d]
        within = self._mix(*(y.reshape((-1,) + y.shape[2:]) for y in (q, k, v))).reshape(v.shape)
        memory, earlier = across_steps(q, k, v, memory, starts, self.gamma)
        return memory, self._finish(x, within + earlier)

    def step(self, state: Array, x: Array, kv: Array | None = None) -> tuple[Array, Array]:
        """One token of the causal form: state [B, H, dk, dv], x [B, D] (kv [B, D]) -> (state', [B, D])."""
        q, k, v = self._qkv(x, x if kv is None else kv)
        state, mixed = causal_step(state, q, k, v, self.gamma)
        return state, self._finish(x, mixed)

    def step_with_memory(
        self, state: tuple[Array, Array], memory: Array, x: Array, kv: Array | None = None
    ) -> tuple[tuple[Array, Array], Array]:
        """One token of the causal form after the earlier steps' memory: state (within the step
        [B, H, dk, dv], this step's sum of k v^T so far [B, H, dk, dv]), x [B, D] (kv [B, D]) ->
        (state', [B, D]). After a step's last token, `memory_after` gives the next memory."""
        within, written = state
        q, k, v = self._qkv(x, x if kv is None else kv)
        within, mixed = causal_step(within, q, k, v, self.gamma)
        mixed = mixed + memory_read(q[:, None], memory, self.gamma)[:, 0]
        written = written + jnp.einsum("bhd,bhv->bhdv", k, v)
        return (within, written), self._finish(x, mixed)

    def zero_state(self, batch: int) -> Array:
        return zero_state(batch, self.embed_dim, self.num_heads)


def zero_state(batch: int, embed_dim: int, num_heads: int) -> Array:
    """A retention's empty state or memory (no sum of k v^T yet): [B, H, dk, dv]."""
    d = embed_dim // num_heads
    return jnp.zeros((batch, num_heads, d, d), jnp.float32)
