"""Smoke test of `marljax bench` on a tiny config: the figures exist and are sane. No timing asserts."""

from __future__ import annotations

import json
import math

import pytest

from marljax.bench import measure
from marljax.bench.checkpoint import run_checkpoint_bench
from marljax.bench.train import run_bench
from marljax.config import load_config

KEYS = (
    "train_env_steps_per_s",
    "env_only_env_steps_per_s",
    "flops_per_env_step",
    "rollout_flops_per_env_step",
    "learn_flops_per_env_step",
    "achieved_gflops",
    "peak_matmul_gflops",
    "mfu",
    "compile_s",
    "peak_rss_mb",
    "bench_updates",
)


def test_bench_tiny_config_reports_finite_positive_figures(monkeypatch):
    monkeypatch.setattr(measure, "MATMUL_SIZES", {"cpu": (256,), "default": (256,)})  # keep it quick
    config = load_config(None, ["num_envs=4", "num_steps=8", "total_timesteps=64", "progress=false"])

    lines: list[str] = []  # not capsys: importing jaxmarl resets sys.stdout to sys.__stdout__
    result = run_bench(config, log=lines.append)

    for key in KEYS:
        value = result[key]
        assert isinstance(value, (int, float)) and not isinstance(value, bool), key
        assert math.isfinite(value) and value > 0, f"{key}={value}"
    parts = result["rollout_flops_per_env_step"] + result["learn_flops_per_env_step"]
    assert math.isclose(result["flops_per_env_step"], parts, rel_tol=1e-4)
    assert result["num_envs"] == 4 and result["num_steps"] == 8 and result["devices"] >= 1
    # the JSON line comes last and holds the same flat dict
    assert json.loads(lines[-1]) == result


def test_checkpoint_bench_reports_both_ways_side_by_side():
    config = load_config(None, ["num_envs=4", "num_steps=8", "total_timesteps=512", "num_chunks=8",
                                "checkpoint_every=4", "progress=false"])  # fmt: skip
    lines: list[str] = []
    result = run_checkpoint_bench(config, rounds=1, log=lines.append)
    assert result["periodic_saves"] == 3  # after updates 4, 8, 12; the 16th is the final save
    assert len(result["seconds_with"]) == len(result["seconds_without"]) == 1
    assert all(t > 0 for t in result["seconds_with"] + result["seconds_without"])
    assert math.isfinite(result["overhead"])
    assert json.loads(lines[-1]) == result


def test_q_bench_reports_env_and_gradient_steps(capfd, monkeypatch):
    monkeypatch.setattr(measure, "MATMUL_SIZES", {"cpu": (256,), "default": (256,)})  # keep it quick
    config = load_config(None, ["algo=qmix", "num_envs=4", "num_steps=8", "replay.gradient_steps=2", "replay.batch_size=4",
                                "replay.buffer_size=16", "total_timesteps=2048", "progress=false"])  # fmt: skip
    result = run_bench(config, log=print)
    assert json.loads(capfd.readouterr().out.strip().splitlines()[-1]) == result
    assert result["gradient_steps_per_update"] == 2 and result["batch"] == 32
    assert result["gradient_steps_per_s"] == pytest.approx(2 * result["updates_per_s"], rel=1e-4) and result["updates_per_s"] > 0
    assert math.isfinite(result["train_env_steps_per_s"]) and result["train_env_steps_per_s"] > 0
