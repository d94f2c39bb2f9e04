"""The trainer's mesh: built once from the config; the state's specs; the sharded programs on it.

With `placement.py` and `pipeline/async_mesh.py`, the only code that touches devices (see placement.py).

Mesh axes:
  * `seed`: splits the seeds (independent runs; no communication);
  * `data`: splits each seed's environments; gradients and advantage statistics
    are averaged over it with collectives inside `jax.shard_map`;
  * `agent`: splits each group's per-agent parameter sets and optimizer state
    (`param_sharing=independent`); see `layouts.py` for the two layouts it implies. A group
    that `mesh.placement=balanced` or `mesh.replicate` keeps whole is replicated over it
    instead, and its environments are split over it (`agent_placement.py`).

The learner state (parameters, optimizer state, keys) is split over `seed`, its
per-agent leaves also over `agent`, and replicated over `data`; the actor state
(environment states, observations, recurrent state) is split over all three axes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from marljax.parallel.agent_placement import REPLICATE, modes_for
from marljax.parallel.layouts import AGENT, Layout
from marljax.parallel.placement import shardings as named
from marljax.parallel.settings import MeshConfig
from marljax.schema import ConfigError
from marljax.types import TrainState

SEED, DATA = "seed", "data"
AXES = (SEED, DATA, AGENT)
ACTING = P(SEED, (DATA, AGENT))  # [S, E, ...]: environments split over every device, as while acting
ACTING_TRAJECTORY = P(SEED, None, (DATA, AGENT))  # [S, T, E, ...]: a rollout in the acting layout


def device_count() -> int:
    return len(jax.devices())


def resolve_mesh_shape(
    mesh: MeshConfig, num_seeds: int, num_envs: int, n_devices: int | None = None
) -> tuple[int, int, int]:
    """(seed, data, agent) sizes with -1 filled in; ConfigError when they don't fit the devices,
    the seeds (`seed` divides them) or the environments (`data` x `agent` divides them)."""
    agent = mesh.agent
    n_all = device_count() if n_devices is None else n_devices
    if n_all % agent:
        raise ConfigError("mesh.agent", f"{agent} does not divide the {n_all} visible devices")
    n = n_all // agent  # devices left for seed x data
    seed, data = mesh.seed, mesh.data
    if seed == -1:
        if n % data:
            raise ConfigError("mesh.data", f"{data} does not divide the {n} visible devices")
        seed = n // data
    if data == -1:
        if n % seed:
            raise ConfigError("mesh.seed", f"{seed} does not divide the {n} visible devices")
        data = n // seed
    if seed * data * agent != n_all:
        raise ConfigError(
            "mesh",
            f"mesh.seed*mesh.data*mesh.agent = {seed}*{data}*{agent} = {seed * data * agent}, but {n_all} "
            "devices are visible; set mesh.seed or mesh.data to -1 to fill the rest",
        )
    if num_seeds % seed:
        raise ConfigError("mesh.seed", f"{seed} devices on the seed axis must divide num_seeds={num_seeds}")
    if num_envs % (data * agent):
        raise ConfigError(
            "mesh.data",
            f"mesh.data*mesh.agent = {data}*{agent} devices split the environments while acting, "
            f"so their product must divide num_envs={num_envs}",
        )
    return seed, data, agent


def build_mesh(mesh: MeshConfig, num_seeds: int, num_envs: int) -> Mesh:
    """The (seed, data, agent) mesh over every visible device (`resolve_mesh_shape`)."""
    shape = resolve_mesh_shape(mesh, num_seeds, num_envs)
    return jax.make_mesh(shape, AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3)


def mesh_layout(mesh: Mesh, replicated: frozenset[str] = frozenset()) -> Layout:
    """The axes a trainer's collectives run over inside `shard_trainer`'s program; `replicated`:
    the groups kept whole on every agent device (`replicated_groups`)."""
    return Layout(DATA, mesh.shape[DATA], AGENT, mesh.shape[AGENT], replicated=replicated)


def replicated_groups(mesh: MeshConfig, sizes: dict[str, int]) -> frozenset[str]:
    """Groups (name -> agent count) that `mesh.placement` / `mesh.replicate` keep whole on every
    agent device instead of splitting them over `agent` (none unless mesh.agent > 1)."""
    if mesh.agent == 1:
        return frozenset()
    modes = modes_for(sizes, mesh.agent, mesh.placement, mesh.replicated)
    return frozenset(g for g, m in modes.items() if m == REPLICATE)


def learner_specs(learner_shape, split: frozenset[str], seed_axis: str | None):
    """Specs of a LearnerState with leading [S] leaves: per-agent leaves of `split` groups are
    [S, A_g, ...] and split over `agent`; `seed_axis` (or nothing) splits the seeds."""

    def spec(path, _leaf):
        in_split = any(isinstance(k, jax.tree_util.DictKey) and k.key in split for k in path)
        return P(seed_axis, AGENT) if in_split else P(seed_axis)

    return jax.tree_util.tree_map_with_path(spec, learner_shape)


ENVS = "envs"  # an axis over the environments' data: split over `data`, as the learner splits the environments
AGENTS = "agents"  # an axis over the agents of `Placed.group`: split over `agent` where that group's sets are


class Placed(NamedTuple):
    """How one part of an algorithm's extra state lies on the mesh (its declaration, see
    `marljax.algos.api`), by what its leading axes after the seed axis count: `ENVS`, `AGENTS` of
    `group` (one entry per agent, or one set shared by them all), or None (whole). Axes past those
    named are whole; `Placed()` is whole on every device of a seed."""

    axes: tuple[str | None, ...] = ()
    group: str | None = None  # the group whose agents an AGENTS axis counts


def state_specs(state_shape: TrainState, split: frozenset[str], extra: Any = None) -> TrainState:
    """PartitionSpecs for a TrainState with a leading [S] seed axis (shapes from `jax.eval_shape`).

    Learner leaves under a group in `split` (per-agent parameter sets and their Adam moments)
    are [S, A_g, ...] and split over `agent` too; the rest of the learner is split over `seed`.
    The extra state is laid out as the algorithm declared it: `extra` is a pytree like it of
    `Placed` (the trainer's `extra_places`); none for a state without extra leaves.
    """

    learner = learner_specs(state_shape.learner, split, SEED)
    actors = jax.tree.map(lambda _: ACTING, state_shape.actors)
    if extra is None and jax.tree.leaves(state_shape.extra):
        raise ValueError("the state has extra leaves but no declared layout for them")
    specs = jax.tree.map(lambda place: placed_spec(place, split), extra, is_leaf=lambda x: isinstance(x, Placed))
    return TrainState(learner=learner, actors=actors, extra=specs)


def placed_spec(place: Placed, split: frozenset[str]) -> P:
    """The PartitionSpec of a part of the extra state placed as `place`, after the seed axis:
    ENVS over `data`; AGENTS over `agent` when its group's sets are split (`split`), else whole."""
    axes = [DATA if a == ENVS else AGENT if a == AGENTS and place.group in split else None for a in place.axes]
    while axes and axes[-1] is None:
        axes.pop()
    return P(SEED, *axes)


class ShardedFns(NamedTuple):
    init: Callable  # keys [S, 2] -> TrainState, created already sharded
    chunk: jax.stages.Wrapped  # (state, n) -> (state, metrics [S, n])
    chunk_upto: (
        jax.stages.Wrapped
    )  # (state, longest, n) -> (state, metrics [S, longest]): n <= longest updates, n traced
    mesh: Mesh
    shapes: TrainState  # ShapeDtypeStructs of the state, [S, ...] leaves
    shardings: TrainState  # NamedSharding of every leaf on `mesh`


def split_groups(trainer) -> frozenset[str]:
    """Groups whose parameter sets are split over `agent` (in an agent-parallel run, all of them
    but those `replicated_groups` keeps whole)."""
    if trainer.config.mesh.agent == 1:
        return frozenset()
    sizes = {g.name: g.size for g in trainer.env.groups}
    return frozenset(sizes) - replicated_groups(trainer.config.mesh, sizes)


def shard_trainer(trainer, mesh: Mesh) -> ShardedFns:
    """Wrap a trainer's pure pieces as jitted programs over `mesh`.

    `init` runs under jit with `out_shardings`, so every array is created on
    the devices that own it. `chunk(state, n)` runs n updates inside
    `shard_map`: each device vmaps over its local seeds and steps its local
    environments; the trainer's collectives use the axes of `mesh_layout(mesh)`.
    """
    shape = jax.eval_shape(jax.vmap(trainer.init), jax.ShapeDtypeStruct((trainer.config.num_seeds, 2), jnp.uint32))
    specs = state_specs(shape, split_groups(trainer), trainer.extra_places(shape.extra, lead=1))
    shardings = named(mesh, specs)
    init = jax.jit(jax.vmap(trainer.init), out_shardings=shardings)

    def chunk(state: TrainState, n: int):
        local = jax.vmap(lambda s: trainer.run_updates(s, n))
        # check_vma=False: with it on, scans whose carries start as constants (e.g. the episode
        # statistics) would need explicit `pcast` to "varying". The learner outputs are
        # replicated over `data` because every cross-env quantity goes through one all-reduce;
        # tests/test_multidevice.py checks the results against a single device.
        return jax.shard_map(local, mesh=mesh, in_specs=(specs,), out_specs=(specs, P(SEED)), check_vma=False)(state)

    def chunk_upto(state: TrainState, longest: int, n: jax.Array):
        def run(s: TrainState, n: jax.Array):
            shapes = jax.eval_shape(lambda x: trainer.update(x)[1], s)
            rows = jax.tree.map(lambda m: jnp.zeros((longest, *m.shape), m.dtype), shapes)  # [longest, ...]

            def one(i, carry):
                s, rows = carry
                s, m = trainer.update(s)
                return s, jax.tree.map(lambda r, x: jax.lax.dynamic_update_index_in_dim(r, x, i, 0), rows, m)

            return jax.lax.fori_loop(0, n, one, (s, rows))

        local = jax.vmap(run, in_axes=(0, None))
        return jax.shard_map(local, mesh=mesh, in_specs=(specs, P()), out_specs=(specs, P(SEED)), check_vma=False)(
            state, n
        )

    return ShardedFns(
        init,
        jax.jit(chunk, static_argnums=1, donate_argnums=0),
        jax.jit(chunk_upto, static_argnums=1, donate_argnums=0),
        mesh,
        shape,
        shardings,
    )


def compile_chunks(fns: ShardedFns, state, sizes) -> dict:
    """The compiled chunk for each distinct size in `sizes` (a run's chunk schedule), by size. One
    size: its own program. Several (a short last chunk): one program for them all, its update count
    an argument, since a second program would double the compile (8-9 s of the default run's on
    the card and on a CPU); `run_chunks` keeps the first n rows of its metrics."""
    distinct = sorted(set(sizes))
    if not distinct:  # nothing left to run (a resume of a finished run)
        return {}
    if len(distinct) == 1:
        return {distinct[0]: fns.chunk.lower(state, distinct[0]).compile()}
    longest, replicated = distinct[-1], NamedSharding(fns.mesh, P())
    program = fns.chunk_upto.lower(state, longest, jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated)).compile()
    return {n: CountedChunk(program, n, replicated) for n in distinct}


