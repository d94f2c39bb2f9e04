"""Micro-batches of mode=async (`async.micro_batches=M`): an actor's environments cut into M
slices along the environment axis, and the M slices of one update joined back into one batch.

An actor thread with E environments rolls them out as M separate jitted rollouts of E/M
environments (one compiled program per slice index, `Layout.env_slice_of`), and hands each to
the buffer as soon as it is done, with the version of the parameters it used. The learner takes
any M slices (block mode: the next M tickets, from whichever actors made them) and joins them
along the environment axis, so that `learn` sees the same shapes as with M = 1. Each slice keeps
its behaviour log-probabilities per step, which is what the correction (decoupled PPO, V-trace)
weighs against, so slices of different versions mix soundly in one update.

Host (PettingZoo) envs: with independent stepping (host_copies.py) all of a thread's copies
keep stepping and each item is the first num_envs/M finished segments per seed; with lockstep
stepping (host_rollout.py) a thread holds M collectors of num_envs/M copies each (`SliceRotation`,
their own env seeds) and rolls them out in turn, as a JAX env's slices are.

Each slice of a thread uses the keys that environment slice would get in the whole rollout
(keys split per global environment index, the rollout key of batch `ticket // M`): with one
thread in deterministic mode, where every slice of update u has version u - K, a run with M > 1
computes the same numbers as M = 1 up to float reduction order.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from marljax.types import EpisodeStats, Trajectory

# Trajectory leaves after the seed vmap: batch [S, T, E, ...], last_value [S, E, A_g], stats [S, ...]
BATCH_ENV_AXIS, LAST_VALUE_ENV_AXIS = 2, 1


def slice_actors(actors: Any, count: int) -> list[Any]:
    """An actor state with leaves [S, E, ...] -> `count` states with leaves [S, E/count, ...]
    (consecutive environments, in order)."""
    E = jax.tree.leaves(actors)[0].shape[1]
    n = E // count
    return [jax.tree.map(lambda x, j=j: x[:, j * n : (j + 1) * n], actors) for j in range(count)]


def join_slices(slices: list[Trajectory]) -> Trajectory:
    """M rollouts of E/M environments each -> one rollout of E environments, on the host.

    The steps are concatenated along the environment axis in the order given; the episode
    statistics (sums over finished episodes) are added."""
    host = jax.device_get(slices)
    batch = jax.tree.map(lambda *xs: np.concatenate(xs, axis=BATCH_ENV_AXIS), *[t.batch for t in host])
    last_value = jax.tree.map(lambda *xs: np.concatenate(xs, axis=LAST_VALUE_ENV_AXIS), *[t.last_value for t in host])
    stats = EpisodeStats(*(sum(parts) for parts in zip(*[t.stats for t in host])))
    return Trajectory(batch, last_value, stats)


class SliceRotation:
    """M collectors, one per environment slice, used in turn: call k rolls out slice k % M (its
    own copies and state), so an actor thread hands over one slice per pass of its loop."""

    # set in __init__ with object.__setattr__ (this class's own __setattr__ forwards to the parts)
    parts: list[Any]
    next: int
    device: Any

    def __init__(self, parts: list[Any]):
        object.__setattr__(self, "parts", parts)
        object.__setattr__(self, "next", 0)
        object.__setattr__(self, "device", parts[0].device)

    def __setattr__(self, name: str, value: Any) -> None:
        # beat, newest, cancelled: set by the actor thread, used by each slice's collector
        for part in self.parts:
            setattr(part, name, value)

    def collect(self, params, ticket: int, **kw) -> tuple[Trajectory, int]:
        j = self.next
        object.__setattr__(self, "next", (j + 1) % len(self.parts))
        return self.parts[j].collect(params, ticket, **kw)

    def close(self) -> None:
        for part in self.parts:
            getattr(part, "close", lambda: None)()
