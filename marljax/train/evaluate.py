"""Evaluation apart from training: fresh environments, whole episodes, no learning.

`make_evaluator(trainer, episodes, greedy)` returns a jitted function that takes
parameters with a leading row axis (seeds, or a sweep's cells x seeds) and one key
per row, and plays `episodes` fresh episodes per row, all at once: each environment
runs until its first episode ends and is then frozen. The training rollouts never
see these environments, so evaluation changes nothing about training.

Returns are per agent (the team's summed reward over the episode divided by the
number of agents), the same unit as training's `return_mean`. Envs with a win condition
(SMAX: `EnvAdapter.won`) also report which episodes were won: `eval_win_rate`.

`keep_best` keeps, per row, the parameters with the highest evaluation return so
far: the "absolute metric" protocol re-evaluates them at the end with 10x the
episodes (ABSOLUTE_FACTOR).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

ABSOLUTE_FACTOR = 10  # the absolute metric uses this many times the evaluation episodes
_EVAL_TAG = 0x65_76_61_6C  # folded into the run's seed, so evaluation keys never meet training keys


class EvalResult(NamedTuple):
    returns: Array  # [R, episodes] per-agent return of every episode
    lengths: Array  # [R, episodes] its length in steps
    won: Array  # [R, episodes] bool: the episode was won (always false without a win condition)


def eval_keys(seed: int, seed_index: Array, evaluation: int) -> Array:
    """One key per row [R, 2] from its seed index [R]: the same seed meets the same episodes
    in every cell (paired comparisons) and at evaluation `evaluation`.

    One program compiled once per run (per seed and row count), not a few eager ops per call."""
    return _eval_keys(int(seed), seed_index, np.uint32(evaluation))


@functools.partial(jax.jit, static_argnums=0)
def _eval_keys(seed: int, seed_index: Array, evaluation: Array) -> Array:
    base = jax.random.fold_in(jax.random.PRNGKey(seed), _EVAL_TAG)
    per_seed = jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.asarray(seed_index, jnp.uint32))
    return jax.vmap(lambda k: jax.random.fold_in(k, evaluation))(per_seed)


def make_evaluator(
    trainer, episodes: int, greedy: bool = True, max_steps: int = 10_000, act: Callable | None = None
) -> Callable:
    """(params with leaves [R, ...], keys [R, 2]) -> EvalResult; jitted.

    `max_steps` caps an episode that never ends (its partial return is counted). `act` replaces
    the trainer's policy (same signature as `Trainer.act`), e.g. a `baseline_act` reference policy.
    """
    act = trainer.act if act is None else act
    env = trainer.env
    groups = env.groups
    E = episodes

    def one_row(params, key: Array) -> EvalResult:
        k_reset, k_run = jax.random.split(key)
        obs, state = jax.vmap(env.reset)(jax.random.split(k_reset, E))
        reset = {g.name: jnp.ones((E, g.size), bool) for g in groups}
        hidden = trainer.initial_hidden(E)
        zeros, no = jnp.zeros((E,), jnp.float32), jnp.zeros((E,), bool)
        carry = (obs, state, reset, hidden, zeros, jnp.zeros((E,), jnp.int32), no, no, 0, k_run)

        def running(c) -> Array:
            return jnp.logical_and(~jnp.all(c[6]), c[8] < max_steps)

        def step(c):
            obs, state, reset, hidden, ret, length, finished, won, t, key = c
            key, k_act, k_env = jax.random.split(key, 3)
            masks = jax.vmap(env.action_mask)(state)
            actions, hidden = act(params, obs, reset, hidden, masks, k_act, greedy)
            res = jax.vmap(env.step)(jax.random.split(k_env, E), state, actions)
            team = sum(jnp.sum(res.reward[g.name], axis=1) for g in groups) / env.num_agents  # [E]
            live = ~finished
            ret = ret + jnp.where(live, team, 0.0)
            length = length + live.astype(jnp.int32)
            won = jnp.logical_or(won, live & jax.vmap(env.won)(res.reward, res.episode_done))
            finished = jnp.logical_or(finished, res.episode_done)
            return res.obs, res.state, res.done, hidden, ret, length, finished, won, t + 1, key

        out = jax.lax.while_loop(running, step, carry)
        return EvalResult(out[4], out[5], out[7])

    return jax.jit(jax.vmap(one_row))


BASELINES = ("noop", "random")


def baseline_act(env, kind: str) -> Callable:
    """A reference policy with `Trainer.act`'s signature that ignores its parameters: `noop`
    always takes action 0 (MPE's no-op; with Box actions the zero vector, clipped to the bounds:
    no force, no velocity), `random` a uniformly random available action (Box: uniform within the
    bounds, as the trained policy's actions are clipped to them). Played by
    `make_evaluator(..., act=baseline_act(env, kind))` on the same keys as the trained policy, it
    meets the same episodes: the fair yardstick for a learning claim."""
    if kind not in BASELINES:
        raise ValueError(f"kind must be one of {BASELINES}, got {kind!r}")

    def act(params, obs, reset, hidden, mask, key, greedy=True):
        del params, reset, greedy
        out = {}
        for gi, g in enumerate(env.groups):
            lead = obs[g.name].shape[:2]  # [E, A_g]
            gkey = jax.random.fold_in(key, gi)
            if not g.discrete:
                low, high = _box_bounds(g)
                if kind == "noop":
                    out[g.name] = jnp.clip(jnp.zeros(lead + (g.action_dim,)), low, high)  # [E, A_g, D]
                else:
                    out[g.name] = jax.random.uniform(gkey, lead + (g.action_dim,), minval=low, maxval=high)
            elif kind == "noop":
                out[g.name] = jnp.zeros(lead, jnp.int32)
            else:
                m = mask.get(g.name, jnp.ones(lead + (g.action_dim,), bool))
                out[g.name] = jax.random.categorical(gkey, jnp.where(m, 0.0, -jnp.inf))
        return out, hidden

    return act


def _box_bounds(group) -> tuple[float, float]:
    """A Box group's bounds; an unbounded side is taken as 1 (a random action needs finite bounds)."""
    low = -1.0 if group.action_low is None or not math.isfinite(group.action_low) else group.action_low
    high = 1.0 if group.action_high is None or not math.isfinite(group.action_high) else group.action_high
    return low, high


@jax.jit
def keep_best(best_params, best_score: Array, params, score: Array):
    """Per row, the parameters with the higher score: (params, score [R]) where score > best_score."""
    better = score > best_score  # [R]

    def pick(b, p):
        return jnp.where(better.reshape((-1,) + (1,) * (p.ndim - 1)), p, b)

    return jax.tree.map(pick, best_params, params), jnp.where(better, score, best_score)


def eval_due(update: int, previous: int, every: int, last: int) -> bool:
    """An evaluation is due at a chunk end `update` (previous chunk end `previous`) when a
    multiple of `every` was passed, or at the run's `last` update."""
    return every > 0 and (update // every > previous // every or update == last)


def eval_fields(returns, lengths, won=None) -> dict:
    """Metrics-row fields of one evaluation of S seeds: returns, lengths and (envs with a win
    condition) won [S, episodes] on the host."""
    per_seed = returns.mean(axis=1)  # [S]
    fields = {
        "eval_return": float(per_seed.mean()),
        "eval_return_per_seed": [float(v) for v in per_seed],
        "eval_episode_length": float(lengths.mean()),
    }
    if won is not None:
        fields["eval_win_rate"] = float(won.mean())
        fields["eval_win_rate_per_seed"] = [float(v) for v in won.mean(axis=1)]
    return fields


class Evaluation:
    """Evaluation at chunk ends (`train.driver`): every `every` updates and at update `last`, each
    row of the parameters with its seed index's keys of that update (a run: its seeds; a sweep:
    cells x seeds, so that every cell meets the same episodes)."""

    def __init__(self, trainer, seed_index: Array, every: int, last: int):
        config = trainer.config
        self.seed, self.every, self.last, self.seed_index = config.seed, every, last, seed_index
        self.evaluate = make_evaluator(trainer, config.eval_episodes, config.eval_greedy)

    def due(self, update: int, previous: int) -> bool:
        return eval_due(update, previous, self.every, self.last)

    def __call__(self, params, update: int) -> EvalResult:
        """Evaluate `params` (leaves [R, ...]) with the keys of `update`; on the device."""
        return self.evaluate(params, eval_keys(self.seed, self.seed_index, update))
