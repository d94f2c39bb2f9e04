"""What every offline algorithm shares: its dataset in place of an env stream.

An offline algorithm (`bc`, `iql_cql`, `maicq`) learns from a dataset (`offline.dataset=PATH`,
marljax/datasets.py: `marljax record` writes one; OG-MARL's Vaults read too) and is evaluated
online, in the env the dataset came from, by the run's own evaluation (`eval_every`). It is an
`api.Algorithm` like any other, so the mesh, vmapped seeds, sweeps, checkpoints, resume, export
and the bench take it as they are:

* **one update is one gradient step** on `num_envs` sequences of `num_steps` transitions sampled
  uniformly from the dataset (each a window of consecutive steps of one stream), so that
  `total_timesteps` counts the transitions learned from and a metrics row's `env_steps` (and the
  progress bar's steps/s) the transitions learned so far. With `mesh.data` = D each data shard
  samples num_envs/D of the sequences with its own key and the gradients are averaged.
* **the dataset rides in the extra state** (`OfflineExtra.data`, whole on every device of a seed):
  read and checked on the host when the algorithm is built (a damaged one is refused there, before
  anything compiles), copied to the devices once by `init`. Each seed holds its own copy and a
  checkpoint saves it with the rest of the state: a dataset is meant to be the size of a replay
  buffer (the memory estimate names it, `dataset`).
* `collect` steps no environment: it returns the actors as they are and no finished episode, so
  a row's training `return_mean` is empty and its `eval_return` is the score.

The dataset's agents must share their spaces (OG-MARL's layout stacks them); a group of the run
(`param_sharing`) takes its agents' slice of the stacked axis.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from marljax.algos.acting import VecEnv
from marljax.algos.api import REPLICATED, Algorithm, CostPiece, ExtraPart, hparams_from_config
from marljax.algos.learning import init_keys, init_learner, learning_rate
from marljax.config import Config
from marljax.envs.adapter import AgentGroup, EnvAdapter
from marljax.parallel.layouts import Layout
from marljax.schema import ConfigError, setting
from marljax.types import ActorState, EpisodeStats, HParams, LearnerState, TrainState, UpdateMetrics

Array = jax.Array
Data = Any  # an array of a dataset: np.ndarray on the host, jax.Array on the devices
KEY = "offline.dataset"
# an offline run's defaults: a gradient step on 256 transitions per update, 20k of them, evaluated 20 times
# and checkpointed 4 times (a checkpoint holds the dataset)
DEFAULTS = {
    "num_envs": 256,
    "num_steps": 1,
    "total_timesteps": 256 * 20_000,
    "eval_every": 1000,
    "checkpoint_every": 5000,
    "num_chunks": 20,
    "lr": 1e-3,
    "anneal_lr": False,
}


@dataclasses.dataclass(frozen=True)
class OfflineConfig:
    """`offline.*`: the dataset an offline algorithm learns from, in place of an env stream."""

    dataset: str = setting(
        "",
        "the dataset: a Vault directory (`marljax record` writes one; OG-MARL's read too) in "
        "the run's env; an update is one gradient step on num_envs sequences of num_steps "
        "transitions sampled from it",
    )

    def check(self, config: Config) -> None:
        """The dataset's description (cheap: no array is read) names the run's env; the arrays
        themselves are read and checked when the algorithm is built."""
        if not self.dataset:
            return  # refused when the algorithm is built: --help and the settings list need no dataset
        from marljax.datasets import DatasetError, read_description

        try:
            described = read_description(self.dataset)
        except DatasetError as exc:
            raise ConfigError(KEY, str(exc)) from None
        if not described:  # a Vault marljax did not write: its shapes are checked against the env when built
            return
        theirs = (described.get("env"), described.get("env_kwargs") or {})
        if theirs != (config.env, dict(config.env_kwargs)):
            named = lambda env, kwargs: env + (f" with env_kwargs {kwargs}" if kwargs else "")  # noqa: E731
            settings = " ".join([f"env={theirs[0]}", *(f"env_kwargs.{k}={v}" for k, v in theirs[1].items())])
            raise ConfigError(
                "env",
                f"{named(config.env, dict(config.env_kwargs))}: the dataset {self.dataset} was "
                f"recorded on {named(*theirs)}; learn in its env: {settings}",
            )


class Transitions(NamedTuple):
    """A dataset (leaves [B, T, ...]; B streams, T steps, N agents) or a batch of windows of it
    ([E, L, ...]), as the learners read it."""

    obs: Data  # [B, T, N, *obs] float32: what each agent saw before acting
    action: Data  # [B, T, N] int32, or [B, T, N, D] float32 (Box)
    reward: Data  # [B, T, N] float32
    terminal: Data  # [B, T] bool: the episode ended after this step, not by the time limit
    truncation: Data  # [B, T] bool: it hit the time limit after this step (the next step starts another)
    legal: Data | None  # [B, T, N, A] bool: available actions (Discrete), None for Box actions
    world: Data | None  # [B, T, W] float32: the env's global state where the dataset holds one


@struct.dataclass
class OfflineExtra:
    """What an offline algorithm keeps beside the learner."""

    data: Transitions  # the dataset, whole on every device of a seed
    target: Any = None  # a Q-learner's target network (the learner's parameter tree), or None

    if TYPE_CHECKING:  # added by flax.struct.dataclass; declared for the type checker

        def replace(self, **changes: Any) -> OfflineExtra: ...


def extra_layout(target: bool) -> OfflineExtra:
    """The dataset and a target network whole on every device of a seed (offline algorithms split
    no group over `agent`)."""
    return OfflineExtra(REPLICATED, REPLICATED if target else None)  # type: ignore[arg-type]


DATASET_PART = ExtraPart("dataset", (KEY,), lambda extra: extra.data)


# ------------------------------------------------------------------------------------ loading
def load(config: Config, env: EnvAdapter) -> Transitions:
    """The run's dataset on the host (numpy), checked against `env`; ConfigError (one line, naming
    the file or the mismatch) for a missing, damaged or mismatched one."""
    offline_cfg = config.section(OfflineConfig)
    if not offline_cfg.dataset:
        raise ConfigError(
            KEY,
            f"algo={config.algo} learns from a dataset: give {KEY}=PATH (a Vault directory; marljax record writes one)",
        )
    from marljax.datasets import DatasetError, dataset_dir

    try:
        where = dataset_dir(offline_cfg.dataset)
        files = sorted(f for f in where.rglob("*") if f.is_file())
        data = _read(str(where), tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))
    except DatasetError as exc:
        raise ConfigError(KEY, str(exc)) from None
    check_fits(data, env, where)
    return data


@functools.lru_cache(maxsize=2)
def _read(where: str, stamp: tuple) -> Transitions:
    """The dataset in `where`, read and checked once per process (a run builds its algorithm more
    than once); `stamp` (every file's size and modification time) tells a changed dataset apart."""
    from marljax.datasets import read_dataset

    exp = read_dataset(where).experience
    infos = exp.get("infos", {})
    ended = lambda name: np.asarray(exp[name]).reshape(exp[name].shape[:2] + (-1,)).max(axis=2) > 0  # noqa: E731
    terminal = ended("terminals")
    discrete = np.issubdtype(exp["actions"].dtype, np.integer)
    legal = None
    if discrete:
        legal = np.asarray(infos["legals"]) > 0 if "legals" in infos else None
    return Transitions(
        obs=np.asarray(exp["observations"], np.float32),
        action=np.asarray(exp["actions"]),
        reward=np.asarray(exp["rewards"], np.float32),
        terminal=terminal,
        truncation=ended("truncations") & ~terminal,
        legal=legal,
        world=np.asarray(infos["state"], np.float32) if "state" in infos else None,
    )


def check_fits(data: Transitions, env: EnvAdapter, where: Path) -> None:
    """The dataset's agents, observations and actions are the env's; ConfigError naming what differs."""
    from marljax.datasets import check_stackable

    try:
        check_stackable(env)
    except ValueError as exc:
        raise ConfigError("env", str(exc)) from None
    g = env.groups[0]
    N = env.num_agents
    found = {"agents": data.reward.shape[2], "observation": tuple(data.obs.shape[3:])}
    wanted = {"agents": N, "observation": tuple(g.obs_shape)}
    discrete = np.issubdtype(data.action.dtype, np.integer)
    found["actions"] = (
        ("Discrete", data.legal.shape[-1] if data.legal is not None else None)
        if discrete
        else ("Box", data.action.shape[-1])
    )
    wanted["actions"] = ("Discrete", g.action_dim) if g.discrete else ("Box", g.action_dim)
    if discrete and data.legal is None:
        found["actions"] = ("Discrete", g.action_dim)  # no legals recorded: every action counts as available
    for what in found:
        if found[what] != wanted[what]:
            raise ConfigError(
                KEY,
                f"{where}: its {what} are {found[what]}, {env.name}'s {wanted[what]}: a dataset of "
                "another env (learn in the env it was recorded in)",
            )


def with_legal(data: Transitions, env: EnvAdapter) -> Transitions:
    """Every action available where a Discrete dataset records no legal actions."""
    g = env.groups[0]
    if not g.discrete or data.legal is not None:
        return data
    return data._replace(legal=np.ones(data.action.shape + (g.action_dim,), bool))


# ------------------------------------------------------------------------------------ the source
@dataclasses.dataclass(frozen=True)
class OfflineSource:
    """The dataset as an algorithm's pieces read it: its device copy, sampling, and the stand-ins
    for the env stream (`init_actors`, `collect`) the protocol expects."""

    config: Config
    env: EnvAdapter
    layout: Layout
    host: Transitions  # numpy, leaves [B, T, ...]
    span: int  # steps in a sampled window: num_steps (+1 where the learner reads the next observation)

    @classmethod
    def of(cls, config: Config, env: EnvAdapter, layout: Layout, next_obs: bool) -> OfflineSource:
        host = with_legal(load(config, env), env)
        span = config.num_steps + int(next_obs)
        steps = host.reward.shape[1]
        if steps < span:
            raise ConfigError(
                "num_steps",
                f"a sequence of {span} steps does not fit the dataset's streams of {steps} "
                f"steps; allowed: num_steps <= {steps - int(next_obs)}",
            )
        if config.num_envs % layout.num_data:
            raise ConfigError(
                "num_envs", f"the batch's {config.num_envs} sequences must split over mesh.data={layout.num_data}"
            )
        return cls(config, env, layout, host, span)

    @property
    def shapes(self) -> Transitions:
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), self.host)

    def device_copy(self, key: Array) -> Transitions:
        """The dataset on the device: one host-to-device copy at `init` (a callback, not a constant
        of the program: the compiled program stays the size of the code whatever the dataset's)."""
        host = self.host
        return jax.pure_callback(lambda _: host, self.shapes, key, vmap_method="sequential")

    @property
    def local_batch(self) -> int:
        """Sequences this data shard samples per update."""
        return self.config.num_envs // self.layout.num_data

    def sample(self, data: Transitions, key: Array) -> Transitions:
        """`local_batch` windows of `span` consecutive steps, each in one stream, uniformly: leaves [E, span, ...]."""
        if self.layout.num_data > 1:  # each shard its own windows; the gradients are averaged over shards
            key = jax.random.fold_in(key, jax.lax.axis_index(self.layout.data_axis))
        B, T = data.reward.shape[:2]
        k_stream, k_start = jax.random.split(key)
        stream = jax.random.randint(k_stream, (self.local_batch,), 0, B)
        start = jax.random.randint(k_start, (self.local_batch,), 0, T - self.span + 1)
        steps = start[:, None] + jnp.arange(self.span)[None]  # [E, span]
        return jax.tree.map(lambda x: x[stream[:, None], steps], data)

    def init_actors(self, key: Array) -> ActorState:
        """The env's actors (num_envs copies, reset): the protocol's state; no update steps them."""
        return VecEnv.of(self.config, self.env, self.layout).init_actors(init_keys(key).env, None)

    def collect(self, params: Any, actors: ActorState, key: Array, update: Array | None = None):
        """No env stream: the actors as they are, and no finished episode."""
        del params, key, update
        return actors, EpisodeStats.zero(self.env.num_agents)

    def read_piece(self, data: Transitions) -> CostPiece:
        """The batch's read, counted per time step (x num_steps): one window start per sequence and
        one step of every sequence gathered."""

        def read_step(data: Transitions, key: Array) -> Transitions:
            one = dataclasses.replace(self, span=1)
            return one.sample(data, key)

        key = jax.ShapeDtypeStruct((2,), jnp.uint32)
        return CostPiece("dataset read", "rollout", read_step, (data, key), self.config.num_steps)


