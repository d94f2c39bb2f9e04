"""Hostile and careless input against saved runs and policies: saved files are data, not code;
one damaged checkpoint does not block resume or export; a failed command creates nothing; a
damaged policy is refused with a line naming the file. Each test reproduces a finding of the
hostile-input review (docs/reliability.md) and checks the fixed behaviour."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import marljax
from marljax.config import load_config
from marljax.train.loop import train
from marljax.train.policy import PolicyError, export_policy

# 8 updates in chunks of 2, a checkpoint every 2 updates: checkpoints 2, 4, 6, 8
BASE = ["num_envs=4", "num_steps=8", "total_timesteps=256", "num_chunks=4", "checkpoint_every=2", "hidden_size=16",
        "progress=false", "plot=false"]  # fmt: skip
QUIET = dict(log=lambda line: None)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished run (kept read-only by the tests: each copies it before damaging it)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    train(load_config(None, [*BASE, f"out_dir={out}"]), **QUIET)
    return out


@pytest.fixture
def run(finished, tmp_path) -> Path:
    shutil.copytree(finished, tmp_path / "run")
    return tmp_path / "run"


@pytest.fixture
def policy(finished, tmp_path) -> Path:
    export_policy(finished, tmp_path / "policy", **QUIET)
    return tmp_path / "policy"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "marljax.cli", *args], capture_output=True, text=True, timeout=300)


def _edit_policy(policy: Path, edit) -> None:
    info = json.loads((policy / "policy.json").read_text())
    edit(info)
    (policy / "policy.json").write_text(json.dumps(info))


# ---- saved files are data, not code


def test_a_policy_naming_an_import_path_is_not_imported_without_trust_code(policy, tmp_path):
    marker = tmp_path / "ran"
    _edit_policy(policy, lambda i: i["config"].update(env="os:system", env_kwargs={"command": f"touch {marker}"}))
    with pytest.raises(PolicyError, match=r"names env 'os:system', an import path.*trust_code=True"):
        marljax.load_policy(policy)
    assert not marker.exists()


def test_trust_code_loads_a_policy_whose_env_is_an_import_path(tmp_path):
    """The negative control: the same refusal is lifted by trust_code for an env the user wrote."""
    out = tmp_path / "run"
    train(load_config(None, [*BASE, "env=tests.nan_env:make_env", "env_kwargs.p=0.0", f"out_dir={out}"]), **QUIET)
    with pytest.raises(PolicyError, match="import path"):
        export_policy(out, tmp_path / "refused", **QUIET)
    assert not (tmp_path / "refused").exists()
    export_policy(out, tmp_path / "policy", trust_code=True, **QUIET)
    with pytest.raises(PolicyError, match="import path"):
        marljax.load_policy(tmp_path / "policy")
    assert marljax.load_policy(tmp_path / "policy", trust_code=True).config.env == "tests.nan_env:make_env"


# ---- one damaged checkpoint does not block resume or export


@pytest.mark.parametrize("damage", ["stray empty directory", "meta deleted", "meta garbled"])
def test_resume_and_export_fall_back_past_a_damaged_newest_checkpoint(run, tmp_path, damage):
    ckpts = run / "checkpoints"
    if damage == "stray empty directory":
        (ckpts / "999").mkdir()
        expected = 8
    else:
        meta = ckpts / "8" / "meta"
        if damage == "meta deleted":
            shutil.rmtree(meta)
        else:
            for f in meta.rglob("*"):
                if f.is_file():
                    f.write_bytes(b"\x00garbage{")
        expected = 6
    logs: list[str] = []
    res = train(load_config(None, [*BASE, f"out_dir={run}", "resume=true"]), log=logs.append)
    assert any(line.startswith("warning: checkpoint") and "unusable" in line for line in logs), logs
    assert any(f"(update {expected} of 8)" in line for line in logs if line.startswith("resumed from")), logs
    assert res.rows[-1]["update"] == 8
    (aside,) = (run / "checkpoints_unusable").iterdir()  # kept, not deleted, and out of the resumed run's way
    assert aside.name.startswith("999-" if damage == "stray empty directory" else "8-")
    export_policy(run, tmp_path / "policy", **QUIET)  # the update-8 checkpoint was saved afresh
    assert json.loads((tmp_path / "policy" / "policy.json").read_text())["update"] == 8


def test_resume_with_no_readable_checkpoint_changes_nothing(run):
    for meta in (run / "checkpoints").glob("*/meta"):
        shutil.rmtree(meta)
    before = (run / "metrics.jsonl").read_text()
    proc = _cli("train", *BASE, f"out_dir={run}", "resume=true")
    assert proc.returncode == 1 and "could be read" in proc.stderr and "Traceback" not in proc.stderr
    assert (run / "metrics.jsonl").read_text() == before  # the history is kept


# ---- a failed command creates nothing


def test_export_of_a_missing_run_creates_nothing(tmp_path):
    proc = _cli("export", str(tmp_path / "no" / "such" / "dir"), str(tmp_path / "policy"))
    assert proc.returncode == 1 and "holds no run" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


# ---- a damaged policy is refused with a line naming the file


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda p: (p / "policy.json").write_text("{not json"), "is not valid JSON"),
        (lambda p: (p / "policy.json").write_bytes(b"\xff\xfe\x00"), "is not valid JSON"),
        (lambda p: (p / "policy.json").unlink(), "holds no exported policy"),
        (lambda p: _edit_policy(p, lambda i: i.pop("config")), "holds no config"),
        (lambda p: _edit_policy(p, lambda i: i["config"].update(hidden_size=32)), "does not hold the parameters"),
        (lambda p: _edit_policy(p, lambda i: i["config"].update(num_envs=-3)), "its config does not load here"),
        (lambda p: _edit_policy(p, lambda i: i["versions"].update(marljax="9.0.0")), "a different major version"),
    ],
    ids=["garbage", "not utf-8", "missing", "no config", "another network", "bad config", "major version"],
)
def test_a_damaged_policy_is_refused_naming_the_file(policy, damage, words):
    damage(policy)
    with pytest.raises(PolicyError, match=words) as info:
        marljax.load_policy(policy)
    assert str(policy) in str(info.value)


def test_a_policy_of_another_minor_version_loads_with_a_warning(policy):
    _edit_policy(policy, lambda i: i["versions"].update(marljax="0.99.0"))
    logs: list[str] = []
    from marljax.train.policy import load_policy

    assert load_policy(policy, log=logs.append).config.hidden_size == 16
    assert any("written by marljax 0.99.0" in line for line in logs), logs
