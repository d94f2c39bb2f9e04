"""Multi-host runs on JAX's own multi-controller runtime (`jax.distributed`).

Every process runs the same program; `initialize(config.distributed, ...)` joins them before any
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
import socket
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import jax
import numpy as np

from marljax.parallel import peer_watch
from marljax.parallel.coordinator import service_beside
from marljax.parallel.settings import DistributedConfig
from marljax.schema import ConfigError


class DistributedError(RuntimeError):
    """Joining the other processes failed; the message says which setting to check."""


def enabled(d: DistributedConfig) -> bool:
    """Whether `distributed.*` asks for a multi-process run."""
    return d.auto or d.num_processes > 1


def _backends_started() -> bool:
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def initialize(
    d: DistributedConfig,
    settings: Callable[[], Mapping[str, Any]],
    under: Path | None,
    again: str = "rerun with resume=true",
) -> None:
    """Join the other processes (no-op for a single-process run, or when already joined), check
    that every process was given the same `settings()` (the run's config as a mapping, read only
    once the processes have joined), then watch
    them (marljax/parallel/peer_watch.py): a lost one ends this process with a line naming it and
    the newest checkpoint under `under` (the run's out_dir), to continue by `again`."""
    if not enabled(d) or jax.distributed.is_initialized():
        return
    if _backends_started():
        raise ConfigError(
            "distributed", "must be initialized before JAX touches a device; start marljax in a fresh process"
        )
    # CPU devices talk over gloo (TCP); accelerators use their own interconnect and ignore this.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kwargs: dict[str, Any] = {"initialization_timeout": d.timeout_s}
    if not d.auto:
        kwargs.update(coordinator_address=d.coordinator, num_processes=d.num_processes, process_id=d.process_id)
        if d.process_id != 0:
            _wait_for_coordinator(d.coordinator, d.timeout_s)
        else:  # JAX aborts from C++ (exit 134) when process 0 cannot serve there: said first, in one line
            _check_coordinator_here(d.coordinator)
        # A process that never comes makes JAX's runtime stop every process that did (it aborts
        # from C++ with DEADLINE_EXCEEDED, which Python cannot catch), so say what that means first.
        print(
            f"marljax: process {d.process_id} of {d.num_processes} joining via {d.coordinator}; waiting at most "
            f"{d.timeout_s}s (distributed.timeout_s). If JAX then stops with DEADLINE_EXCEEDED, a process did not "
            "join in time: check that all were started with the same distributed.num_processes and coordinator. "
            "If it aborts later with the coordination service UNAVAILABLE, process 0's host was lost: resume=true",
            file=sys.stderr,
            flush=True,
        )
    # process 0's coordination service in a child of its own: its death is then a lost peer like
    # any other, named by the others' watch, not a native abort of every process (coordinator.py)
    served = service_beside() if not d.auto and d.process_id == 0 else nullcontext()
    try:
        with served:
            jax.distributed.initialize(**kwargs)
    except Exception as exc:  # noqa: BLE001 - every failure to join gets the same clear message
        where = (
            "auto-detected cluster"
            if d.auto
            else f"coordinator {d.coordinator} as process {d.process_id} of {d.num_processes}"
        )
        raise DistributedError(
            f"could not join the {where} within distributed.timeout_s={d.timeout_s}s "
            f"({type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}). Check that every "
            "process was started, with the same distributed.num_processes and coordinator address, and that the "
            "coordinator's port is reachable"
        ) from exc
    check_same_config(settings())
    _watch_peers(under, again)


def _watch_peers(under: Path | None, again: str) -> None:
    from jax._src.distributed import global_state  # the runtime's client: its key-value store carries the beats

    client = getattr(global_state, "client", None)
    if jax.process_count() > 1 and client is not None and hasattr(client, "key_value_dir_get"):
        peer_watch.start(client, jax.process_index(), jax.process_count(), under, again)


def _check_coordinator_here(address: str) -> None:
    """DistributedError unless process 0, which runs the coordinator, can listen on `address`:
    its host must be an address of this machine and its port free."""
    host, port = address.rsplit(":", 1)
    try:
        candidates = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, ValueError) as exc:
        raise DistributedError(
            f"the coordinator address {address} (distributed.coordinator) does not resolve ({exc}); "
            "give process 0's host:port"
        ) from None
    problem: OSError | None = None
    for family, kind, proto, _, sockaddr in candidates:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
                return
            except OSError as exc:
                problem = exc
    reason = problem.strerror if problem is not None else "no address"
    raise DistributedError(
        f"process 0 runs the coordinator, but cannot listen on {address} (distributed.coordinator): {reason}. "
        "Give an address of process 0's own host and a free port"
    )


def _wait_for_coordinator(address: str, timeout_s: float) -> None:
    """DistributedError unless process 0's coordinator accepts a TCP connection within timeout_s."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise DistributedError(
                    f"the coordinator {address} (distributed.coordinator) did not answer within "
                    f"distributed.timeout_s={timeout_s}s ({exc}); is process 0 running, and is that address "
                    "reachable from this host?"
                ) from None
            time.sleep(0.5)


def is_primary() -> bool:
    return jax.process_index() == 0


def _field_hashes(settings: Mapping[str, Any]) -> tuple[list[str], np.ndarray]:
    """(field names, one uint32 hash per field [F]); distributed.process_id is left out."""
    values = dict(settings)
    values["distributed"] = {k: v for k, v in values["distributed"].items() if k != "process_id"}
    names = sorted(values)
    digest = [hashlib.sha256(json.dumps(values[k], sort_keys=True, default=str).encode()).digest()[:4] for k in names]
    return names, np.array([int.from_bytes(d, "little") for d in digest], np.uint32)


def check_same_config(settings: Mapping[str, Any]) -> None:
    """ConfigError naming the fields in which the processes' configs differ."""
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    names, mine = _field_hashes(settings)
    every = np.asarray(multihost_utils.process_allgather(mine))  # [P, F]
    differ = ~(every == every[0]).all(axis=0)  # [F]
    if differ.any():
        fields = [n for n, d in zip(names, differ) if d]
        odd = [int(i) for i in np.nonzero((every != every[0]).any(axis=1))[0]]
        raise ConfigError(
            "distributed",
            f"every process must run the same config, but process(es) {odd} differ from process 0 in: "
            f"{', '.join(fields)}",
        )


def barrier(name: str) -> None:
    """Every process waits here for the others (no-op in a single process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def every_process(mine: np.ndarray) -> np.ndarray:
    """Every process's `mine` (a small host array, the same shape on each), stacked in process
    order on every process: [P, ...]. One all-gather, so every process must call it at the same
    point of the run."""
    mine = np.asarray(mine)
    if jax.process_count() == 1:
        return mine[None]
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(mine)).reshape(jax.process_count(), *mine.shape)


def any_process(mine: bool) -> bool:
    """True on every process when `mine` is true on any of them (a decision all processes must
    take together, e.g. to stop after the same update)."""
    return bool(every_process(np.array([mine])).any())


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