def group_slice(x: Array, g: AgentGroup, axis: int = 2) -> Array:
    """Group g's agents of a stacked agent axis (the env's agent order)."""
    idx = np.asarray(g.indices)
    if np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):  # contiguous: a slice, not a gather
        return jax.lax.slice_in_dim(x, int(idx[0]), int(idx[0]) + idx.size, axis=axis)
    return jnp.take(x, jnp.asarray(idx), axis=axis)


def world_of(batch: Transitions) -> Array:
    """The global state of each step [E, L, W]: the dataset's, else every agent's observation
    concatenated (what `EnvAdapter.world_state` gives an env without one)."""
    if batch.world is not None:
        return batch.world
    return batch.obs.reshape(batch.obs.shape[:2] + (-1,))


def world_size(data: Transitions) -> int:
    """W of `world_of` on this dataset."""
    return data.world.shape[-1] if data.world is not None else int(np.prod(data.obs.shape[2:]))


def mean_over_shards(tree: Any, layout: Layout) -> Any:
    """Metrics averaged over the data shards (each computed them on its own windows)."""
    from marljax.nn import ops

    return ops.psum_tree(jax.tree.map(lambda x: x / layout.num_data, tree), layout.data_axis)


# ------------------------------------------------------------------------------------ the pieces
@dataclasses.dataclass(frozen=True)
class Target:
    """A target network: what of the learner's parameters it copies, on which schedule."""

    section: Any  # the algorithm's section: target_update_interval (0: Polyak with tau) and tau
    of: Callable[[dict], dict] = lambda params: params  # the learner's parameters -> the part it copies

    def moved(self, params: dict, target: dict, updates_done: Array) -> dict:
        """The target after `updates_done` updates: copied every `target_update_interval`, else Polyak."""
        section, params = self.section, self.of(params)
        if section.target_update_interval:
            copy = updates_done % section.target_update_interval == 0
            return jax.tree.map(lambda p, t: jnp.where(copy, p, t), params, target)
        return jax.tree.map(lambda p, t: section.tau * p + (1.0 - section.tau) * t, params, target)


