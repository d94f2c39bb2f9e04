"""Named pytrees of the training state. Shapes are per seed; a run stacks a leading [S] axis.

`E` is the number of environments (global in `init`, device-local inside a
sharded chunk), `A_g` the agents of group g, `N` all agents, `T` num_steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

Array = jax.Array
# Host-side collectors (PettingZoo envs, pipeline/host_*.py) fill the rollout pytrees with numpy
# arrays; they are placed on the learner's devices before `learn` reads them.
HostOrDevice = jax.Array | np.ndarray
A = TypeVar("A", bound=HostOrDevice)  # a GroupBatch's leaves: jax.Array on device, np.ndarray on the host


def traced(key: str) -> Any:
    """A field of a traced-hyperparameters pytree, read from the config's dotted `key`."""
    return dataclasses.field(metadata={"key": key})


@struct.dataclass
class HParams:
    """The traced hyperparameters every learner has: float32 scalars [] carried in the learner
    state, so that a sweep vmaps them (one row per cell and seed: [R] across a sweep's rows).
    An algorithm with traced settings of its own subclasses this with `traced(key)` fields, one per
    field that `marljax.schema.traced_keys` lists for its config."""

    lr: Array = traced("lr")
    gamma: Array = traced("gamma")
    max_grad_norm: Array = traced("max_grad_norm")

    if TYPE_CHECKING:  # added by flax.struct.dataclass; declared for the type checker

        def replace(self, **changes: Any) -> HParams: ...


def hparam_keys(kind: type[HParams]) -> dict[str, str]:
    """Field name -> the config's dotted key, of a traced-hyperparameters class."""
    return {f.name: f.metadata["key"] for f in dataclasses.fields(kind)}


def hparams_of(kind: type[HParams], value: Callable[[str], Any]) -> HParams:
    """`kind` with each field float32 `value(dotted key)` (a scalar, or rows [R])."""
    return kind(**{name: jnp.asarray(value(key), jnp.float32) for name, key in hparam_keys(kind).items()})


@struct.dataclass
class LearnerState:
    """What the learner owns: replicated across the `data` mesh axis, split over `seed`."""

    params: dict  # group -> flax params (one set per group; ready for a leading agent axis)
    opt_state: Any  # Adam moments over `params`
    hparams: HParams
    key: Array  # [2] uint32 PRNG key
    update: Array  # [] int32, updates done so far

    if TYPE_CHECKING:  # added by flax.struct.dataclass; declared for the type checker

        def replace(self, **changes: Any) -> LearnerState: ...


@struct.dataclass
class ActorState:
    """What the environments own: split over `data` (and `seed`)."""

    env_state: Any  # the env's state pytree, leaves [E, ...]
    obs: dict  # group -> [E, A_g, *obs_shape] float32
    reset: dict  # group -> [E, A_g] bool: obs starts a new episode (recurrent state resets)
    hidden: dict  # group -> [E, A_g, H] GRU state; {} for feed-forward networks
    ep_return: Array  # [E, N] undiscounted return of the running episode, per agent
    ep_length: Array  # [E] int32 steps in the running episode

    if TYPE_CHECKING:  # added by flax.struct.dataclass; declared for the type checker

        def replace(self, **changes: Any) -> ActorState: ...


@struct.dataclass
class TrainState:
    learner: LearnerState
    actors: ActorState | None  # None in an async run's result: the actors' state stays with them
    extra: Any = None  # what else an algorithm keeps (the Q-learning family: target network, replay)

    if TYPE_CHECKING:  # added by flax.struct.dataclass; declared for the type checker

        def replace(self, **changes: Any) -> TrainState: ...


class GroupBatch(NamedTuple, Generic[A]):
    """One group's rollout, time-major: `GroupBatch[Array]` on device, `GroupBatch[np.ndarray]` as a
    host collector builds it."""

    obs: A  # [T, E, A_g, *obs_shape]
    action: A  # [T, E, A_g] int32, or [T, E, A_g, d] float32
    logp: A  # [T, E, A_g] behaviour log-prob
    value: A  # [T, E, A_g]
    reward: A  # [T, E, A_g]
    done: A  # [T, E, A_g] the agent's episode ended after this step
    mask: A | None  # [T, E, A_g, n] available actions, None where the env has no masks
    reset: A | None  # [T, E, A_g] obs starts an episode (recurrent only)
    hidden: A | None  # [T, E, A_g, H] GRU state before this step (recurrent only)
    world: A | None  # [T, E, W] global state for a centralised critic (MAPPO only)


class Trajectory(NamedTuple):
    """One rollout in the acting layout, as `collect` returns it and `learn` takes it."""

    batch: dict  # group -> GroupBatch, leaves [T, E, A_g, ...]
    last_value: dict  # group -> [E, A_g] behaviour value of the observation after the last step
    stats: Any  # EpisodeStats of the episodes that finished during the rollout


class EpisodeStats(NamedTuple):
    """Episodes that finished during one update, summed over environments (numpy where a host
    collector or `join_slices` summed them)."""

    return_sum: HostOrDevice  # [N] per-agent undiscounted return, summed over finished episodes
    length_sum: HostOrDevice  # [] summed episode lengths
    count: HostOrDevice  # type: ignore[assignment]  # [] finished episodes (the field shadows tuple.count)
    won_sum: HostOrDevice  # [] of those, episodes won (envs with a win condition, e.g. SMAX; else 0)

    @staticmethod
    def zero(num_agents: int) -> EpisodeStats:
        return EpisodeStats(jnp.zeros(num_agents), jnp.float32(0), jnp.float32(0), jnp.float32(0))

    def add(self, ep_return: Array, ep_length: Array, done: Array, won: Array) -> EpisodeStats:
        """Count the episodes that end now: ep_return [E, N] and ep_length [E] including this
        step, done [E] and won [E] bool."""
        fin = done.astype(jnp.float32)
        return EpisodeStats(
            self.return_sum + jnp.sum(fin[:, None] * ep_return, axis=0),
            self.length_sum + jnp.sum(fin * ep_length),
            self.count + jnp.sum(fin),
            self.won_sum + jnp.sum(fin * won.astype(jnp.float32)),
        )


@struct.dataclass
class UpdateMetrics:
    """What `learn` reports of one update: the algorithm's own figures by the names it gives them
    (losses, lr, ...: [] float32) and the episodes that finished during its rollout. A chunk's
    program stacks its updates ([n, ...]; [S, n, ...] across seeds on the host)."""

    values: dict  # name -> [] float32
    episodes: EpisodeStats

    def __getitem__(self, name: str) -> Array:
        return self.values[name]

    if TYPE_CHECKING:  # added by flax.struct.dataclass; declared for the type checker

        def replace(self, **changes: Any) -> UpdateMetrics: ...