class CountedChunk:
    """`program(state, n)` as a chunk of n updates: `compiled[n](state)` like a program of its own."""

    def __init__(self, program: Callable, n: int, sharding: NamedSharding):
        self.program = program
        # placed once here: the chunk loop runs under a transfer guard that refuses a host scalar
        self.count = jax.make_array_from_callback((), sharding, lambda _: np.int32(n))

    def __call__(self, state: TrainState):
        return self.program(state, self.count)


def shard_seeds(fn: Callable, mesh: Mesh, in_specs: tuple) -> Callable:
    """jit of `fn` inside `shard_map` over `mesh`: arguments split by `in_specs`, one result per
    seed [S] (`fn` sees each device's local blocks; its collectives use `mesh_layout(mesh)`)."""
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=P(SEED), check_vma=False))


def first_device_sharding() -> NamedSharding:
    """Everything on this process's first device (exporting, inspecting a checkpoint)."""
    mesh = jax.make_mesh((1,), ("one",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.local_devices()[:1])
    return NamedSharding(mesh, P())


def seed_keys(seed: int, num_seeds: int) -> jax.Array:
    """One key per seed index, independent of how many seeds run beside it: [S, 2]."""
    base = jax.random.PRNGKey(seed)
    return jnp.stack([jax.random.fold_in(base, i) for i in range(num_seeds)])
