"""Less to compile: a run compiles its chunk program once per distinct chunk size and its
evaluation program once, however many chunks and evaluations it runs (compile_cache.CompileLog
counts JAX's backend compile events)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from marljax.config import load_config
from marljax.train.compile_cache import CompileLog
from marljax.train.loop import train

RUN = ["num_envs=4", "num_steps=8", "total_timesteps=192", "num_chunks=3", "hidden_size=16", "eval_every=2",
       "eval_episodes=2", "checkpoint_every=2", "progress=false", "plot=false", "compile_cache=false"]  # fmt: skip


def test_the_counter_sees_a_fresh_jit_compile_again():  # the negative control
    x = jnp.arange(3.0)
    with CompileLog() as log:
        for _ in range(2):
            jax.jit(lambda v: v * 3 + 1)(x)  # a jit made afresh per call: compiled every time
        kept = jax.jit(lambda v: v * 5 + 1)
        kept(x), kept(x)
    assert log.counts()["jit(<lambda>)"] == 3
    assert log.repeats() == {("jit(<lambda>)", "(ShapedArray(float32[3]),)"): 3}


@pytest.mark.slow
@pytest.mark.newest_jax  # jax.monitoring's compile events and pxla's compile log on the newest jax too (CI leg 2)
def test_a_run_compiles_its_chunk_and_evaluation_programs_once(tmp_path):
    config = load_config(None, [*RUN, f"out_dir={tmp_path / 'run'}"])
    assert config.num_updates == 6 and config.updates_per_chunk == 2  # 3 chunks, 3 evaluations, 3 checkpoints
    jax.clear_caches()  # the module-level jits (fingerprint, guard, eval keys) may have compiled in an earlier test
    with CompileLog(stack=False) as log:
        result = train(config, log=lambda _line: None)
    assert sum("eval_return" in r for r in result.rows) == 3 and len(result.checkpoints) == 3
    counts = log.counts()
    assert counts["jit(chunk)"] == 1, counts
    assert counts["jit(one_row)"] == 1, counts  # the evaluation
    assert counts["jit(_eval_keys)"] == 1, counts  # its keys
    assert counts["jit(<lambda>)"] == 1, counts  # the checkpoint's fingerprint
    assert counts["jit(_finite_by_group)"] == 1, counts  # the NaN guard
