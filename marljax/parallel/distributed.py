"""Multi-host runs on JAX's own multi-controller runtime (`jax.distributed`).

Every process runs the same program; `initialize(config)` joins them before any
device is touched, after which `jax.devices()` lists every process's devices and the
mesh spans them all. Process 0 is the *primary*: it alone writes logs, metrics,
plots, results and the progress bar; checkpoints are written by all processes
together (orbax). Arrays that span processes come back to the host with
`host_values`, which gathers them over the runtime.

Failures are turned into clear errors with a time limit instead of a hang:
a coordinator that never answers, a wrong process count (the processes that came
wait `distributed.timeout_s`, then stop), and processes started with different configs.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import jax
import numpy as np

from marljax.config import Config, ConfigError


class DistributedError(RuntimeError):
    """Joining the other processes failed; the message says which setting to check."""


def enabled(config: Config) -> bool:
    d = config.distributed
    return d.auto or d.num_processes > 1


def _backends_started() -> bool:
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def initialize(config: Config) -> None:
    """Join the other processes (no-op for a single-process config, or when already joined)."""
    if not enabled(config) or jax.distributed.is_initialized():
        return
    d = config.distributed
    if _backends_started():
        raise ConfigError(
            "distributed", "must be initialized before JAX touches a device; start marljax in a fresh process"
        )
    # CPU devices talk over gloo (TCP); accelerators use their own interconnect and ignore this.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kwargs: dict[str, Any] = {"initialization_timeout": d.timeout_s}
    if not d.auto:
        kwargs.update(coordinator_address=d.coordinator, num_processes=d.num_processes, process_id=d.process_id)
    try:
        jax.distributed.initialize(**kwargs)
    except Exception as exc:  # noqa: BLE001 - every failure to join gets the same clear message
        where = "auto-detected cluster" if d.auto else f"coordinator {d.coordinator} as process {d.process_id} of {d.num_processes}"
        raise DistributedError(
            f"could not join the {where} within distributed.timeout_s={d.timeout_s}s "
            f"({type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}). Check that every "
            "process was started, with the same distributed.num_processes and coordinator address, and that the "
            "coordinator's port is reachable"
        ) from exc
    check_same_config(config)


def is_primary() -> bool:
    return jax.process_index() == 0


def _config_bytes(config: Config) -> bytes:
    values = config.to_dict()
    values["distributed"] = {k: v for k, v in values["distributed"].items() if k != "process_id"}
    return json.dumps(values, sort_keys=True, default=str).encode()


def check_same_config(config: Config) -> None:
    """ConfigError naming the fields where this process's config differs from process 0's."""
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    mine = np.frombuffer(hashlib.sha256(_config_bytes(config)).digest(), np.uint8)
    hashes = np.asarray(multihost_utils.process_allgather(mine))  # [P, 32]
    if (hashes == hashes[0]).all():
        return
    # tell which fields differ: process 0's config, padded to a common length, sent to all
    text = np.frombuffer(_config_bytes(config), np.uint8)
    length = int(np.max(multihost_utils.process_allgather(np.int32(text.size))))
    padded = np.zeros(length, np.uint8)
    padded[: text.size] = text
    first = np.asarray(multihost_utils.broadcast_one_to_all(padded)).tobytes().rstrip(b"\0")
    theirs, ours = json.loads(first), json.loads(_config_bytes(config))
    fields = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
    differing = [int(i) for i in np.nonzero((hashes != hashes[0]).any(axis=1))[0]]
    raise ConfigError(
        "distributed",
        f"every process must run the same config, but process(es) {differing} differ from process 0"
        + (f" in: {', '.join(fields)} (this is process {jax.process_index()})" if fields else ""),
    )


def host_values(tree: Any) -> Any:
    """Numpy copies of a pytree of (possibly multi-process) arrays, whole on every process."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    def one(x):
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return np.asarray(jax.device_get(x))
        if x.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(one, tree)
