"""Defaults per accelerator: what a run on a GPU or TPU starts from, where it would waste the card
with the CPU's defaults (64 environments keep an H200 at a few percent of its throughput).

They sit above the env family's defaults and below every setting given explicitly
(`device_defaults=none` leaves them out; `device_defaults=gpu` asks for them anywhere). Each entry is
chosen by the time to the same return on that device, not by throughput alone
(docs/performance.md, "Defaults on the card"). On a CPU there are none: nothing changes there.

JAX-free unless asked which accelerator this machine has: `platform()` answers "cpu" without
importing JAX where JAX_PLATFORMS says cpu or no accelerator plugin is installed.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping
from typing import Any

DEVICES = ("cpu", "gpu", "tpu")

# device -> algorithm -> env family -> nested overrides
DEVICE_DEFAULTS: Mapping[str, Mapping[str, Mapping[str, Mapping[str, Any]]]] = {}

_PLUGINS = {"gpu": ("jax-cuda12-plugin", "jax-cuda13-plugin", "jax-rocm7-plugin"), "tpu": ("libtpu",)}


def platform(start_backend: bool = True) -> str:
    """'cpu', 'gpu' or 'tpu': the backend a run here gets. Imports JAX (and starts its backend) only
    where an accelerator could be there. `start_backend=False` answers from the installed plugins
    alone: a multi-process run must not start the backend before jax.distributed.initialize."""
    chosen = os.environ.get("JAX_PLATFORMS", "").split(",")[0].strip().lower()
    if chosen == "cpu":
        return "cpu"
    if chosen in ("cuda", "gpu", "rocm", "tpu"):
        installed = {"gpu" if chosen != "tpu" else "tpu"}
    else:
        installed = {device for device, plugins in _PLUGINS.items() if any(_has(p) for p in plugins)}
    if not installed:
        return "cpu"
    if not start_backend:
        return "gpu" if "gpu" in installed else "tpu"
    import jax

    backend = jax.default_backend()
    return "gpu" if backend in ("gpu", "cuda", "rocm") else backend


def _has(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def declared(algo: str, family: str | None) -> bool:
    """Whether any device declares defaults for `algo` on `family` (else no device need be asked)."""
    return any(overrides(device, algo, family) for device in DEVICES)


def overrides(device: str, algo: str, family: str | None) -> Mapping[str, Any]:
    """The nested overrides `device`'s defaults declare for `algo` on `family` ({} where none)."""
    return DEVICE_DEFAULTS.get(device, {}).get(algo, {}).get(family or "", {})
