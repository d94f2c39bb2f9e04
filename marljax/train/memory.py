"""Will the run fit in memory? Estimated from shapes before anything compiles, refused up front.

The estimate counts what a run holds, from `jax.eval_shape` and the update's traced program
(nothing is compiled): the training state of every seed (parameters, Adam moments, environment
states, an algorithm's extra state such as a replay buffer and target network), the rollout of
one update (the arrays the update's scans stack), and the working buffers of its largest loop
body (the matmul outputs of a minibatch's forward and backward pass). Measured against a compiled
chunk's own memory analysis it came to 1.11x (ippo) and 0.96x (qmix) of it on the default
configs, 0.51x-1.01x on small ones of every algorithm (the GRU's inner scans and pqn's
temporaries are not counted; tests/test_up_front.py keeps ippo and qmix within 0.5x-2x).

The limit: on CPU the host's available memory (/proc/meminfo MemAvailable); on a GPU or TPU the
sum of the run's devices' `memory_stats()["bytes_limit"]` (the state is assumed spread evenly).
`MARLJAX_MEMORY_LIMIT` (bytes, or 512M / 8G / 1.5T; `off`: no check) replaces it.
Above the limit the run is refused naming the field that drives the size; above
WARN_FRACTION of it, one warning line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from marljax.config import Config
from marljax.parallel.placement import memory_stats
from marljax.schema import ConfigError

LIMIT_ENV = "MARLJAX_MEMORY_LIMIT"
WARN_FRACTION = 0.6  # an estimate above this share of the limit gets one warning line
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class MemoryEstimate(NamedTuple):
    """Bytes a run holds, by part (every seed together), and the config keys that size each part."""

    parts: dict[str, int]  # e.g. {"rollout": ..., "training state": ..., and an algorithm's ExtraParts}
    keys: dict[str, tuple[str, ...]]  # part -> the keys that size it, e.g. ("num_envs", "num_steps")
    values: dict[str, Any]  # key -> its value in this run, for the message
    state: tuple[str, ...] = ("training state",)  # the parts that are the training state (a checkpoint's)

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def largest(self) -> str:
        return max(self.parts, key=lambda name: self.parts[name])

    def sized_by(self, part: str) -> str:
        """'num_envs=64, num_steps=128'."""
        return ", ".join(f"{k}={self.values[k]}" for k in self.keys[part])


def estimate_of(config: Config, parts: dict[str, int], keys: dict[str, tuple[str, ...]]) -> MemoryEstimate:
    """A MemoryEstimate of the non-empty `parts`, with the values of their keys in `config`."""
    parts = {k: v for k, v in parts.items() if v}
    return MemoryEstimate(parts, {k: keys[k] for k in parts}, {f: config.value(f) for k in parts for f in keys[k]})


class MemoryLimit(NamedTuple):
    bytes: int
    source: str  # where the figure comes from, said in the message


def tree_bytes(tree: Any) -> int:
    """Bytes of every array (or ShapeDtypeStruct) leaf of `tree`."""
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def human(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # unreachable


def per_seed(shapes: Any) -> Any:
    """ShapeDtypeStructs of one seed from those with a leading [S] axis."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), shapes)


class UpdateBytes(NamedTuple):
    """What one seed's update holds beyond the state, from its traced program."""

    rollout: int  # the arrays its scans stack (their `ys`: the rollout's [T, ...] trajectory)
    working: int  # the matmul/conv outputs of its largest loop body (a minibatch's forward and backward pass)


_LOOPS = ("scan", "while")
_MATMULS = ("dot_general", "conv_general_dilated")


def update_bytes(fn: Callable, *args: Any) -> UpdateBytes:
    """UpdateBytes of `fn(*args)` (traced, not compiled; collectives see mesh axes of size 1).

    A loop's stacked outputs are held after it; what its body makes per trip is working memory,
    of which the matmul outputs are what XLA cannot fuse away (the backward pass keeps them)."""
    jaxpr = jax.make_jaxpr(fn, axis_env=[("seed", 1), ("data", 1), ("agent", 1)])(*args).jaxpr
    return UpdateBytes(_stacked(jaxpr), max(_matmuls(jaxpr)))


def _stacked(jaxpr) -> int:
    """Bytes of the `ys` of the scans of `jaxpr`, outside loop bodies."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan":
            total += tree_bytes([v.aval for v in _scan_ys(eqn)])
        elif eqn.primitive.name not in (*_LOOPS, "cond"):  # pjit, custom_jvp/vjp, remat: run once
            total += sum(_stacked(sub) for sub in _inner(eqn))
    return total


def _scan_ys(eqn) -> list:
    """A scan's stacked outputs. jax <= 0.11 says how many outputs are carries (`num_carry`); 0.12
    describes them by a tree of its own (`ft_out`), so there the outputs with a leading axis of the
    scan's length are taken (a carry of that size too would be counted: an estimate, not a bound)."""
    if "num_carry" in eqn.params:
        return eqn.outvars[eqn.params["num_carry"] :]
    length = eqn.params.get("length")
    return [v for v in eqn.outvars if getattr(v.aval, "shape", ()) and v.aval.shape[0] == length]


def _matmuls(jaxpr) -> tuple[int, int]:
    """(bytes of the matmul outputs of `jaxpr` outside loops, the most of any loop body inside)."""
    here = inner = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _MATMULS:
            here += tree_bytes([v.aval for v in eqn.outvars])
        for sub in _inner(eqn):
            body, deeper = _matmuls(sub)
            if eqn.primitive.name in _LOOPS:
                inner = max(inner, body, deeper)
            else:
                here, inner = here + body, max(inner, deeper)
    return here, inner


