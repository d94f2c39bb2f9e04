"""Why a vmapped sweep does not run faster per run on this CPU: the seed-batched matmul.

`python experiments/profile_chunk.py --envs 32 --updates 4 num_seeds=S` at S = 1 and 32 (the
bench sweep's run size) compares each phase's time per seed with and without vmap over seeds.
Under that vmap a layer's matmul becomes a `dot_general` with a batch dimension (each seed has
its own weights). This times that product alone, jitted, three ways for the same FLOPs:

    PYTHONPATH=. python experiments/seed_batched_matmul.py [--seeds 32] [--rows 3072] [--width 64]

- batched: one dot_general [S, rows, w] x [S, w, w] (what vmap emits for the forward), and the
  weight gradient [S, rows, w]^T x [S, rows, w] -> [S, w, w];
- unrolled: the same S products as S separate 2-D dots in one program;
- one seed: a single 2-D dot, times S.
`rows` is one PPO minibatch at bench sweep's size (32 envs x 128 steps x 3 agents / 4 minibatches).
Prints ms per seed for each, then a JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics

import jax
import jax.numpy as jnp

from experiments.weight_grad_matmul import time_it

FORWARD = (((2,), (1,)), ((0,), (0,)))  # [S, rows, w] x [S, w, w] -> [S, rows, w]
WEIGHT_GRAD = (((1,), (1,)), ((0,), (0,)))  # [S, rows, w] x [S, rows, w] -> [S, w, w]


def forms(seeds: int) -> dict[str, tuple]:
    """name -> (jitted f, which operands: 'fwd' takes (x, w), 'grad' takes (x, dy), per-seed count)."""

    def unrolled(dims):
        def f(a, b):  # S separate 2-D dots in one program
            one = (tuple(tuple(d - 1 for d in side) for side in dims[0]), ((), ()))
            return jnp.stack([jax.lax.dot_general(a[s], b[s], one) for s in range(seeds)])

        return f

    def first_seed(dims):
        one = (tuple(tuple(d - 1 for d in side) for side in dims[0]), ((), ()))
        return lambda a, b: jax.lax.dot_general(a[0], b[0], one)

    return {
        "forward, batched (vmap)": (jax.jit(lambda x, w: jax.lax.dot_general(x, w, FORWARD)), "fwd", 1),
        "forward, S 2-D dots": (jax.jit(unrolled(FORWARD)), "fwd", 1),
        "forward, one seed x S": (jax.jit(first_seed(FORWARD)), "fwd", seeds),
        "weight grad, batched (vmap)": (jax.jit(lambda x, dy: jax.lax.dot_general(x, dy, WEIGHT_GRAD)), "grad", 1),
        "weight grad, S 2-D dots": (jax.jit(unrolled(WEIGHT_GRAD)), "grad", 1),
        "weight grad, one seed x S": (jax.jit(first_seed(WEIGHT_GRAD)), "grad", seeds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=32)
    parser.add_argument("--rows", type=int, default=3072)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    S, N, W = args.seeds, args.rows, args.width
    kx, kd, kw = jax.random.split(jax.random.PRNGKey(0), 3)
    operands = {
        "fwd": (jax.random.normal(kx, (S, N, W)), jax.random.normal(kw, (S, W, W))),  # x [S, N, W], w [S, W, W]
        "grad": (jax.random.normal(kx, (S, N, W)), jax.random.normal(kd, (S, N, W))),
    }  # x, dy [S, N, W]
    print(f"{jax.devices()[0].platform}: {S} seeds, {N} rows, width {W}; ms per seed (best, median of {args.reps})")
    results = {}
    for name, (fn, kind, repeat) in forms(S).items():
        times = [t * repeat / S * 1e3 for t in time_it(fn, operands[kind], args.reps)]
        results[name] = {"best_ms_per_seed": min(times), "median_ms_per_seed": statistics.median(times)}
        print(f"  {name:30s} {min(times):8.3f} {statistics.median(times):8.3f}")
    print(json.dumps({"seeds": S, "rows": N, "width": W, "results": results}))


if __name__ == "__main__":
    main()
