"""Run records: config.yaml names the code that produced it and still loads as a config; the
`on_row` callback sees every metrics row as written."""

from __future__ import annotations

import importlib.metadata
import re

import jax

from marljax.config import load_config
from marljax.train.loop import train
from marljax.train.metrics import read_jsonl
from marljax.train.records import read_record

BASE = ["num_envs=4", "num_steps=8", "total_timesteps=256", "num_chunks=4", "num_seeds=2", "hidden_size=16",
        "eval_every=4", "eval_episodes=4", "progress=false", "plot=false"]  # fmt: skip


def test_on_row_sees_every_row_and_config_yaml_records_the_code(tmp_path):
    seen: list[dict] = []
    config = load_config(None, [*BASE, f"out_dir={tmp_path / 'run'}"])
    res = train(config, log=lambda line: None, on_row=seen.append)

    written = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert len(seen) == 4 and seen == res.rows == written
    assert any("eval_return" in row for row in seen)  # evaluation rows reach the callback too

    record = read_record(tmp_path / "run" / "config.yaml")
    assert record["marljax"] == importlib.metadata.version("marljax")
    assert record["jax"] == jax.__version__
    assert set(record) >= {"git_commit", "jaxlib", "flax", "optax", "orbax-checkpoint", "jaxmarl"}
    assert record["git_commit"] == "unknown" or re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", record["git_commit"])
    # the header is comments: the file reruns the same config
    assert load_config(tmp_path / "run" / "config.yaml", []).to_dict() == config.to_dict()