def _inner(eqn) -> list:
    """The jaxprs an equation calls (a pjit's, a scan's body, a cond's branches)."""
    subs = []
    for p in eqn.params.values():
        for q in p if isinstance(p, (tuple, list)) else (p,):
            sub = getattr(q, "jaxpr", q)
            if hasattr(sub, "eqns"):
                subs.append(sub)
    return subs


def rollout_bytes(trainer, state_one_seed: Any) -> int:
    """Bytes of one seed's rollout of one update: `collect`'s trajectory (mode=async)."""
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    _, traj = jax.eval_shape(trainer.collect, state_one_seed.learner.params, state_one_seed.actors, key)
    return tree_bytes(traj)


def estimate(
    config: Config, trainer, state_shapes: Any, extra: dict[str, tuple[int, str]] | None = None
) -> MemoryEstimate:
    """The bytes a run of `config` holds. state_shapes: its TrainState's ShapeDtypeStructs, leaves
    [S, ...] (S = num_seeds; a sweep program's cells x seeds); `extra`: more parts, name ->
    (bytes, field), e.g. a sweep's copy of the best parameters."""
    extra_state = getattr(state_shapes, "extra", None)
    # the parts of the algorithm's extra state it names apart (`extra_parts`: a replay buffer, ...)
    apart = [] if extra_state is None else getattr(trainer, "extra_parts", ())
    parts = {p.name: tree_bytes(p.of(extra_state)) for p in apart}
    keys = {p.name: tuple(p.keys) for p in apart}
    update = update_bytes(trainer.update, per_seed(state_shapes))
    S = config.num_seeds
    parts |= {
        "rollout": update.rollout * S,
        "working buffers": update.working * S,
        "training state": tree_bytes(state_shapes) - sum(parts.values()),
    }
    keys |= {
        "rollout": ("num_envs", "num_steps"),
        "working buffers": ("num_envs", "num_steps", "hidden_size"),
        "training state": ("num_envs", "hidden_size"),
    }
    for name, (n, key) in (extra or {}).items():
        parts[name], keys[name] = n, (key,)
    return estimate_of(config, parts, keys)._replace(state=(*(p.name for p in apart), "training state"))


def parse_limit(text: str) -> int | None:
    """MARLJAX_MEMORY_LIMIT's value in bytes ('8G', '512M', '1.5T', '1000000'); None for off."""
    text = text.strip()
    if text.lower() in ("off", "none", "0"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", text, re.IGNORECASE)
    if m is None:
        raise ConfigError(LIMIT_ENV, f"expected bytes such as 8G, 512M or 1000000, or off; got {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def host_available() -> int:
    """The host's available memory: MemAvailable of /proc/meminfo, else free pages x page size."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def memory_limit(devices: Iterable[Any], environ=os.environ) -> MemoryLimit | None:
    """What the run's devices can hold: MARLJAX_MEMORY_LIMIT if set; on CPU the host's available
    memory (every CPU device of a host shares it); else the sum of the devices' bytes_limit. None:
    off, or a device that reports no limit."""
    if LIMIT_ENV in environ:
        n = parse_limit(environ[LIMIT_ENV])
        return None if n is None else MemoryLimit(n, f"{LIMIT_ENV}={environ[LIMIT_ENV]}")
    devices = list(devices)
    hosts = len({d.process_index for d in devices})  # a multi-host run: every host alike, each holds its share
    if all(d.platform == "cpu" for d in devices):
        return MemoryLimit(
            host_available() * hosts,
            f"this host's available memory (MemAvailable){f' x {hosts} hosts' if hosts > 1 else ''}",
        )
    local = [d for d in devices if d.process_index == jax.process_index()]  # the others' stats are not ours to read
    limits = [memory_stats(d).get("bytes_limit") for d in local]
    known = [int(x) for x in limits if x]
    if len(known) < len(limits):
        return None
    return MemoryLimit(
        sum(known) * len(devices) // len(local), f"the memory of {len(devices)} {devices[0].platform} device(s)"
    )


def check_fits(
    est: MemoryEstimate,
    limit: MemoryLimit | None,
    seeds: int,
    seeds_field: str = "num_seeds",
    log: Callable[[str], None] = print,
) -> None:
    """ConfigError naming the field that drives the size when `est` is above `limit`; one warning
    line when it is above WARN_FRACTION of it."""
    if limit is None or est.total <= WARN_FRACTION * limit.bytes:
        return
    big = est.largest()
    parts = ", ".join(
        f"{name} {human(n)} ({est.sized_by(name)})" for name, n in sorted(est.parts.items(), key=lambda p: -p[1])
    )
    across = f" for {seeds} seeds ({seeds_field})" if seeds > 1 else ""
    head = f"the run holds about {human(est.total)}{across}: {parts}"
    lower = " or ".join(est.keys[big] + ((seeds_field,) if seeds > 1 else ()))
    if est.total > limit.bytes:
        raise ConfigError(
            est.keys[big][0],
            f"{head}; more than {human(limit.bytes)}, {limit.source}; lower {lower} ({LIMIT_ENV}=off skips this check)",
        )
    log(
        f"warning: {head}; {est.total / limit.bytes:.0%} of {human(limit.bytes)}, {limit.source}; it may not fit "
        f"(lower {lower})"
    )
