"""A chunk schedule with a short last chunk compiles one program, its update count an argument,
and gives bitwise the run that one program per chunk size gives: the whole state (every seed's
parameters, optimizer moments, keys, env states) and every metric of every update."""

import pytest

from tests._subprocess import run_with_devices

CODE = """
import json, jax, numpy as np
from marljax.config import load_config
from marljax.parallel.mesh import compile_chunks, seed_keys, shard_trainer
from marljax.train.chunks import chunk_sizes, run_chunks
from marljax.train.wiring import prepare

config = load_config(None, {overrides!r})
env, mesh, trainer = prepare(config)
schedule = chunk_sizes(config.num_updates, config.updates_per_chunk)

fns = shard_trainer(trainer, mesh)

def run(one_program, seed, compiled=None):
    state = fns.init(seed_keys(seed, config.num_seeds))
    if compiled is None and one_program:
        compiled = compile_chunks(fns, state, schedule)
    elif compiled is None:  # the reference: one program per distinct size
        compiled = {{n: fns.chunk.lower(state, n).compile() for n in sorted(set(schedule))}}
    rows = []
    state, _ = run_chunks(compiled, state, schedule, lambda _s, m, _n, _w: rows.append(m))
    return compiled, jax.device_get(state), rows

def same(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(np.array_equal(x, y) for x, y in zip(la, lb))

one, state, rows = run(True, config.seed)
_, state_each, rows_each = run(False, config.seed)
_, state_other, rows_other = run(True, config.seed + 1, one)
print(json.dumps({{
    "schedule": schedule,
    "programs": len({{id(getattr(f, "program", f)) for f in one.values()}}),
    "rows": [int(jax.tree.leaves(r)[0].shape[1]) for r in rows],
    "state": same(state, state_each), "metrics": same(rows, rows_each),
    "control_state": same(state, state_other), "control_metrics": same(rows, rows_other),
}}))
"""

SMALL = [
    "num_envs=8",
    "num_steps=8",
    "total_timesteps=2560",
    "num_chunks=3",
    "progress=false",
]  # 40 updates: 14, 14, 12


@pytest.mark.parametrize("devices, extra", [
    (1, []),
    pytest.param(4, ["num_seeds=2", "mesh.seed=2", "mesh.data=2"], marks=pytest.mark.nightly),
], ids=["1 device", "4 devices"])  # fmt: skip
def test_a_short_last_chunk_runs_on_the_same_program_bitwise(devices, extra):
    out = run_with_devices(CODE.format(overrides=SMALL + extra), devices)
    assert out["schedule"] == [14, 14, 12] and out["rows"] == [14, 14, 12]
    assert out["programs"] == 1  # the 12-update chunk runs the 14-update program
    assert out["state"] and out["metrics"]  # bitwise, against one program per size
    assert not out["control_state"] and not out["control_metrics"]  # another seed: the check can fail