def pieces(
    config: Config,
    layout: Layout,
    source: OfflineSource,
    *,
    networks: Mapping[str, Any],
    init_params: Callable[[Array], dict],
    act: Callable,
    gradient_step: Callable,
    metrics: tuple[str, ...],
    target: Target | None = None,
    hparams: type[HParams] = HParams,
) -> Algorithm:
    """An offline algorithm's `api.Algorithm` from its own parts: its networks and their first
    parameters, `act`, and one gradient step, `gradient_step(params, opt_state[, target], batch, hp,
    lr) -> (params, opt_state, values of `metrics`)`, on a batch of windows [E, span, ...]. The rest
    is the same for every one: the dataset in the extra state (and the target network, moved after
    each step), a fresh sample per update, the metrics averaged over the data shards."""

    def learner_init(key: Array) -> LearnerState:
        return init_learner(config, key, init_params, hparams)

    def init_extra(key: Array, learner: LearnerState) -> OfflineExtra:
        return OfflineExtra(source.device_copy(key), None if target is None else target.of(learner.params))

    def learn(learner: LearnerState, extra: OfflineExtra, stats: EpisodeStats, key: Array):
        """One gradient step on a fresh sample of the dataset (then the target network moved)."""
        lr = learning_rate(config, learner)
        batch = source.sample(extra.data, key)
        before = () if target is None else (extra.target,)
        params, opt_state, out = gradient_step(learner.params, learner.opt_state, *before, batch, learner.hparams, lr)
        done = learner.update + 1
        if target is not None:
            extra = extra.replace(target=target.moved(params, extra.target, done))
        values = dict(zip(metrics, mean_over_shards(tuple(out), layout)))
        learner = learner.replace(params=params, opt_state=opt_state, update=done)
        return learner, extra, UpdateMetrics({**values, "lr": lr}, stats)

    def cost_pieces(state: TrainState) -> list[CostPiece]:
        """(a) the batch's read (`OfflineSource.read_piece`) x num_steps; (b) one gradient step (the
        algorithm's loss and its gradient on num_envs x span transitions, clipping, Adam) x 1."""
        learner, extra = state.learner, state.extra
        batch = jax.eval_shape(source.sample, extra.data, jax.ShapeDtypeStruct((2,), jnp.uint32))
        hp, lr = hparams_from_config(config, hparams), jax.ShapeDtypeStruct((), jnp.float32)
        before = () if target is None else (extra.target,)

        def one_step(params, opt_state, *rest):  # rest: [target,] batch, lr
            return gradient_step(params, opt_state, *rest[:-1], hp, rest[-1])

        step = CostPiece(
            "gradient step",
            "learn",
            one_step,
            (learner.params, learner.opt_state, *before, batch, lr),
            1,
            transitions=config.num_envs * config.num_steps,
        )
        return [source.read_piece(extra.data), step]

    return Algorithm(
        networks=networks,
        init_learner=learner_init,
        init_actors=source.init_actors,
        collect=source.collect,
        learn=learn,
        act=act,
        cost_pieces=cost_pieces,
        init_extra=init_extra,
        extra_layout=extra_layout(target is not None),
        extra_parts=(DATASET_PART,),
    )


__all__ = ["DEFAULTS", "OfflineConfig", "OfflineExtra", "OfflineSource", "Target", "Transitions", "load", "pieces"]
