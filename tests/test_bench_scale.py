"""`marljax bench scale` runs the bench per num_envs in its own process and stops at its limits;
experiments/protocol_summary.py reads what the protocol's steps printed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from marljax.bench.scale import env_devices, row_overrides
from marljax.config import load_config

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["num_steps=8", "hidden_size=16"]


def _cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "marljax.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)  # fmt: skip


def test_rows_hold_a_few_chunks_of_a_useful_size():
    config = load_config(None, SMALL)
    small = load_config(None, [*SMALL, *row_overrides(config, 64)])
    assert (
        small.num_envs == 64 and small.num_chunks == 8 and small.updates_per_chunk == 10
    )  # 64 x 8 steps: small updates
    big = load_config(None, [*SMALL, *row_overrides(config, 65536)])
    assert big.updates_per_chunk == 1 and big.num_updates == 8  # 65536 x 8 steps is already 512k per update
    assert env_devices(config, 8) == 8 and env_devices(load_config(None, ["mesh.seed=2", "num_seeds=2"]), 8) == 4


@pytest.mark.slow
@pytest.mark.nightly  # nightly since 2026-11-28: CI's time (issue 63); a bench's figures, not a contract of training
def test_bench_scale_runs_a_row_then_the_protocol_summary_reads_it(tmp_path):
    proc = _cli("bench", "scale", "--max-envs", "64", *SMALL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "scale" and summary["stopped"] == "max-envs" and summary["platform"] == "cpu"
    (row,) = summary["rows"]
    assert row["num_envs_per_device"] == 64 and row["num_envs"] == 64
    assert row["train_env_steps_per_s"] > 0 and 0 < row["mfu"] < 1 and row["compile_s"] > 0
    assert row["peak_device_mb"] is None and row["peak_rss_mb"] > 0  # the CPU runtime counts no device memory

    # the protocol's summary over a directory holding this step and a doctor report; the rest never ran
    # (the protocol's log format: each command after "$ ", then its output; steps.tsv: step, exit, seconds, limit)
    (tmp_path / "bench_scale.log").write_text(f"$ marljax bench scale\n{proc.stdout}")
    (tmp_path / "doctor.log").write_text(f"$ marljax doctor\n{_cli('doctor').stdout}")
    (tmp_path / "steps.tsv").write_text("doctor\t0\t2\t60\nbench_scale\t0\t40\t330\n")
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "protocol_summary.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert re.search(r"doctor: ok\n  jax 0\.1[0-2]\.[^\n]*backend cpu", text), text
    assert "bench_scale: ok\n  stopped: max-envs" in text and f"{row['train_env_steps_per_s']:>14,.0f}" in text
    assert "train: not run" in text and "jaxmarl_4096_envs: not run" in text
    assert json.loads(text.strip().splitlines()[-1])["bench_scale"] == summary["rows"]


def test_a_row_past_its_time_limit_stops_the_sweep():
    proc = _cli("bench", "scale", "--timeout", "1", *SMALL)
    assert proc.returncode == 1
    assert "num_envs 64 per device: time limit (1 s); the sweep stops here" in proc.stdout
    assert json.loads(proc.stdout.strip().splitlines()[-1])["rows"] == []
