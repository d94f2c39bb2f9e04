"""Where mode=async runs, and the learner's programs there.

Actor thread i runs on `actor_devices[i % len]`; the learner on a mesh of its own with axes
(data, agent) (`async.actor_devices`, `async.learner_devices`; disjoint unless one device is
all there is). The learner state is created on that mesh in the learning layout (per-agent
sets split over `agent` when mesh.agent > 1, the rest replicated); a batch from the host
buffer arrives in the acting layout, its environments split over every learner device, and
`learn` runs inside `shard_map` over the mesh. With `async.actor_backend=cpu` on an accelerator
the actors take their devices from the host CPU backend and the learner every device it is given
of the accelerator's: parameters go to the CPU after each update, trajectories come back.
Several processes: the actor devices are each process's own, the learner mesh joins every
process's learner devices (process order), and a batch is made of every process's environments
(`placement.place_process_local`); with mesh.agent > 1 the agent axis lies within each process
(every process holds every agent's parameters).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from marljax.parallel.layouts import AGENT
from marljax.parallel.mesh import DATA
from marljax.parallel.placement import shardings
from marljax.pipeline.settings import AsyncConfig
from marljax.schema import ConfigError
from marljax.types import Trajectory


class AsyncPlacement(NamedTuple):
    """Where the async mode runs: one device per actor thread (round robin), a learner mesh."""

    actor_devices: tuple  # device of actor thread i: actor_devices[i % len]
    learner_mesh: Mesh  # axes (data, agent): `data` splits each batch's environments, `agent` the agents


def async_placement(a: AsyncConfig, agent: int, num_envs: int) -> AsyncPlacement:
    """Disjoint actor and learner devices (`async.actor_devices`, then `async.learner_devices`); shared on one device.

    Several processes (`distributed.*`): the counts or indices apply to each process's own devices;
    a process's actors run on its own actor devices, and the learner mesh joins every process's
    learner devices in process order (process p holds data shard p, with the environments its
    actors generate)."""
    host_actors = _host_cpu_devices(a)
    if jax.process_count() == 1:
        actor, learner = _split(a, jax.devices(), host_actors)
    else:
        mine = jax.process_index()
        by_process = [
            _split(a, [d for d in jax.devices() if d.process_index == q], host_actors)
            for q in range(jax.process_count())
        ]
        actor, learner = by_process[mine][0], [d for _, devices in by_process for d in devices]
    k = agent  # mesh.agent
    if len(learner) % k:
        raise ConfigError("mesh.agent", f"{k} must divide the {len(learner)} learner devices (async.learner_devices)")
    per_process = len(learner) // jax.process_count()
    if jax.process_count() > 1 and per_process % k:
        # the mesh's rows (data shards) are k consecutive learner devices in process order: each
        # row within one process, so that each process holds every agent's parameters (its actors'
        # replica, placement.local_replica) and the agent swap never crosses processes
        raise ConfigError(
            "mesh.agent",
            f"with {jax.process_count()} processes, {k} must divide each process's "
            f"{per_process} learner devices (async.learner_devices): the agent axis lies within a process",
        )
    if num_envs % len(learner):
        raise ConfigError("async.learner_devices", f"{len(learner)} learner devices must divide num_envs={num_envs}")
    n_proc, M = jax.process_count(), a.micro_batches
    if num_envs % (n_proc * M):  # each process's actors step num_envs/P environments, in M slices
        allowed = ", ".join(str(m) for m in range(1, num_envs // n_proc + 1) if num_envs % (n_proc * m) == 0)
        raise ConfigError(
            "async.micro_batches",
            f"with {n_proc} processes must divide each process's num_envs/"
            f"{n_proc}={num_envs / n_proc:g} environments; allowed: {allowed}; got {M}",
        )
    shape = (len(learner) // k, k)
    mesh = jax.make_mesh(shape, (DATA, AGENT), axis_types=(jax.sharding.AxisType.Auto,) * 2, devices=learner)
    return AsyncPlacement(tuple(actor), mesh)


def _host_cpu_devices(a: AsyncConfig) -> list | None:
    """This process's host CPU devices when the actors should run there apart from an accelerator
    learner (`async.actor_backend=cpu` and a default backend other than the CPU); else None."""
    if a.actor_backend != "cpu" or jax.default_backend() == "cpu":
        return None  # on a CPU-only machine the CPU devices are the ones the learner shares out
    try:
        return jax.local_devices(backend="cpu")
    except RuntimeError as e:  # JAX_PLATFORMS left the CPU backend out
        raise ConfigError(
            "async.actor_backend",
            f"cpu: JAX has no CPU backend here ({e}); allow it "
            "(JAX_PLATFORMS=cuda,cpu, or unset) or set async.actor_backend=default",
        ) from None


def _pick(spec: int | list | tuple, devices: list, name: str) -> list:
    """The devices `spec` (a count: the first N; or a list of indices) names among `devices`."""
    if isinstance(spec, (list, tuple)):
        bad = [i for i in spec if i >= len(devices)]
        if bad:
            raise ConfigError(
                name, f"device indices {bad} don't exist; {len(devices)} {devices[0].platform} devices are visible"
            )
        return [devices[i] for i in spec]
    if spec > len(devices):
        raise ConfigError(
            name, f"{spec} devices asked for, but {len(devices)} {devices[0].platform} devices are visible"
        )
    return devices[:spec]


def _split(a: AsyncConfig, devices: list, host_actors: list | None = None) -> tuple[list, list]:
    """(actor devices, learner devices) of one process's `devices` as async.actor_devices/learner_devices say.

    With `host_actors` (the host CPU's devices, async.actor_backend=cpu on an accelerator) the
    actors are picked from those and the learner from `devices`: two pools, disjoint by platform."""
    n_act, n_learn = a.actor_devices, a.learner_devices
    if host_actors is not None:
        return _pick(n_act, host_actors, "async.actor_devices"), _pick(n_learn, devices, "async.learner_devices")
    if isinstance(n_act, (list, tuple)) or isinstance(n_learn, (list, tuple)):
        if not (isinstance(n_act, (list, tuple)) and isinstance(n_learn, (list, tuple))):
            raise ConfigError(
                "async.actor_devices",
                "give both async.actor_devices and async.learner_devices as index lists, or both as counts",
            )
        shared = sorted(set(n_act) & set(n_learn))
        if shared:  # one pool (async.actor_backend=cpu on a CPU-only machine is checked here, not in the config)
            raise ConfigError(
                "async.learner_devices", f"actor and learner devices must be disjoint; both list {shared}"
            )
        return _pick(n_act, devices, "async.actor_devices"), _pick(n_learn, devices, "async.learner_devices")
    if len(devices) == 1:
        if n_act != 1 or n_learn != 1:
            raise ConfigError(
                "async.actor_devices", "only 1 device is visible; actors and learner share it (set both to 1)"
            )
        return devices, devices
    if n_act + n_learn > len(devices):
        raise ConfigError(
            "async.actor_devices",
            f"async.actor_devices + async.learner_devices = {n_act + n_learn}, but {len(devices)} devices are visible",
        )
    return devices[:n_act], devices[n_act : n_act + n_learn]


def learner_on_mesh(init_fn: Callable, keys: jax.Array, mesh: Mesh, specs):
    """`vmap(init_fn)(keys)` created already placed on `mesh` by `specs` (jit with out_shardings)."""
    return jax.jit(jax.vmap(init_fn), out_shardings=shardings(mesh, specs))(keys)


def trajectory_specs(per_device_stats: bool = False) -> Trajectory:
    """A batch [S, T, E, ...] in the acting layout: environments split over every learner device.

    The episode statistics are replicated ([S, ...], one process: they cover every environment),
    or with `per_device_stats` ([n_learner_devices, S, ...], several processes: each process's
    devices carry the statistics of that process's environments) split one row per device."""
    envs = (DATA, AGENT)
    specs = P(None, None, envs), P(None, envs), P(envs) if per_device_stats else P()
    return Trajectory(*specs)  # type: ignore[arg-type]  # a pytree prefix: one spec for each field's subtree


def trajectory_shardings(mesh: Mesh, per_device_stats: bool = False) -> Trajectory:
    return shardings(mesh, trajectory_specs(per_device_stats))


def shard_learn(fn: Callable, mesh: Mesh, learner_specs, per_device_stats: bool = False) -> Callable:
    """`fn(learner, traj) -> (learner, metrics)` on each device's blocks, jitted inside `shard_map`
    over `mesh`: the learner split by `learner_specs`, the batch by `trajectory_specs()`, metrics
    replicated. The learner input is donated."""
    return jax.jit(
        jax.shard_map(
            fn,
            mesh=mesh,
            in_specs=(learner_specs, trajectory_specs(per_device_stats)),
            out_specs=(learner_specs, P()),
            check_vma=False,
        ),
        donate_argnums=0,
    )
