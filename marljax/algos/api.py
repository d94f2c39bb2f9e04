"""The algorithm protocol: the pieces an algorithm supplies, what it declares, what is derived.

An algorithm is a module under `marljax/algos/` with
* its config section(s): frozen dataclasses of `marljax.schema.setting` fields;
* `build(config, env, *, layout=Layout(), correction="none") -> Algorithm`: its pure pieces
  (`Algorithm` below: `init_learner`, `init_actors`, `collect`, `learn`, `act`, `cost_pieces`,
  its `networks`, and `policy_step` where it serves host envs), each typed by the aliases below;
* its declarations: `Algorithm.extra_layout` (what it keeps beside the learner, `init_extra`, and how
  each part lies on the mesh, a pytree of `Placed`) and `AlgorithmSpec.losses` (which of its
  metrics the NaN guard watches);
* an `AlgorithmSpec(schema, build, losses)`, registered by one line in `marljax/algos/__init__.py`.

The framework derives the rest in one place, `derive`: `init` (learner, actors, extra),
`update` (gather the parameters to the acting layout, `collect`, `learn`), `run_updates` (a
`lax.scan` of updates) and `train` (PureJaxRL's `train(key)`), returned as a `Trainer` (an
`AsyncTrainer` where the pieces can run `mode=async`). The host loop, sweeps, the async pipeline,
the mesh and the benchmarks read that object and the declarations; none of them imports an
algorithm or knows its field or metric names. An algorithm builds its pieces from the shared
modules beside it: `acting.py` (a group's network per `param_sharing`, the actors, the rollout
scan with reward shaping, episode statistics), `q_acting.py` (the Q family's acting) and
`learning.py` (the learner's first state, descent, epochs of minibatches).

Adding an algorithm touches its module, its tests and one registration line; see
CONTRIBUTING.md ("Adding an algorithm") and docs/tutorials/own-algorithm.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from marljax.config import AlgorithmSchema, Config
from marljax.parallel.layouts import Layout
from marljax.parallel.mesh import AGENTS, ENVS, Placed
from marljax.schema import ConfigError, divisors, setting
from marljax.types import ActorState, HParams, LearnerState, TrainState, UpdateMetrics, hparams_of

Array = jax.Array


# ------------------------------------------------------------------ the state pytrees, by name
# Shapes are per seed (a run vmaps over seeds); E: environments, A_g: agents of group g.
Key = Array  # [2] uint32 PRNG key
Params = dict  # group (or an algorithm's own entry, e.g. a central critic) -> flax params, leaves [1 or A_g, ...]
GroupArrays = dict  # group -> [B, A_g, ...]: observations, reset flags, hidden states, masks, actions
Metrics = UpdateMetrics  # one update's figures by name, and the episodes that finished
Extra = Any  # what an algorithm keeps beside the learner (None, or a pytree `Algorithm.extra_layout` lays out)
Batch = Any  # what `collect` hands to `learn` (the PPO family: types.Trajectory; the async pipeline carries it)


class Collect(Protocol):
    """One rollout of num_steps on every local environment with `params` in the acting layout
    (every agent's set beside every environment); `update`, the learner's counter, sets what
    depends on it (the reward-shaping factor, a Q-learner's epsilon; None: update 0)."""

    def __call__(
        self, params: Params, actors: ActorState, key: Key, update: Array | None = None, /
    ) -> tuple[ActorState, Batch]: ...


class Learn(Protocol):
    """One update's learning on `batch` (acting layout, as `collect` made it): moves the learner
    on (its `update` counter included; its key is already the next update's) and the extra state."""

    def __call__(
        self, learner: LearnerState, extra: Extra, batch: Batch, key: Key, /
    ) -> tuple[LearnerState, Extra, Metrics]: ...


class Act(Protocol):
    """Every group's actions on a batch of B environments (obs: group -> [B, A_g, ...]), for
    evaluation and policy export: -> (group -> actions [B, A_g(, d)], group -> hidden' [B, A_g, H])."""

    def __call__(
        self,
        params: Params,
        obs: GroupArrays,
        reset: GroupArrays,
        hidden: GroupArrays,
        mask: GroupArrays,
        key: Key,
        /,
        greedy: bool = False,
    ) -> tuple[GroupArrays, GroupArrays]: ...


class PolicyStep(Protocol):
    """One acting step for host (Python) envs, E copies: obs group -> [E, A_g, ...] -> group ->
    (action [E, A_g(, d)], logp [E, A_g], value [E, A_g], hidden [E, A_g, H] | None)."""

    def __call__(
        self, params: Params, obs: GroupArrays, reset: GroupArrays, hidden: GroupArrays, key: Key, /
    ) -> dict: ...


InitLearner = Callable[[Key], LearnerState]  # the seed's key -> the learner (no env touched)
InitActors = Callable[[Key], ActorState]  # the seed's key -> every environment reset
InitExtra = Callable[[Key, LearnerState], Extra]  # the seed's key and its learner -> the extra state
CostPieces = Callable[[TrainState], "list[CostPiece]"]  # a seed's state (arrays or shapes) -> pieces of one update
InitialHidden = Callable[[int], GroupArrays]  # B -> `act`'s recurrent state of B environments before their episodes


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


# ------------------------------------------------------------------ the layout declaration
# `Placed(axes, group)` per part of the extra state, with axes ENVS (split over `data`, as the
# learner splits the environments), AGENTS (the agents of `group`: split over `agent` where its
# sets are) or None (whole); the vocabulary is the mesh's (marljax.parallel.mesh), which maps it.
REPLICATED = Placed()


class ExtraPart(NamedTuple):
    """A part of the extra state that the memory estimate reports on its own line, with the
    settings that size it (what a message tells a user to lower)."""

    name: str  # as the estimate names it, e.g. "replay buffer"
    keys: tuple[str, ...]  # the settings that size it, e.g. ("replay.buffer_size",)
    of: Callable[[Any], Any]  # the extra state (arrays or shapes) -> that part


ExtraLayout = Any  # a pytree prefix of the extra state whose leaves are `Placed`


def _is_placed(x: Any) -> bool:
    return isinstance(x, Placed)


def placed_leaves(declared: ExtraLayout, extra_shape: Any, sizes: Mapping[str, int], lead: int = 0) -> Any:
    """The declaration checked against the extra state's shapes (leaves with `lead` axes before
    the per-seed ones) and broadcast to its leaves: a pytree like `extra_shape` of `Placed`.
    A declaration that does not fit raises ValueError, one line naming the part."""
    shapes = jax.tree_util.tree_flatten_with_path(extra_shape)[0]
    places = jax.tree_util.tree_flatten_with_path(declared, is_leaf=_is_placed)[0]
    for path, place in places:
        if not isinstance(place, Placed):
            raise ValueError(
                f"extra-state layout: extra{jax.tree_util.keystr(path)} is declared {place!r}, not a Placed"
            )
        if not any(p[: len(path)] == path for p, _ in shapes) and not (path == () and not shapes):
            raise ValueError(
                f"extra-state layout: extra{jax.tree_util.keystr(path)} is declared but the state has no such part"
            )
    out = []
    for path, leaf in shapes:
        where = f"extra{jax.tree_util.keystr(path)}"
        place = next((pl for p, pl in places if path[: len(p)] == p), None)
        if place is None:
            raise ValueError(f"extra-state layout: {where} {tuple(leaf.shape)} has no declared layout (a Placed)")
        shape = tuple(leaf.shape)[lead:]
        if len(place.axes) > len(shape):
            raise ValueError(
                f"extra-state layout: {where} has {len(shape)} axes per seed, its layout names {len(place.axes)}"
            )
        for i, axis in enumerate(place.axes):
            if axis not in (ENVS, AGENTS, None):
                raise ValueError(
                    f"extra-state layout: {where} axis {i} is {axis!r}; allowed: {ENVS!r}, {AGENTS!r}, None"
                )
            if axis == AGENTS and place.group not in sizes:
                raise ValueError(
                    f"extra-state layout: {where} axis {i} counts the agents of group {place.group!r}, "
                    f"which the env does not have; its groups: {', '.join(sizes)}"
                )
            if axis == AGENTS and shape[i] not in (1, sizes[str(place.group)]):  # one set shared by them: 1
                raise ValueError(
                    f"extra-state layout: {where} axis {i} is declared the {sizes[str(place.group)]} agents "
                    f"of {place.group!r}, but has size {shape[i]}"
                )
        out.append(place)
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(extra_shape), out)


# ------------------------------------------------------------------ what an algorithm supplies
@dataclasses.dataclass(frozen=True)
class Algorithm:
    """The pure pieces of one algorithm for one env and layout (shapes per seed), from which
    `derive` builds every mode's programs, and what it declares about its state.

    `layout` (marljax.parallel.layouts) said which mesh axes the pieces run under: `learn` sees
    the learning layout (a group's agents split over `agent` where its sets are, see
    `split_groups`), `collect` and `act` the acting layout (every agent beside every env)."""

    networks: Mapping[str, Any]  # group -> flax module; `act` reads params[group] of these groups only
    init_learner: InitLearner
    init_actors: InitActors
    collect: Collect
    learn: Learn
    act: Act
    cost_pieces: CostPieces  # one update's unscanned pieces; run it on an unsharded build
    init_extra: InitExtra | None = None  # None: the algorithm keeps nothing beside the learner
    extra_layout: ExtraLayout = None  # how each part of init_extra's state lies on the mesh: a pytree prefix of Placed
    policy_step: PolicyStep | None = None  # host envs and mode=async: acting on the host's copies
    extra_parts: tuple[ExtraPart, ...] = ()  # parts of the extra state the memory estimate names apart
    initial_hidden: InitialHidden | None = None  # None: the GRU networks' (`gru_hidden`)


def gru_hidden(config: Config, env: Any) -> InitialHidden:
    """`act`'s recurrent state where the networks are GRUs: group -> zeros [B, A_g, gru_hidden_size]
    (recurrent=true), else {}."""

    def initial(batch: int) -> GroupArrays:
        if not config.recurrent:
            return {}
        return {g.name: jnp.zeros((batch, g.size, config.gru_hidden_size)) for g in env.groups}

    return initial


class MakeAlgorithm(Protocol):
    def __call__(self, config: Config, env: Any, *, layout: Layout = ..., correction: str = "none") -> Algorithm: ...


def split_groups(groups: Sequence[Any], layout: Layout) -> frozenset[str]:
    """The groups whose parameter sets `layout` splits over `agent` (agent-parallel: every group
    but those it keeps whole on every agent device)."""
    if not layout.agent_parallel:
        return frozenset()
    return frozenset(g.name for g in groups if g.name not in layout.replicated)


# ------------------------------------------------------------------ what the framework derives
@dataclasses.dataclass(frozen=True)
class Trainer:
    """One algorithm's programs for one env (shapes per seed; vmap over seeds), derived from its
    `Algorithm` pieces by `derive`. `train` runs unsharded only."""

    config: Config
    env: Any  # EnvAdapter
    networks: Mapping[str, Any]  # group -> flax module; `act` reads params[group] of these groups only
    init: Callable[[Key], TrainState]  # learner, actors and extra state of one seed
    init_learner: InitLearner
    update: Callable[[TrainState], tuple[TrainState, Metrics]]  # one rollout and its learning
    run_updates: Callable[[TrainState, int], tuple[TrainState, Metrics]]  # n updates in one lax.scan: metrics [n]
    train: Callable[[Key], tuple[TrainState, Metrics]]  # init plus every update (PureJaxRL's train(rng))
    act: Act
    cost_pieces: CostPieces
    init_actors: InitActors
    collect: Collect
    losses: tuple[str, ...]  # the metrics the NaN guard watches (AlgorithmSpec.losses)
    extra_layout: ExtraLayout  # the extra state's declared layout (None: no extra state)
    extra_parts: tuple[ExtraPart, ...]  # what the memory estimate reports of it apart
    initial_hidden: InitialHidden  # `act`'s recurrent state of B environments (evaluation, exported policies)

    def extra_places(self, extra_shape: Any, lead: int = 0) -> Any:
        """`placed_leaves` of this trainer's declaration on `extra_shape` (checked)."""
        return placed_leaves(self.extra_layout, extra_shape, {g.name: g.size for g in self.env.groups}, lead)


@dataclasses.dataclass(frozen=True)
class AsyncTrainer(Trainer):
    """A trainer that can run mode=async (marljax/pipeline): its learner keeps no extra state, so
    `learn` is the learner's alone; `update` is `collect` with the learner's parameters, then it."""

    learn: Callable[[LearnerState, Batch, Key], tuple[LearnerState, Metrics]]
    policy_step: PolicyStep


def derive(config: Config, env: Any, layout: Layout, algo: Algorithm, losses: tuple[str, ...]) -> Trainer:
    """The framework's programs from an algorithm's pieces, the same for every algorithm.

    `update`: the learner's key split in three (the next update's, collect's, learn's); the
    parameters gathered to the acting layout (`Layout.to_acting` over `split_groups`); `collect`
    with them and the learner's update counter; `learn` on what it collected."""
    if (algo.init_extra is None) != (algo.extra_layout is None):
        raise ValueError("an algorithm's init_extra and its extra_layout (how that state lies on the mesh) go together")
    split = split_groups(env.groups, layout)

    def init(key: Key) -> TrainState:
        learner = algo.init_learner(key)
        extra = None if algo.init_extra is None else algo.init_extra(key, learner)
        return TrainState(learner, algo.init_actors(key), extra)

    def update(state: TrainState) -> tuple[TrainState, Metrics]:
        learner = state.learner
        key, k_collect, k_learn = jax.random.split(learner.key, 3)
        acting = layout.to_acting(learner.params, split)  # every agent's parameters, beside every env
        assert state.actors is not None  # only an async run's result leaves them out
        actors, batch = algo.collect(acting, state.actors, k_collect, learner.update)
        learner, extra, metrics = algo.learn(learner.replace(key=key), state.extra, batch, k_learn)
        return TrainState(learner, actors, extra), metrics

    def run_updates(state: TrainState, n: int) -> tuple[TrainState, Metrics]:
        return jax.lax.scan(lambda s, _: update(s), state, None, length=n)

    def train(key: Key) -> tuple[TrainState, Metrics]:
        if layout.num_env_shards != 1:
            raise ValueError("train(key) runs unsharded; use marljax.train.loop for a device mesh")
        return run_updates(init(key), config.num_updates)

    common = dict(
        config=config,
        env=env,
        networks=algo.networks,
        init=init,
        init_learner=algo.init_learner,
        update=update,
        run_updates=run_updates,
        train=train,
        act=algo.act,
        cost_pieces=algo.cost_pieces,
        init_actors=algo.init_actors,
        collect=algo.collect,
        losses=tuple(losses),
        extra_layout=algo.extra_layout,
        extra_parts=algo.extra_parts,
        initial_hidden=algo.initial_hidden or gru_hidden(config, env),
    )
    if algo.policy_step is None or algo.init_extra is not None:
        return Trainer(**common)

    def learn(learner: LearnerState, batch: Batch, key: Key) -> tuple[LearnerState, Metrics]:
        learner, _, metrics = algo.learn(learner, None, batch, key)
        return learner, metrics

    return AsyncTrainer(**common, learn=learn, policy_step=algo.policy_step)


@dataclasses.dataclass(frozen=True)
class AlgorithmSpec:
    """One registered algorithm: its config schema, its pieces' builder, and the metrics of its
    `learn` that the NaN guard watches (a non-finite value there stops the run)."""

    schema: AlgorithmSchema
    build: MakeAlgorithm
    losses: tuple[str, ...] = ("loss_total",)

    @property
    def name(self) -> str:
        return self.schema.name

    def make_train(self, config: Config, env: Any, *, layout: Layout = Layout(), correction: str = "none") -> Trainer:
        """The algorithm's `Trainer` for `env` under `layout`: its pieces, derived."""
        return derive(config, env, layout, self.build(config, env, layout=layout, correction=correction), self.losses)


@dataclasses.dataclass(frozen=True)
class EpochSchedule:
    """Section fields of algorithms that learn each rollout in epochs of minibatches: by default a
    minibatch takes num_steps/num_minibatches time steps of every environment; `minibatch_split=envs`:
    every time step of num_envs/num_minibatches environments (`learning.Minibatches`)."""

    update_epochs: int = setting(4, "passes over each rollout", minimum=1, jaxmarl=("UPDATE_EPOCHS", "NUM_EPOCHS"))
    num_minibatches: int = setting(
        4,
        "minibatches per epoch, each num_steps/num_minibatches steps of every env "
        "(minibatch_split=envs: every step of num_envs/num_minibatches envs)",
        minimum=1,
        jaxmarl="NUM_MINIBATCHES",
    )
    minibatch_split: str = setting(
        "time",
        "what a minibatch is a slice of: time (steps of every env) | envs (whole "
        "rollouts of some envs: a recurrent network replays each from its first step, as "
        "JaxMARL's recurrent PPO does)",
        choices=("time", "envs"),
    )

    def check(self, config: Config) -> None:
        name = next(k for k, s in config.sections.items() if s is self)
        split, count = ("envs", config.num_envs) if self.minibatch_split == "envs" else ("steps", config.num_steps)
        if count % self.num_minibatches:
            raise ConfigError(
                f"{name}.num_minibatches",
                f"must divide num_{split}={count} (each minibatch takes num_{split}/num_minibatches "
                f"{'environments' if split == 'envs' else 'steps of every environment'}); allowed: {divisors(count)}"
                + ("" if split == "envs" else f", or {name}.minibatch_split=envs for a divisor of num_envs"),
            )

    def minibatch_steps(self, config: Config) -> int:
        """Time steps of every environment (of its share) that one minibatch takes."""
        return config.num_steps if self.minibatch_split == "envs" else config.num_steps // self.num_minibatches


def hparams_from_config(config: Config, kind: type[HParams] = HParams) -> HParams:
    """The learner's traced hyperparameters, float32 scalars [] of `kind` (`types.HParams` or an
    algorithm's subclass of it) read from `config`."""
    return hparams_of(kind, config.value)
