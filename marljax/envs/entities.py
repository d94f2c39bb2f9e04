"""Entity views of observations and world states, for networks that attend over entities
(TransfQMix's transformers): one agent's flat observation [D] as a matrix [n_e, F] of the
entities it sees, and the flat world state [W] (`EnvAdapter.world_state`) as [n_s, F_s].

The views are pure functions of the flat arrays the adapter already gives, so the replay keeps
what it keeps for every algorithm and evaluation and export see the same observations; what an
env's flat layout means lives here, not in the algorithm. Envs with a view: MPE simple_spread
(agents and landmarks) and the SMAX family with unit-list observations. `entity_view(env)` is
None for the others (an algorithm that needs one refuses them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array


class EntityView(NamedTuple):
    obs: Callable[[Array], Array]  # one agent's observations [..., D] -> [..., n_obs, f_obs]
    world: Callable[[Array], Array]  # world states [..., W] -> [..., n_world, f_world]
    what: str  # which env layout it reads, for messages


def _inner(env: Any) -> list[Any]:
    """The JaxMARL env and every env it wraps (`_env`, `env`), outermost first."""
    out, seen = [], set()
    while env is not None and id(env) not in seen:
        seen.add(id(env))
        out.append(env)
        env = getattr(env, "_env", None)
    return out


def _spread(env: Any, D: int, W: int) -> EntityView | None:
    """MPE simple_spread: an agent sees [vel 2, pos 2, landmarks' relative positions 2L, the other
    agents' relative positions 2(N-1), their communication 2(N-1)] (comm is silent here).
    Entities: itself (velocity, is_self), the other agents and the landmarks (relative positions);
    features [dx, dy, vx, vy, is_self, is_agent]. The world state (every agent's observation,
    concatenated) gives each entity's absolute position and velocity: [x, y, vx, vy, is_agent]."""
    N, L = int(env.num_agents), int(env.num_landmarks)
    c = (D - 4 - 2 * L - 2 * (N - 1)) // max(N - 1, 1)
    if D != 4 + 2 * L + 2 * (N - 1) + c * (N - 1) or W != N * D:
        return None

    def obs(o: Array) -> Array:
        lead = o.shape[:-1]
        zero, one = jnp.zeros(lead + (1,)), jnp.ones(lead + (1,))
        me = jnp.concatenate([zero, zero, o[..., 0:2], one, one], -1)[..., None, :]  # [..., 1, 6]
        land = o[..., 4 : 4 + 2 * L].reshape(lead + (L, 2))
        others = o[..., 4 + 2 * L : 4 + 2 * L + 2 * (N - 1)].reshape(lead + (N - 1, 2))

        def rel(pos: Array, agent: float) -> Array:
            k = pos.shape[-2]
            pad = jnp.zeros(lead + (k, 3))
            return jnp.concatenate([pos, pad, jnp.full(lead + (k, 1), agent)], -1)

        return jnp.concatenate([me, rel(others, 1.0), rel(land, 0.0)], -2)  # [..., N + L, 6]

    def world(w: Array) -> Array:
        lead = w.shape[:-1]
        per = w.reshape(lead + (N, D))
        agents = jnp.concatenate([per[..., 2:4], per[..., 0:2], jnp.ones(lead + (N, 1))], -1)  # [..., N, 5]
        land = per[..., 0, 4 : 4 + 2 * L].reshape(lead + (L, 2)) + per[..., 0:1, 2:4]  # absolute positions
        land = jnp.concatenate([land, jnp.zeros(lead + (L, 3))], -1)
        return jnp.concatenate([agents, land], -2)  # [..., N + L, 5]

    return EntityView(obs, world, f"MPE simple_spread ({N} agents, {L} landmarks)")


def _smax(env: Any, D: int, W: int) -> EntityView | None:
    """SMAX (unit-list observations): an agent sees one row of unit features per other unit
    (allies, then enemies), then its own features. Entities: those rows and itself (its own
    features padded to a row's width), with [is_agent, is_self] appended. The world state is
    every unit's own features, then every unit's team and type: one row per unit."""
    if getattr(env, "observation_type", "unit_list") != "unit_list":
        return None
    u, own = len(env.unit_features), len(env.own_features)
    allies, enemies = int(env.num_allies), int(env.num_enemies)
    n_other = allies - 1 + enemies
    units = allies + enemies
    if D != n_other * u + own or W != units * (own + 2) or own > u:
        return None
    flags = jnp.concatenate([jnp.ones(allies - 1), jnp.zeros(enemies), jnp.ones(1)])  # is_agent (an ally)

    def obs(o: Array) -> Array:
        lead = o.shape[:-1]
        rows = o[..., : n_other * u].reshape(lead + (n_other, u))
        me = jnp.pad(o[..., n_other * u :], [(0, 0)] * len(lead) + [(0, u - own)])[..., None, :]
        ents = jnp.concatenate([rows, me], -2)  # [..., n_other + 1, u]
        is_self = jnp.zeros(n_other + 1).at[-1].set(1.0)
        extra = jnp.broadcast_to(jnp.stack([flags, is_self], -1), lead + (n_other + 1, 2))
        return jnp.concatenate([ents, extra], -1)

    def world(w: Array) -> Array:
        lead = w.shape[:-1]
        feats = w[..., : units * own].reshape(lead + (units, own))
        rest = jnp.swapaxes(w[..., units * own :].reshape(lead + (2, units)), -1, -2)  # team, type per unit
        return jnp.concatenate([feats, rest], -1)  # [..., units, own + 2]

    return EntityView(obs, world, f"SMAX ({allies} allies, {enemies} enemies)")


def entity_view(adapter: Any) -> EntityView | None:
    """The entity view of an `EnvAdapter`'s observations and world state, or None when marljax
    does not know how to split its observations into entities (one group of identical agents only)."""
    if len(adapter.groups) != 1:
        return None
    D = adapter.groups[0].obs_shape
    if len(D) != 1:
        return None

    def shapes(key: Array) -> Any:
        obs, state = adapter.reset(key)
        return adapter.world_state(state, obs)

    W = jax.eval_shape(shapes, jax.random.PRNGKey(0)).shape
    for env in _inner(adapter.env):
        name = type(env).__name__
        if name == "SimpleSpreadMPE":
            return _spread(env, D[0], W[0])
        if hasattr(env, "unit_features") and hasattr(env, "own_features"):
            return _smax(env, D[0], W[0])
    return None
