"""Each backend-specific choice of `marljax/nn/backend.py` timed both ways on this machine's
default backend: GAE as a serial scan or an associative scan, and the CNN torso's gradient with
the patch convolution or the convolution itself (parameters vmapped over agents, as
param_sharing=independent runs it).

    python experiments/backend_choices.py [--small]

Prints a table of milliseconds per call (the best of 5 after a warm-up) and the ratio of each
pair, then one JSON line. Both sides of a pair are timed one after the other in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp

from marljax.nn import ops
from marljax.nn.networks import CNNEncoder

FORCE = "MARLJAX_BACKEND_CHOICES"


def best_ms(fn, *args, calls: int = 5) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def gae_pair(T: int, E: int, A: int) -> dict[str, float]:
    k = jax.random.split(jax.random.PRNGKey(0), 4)
    reward, value = jax.random.normal(k[0], (T, E, A)), jax.random.normal(k[1], (T, E, A))
    done, last = jax.random.bernoulli(k[2], 0.04, (T, E, A)), jax.random.normal(k[3], (E, A))
    out = {}
    for method in ("scan", "associative"):
        fn = jax.jit(lambda r, v, d, lv, m=method: ops.gae(r, v, d, lv, 0.99, 0.95, m))
        out[method] = best_ms(fn, reward, value, done, last)
    return out


def conv_pair(agents: int, batch: int, obs: tuple[int, int, int]) -> dict[str, float]:
    x = jnp.ones((agents, batch, *obs))
    out = {}
    for choice in ("patch", "xla"):
        os.environ[FORCE] = f"conv={choice}"  # read when the module is traced, below
        net = CNNEncoder()
        params = jax.vmap(net.init, (0, 0))(jax.random.split(jax.random.PRNGKey(0), agents), x)
        loss = lambda p, x, net=net: jnp.sum(jax.vmap(net.apply)(p, x) ** 2)  # noqa: E731
        out[choice] = best_ms(jax.jit(jax.grad(loss)), params, x)
    del os.environ[FORCE]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="small shapes (a CPU rehearsal)")
    args = parser.parse_args()
    gae_shapes = [(64, 64, 3), (128, 160, 3)] if args.small else [(64, 64, 3), (128, 160, 3), (128, 40960, 3)]
    conv_shapes = [(2, 64, (5, 5, 4))] if args.small else [(2, 64, (5, 5, 26)), (2, 4096, (5, 5, 26))]
    result: dict = {"platform": jax.default_backend(), "device_kind": jax.devices()[0].device_kind, "rows": []}
    print(f"backend choices on {result['platform']} ({result['device_kind']}): ms per call, best of 5")
    for T, E, A in gae_shapes:
        t = gae_pair(T, E, A)
        row = {"choice": "gae", "shape": f"T{T} E{E} A{A}", **t, "ratio": t["associative"] / t["scan"]}
        print(f"  gae   {row['shape']:>22}  scan {t['scan']:8.3f}  associative {t['associative']:8.3f}"
              f"  associative/scan {row['ratio']:.2f}")  # fmt: skip
        result["rows"].append(row)
    for agents, batch, obs in conv_shapes:
        t = conv_pair(agents, batch, obs)
        row = {"choice": "conv", "shape": f"{agents} agents x {batch} x {obs}", **t, "ratio": t["xla"] / t["patch"]}
        print(f"  conv  {row['shape']:>22}  patch {t['patch']:8.3f}  xla {t['xla']:8.3f}  xla/patch {row['ratio']:.2f}")
        result["rows"].append(row)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
