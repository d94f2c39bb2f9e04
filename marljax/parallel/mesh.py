"""The one module that touches devices: builds the mesh and places / shards the state.

Mesh axes:
  * `seed`: splits the seeds (independent runs; no communication);
  * `data`: splits each seed's environments; gradients and advantage statistics
    are averaged over it with collectives inside `jax.shard_map`.

The learner state (parameters, optimizer state, keys) is split over `seed` and
replicated over `data`; the actor state (environment states, observations,
recurrent state) is split over both.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from marljax.config import Config, ConfigError
from marljax.types import TrainState

SEED, DATA = "seed", "data"


def device_count() -> int:
    return len(jax.devices())


def resolve_mesh_shape(config: Config, n_devices: int | None = None) -> tuple[int, int]:
    """(seed, data) sizes with -1 filled in; ConfigError when they don't fit the devices."""
    n = device_count() if n_devices is None else n_devices
    seed, data = config.mesh.seed, config.mesh.data
    if seed == -1:
        if n % data:
            raise ConfigError("mesh.data", f"{data} does not divide the {n} visible devices")
        seed = n // data
    if data == -1:
        if n % seed:
            raise ConfigError("mesh.seed", f"{seed} does not divide the {n} visible devices")
        data = n // seed
    if seed * data != n:
        raise ConfigError(
            "mesh",
            f"mesh.seed*mesh.data = {seed}*{data} = {seed * data}, but {n} devices are visible; "
            "set one axis to -1 to fill the rest",
        )
    if config.num_seeds % seed:
        raise ConfigError(
            "mesh.seed", f"{seed} devices on the seed axis must divide num_seeds={config.num_seeds}"
        )
    if config.num_envs % data:
        raise ConfigError(
            "mesh.data", f"{data} devices on the data axis must divide num_envs={config.num_envs}"
        )
    return seed, data


def build_mesh(config: Config) -> Mesh:
    seed, data = resolve_mesh_shape(config)
    return jax.make_mesh((seed, data), (SEED, DATA), axis_types=(jax.sharding.AxisType.Auto,) * 2)


def state_specs() -> TrainState:
    """PartitionSpec prefix tree for a TrainState with a leading [S] seed axis."""
    return TrainState(learner=P(SEED), actors=P(SEED, DATA))  # type: ignore[arg-type]


class ShardedFns(NamedTuple):
    init: Callable  # keys [S, 2] -> TrainState, created already sharded
    chunk: Callable  # (state, n) -> (state, metrics [S, n])
    mesh: Mesh


def shard_trainer(trainer, mesh: Mesh) -> ShardedFns:
    """Wrap a trainer's pure pieces as jitted programs over `mesh`.

    `init` runs under jit with `out_shardings`, so every array is created on
    the devices that own it. `chunk(state, n)` runs n updates inside
    `shard_map`: each device vmaps over its local seeds and steps its local
    environments; the learner's collectives use the `data` axis.
    """
    specs = state_specs()
    shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs)
    init = jax.jit(jax.vmap(trainer.init), out_shardings=shardings)

    def chunk(state: TrainState, n: int):
        local = jax.vmap(lambda s: trainer.run_updates(s, n))
        # check_vma=False: with it on, scans whose carries start as constants (e.g. the episode
        # statistics) would need explicit `pcast` to "varying". The learner outputs are
        # replicated over `data` because every cross-env quantity goes through one all-reduce;
        # tests/test_multidevice.py checks the results against a single device.
        return jax.shard_map(local, mesh=mesh, in_specs=(specs,), out_specs=(specs, P(SEED)), check_vma=False)(
            state
        )

    return ShardedFns(init, jax.jit(chunk, static_argnums=1, donate_argnums=0), mesh)


def seed_keys(seed: int, num_seeds: int) -> jax.Array:
    """One key per seed index, independent of how many seeds run beside it: [S, 2]."""
    import jax.numpy as jnp

    base = jax.random.PRNGKey(seed)
    return jnp.stack([jax.random.fold_in(base, i) for i in range(num_seeds)])
