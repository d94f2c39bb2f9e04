"""How long one gradient of the CNN torso takes with its parameters vmapped over agents: flax's
nn.Conv (lax.conv_general_dilated, a grouped convolution once vmapped) against `CNNEncoder`
(patches and one matmul), and nn.Conv with one set of parameters shared by the agents.

    python experiments/conv_gradient.py [--agents 2] [--obs 4 5 30] [--batch 64 2048]

Prints a table of milliseconds per gradient (the mean of 3 calls after a warm-up), then one JSON
line. The three are timed one after another in one process; compare their ratios.
"""

from __future__ import annotations

import argparse
import json
import time

import flax.linen as nn
import jax

from marljax.nn.networks import CNNEncoder


class FlaxConv(nn.Module):
    """CNNEncoder's two layers with flax's own nn.Conv."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i in range(2):
            x = jax.nn.relu(nn.Conv(32, (3, 3), padding="SAME", name=f"Conv_{i}")(x))
        return x.reshape(x.shape[0], -1)


def ms_per_call(f, *args, calls: int = 3) -> float:
    jax.block_until_ready(f(*args))
    start = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(f(*args))
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--obs", type=int, nargs=3, default=[4, 5, 30], help="H W C (overcooked_v2's)")
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 2048], help="observations per agent")
    args = parser.parse_args()
    rows = []
    for batch in args.batch:
        x = jax.random.normal(jax.random.PRNGKey(0), (args.agents, batch, *args.obs))  # [A, B, H, W, C]
        keys = jax.random.split(jax.random.PRNGKey(1), args.agents)
        row = {"batch": batch}
        for name, module in (("flax_conv_vmapped", FlaxConv()), ("patches_vmapped", CNNEncoder())):
            params = jax.vmap(lambda k, m=module, x0=x[0]: m.init(k, x0))(keys)  # per-agent parameters
            loss = lambda p, x, m=module: (jax.vmap(m.apply)(p, x) ** 2).mean()  # noqa: E731
            row[name] = ms_per_call(jax.jit(jax.grad(loss)), params, x)
        shared = FlaxConv().init(keys[0], x[0])
        loss = lambda p, x: (jax.vmap(FlaxConv().apply, (None, 0))(p, x) ** 2).mean()  # noqa: E731
        row["flax_conv_shared"] = ms_per_call(jax.jit(jax.grad(loss)), shared, x)
        rows.append(row)
    print(f"{'batch':>6} {'nn.Conv, vmapped':>17} {'patches, vmapped':>17} {'nn.Conv, shared':>16}  (ms per gradient)")
    for r in rows:
        print(
            f"{r['batch']:>6} {r['flax_conv_vmapped']:>17.1f} {r['patches_vmapped']:>17.1f} {r['flax_conv_shared']:>16.1f}"
        )
    print(json.dumps({"agents": args.agents, "obs": args.obs, "rows": rows}))


if __name__ == "__main__":
    main()
