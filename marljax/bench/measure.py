"""What every benchmark measures with: wall time, XLA's FLOP count, a matmul peak, memory.

The matmul peak is measured, not read off a datasheet: MFU = achieved / this peak.
"""

from __future__ import annotations

import functools
import math
import re
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from marljax.parallel.placement import every_device_sharding, memory_stats, on_every_device, platform

TIME_BUDGET_S = 30.0  # a benchmark stops timing more repetitions once this much has been timed
MATMUL_REPS = 10  # timed matmuls per size (the best is kept)
MATMUL_SIZES = {"cpu": (1024, 2048), "default": (4096, 8192)}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(wall seconds of `fn()`, waiting for every array it returns; what it returned)."""
    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    return time.perf_counter() - t, out


def flops(fn: Callable, *args: Any) -> float:
    """FLOPs XLA's cost analysis reports for `jit(fn)(*args)` (args may be ShapeDtypeStructs).

    Compiled for the host CPU wherever JAX has one, so that every backend counts the same
    program: XLA's GPU compiler hands matmuls to cuBLAS (`__cublas$lt$matmul` custom calls) that
    its cost analysis leaves out (measured on an NVIDIA H200: an IPPO gradient step, hidden 256,
    225.8M FLOPs compiled for the card, 324.5M for its CPU, which the analytic count matches).
    A scan or while body inside `fn` is counted ONCE, whatever its trip count.
    """
    try:
        host = jax.devices("cpu")[0]
    except RuntimeError:  # JAX_PLATFORMS names the accelerator alone: count what it compiles
        host = None
    return _cost(fn, args, host).get("flops", 0.0)


def bytes_accessed(fn: Callable, *args: Any) -> float:
    """Bytes XLA's cost analysis models `jit(fn)(*args)` as reading and writing, compiled for the
    default backend (its fusion decides what stays on chip): a model, not a measurement."""
    return _cost(fn, args, None).get("bytes accessed", 0.0)


def _cost(fn: Callable, args: tuple, device) -> dict[str, float]:
    with jax.default_device(device):
        cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    if isinstance(cost, (list, tuple)):  # older JAX: one dict per program
        merged: dict[str, float] = {}
        for c in filter(None, cost):
            for k, v in c.items():
                merged[k] = merged.get(k, 0.0) + float(v)
        return merged
    return {k: float(v) for k, v in (cost or {}).items()}


# NVIDIA's datasheet figures per device kind (dense, without sparsity; TF32 for float32 matmuls,
# which XLA runs on the card by default): GFLOP/s, and memory bandwidth in GB/s
DATASHEET = {
    "NVIDIA H200": {"float32": 494_700.0, "bfloat16": 989_400.0, "memory_gb_s": 4_800.0},
    "NVIDIA H100 80GB HBM3": {"float32": 494_700.0, "bfloat16": 989_400.0, "memory_gb_s": 3_350.0},
    "NVIDIA A100-SXM4-80GB": {"float32": 156_000.0, "bfloat16": 312_000.0, "memory_gb_s": 2_039.0},
}


def datasheet(mesh: Mesh, dtype: str) -> dict[str, Any]:
    """The device kind's datasheet matmul peak for `dtype` and memory bandwidth (None where the kind is
    not in `DATASHEET`, a CPU included)."""
    kind = mesh.devices.flat[0].device_kind
    sheet = DATASHEET.get(kind, {})
    devices = mesh.devices.size
    peak, bandwidth = sheet.get(dtype), sheet.get("memory_gb_s")
    return {
        "device_kind": kind,
        "datasheet_matmul_gflops": None if peak is None else peak * devices,
        "datasheet_memory_gb_s": None if bandwidth is None else bandwidth * devices,
    }


def peak_matmul_gflops(
    mesh: Mesh, sizes: tuple[int, ...] | None = None, reps: int = MATMUL_REPS, dtype: str = "float32"
) -> dict:
    """Best matmul GFLOP/s on the mesh's devices: one n x n @ n x n per device, 2 n^3 each, on
    `dtype` operands (bfloat16: with a float32 result, as the networks' dtype=bfloat16 runs them)."""
    devices = mesh.devices.size
    sizes = sizes or MATMUL_SIZES.get(platform(mesh), MATMUL_SIZES["default"])
    if dtype == "float32":
        product = lambda a, b: a[0] @ b[0]  # noqa: E731
    else:
        product = lambda a, b: jnp.matmul(a[0], b[0], preferred_element_type=jnp.float32)  # noqa: E731
    matmul = on_every_device(lambda a, b: product(a, b)[None], mesh)  # each device its own pair, a 2-D matmul
    best, best_n = 0.0, 0
    for n in sizes:
        make = jax.jit(
            lambda k: jax.random.normal(k, (devices, n, n), jnp.float32).astype(dtype),  # noqa: B023
            out_shardings=every_device_sharding(mesh),
        )
        a, b = make(jax.random.PRNGKey(1)), make(jax.random.PRNGKey(2))
        jax.block_until_ready(matmul(a, b))  # compile + warm-up
        seconds = min(timed(functools.partial(matmul, a, b))[0] for _ in range(reps))
        gflops = devices * 2 * n**3 / seconds / 1e9
        if gflops > best:
            best, best_n = gflops, n
        del a, b
    return {"peak_matmul_gflops": best, "peak_matmul_n": best_n, "peak_matmul_dtype": dtype}


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def peak_device_mb(mesh: Mesh) -> float | None:
    """Largest peak of device memory in use over the mesh's devices, in MiB, as the runtime
    counts it (GPU, TPU); None where the runtime keeps no count (CPU: see peak_rss_mb)."""
    peaks = []
    for device in mesh.devices.flat:
        stats = memory_stats(device)
        if "peak_bytes_in_use" in stats:
            peaks.append(stats["peak_bytes_in_use"])
    return max(peaks) / 2**20 if peaks else None


def six_digits(result: dict[str, Any]) -> dict[str, Any]:
    """`result` with every finite float rounded to 6 significant digits, for the JSON line."""
    return {k: (float(f"{v:.6g}") if isinstance(v, float) and math.isfinite(v) else v) for k, v in result.items()}


_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")
_WHILE = re.compile(r"while\(.*body=%?([\w.\-]+)")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_CALLED = re.compile(r"(?:calls|to_apply|condition|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
# the random-bit hash's own loop: JAX lowers threefry's rounds as a 5-trip loop on a CPU (to compile
# faster) and unrolled elsewhere, so it is not a sequential step of the algorithm
_RNG = re.compile(
    r'op_name="[^"]*jit\((_threefry\w*|_uniform|_normal\w*|_gumbel|_shuffle|_randint|_bernoulli|_random_bits\w*|_truncated_normal|_categorical|_split|_fold_in)\)'
)


def loop_trips(hlo_text: str) -> int:
    """Sequential loop trips a compiled program runs: every while loop's body counted once per trip,
    a nested loop once per trip of each loop around it (from `compiled.as_text()`; XLA records each
    scan's trip count as `known_trip_count`), leaving out the random-bit hash's own loops (`_RNG`). A loop of unknown count counts one trip; a conditional its
    longest branch."""
    body: dict[str, list[str]] = {}
    name, entry = "", ""
    for line in hlo_text.splitlines():
        match = _COMPUTATION.match(line)
        if match:
            name = match.group(1)
            body[name] = []
            entry = name if line.startswith("ENTRY") else entry
        elif name:
            body[name].append(line)

    @functools.cache
    def trips(computation: str) -> int:
        total = 0
        for line in body.get(computation, ()):
            loop = _WHILE.search(line)
            if loop and _RNG.search(line):
                continue
            if loop:
                count = _TRIPS.search(line)
                total += (int(count.group(1)) if count else 1) * (1 + trips(loop.group(1)))
                continue
            total += sum(trips(c) for c in _CALLED.findall(line))
            for branches in _BRANCHES.findall(line):  # a conditional runs one branch: the longest counts
                total += max(trips(b.strip().lstrip("%")) for b in branches.split(","))
        return total

    return trips(entry)
