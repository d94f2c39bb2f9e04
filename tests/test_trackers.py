"""Experiment trackers mirror metrics.jsonl: a 2-seed run with evaluations is logged to
TensorBoard, wandb (offline) and MLflow (file store), and each backend's own reader finds every
number of every row (per-seed values included) at the row's env_steps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from marljax.config import ConfigError, load_config
from marljax.train.loop import train
from marljax.train.metrics import read_jsonl
from marljax.train.trackers import scalars

BASE = ["num_envs=4", "num_steps=8", "total_timesteps=256", "num_chunks=4", "num_seeds=2", "hidden_size=16",
        "eval_every=4", "eval_episodes=4", "progress=false"]  # fmt: skip


def _expected(rows: list[dict]) -> dict[str, dict[int, float]]:
    """metric -> {env_steps: value}, from metrics.jsonl."""
    out: dict[str, dict[int, float]] = {}
    for row in rows:
        for key, value in scalars(row).items():
            out.setdefault(key, {})[int(row["env_steps"])] = value
    return out


def _tensorboard(out: Path) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def _mlflow(out: Path) -> dict[str, dict[int, float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(out / "mlruns").absolute().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("marljax").experiment_id])
    return {k: {m.step: m.value for m in client.get_metric_history(run.info.run_id, k)} for k in run.data.metrics}


def _wandb(out: Path) -> dict[str, dict[int, float]]:
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    (path,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    store = datastore.DataStore()
    store.open_for_scan(str(path))
    found: dict[str, dict[int, float]] = {}
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") != "history":
            continue
        items = {(item.key or "/".join(item.nested_key)): json.loads(item.value_json) for item in record.history.item}
        if "env_steps" not in items:
            continue
        for key, value in items.items():
            if isinstance(value, (int, float)) and not key.startswith("_"):
                found.setdefault(key, {})[int(items["env_steps"])] = float(value)
    return found


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> Path:
    pytest.importorskip("tensorboardX")
    out = tmp_path_factory.mktemp("trackers") / "run"
    config = load_config(None, [*BASE, f"out_dir={out}", "log.backends=[tensorboard,wandb,mlflow]", "log.tags=[test]"])
    train(config, log=lambda line: None)
    return out


@pytest.mark.parametrize("reader, rtol", [(_tensorboard, 1e-6), (_wandb, 0.0), (_mlflow, 0.0)],
                         ids=["tensorboard", "wandb", "mlflow"])  # fmt: skip
def test_each_tracker_holds_every_number_of_metrics_jsonl(logged, reader, rtol):
    expected = _expected(read_jsonl(logged / "metrics.jsonl"))
    assert "eval_return" in expected and "return_per_seed/seed_1" in expected  # evaluations and per-seed series
    found = reader(logged)
    missing = sorted(set(expected) - set(found))
    assert not missing, f"not logged: {missing}"
    for key, series in expected.items():
        assert sorted(found[key]) == sorted(series), key
        np.testing.assert_allclose([found[key][s] for s in sorted(series)], [series[s] for s in sorted(series)],
                                   rtol=rtol, err_msg=key)  # fmt: skip


def test_an_unknown_or_missing_tracker_is_a_config_error_naming_the_extra(monkeypatch):
    with pytest.raises(ConfigError, match=r"log.backends: unknown tracker 'tensorbord'"):
        load_config(None, ["log.backends=[tensorbord]"])
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match=r'log.backends: wandb is not installed: pip install "marljax\[wandb\]"'):
        load_config(None, ["log.backends=[wandb]"])
