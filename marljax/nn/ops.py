"""Pure RL math shared by the algorithms: advantages, PPO losses, collectives.

Nothing here knows about environments, networks or devices; every function
is a pure function of arrays with the shapes its docstring states.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

Array = jax.Array


def gae(
    reward: Array,  # [T, ...]
    value: Array,  # [T, ...]  V(s_t)
    done: Array,  # [T, ...]  the episode (or the agent) ended after step t
    last_value: Array,  # [...]  V(s_T)
    gamma: Array | float,
    lam: Array | float,
    method: str = "scan",
) -> tuple[Array, Array]:
    """Generalised advantage estimation. Returns (advantages, value targets), both [T, ...].

    A_t = delta_t + gamma lam (1 - d_t) A_{t+1}, a linear recurrence: `method="scan"` runs it as a
    T-trip loop, `"associative"` as log2(T) levels of an associative scan over the affine maps
    A -> delta_t + c_t A (no loop; the same values up to float rounding, which sums in another order)."""
    if method == "associative":
        notdone = 1.0 - done.astype(jnp.float32)
        next_value = jnp.concatenate([value[1:], last_value[None]], axis=0)  # V(s_{t+1})
        delta = reward + gamma * next_value * notdone - value
        decay = gamma * lam * notdone

        def compose(later, earlier):  # the map of `earlier`'s steps applied after `later`'s
            return earlier[0] * later[0], earlier[1] + earlier[0] * later[1]

        _, adv = jax.lax.associative_scan(compose, (decay, delta), reverse=True)
        return adv, adv + value
    if method != "scan":
        raise ValueError(f"gae: method must be 'scan' or 'associative', got {method!r}")

    def step(carry, xs):
        next_adv, next_value = carry
        r, v, d = xs
        notdone = 1.0 - d.astype(jnp.float32)
        delta = r + gamma * next_value * notdone - v
        adv = delta + gamma * lam * notdone * next_adv
        return (adv, v), adv

    _, adv = jax.lax.scan(step, (jnp.zeros_like(last_value), last_value), (reward, value, done), reverse=True)
    return adv, adv + value


def q_lambda_returns(
    reward: Array,  # [T, ...]
    done: Array,  # [T, ...]  the episode ended after step t
    next_q_max: Array,  # [T, ...]  max_a Q(s_{t+1}, a) (or the double-Q value) for every step
    gamma: Array | float,
    lam: Array | float,  # [] or [T, ...] (broadcast to reward's shape): one per step
) -> Array:
    """Peng's Q(lambda) targets, as PQN uses them: G_t = r_t + gamma (1 - d_t) [(1 - lam) q_{t+1} + lam G_{t+1}],
    bootstrapped with G_T = q_T (`next_q_max[-1]`). lam = 0 gives one-step Q-learning targets; a lam of 0 at
    step t alone stops the return there without ending it (an episode the time limit cut). [T, ...]."""
    per_step = jnp.ndim(lam) > 0  # a scalar stays out of the scan's inputs: the common case's program as before

    def step(next_return, xs):
        r, d, q_next, lam_t = xs if per_step else (*xs, lam)
        notdone = 1.0 - d.astype(jnp.float32)
        g = r + gamma * notdone * ((1.0 - lam_t) * q_next + lam_t * next_return)
        return g, g

    xs = (reward, done, next_q_max) + ((jnp.broadcast_to(lam, reward.shape),) if per_step else ())
    _, returns = jax.lax.scan(step, next_q_max[-1], xs, reverse=True)
    return returns


def double_q_value(q_online: Array, q_target: Array, mask: Array | None = None) -> Array:
    """Q_target(s, argmax_a Q_online(s, a)) over available actions. q_*: [..., A]; mask: [..., A] bool. [...]."""
    if mask is not None:
        q_online = jnp.where(mask, q_online, -jnp.inf)
    best = jnp.argmax(q_online, axis=-1)
    return jnp.take_along_axis(q_target, best[..., None], axis=-1)[..., 0]


def masked_max(q: Array, mask: Array | None = None) -> Array:
    """max over available actions: q [..., A], mask [..., A] bool -> [...]."""
    return jnp.max(q if mask is None else jnp.where(mask, q, -jnp.inf), axis=-1)


def vtrace(
    reward: Array,  # [T, ...]
    value: Array,  # [T, ...]  V(x_t) under the policy being evaluated
    done: Array,  # [T, ...]
    last_value: Array,  # [...]  V(x_T)
    rho: Array,  # [T, ...]  truncated importance weights min(rho_bar, pi / mu); c_t = rho_t (c_bar = rho_bar = 1)
    gamma: Array | float,
) -> tuple[Array, Array]:
    """V-trace (Espeholt et al., 2018) with c_bar = rho_bar. Returns (value targets v_s, policy advantages).

    v_s = V(x_s) + sum_t gamma^(t-s) (prod_{i<t} c_i) delta_t, delta_t = rho_t (r_t + gamma V(x_{t+1}) - V(x_t)),
    computed backwards as v_s - V(x_s) = delta_s + gamma c_s (v_{s+1} - V(x_{s+1})); an episode end
    cuts every term after it. Advantage_s = rho_s (r_s + gamma v_{s+1} - V(x_s)).
    """
    notdone = 1.0 - done.astype(jnp.float32)
    next_value = jnp.concatenate([value[1:], last_value[None]], axis=0)  # V(x_{t+1})
    delta = rho * (reward + gamma * notdone * next_value - value)

    def step(acc, xs):  # acc = v_{t+1} - V(x_{t+1})
        d, c, nd = xs
        acc = d + gamma * c * nd * acc
        return acc, acc

    _, diff = jax.lax.scan(step, jnp.zeros_like(last_value), (delta, rho, notdone), reverse=True)
    vs = value + diff
    next_vs = jnp.concatenate([vs[1:], last_value[None]], axis=0)
    advantage = rho * (reward + gamma * notdone * next_vs - value)
    return vs, advantage


# Collectives. An axis name, a tuple of them (reduced over all at once) or None (no collective).
AxisNames = str | tuple[str, ...] | None

# Each sync point issues exactly ONE all-reduce over one flat float32 vector.
# Several independent all-reduces may be started in a different order on each device by XLA's
# CPU runtime; with few cores every worker thread can then block in a different rendezvous and
# the program deadlocks (seen with 2 fake devices and vmapped seeds on a 2-core machine). One
# collective per sync point leaves no order to disagree on, and is cheaper on real devices too.


def psum_tree(tree, axis_name: AxisNames):
    """Sum a pytree over a mesh axis with a single all-reduce (identity without an axis)."""
    if axis_name is None:
        return tree
    flat, unravel = ravel_pytree(tree)
    return unravel(jax.lax.psum(flat, axis_name))


def pmean_tree(tree, axis_name: AxisNames):
    """Mean of a pytree over a mesh axis with a single all-reduce (identity without an axis)."""
    if axis_name is None:
        return tree
    flat, unravel = ravel_pytree(tree)
    return unravel(jax.lax.pmean(flat, axis_name))


def normalize(x: Array, axis_name: AxisNames, eps: float = 1e-8) -> Array:
    """Zero-mean, unit-std over ALL elements on every shard of `axis_name` (equal-sized shards)."""
    mean, mean_sq = pmean_tree(jnp.stack([jnp.mean(x), jnp.mean(jnp.square(x))]), axis_name)
    var = jnp.maximum(mean_sq - jnp.square(mean), 0.0)
    return (x - mean) / (jnp.sqrt(var) + eps)


class PPOLoss(NamedTuple):
    total: Array
    actor: Array
    value: Array
    entropy: Array
    approx_kl: Array
    clip_frac: Array


def ppo_loss(
    logp: Array,  # [B] log-prob of the taken action under the current policy
    old_logp: Array,  # [B] under the behaviour policy
    entropy: Array,  # [B]
    value: Array,  # [B] current value prediction
    old_value: Array,  # [B] value prediction at rollout time
    advantage: Array,  # [B] (already normalised)
    target: Array,  # [B] value target
    clip_eps: Array | float,
    vf_coef: Array | float,
    ent_coef: Array | float,
    weight: Array | None = None,  # [B] importance weight on the surrogate (decoupled PPO); None: 1
) -> PPOLoss:
    """Clipped surrogate, clipped value loss and entropy bonus (JaxMARL's IPPO form).

    With `weight`, old_logp is the proximal policy's and each sample's surrogate is scaled by
    `weight` (the truncated importance weight pi_prox / mu of decoupled PPO).
    """
    log_ratio = logp - old_logp
    ratio = jnp.exp(log_ratio)
    surrogate = jnp.minimum(ratio * advantage, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * advantage)
    if weight is not None:
        surrogate = weight * surrogate
    actor = -jnp.mean(surrogate)
    value_clipped = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
    value_loss = 0.5 * jnp.mean(jnp.maximum(jnp.square(value - target), jnp.square(value_clipped - target)))
    ent = jnp.mean(entropy)
    total = actor + vf_coef * value_loss - ent_coef * ent
    approx_kl = jnp.mean((ratio - 1) - log_ratio)
    clip_frac = jnp.mean((jnp.abs(ratio - 1) > clip_eps).astype(jnp.float32))
    return PPOLoss(total, actor, value_loss, ent, approx_kl, clip_frac)


def global_norm(tree) -> Array:
    """sqrt of the sum of squares of every leaf."""
    return jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(tree)))


def clip_by_norm(grads, norm: Array, max_norm: Array | float):
    """Scale `grads`, whose global norm is `norm`, so that it is at most `max_norm` (may be traced)."""
    scale = jnp.minimum(1.0, max_norm / (norm + 1e-6))
    return jax.tree.map(lambda g: g * scale, grads)


def descend(params, opt_state, grads, norm: Array, optimizer, lr: Array, max_norm: Array | float):
    """One step of every algorithm here: clip `grads` (global norm `norm`) to `max_norm`, let
    `optimizer` (an optax transformation without a learning rate; it sees `params`, as weight decay
    needs) scale them, subtract lr x that. The learning rate stays outside the optimizer so that it
    can be traced (sweeps vmap it)."""
    updates, opt_state = optimizer.update(clip_by_norm(grads, norm, max_norm), opt_state, params)
    return jax.tree.map(lambda p, u: p - lr * u, params, updates), opt_state


def linear_schedule(lr: Array, update: Array, num_updates: float, anneal: bool) -> Array:
    """`lr` falling linearly to 0 over `num_updates` (when `anneal`), never below 0 past the budget."""
    if not anneal:
        return lr
    return lr * jnp.maximum(1.0 - update.astype(jnp.float32) / num_updates, 0.0)


def schedule_position(resumes: Sequence[Sequence[int]], num_updates: int) -> tuple[int, Callable[[Array], Array]]:
    """(the schedule's horizon, update [] -> its position on the schedule []) of a run resumed with
    other budgets (`lr_schedule_resumes`: one [update s, updates planned before] per change).

    Until the first change an update is its own position, on a schedule over the first budget N.
    From each change at update s on, the position goes on from where it was at s and reaches N at
    the budget planned from there (the next change's "planned before", else `num_updates`): what
    was left of the schedule is stretched (or shrunk) over the updates now left, so the rate never
    jumps. No changes: (num_updates, the update itself), the same ops as ever."""
    if not resumes:
        return num_updates, lambda update: update
    horizon = resumes[0][1]
    starts = [s for s, _ in resumes]
    ends = [n for _, n in resumes[1:]] + [num_updates]
    positions, p = [], float(starts[0])
    for k, (s, e) in enumerate(zip(starts, ends)):
        positions.append(p)
        if k + 1 < len(starts):
            p += (starts[k + 1] - s) * (horizon - p) / max(e - s, 1)

    def position(update: Array) -> Array:
        u = jnp.asarray(update).astype(jnp.float32)
        at = u
        for s, e, p in zip(starts, ends, positions):
            at = jnp.where(u >= s, p + (u - s) * ((horizon - p) / max(e - s, 1)), at)
        return at

    return horizon, position


def lr_schedule(
    lr: Array, update: Array, num_updates: int, anneal: bool, warmup: int = 0, decay: str = "linear", rate: float = 0.0
) -> Array:
    """`lr` rising linearly from 0 over the first `warmup` updates, then (when `anneal`) falling to 0
    over the rest, linearly or along a half cosine, or (`decay="exponential"`) by the fraction `rate`
    per update, never reaching 0. warmup=0 and linear: `linear_schedule` itself."""
    if warmup == 0 and decay == "linear":
        return linear_schedule(lr, update, num_updates, anneal)  # the same ops: runs without warm-up stay bitwise
    step = update.astype(jnp.float32)
    rise = jnp.minimum((step + 1.0) / warmup, 1.0) if warmup else 1.0  # the first update already learns a little
    if not anneal:
        return lr * rise
    if decay == "exponential":  # (1 - rate)^k as exp(k log1p(-rate)): log1p in float64 here, exact for tiny rates
        fall = jnp.exp((step - warmup) * math.log1p(-rate))
    else:
        frac = jnp.clip((step - warmup) / max(num_updates - warmup, 1), 0.0, 1.0)  # of the decay, after the warm-up
        fall = 1.0 - frac if decay == "linear" else 0.5 * (1.0 + jnp.cos(jnp.pi * frac))
    return lr * jnp.where(step < warmup, rise, fall)
