"""A chunk schedule with a short last chunk: the one program `compile_chunks` compiles (its update
count an argument) against one program per chunk size, for any algorithm and settings:

    python experiments/one_chunk_program.py algo=qmix recurrent=true num_envs=8 num_steps=8 total_timesteps=2560 num_chunks=3

prints both compile times, whether the final state and every metric are bitwise equal, and the
same comparison against another seed (the negative control: it must print False False).
"""

import sys
import time

import jax
import numpy as np

from marljax.config import load_config
from marljax.parallel import mesh as meshmod
from marljax.parallel.mesh import seed_keys, shard_trainer
from marljax.train.chunks import chunk_sizes, run_chunks
from marljax.train.wiring import prepare

jax.config.update("jax_enable_compilation_cache", False)

args = sys.argv[1:] or ["total_timesteps=40960", "num_chunks=3", "num_envs=16"]
config = load_config(None, args)
env, mesh, trainer = prepare(config)
schedule = chunk_sizes(config.num_updates, config.updates_per_chunk)
print("schedule", schedule)


def go(one_program: bool, seed: int):
    fns = shard_trainer(trainer, mesh)
    state = fns.init(seed_keys(seed, config.num_seeds))
    t = time.perf_counter()
    if one_program:
        compiled = meshmod.compile_chunks(fns, state, schedule)
    else:
        compiled = {n: fns.chunk.lower(state, n).compile() for n in sorted(set(schedule))}
    c = time.perf_counter() - t
    rows = []
    state, _ = run_chunks(compiled, state, schedule, lambda _s, m, _n, _w: rows.append(m))
    return c, jax.device_get(state), rows


c1, s1, r1 = go(True, config.seed)
c2, s2, r2 = go(False, config.seed)
c3, s3, r3 = go(True, config.seed + 1)


def eq(a, b) -> bool:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(np.array_equal(x, y) for x, y in zip(la, lb))


print(f"compile: one program {c1:.1f}s, one per size {c2:.1f}s")
print("state bitwise", eq(s1, s2), "metrics bitwise", eq(r1, r2), "rows", [jax.tree.leaves(r)[0].shape for r in r1])
print("negative control (another seed) equal?", eq(s1, s3), eq(r1, r3))
