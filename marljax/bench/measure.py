"""What every benchmark measures with: wall time, XLA's FLOP count, a matmul peak, memory.

The matmul peak is measured, not read off a datasheet: MFU = achieved / this peak.
"""

from __future__ import annotations

import functools
import math
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
    Older JAX returns a list with one dict per program, newer a dict; a scan or while body
    inside `fn` is counted ONCE, whatever its trip count.
    """
    try:
        host = jax.devices("cpu")[0]
    except RuntimeError:  # JAX_PLATFORMS names the accelerator alone: count what it compiles
        host = None
    with jax.default_device(host):
        cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    if isinstance(cost, (list, tuple)):
        return float(sum(c.get("flops", 0.0) for c in cost if c))
    return float(cost.get("flops", 0.0)) if cost else 0.0


def peak_matmul_gflops(mesh: Mesh, sizes: tuple[int, ...] | None = None, reps: int = MATMUL_REPS,
                       dtype: str = "float32") -> dict:  # fmt: skip
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
