"""Experiment trackers mirror metrics.jsonl: a 2-seed run with evaluations is logged to
TensorBoard, wandb (offline), Neptune (offline) and MLflow (file store), and each backend's own
reader (Neptune: its offline operation log, what `neptune sync` uploads) finds every number of
every row (per-seed values included) at the row's env_steps, then the plot and the config."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
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


def _mlflow_run(out: Path):
    from mlflow.tracking import MlflowClient

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3's opt-in for reading a local file store
    client = MlflowClient(tracking_uri=(out / "mlruns").absolute().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("marljax").experiment_id])
    return client, run


def _mlflow(out: Path) -> dict[str, dict[int, float]]:
    client, run = _mlflow_run(out)
    return {k: {m.step: m.value for m in client.get_metric_history(run.info.run_id, k)} for k in run.data.metrics}


def _neptune_ops(out: Path) -> list[dict]:
    (log,) = (out / ".neptune" / "offline").glob("run__*/data-1.log")
    return [json.loads(line)["obj"] for line in log.read_text().splitlines()]


def _neptune(out: Path) -> dict[str, dict[int, float]]:
    found: dict[str, dict[int, float]] = {}
    for op in _neptune_ops(out):
        if op["type"] == "LogFloats" and op["path"][0] == "metrics":
            for v in op["values"]:
                found.setdefault("/".join(op["path"][1:]), {})[int(v["step"])] = v["value"]
    return found


def _wandb_records(path: Path) -> Iterator[bytes]:
    """The records of a .wandb file: a 7-byte header (":W&B", magic, version), then LevelDB-log
    blocks of 32 KiB whose chunks carry a 7-byte header (crc32c, length, type: 1 full, 2 first,
    3 middle, 4 last). wandb 0.31 no longer ships a Python reader of its own format."""
    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", path
    pos, parts = 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            break
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            yield parts


def _wandb(out: Path) -> dict[str, dict[int, float]]:
    from wandb.proto import wandb_internal_pb2

    (path,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    found: dict[str, dict[int, float]] = {}
    for data in _wandb_records(path):
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
    out = tmp_path_factory.mktemp("trackers") / "run"
    config = load_config(None, [*BASE, f"out_dir={out}", "log.backends=[tensorboard,wandb,neptune,mlflow]",
                                "log.tags=[test]"])  # fmt: skip
    train(config, log=lambda line: None)
    return out


# TensorBoard stores float32; the others keep the float64 of metrics.jsonl
@pytest.mark.parametrize("reader, rtol", [(_tensorboard, 1e-6), (_wandb, 0.0), (_neptune, 0.0), (_mlflow, 0.0)],
                         ids=["tensorboard", "wandb", "neptune", "mlflow"])  # fmt: skip
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


def test_streaming_without_a_login_is_refused_naming_log_offline_before_anything_compiles(tmp_path, monkeypatch):
    """`log.offline=false` (JaxMARL's `WANDB_MODE: online`) with no credentials failed when the run opened its
    trackers, after compiling; now `train` refuses it first and writes nothing. The config itself still loads
    (a streamed run's saved config is read elsewhere: export, load_policy). Controls: with a key, or offline,
    the check passes."""
    import importlib.util

    from marljax.run_settings import check_logins

    netrc = tmp_path / "netrc"
    netrc.write_text("")
    for name, value in {"HOME": tmp_path, "NETRC": netrc, "WANDB_CONFIG_DIR": tmp_path / "wandb"}.items():
        monkeypatch.setenv(name, str(value))
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "NEPTUNE_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # wandb's credential lookup, where this wandb has it (elsewhere wandb.init asks, as before)
    lookup = importlib.util.find_spec("wandb") is not None and importlib.util.find_spec("wandb.sdk.lib.wbauth")
    trackers = (("wandb", "WANDB_API_KEY"),) if lookup else ()
    for tracker, login in (*trackers, ("neptune", "NEPTUNE_API_TOKEN")):
        out = tmp_path / f"run_{tracker}"
        online = load_config(None, [*BASE, f"log.backends=[{tracker}]", "log.offline=false", f"out_dir={out}"])
        refused = rf"^log\.offline: false streams to {tracker}, which finds no login here"
        with pytest.raises(ConfigError, match=refused):
            train(online, log=lambda line: None)
        assert not out.exists()
        check_logins(load_config(None, [f"log.backends=[{tracker}]"]).log)  # offline (the default) needs none
        monkeypatch.setenv(login, "x" * 40)
        check_logins(online.log)


def test_each_tracker_gets_the_plot_and_the_config_with_its_record(logged):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logged / "tensorboard"), size_guidance={"images": 0, "tensors": 0})
    acc.Reload()
    assert acc.Tags()["images"] == ["returns"]
    config_text = (logged / "config.yaml").read_text()
    (text,) = [e.tensor_proto.string_val[0].decode() for e in acc.Tensors("config/text_summary")]
    assert config_text.strip() in text and "written by marljax" in text

    client, run = _mlflow_run(logged)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert artifacts == {"config.yaml", "returns.png"} and run.info.status == "FINISHED"
    assert run.data.params["log.backends"] == "['tensorboard', 'wandb', 'neptune', 'mlflow']"
    assert run.data.params["record.git_commit"] and "test" in run.data.tags

    ops = _neptune_ops(logged)
    assert any(op["type"] == "UploadFile" and op["path"] == ["returns_plot"] for op in ops)
    assert any(op["path"] == ["config_yaml"] and op.get("value") == config_text for op in ops)
    (files,) = (logged / "wandb").glob("offline-run-*/files")
    assert (files / "config.yaml").read_text() == config_text
    assert list((files / "media" / "images").glob("returns_plot_*.png"))


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_tracker_runs(tmp_path):
    out = tmp_path / "run"
    base = [*BASE, f"out_dir={out}", "log.backends=[mlflow]", "checkpoint_every=2"]
    train(load_config(None, [*base, "total_timesteps=128"]), log=lambda line: None)
    first = json.loads((out / "trackers.json").read_text())
    train(load_config(None, [*base, "resume=true"]), log=lambda line: None)
    assert json.loads((out / "trackers.json").read_text()) == first
    client, run = _mlflow_run(out)  # one run, which holds both halves
    assert run.info.run_id == first["mlflow"]
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "update")]
    assert steps == [int(r["env_steps"]) for r in read_jsonl(out / "metrics.jsonl")]


def test_a_failing_tracker_is_switched_off_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    from marljax.train import trackers

    def broken(self, row, values):
        raise OSError("disk full")

    monkeypatch.setattr(trackers.TensorBoard, "row", broken)
    out = tmp_path / "run"
    result = train(load_config(None, [*BASE, f"out_dir={out}", "log.backends=[tensorboard]"]), log=lambda line: None)
    assert len(result.rows) == 4 and len(read_jsonl(out / "metrics.jsonl")) == 4
    printed = capsys.readouterr().out
    assert printed.count("log.backends: tensorboard failed (OSError: disk full)") == 1


@pytest.mark.slow
def test_a_sweep_logs_one_tracker_run_per_cell_grouped_under_the_sweep(tmp_path):
    from marljax.sweeps.runner import run_sweep
    from marljax.sweeps.spec import expand

    out = tmp_path / "lr_sweep"
    base = {"num_envs": 4, "num_steps": 8, "total_timesteps": 256, "eval_every": 4, "eval_episodes": 4,
            "hidden_size": 16, "plot": False, "log": {"backends": ["mlflow"]}}  # fmt: skip
    run_sweep(expand({"base": base, "axes": {"lr": [1e-3, 3e-3]}, "seeds": 2, "out_dir": str(out)}),
              log=lambda line: None, progress=False)  # fmt: skip
    from mlflow.tracking import MlflowClient

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    client = MlflowClient(tracking_uri=(out / "mlruns").absolute().as_uri())
    runs = client.search_runs([client.get_experiment_by_name("marljax").experiment_id])
    cells = sorted(p for p in (out / "cells").iterdir())
    assert len(runs) == len(cells) == 2 and {r.data.tags["group"] for r in runs} == {"lr_sweep"}
    for cell in cells:
        (run,) = [r for r in runs if r.data.params["lr"] == str(load_config(cell / "config.yaml").lr)]
        assert "lr=" in run.data.tags["mlflow.runName"] and run.info.status == "FINISHED"
        expected = _expected(read_jsonl(cell / "metrics.jsonl"))
        history = {k: {m.step: m.value for m in client.get_metric_history(run.info.run_id, k)} for k in expected}
        assert history == expected, cell.name
