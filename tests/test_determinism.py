"""Same seed and config on the same devices: bitwise-identical metrics and parameters."""

import jax
import numpy as np

from marljax.config import load_config
from marljax.train.loop import train


def _run(tmp_path, name):
    cfg = load_config(None, [
        "num_envs=8", "num_steps=16", "total_timesteps=1024", "num_seeds=2", "num_chunks=2",
        f"out_dir={tmp_path / name}", "progress=false", "plot=false",
    ])  # fmt: skip
    res = train(cfg, log=lambda s: None)
    return res.rows, jax.device_get(res.state.learner.params)


def test_two_runs_are_bitwise_identical(tmp_path):
    rows_a, params_a = _run(tmp_path, "a")
    rows_b, params_b = _run(tmp_path, "b")
    drop = ("wall_s", "env_steps_per_s")
    assert [{k: v for k, v in r.items() if k not in drop} for r in rows_a] == [
        {k: v for k, v in r.items() if k not in drop} for r in rows_b
    ]
    for a, b in zip(jax.tree.leaves(params_a), jax.tree.leaves(params_b)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_different_seed_gives_different_parameters(tmp_path):
    base = ["num_envs=4", "num_steps=8", "total_timesteps=64", "progress=false", "plot=false"]
    p = []
    for seed in (0, 1):
        cfg = load_config(None, base + [f"seed={seed}", f"out_dir={tmp_path / str(seed)}"])
        p.append(jax.device_get(train(cfg, log=lambda s: None).state.learner.params))
    leaves = list(zip(jax.tree.leaves(p[0]), jax.tree.leaves(p[1])))
    assert any(not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in leaves)
