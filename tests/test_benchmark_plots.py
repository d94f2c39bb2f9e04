"""experiments/benchmark_plots.py's `scale` record, read from a GPU protocol's bench_scale.log (the way
an offline node's figures come back), with a log written here: each num_envs row is kept, the
summary line is not, the command is the one the user types, and a log with no rows is refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))

import benchmark_plots  # noqa: E402


def _row(n: int, train: float, env_only: float) -> str:
    return json.dumps({"num_envs": n, "platform": "gpu", "train_env_steps_per_s": train,
                       "env_only_env_steps_per_s": env_only, "compile_s": 7.0, "mfu": 0.01,
                       "peak_device_mb": 800.0, "num_envs_per_device": n})  # fmt: skip


def test_scale_from_a_protocol_log(tmp_path):
    log = tmp_path / "bench_scale.log"
    summary = json.dumps({"bench": "scale", "rows": [{"num_envs": 64, "train_env_steps_per_s": 1.0}]})
    log.write_text("\n".join(["$ python3 -m marljax.cli bench scale --timeout 100", "marljax bench scale: ...",
                              _row(64, 6e5, 1.3e6), "64 (64 in all)  600,000", _row(256, 2e6, 5e6), summary,
                              "whole process: 183.0 s"]))  # fmt: skip
    record = benchmark_plots.scale_from_log(log, "NVIDIA H200", "2026-11-26")
    assert record["command"] == "marljax bench scale --timeout 100"
    assert [(r["num_envs"], r["train"], r["env_only"]) for r in record["rows"]] == [(64, 6e5, 1.3e6), (256, 2e6, 5e6)]
    assert record["machine"]["device_kind"] == "NVIDIA H200" and record["machine"]["platform"] == "gpu"
    assert benchmark_plots._where(record) == "NVIDIA H200 (gpu), 2026-11-26"
    fig = benchmark_plots.draw_throughput(record)
    assert len(fig.axes[0].lines) == 2  # training and env alone


def test_a_log_without_rows_is_refused(tmp_path):
    log = tmp_path / "bench_scale.log"
    log.write_text("$ python3 -m marljax.cli bench scale\n" + json.dumps({"bench": "scale", "rows": []}) + "\n")
    with pytest.raises(SystemExit, match="no `marljax bench scale` rows"):
        benchmark_plots.scale_from_log(log, "NVIDIA H200", "2026-11-26")
