"""A resumed run with a larger total_timesteps: the learning rate goes on from where it was (no
jump at the resume point), the chunk length stays, and the chunk program compiles once (read back
from the compile cache when the schedule does not depend on the budget)."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from marljax.config import load_config
from marljax.nn.ops import schedule_position
from tests._subprocess import run_with_devices

# 8 updates of 4 envs x 8 steps, one update a chunk, lr annealed linearly from 0.01
BASE = [
    "num_envs=4",
    "num_steps=8",
    "total_timesteps=256",
    "num_chunks=8",
    "checkpoint_every=1",
    "hidden_size=16",
    "lr=0.01",
    "progress=false",
    "plot=false",
]


def test_the_position_goes_on_from_where_it_was_and_ends_with_the_new_budget():
    horizon, at = schedule_position([[4, 8]], 16)  # 8 updates planned, resumed at 4 with 16
    assert horizon == 8
    pos = [float(at(jnp.int32(u))) for u in range(17)]
    assert pos[:5] == [0, 1, 2, 3, 4]  # before the resume: the old schedule itself
    assert pos[16] == pytest.approx(8.0) and pos[10] == pytest.approx(6.0)  # 4 left, stretched over 12
    _, twice = schedule_position([[4, 8], [10, 16]], 20)  # resumed again at 10 (position 6), now 20
    assert float(twice(jnp.int32(10))) == pytest.approx(6.0) and float(twice(jnp.int32(20))) == pytest.approx(8.0)
    assert float(twice(jnp.int32(15))) == pytest.approx(7.0)
    none_horizon, same = schedule_position([], 16)
    assert none_horizon == 16 and int(same(jnp.int32(5))) == 5


def test_a_bad_list_is_refused_naming_the_field():
    for bad in ("[[9, 8]]", "[[4]]", "[[4, 8], [2, 8]]", "[[0, 8]]", "3"):
        with pytest.raises(Exception, match="lr_schedule_resumes: a list of"):
            load_config(None, [*BASE, "total_timesteps=512", f"lr_schedule_resumes={bad}"])


RESUME = """
import json
from marljax.config import load_config
from marljax.train.compile_cache import CompileLog
from marljax.train.loop import train
base = {base!r} + ["out_dir={out}", "compile_cache={cache}"]
train(load_config(None, base), log=lambda s: None, max_chunks=4)  # stopped at update 4 of 8
lines = []
with CompileLog(stack=False) as log:
    res = train(load_config(None, base + ["resume=true", "total_timesteps=512"]), log=lines.append)
chunk = [p for p in log.programs if p.name == "jit(chunk)"]
print(json.dumps({{"lr": [r["lr"] for r in res.rows], "updates": [r["update"] for r in res.rows], "lines": lines,
                  "chunk_compiles": len(chunk), "chunk_cached": [p.cached for p in chunk]}}))
"""


def _resumed(tmp_path, *extra: str) -> dict:
    return run_with_devices(RESUME.format(base=[*BASE, *extra], out=tmp_path / "run", cache=tmp_path / "cache"), 1)


@pytest.mark.slow
def test_a_larger_budget_continues_the_learning_rate_and_the_chunk_program(tmp_path):
    got = _resumed(tmp_path)
    lr = np.array(got["lr"])  # one update a chunk: the rate of each update, 1..16
    assert got["updates"] == list(range(1, 17))  # chunks of 1 update as before
    steps = np.diff(lr)
    assert np.all(steps <= 0), lr  # never rises: the rate at update 5 is below update 4's (it jumped up before)
    assert abs(steps[4]) <= abs(steps[3]) + 1e-9, lr  # at the resume point it falls no faster than before it
    assert lr[-1] < 0.1 * lr[0]  # and it still anneals towards 0, now at update 16
    change = next(line for line in got["lines"] if line.startswith("resumed with total_timesteps"))
    assert "256 -> 512 (8 -> 16 updates, from update 4)" in change and "chunks of 1 updates as before" in change
    assert "learning rate goes on from 0.005 " in change  # 0.01 x (1 - 4/8): the stopped run's next update's rate
    assert got["chunk_compiles"] == 1  # one chunk size, compiled once (the new end of the schedule is a constant)


@pytest.mark.slow
def test_with_a_flat_schedule_the_resumed_run_reads_its_chunk_program_back(tmp_path):
    got = _resumed(tmp_path, "anneal_lr=false")
    assert np.allclose(got["lr"], 0.01)
    assert got["chunk_compiles"] == 1 and got["chunk_cached"] == [True]  # the same program: from the cache
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["update"] == 16
