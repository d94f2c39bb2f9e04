"""The backward pass's weight-gradient matmul against the forward matmul of the same size, on CPU.

docs/performance.md (section 1) finds the two 64x64 hidden-layer weight gradients of the PPO
loss (`dW = X^T dY`, both operands contracted over their row axis, K = 98,304 rows at 1024 envs)
about twice as slow as the forward matmuls of the same FLOPs. This times, alone and jitted, the
ways XLA can be asked for the same product, so that a change to the network's backward pass is
chosen from measured figures:

    PYTHONPATH=. python experiments/weight_grad_matmul.py [--rows 98304] [--width 64] [--reps 15]

Prints the best and median time of each, and the largest difference from the plain
`dot_general` (the other forms sum in another order: they are not bitwise equal), then a JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp


def forms(rows: int, width: int) -> dict[str, Callable]:
    """name -> jitted f(x [rows, width], dy [rows, width]) -> [width, width] (the forward: x @ w)."""
    contract_rows = (((0,), (0,)), ((), ()))

    def chunked(chunks: int) -> Callable:
        def f(x, dy):  # the row reduction split: [chunks, rows/chunks, width] -> per-chunk products, summed
            xs, dys = x.reshape(chunks, rows // chunks, width), dy.reshape(chunks, rows // chunks, width)
            return jnp.einsum("bnk,bnm->bkm", xs, dys).sum(0)  # [chunks, width, width] -> [width, width]

        return f

    def transposed_copy(x, dy):  # X^T materialised first, then a row-major matmul
        return jax.lax.optimization_barrier(jnp.transpose(x)) @ dy

    table = {
        "dot_general (as autodiff emits it)": lambda x, dy: jax.lax.dot_general(x, dy, contract_rows),
        "x.T @ dy": lambda x, dy: jnp.transpose(x) @ dy,
        "X^T copied, then matmul": transposed_copy,
        "both copied transposed (A B^T)": lambda x, dy: jnp.einsum(
            "kn,mn->km", jax.lax.optimization_barrier(jnp.transpose(x)), jax.lax.optimization_barrier(jnp.transpose(dy))
        ),
        **{f"row reduction in {c} chunks": chunked(c) for c in (48, 384) if rows % c == 0},
        "bf16 operands, f32 result": lambda x, dy: jax.lax.dot_general(
            x.astype(jnp.bfloat16), dy.astype(jnp.bfloat16), contract_rows, preferred_element_type=jnp.float32
        ),
        "forward x @ w (same FLOPs)": lambda x, w: x @ w,
    }
    return {name: jax.jit(f) for name, f in table.items()}


def time_it(fn: Callable, args: tuple, reps: int) -> list[float]:
    fn(*args).block_until_ready()  # compile and warm up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args).block_until_ready()
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=98_304)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    kx, kd = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(kx, (args.rows, args.width))  # [rows, width]
    dy = jax.random.normal(kd, (args.rows, args.width))  # [rows, width]
    w = jnp.ones((args.width, args.width))
    fns = forms(args.rows, args.width)
    reference = next(iter(fns.values()))(x, dy)
    results = {}
    for name, fn in fns.items():
        forward = name.startswith("forward")
        times = time_it(fn, (x, w) if forward else (x, dy), args.reps)
        diff = None if forward else float(jnp.max(jnp.abs(fn(x, dy) - reference)))
        results[name] = {"best_ms": min(times) * 1e3, "median_ms": statistics.median(times) * 1e3, "max_abs_diff": diff}
        shown = "" if diff is None else f"  max |diff| {diff:.1e}"
        print(f"{name:36s} best {min(times) * 1e3:7.2f} ms  median {statistics.median(times) * 1e3:7.2f} ms{shown}")
    print(json.dumps({"bench": "weight_grad_matmul", "rows": args.rows, "width": args.width,
                      "platform": jax.devices()[0].platform, "results": results}))  # fmt: skip


if __name__ == "__main__":
    main()
