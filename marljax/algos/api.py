"""The contract every algorithm implements, and what an algorithm registers.

An algorithm is a module under `marljax/algos/` with
* its config section(s): frozen dataclasses of `marljax.config.setting` fields;
* `make_train(config, env, *, layout=Layout(), correction="none") -> Trainer` (or
  `AsyncTrainer` where it supports mode=async): pure, jittable pieces;
* an `AlgorithmSpec` naming both, with its defaults and what it supports, registered by one
  line in `marljax/algos/__init__.py`.

The host loop, sweeps, the async pipeline and the benchmarks compose these pieces; none of
them imports an algorithm by name. An algorithm builds them from the shared modules beside it:
`acting.py` (a group's network per `param_sharing`, the actors, the rollout scan, episode
statistics) and `learning.py` (the learner's first state, descent, epochs of minibatches, the
chunked loop of updates).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from marljax.config import AlgorithmSchema, Config, ConfigError, divisors, hparams_values, setting

Array = jax.Array


class CostPiece(NamedTuple):
    """An unscanned piece of one update, for FLOP counting. XLA's cost analysis counts a scan's
    body once, whatever its trip count, so the bench compiles `fn(*args)` alone (args may be
    `jax.ShapeDtypeStruct`s) and multiplies its FLOPs by `trips`. A gradient step also says how
    many transitions it learns from: the bench reports gradient steps per second and their batch."""

    name: str  # what it is, e.g. "rollout step", "gradient step"
    part: str  # "rollout" (acting in the environments) or "learn" (everything after)
    fn: Callable
    args: tuple
    trips: int  # times it runs in one update of one seed
    transitions: int = 0  # a gradient step's batch: env steps of one seed it learns from; 0: not a gradient step


@dataclasses.dataclass(frozen=True)
class Trainer:
    """The pure pieces of one algorithm for one env (shapes per seed; vmap over seeds).

    `layout` (marljax.parallel.layouts) said which mesh axes the pieces run under; `train` runs
    unsharded only."""

    config: Config
    env: Any  # EnvAdapter
    networks: Mapping[str, Any]  # group -> flax module; `act` reads params[group] of these groups only
    init: Callable  # key [2] -> TrainState
    init_learner: Callable  # key [2] -> LearnerState: the learner `init(key)` makes (no env touched)
    update: Callable  # TrainState -> (TrainState, metrics): one rollout and its learning
    run_updates: Callable  # (TrainState, n) -> (TrainState, metrics [n]): n updates in one lax.scan
    train: Callable  # key -> (TrainState, metrics): init plus every update (PureJaxRL's train(rng))
    # (params, obs, reset, hidden, mask, key, greedy) -> (actions, hidden), every group on a batch of
    # B envs (obs: group -> [B, A_g, ...]): evaluation and policy export
    act: Callable
    cost_pieces: Callable  # TrainState of one seed (arrays or shapes) -> list[CostPiece] of one update


@dataclasses.dataclass(frozen=True)
class AsyncTrainer(Trainer):
    """A trainer whose update splits into acting and learning (mode=async, marljax/pipeline):
    `update` is `collect` with the learner's parameters, then `learn` on that trajectory."""

    init_actors: Callable  # key [2] -> ActorState: the actors `init(key)` makes
    collect: Callable  # (acting params, ActorState, key) -> (ActorState, Trajectory): one rollout
    learn: Callable  # (LearnerState, Trajectory, key) -> (LearnerState, metrics): one update on it
    policy_step: Callable  # (params, obs, reset, hidden, key) -> group -> (action, logp, value, hidden): host envs


class MakeTrain(Protocol):
    def __call__(self, config: Config, env: Any, *, layout: Any = ..., correction: str = "none") -> Trainer: ...


@dataclasses.dataclass(frozen=True)
class AlgorithmSpec:
    """One registered algorithm."""

    schema: AlgorithmSchema
    make_train: MakeTrain

    @property
    def name(self) -> str:
        return self.schema.name


@dataclasses.dataclass(frozen=True)
class EpochSchedule:
    """Section fields of algorithms that learn each rollout in epochs of minibatches, where a
    minibatch takes num_steps/num_minibatches time steps of every environment."""

    update_epochs: int = setting(4, "passes over each rollout", minimum=1, jaxmarl=("UPDATE_EPOCHS", "NUM_EPOCHS"))
    num_minibatches: int = setting(4, "minibatches per epoch, each num_steps/num_minibatches steps of every env",
                                   minimum=1, jaxmarl="NUM_MINIBATCHES")  # fmt: skip

    def check(self, config: Config) -> None:
        if config.num_steps % self.num_minibatches:
            name = next(k for k, s in config.sections.items() if s is self)
            raise ConfigError(
                f"{name}.num_minibatches",
                f"must divide num_steps={config.num_steps} (each minibatch takes num_steps/num_minibatches steps of "
                f"every environment); allowed: {divisors(config.num_steps)}",
            )

    def minibatch_steps(self, config: Config) -> int:
        """Time steps of every environment that one minibatch takes."""
        return config.num_steps // self.num_minibatches


def hparams_from_config(config: Config) -> dict:
    """The learner's traced hyperparameters: dotted key -> float32 scalar [] (see types.HParams)."""
    return {key: jnp.float32(value) for key, value in hparams_values(config).items()}
