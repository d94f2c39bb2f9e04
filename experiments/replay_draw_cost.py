"""What drawing a replay batch costs: marljax's draw (`marljax.algos.replay.draw`: a uniform integer over the
filled slots' count) against the categorical over every slot's validity it replaced, each jitted alone.

    python experiments/replay_draw_cost.py [--capacity 5000] [--batch 32] [--repeats 500]

Prints one line per draw with its mean time, then a JSON line. Times are this machine's; compare the
two rows with each other (docs/benchmarks.md, the parity section's VDN/QMIX speed)."""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp

from marljax.algos import replay


def mean_ms(fn, repeats: int) -> float:
    draw = jax.jit(fn)
    key = jax.random.PRNGKey(0)
    jax.block_until_ready(draw(key))  # compiled before the clock starts
    start = time.perf_counter()
    for i in range(repeats):
        out = draw(jax.random.fold_in(key, i))
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=5000)  # JaxMARL's ql_rnn_mpe.yaml BUFFER_SIZE
    parser.add_argument("--batch", type=int, default=32)  # its BUFFER_BATCH_SIZE
    parser.add_argument("--repeats", type=int, default=500)
    args = parser.parse_args()
    empty = replay.init(args.capacity, jnp.zeros((1,)))
    state = empty.replace(valid=jnp.ones_like(empty.valid))  # every slot filled
    logits = jnp.where(state.valid, 0.0, -jnp.inf)
    rows = {
        "categorical_ms": mean_ms(lambda k: jax.random.categorical(k, logits, shape=(args.batch,)), args.repeats),
        "uniform_ms": mean_ms(lambda k: replay.draw(state, k, args.batch), args.repeats),
    }
    print(f"{args.batch} of {args.capacity} slots, the earlier draw (categorical): {rows['categorical_ms']:.3f} ms")
    print(f"{args.batch} of {args.capacity} slots, marljax's draw (uniform count): {rows['uniform_ms']:.3f} ms")
    print(json.dumps({"capacity": args.capacity, "batch": args.batch, "device": jax.devices()[0].device_kind, **rows}))


if __name__ == "__main__":
    main()
