"""Putting arrays where they run: on a device, on a mesh's shardings, or a copy per actor device.

With `mesh.py` (the trainer's mesh) and `pipeline/async_mesh.py` (the async mode's actor devices and
learner mesh), the only code that calls `jax.device_put` or `jax.devices()` or builds a
`NamedSharding`: the pipeline, sweeps and benchmarks receive meshes, devices and shardings
and place with these functions.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def shardings(mesh: Mesh, specs: Any) -> Any:
    """A tree of PartitionSpecs (or one) as NamedShardings on `mesh`."""
    return jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs)


def place(tree: Any, where: Any) -> Any:
    """`tree` committed to a device, or to a sharding / a tree of shardings (dispatch is asynchronous).
    On the device or sharding it already has, an array may come back as itself."""
    return jax.device_put(tree, where)


def copy_to(tree: Any, device: Any) -> Any:
    """A real copy of `tree` on `device`, never an alias of the input, even on the same device: the
    copy outlives an input that a jitted program later donates."""
    return jax.device_put(tree, device, may_alias=False)


def copy_to_devices(tree: Any, devices: Any) -> dict:
    """`copy_to` each distinct device of `devices`: device -> its copy."""
    return {d: copy_to(tree, d) for d in set(devices)}


def place_process_local(tree: Any, where: Any) -> Any:
    """Several processes: global arrays made of each process's blocks. `where` is a tree of
    shardings (or a prefix of `tree`'s structure); each leaf of `tree` holds this process's
    consecutive share of the sharded axes (the global shape is inferred: every process gives
    the same local shape)."""
    return jax.tree.map(
        lambda s, sub: jax.tree.map(lambda x: jax.make_array_from_process_local_data(s, np.asarray(x)), sub),
        where,
        tree,
    )


def local_replica(tree: Any) -> Any:
    """This process's whole copy of a (possibly multi-process) tree, from its own devices only (no
    communication). A leaf that one of its devices holds whole (replicated) comes back as that
    shard; a leaf split over its devices (mesh.agent > 1: each device holds some agents) is put
    together on the host from the blocks this process holds, which must tile it: a ValueError
    names the leaf otherwise (the agent axis must lie within each process)."""

    def whole(path, x):
        if x.is_fully_addressable and len(x.sharding.device_set) == 1:
            return x
        shards = x.addressable_shards
        full = next((s.data for s in shards if s.data.shape == x.shape), None)
        if full is not None:
            return full
        out, covered = np.empty(x.shape, x.dtype), np.zeros(x.shape, bool)
        for s in shards:
            out[s.index] = np.asarray(s.data)
            covered[s.index] = True
        if not covered.all():
            raise ValueError(
                f"{jax.tree_util.keystr(path)}: this process's devices hold only part of it "
                f"(shape {x.shape}, sharding {x.sharding}); each process must hold every agent"
            )
        return out

    return jax.tree_util.tree_map_with_path(whole, tree)


def platform(mesh: Mesh | None = None) -> str:
    """The platform ("cpu", "gpu", "tpu") of the mesh's devices, or of the first visible device."""
    return (mesh.devices.flat[0] if mesh is not None else jax.devices()[0]).platform


def fake_cpu_devices_env(n: int, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A copy of `environ` for a child process whose JAX sees `n` CPU devices (a host platform
    split into n fake devices: the multi-device code paths on a machine without accelerators).
    Only a process that has not yet started JAX's backend can take it: hence a child process."""
    flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "", environ.get("XLA_FLAGS", "")).split()
    flags.append(f"--xla_force_host_platform_device_count={n}")
    return {**environ, "XLA_FLAGS": " ".join(flags), "JAX_PLATFORMS": "cpu"}


def memory_stats(device: Any) -> dict:
    """The device's `memory_stats()` (bytes_limit, peak_bytes_in_use, ...); {} where the runtime
    keeps none (CPU)."""
    try:
        return device.memory_stats() or {}
    except Exception:  # noqa: BLE001 -- some backends raise instead of returning None
        return {}


def bytes_on_one_device(tree: Any) -> int:
    """Bytes of `tree` that the device holding its first leaf's first shard keeps."""
    device = jax.tree.leaves(tree)[0].addressable_shards[0].device
    return sum(
        shard.data.nbytes
        for leaf in jax.tree.leaves(tree)
        for shard in leaf.addressable_shards
        if shard.device == device
    )


def every_device_sharding(mesh: Mesh) -> NamedSharding:
    """Leading axis [n_devices, ...] split over every axis of `mesh`: one slice per device."""
    return NamedSharding(mesh, _every_device(mesh))


def on_every_device(fn: Callable, mesh: Mesh) -> Callable:
    """jit(fn) run by each device on its own slice of arguments laid out by `every_device_sharding`
    (`fn` sees [1, ...] blocks and returns [1, ...] blocks; no communication)."""
    spec = _every_device(mesh)
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=spec))


def _every_device(mesh: Mesh) -> P:
    return P(tuple(mesh.axis_names))
