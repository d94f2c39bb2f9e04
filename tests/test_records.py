"""Run records: config.yaml names the code that produced it and still loads as a config; the
`on_row` callback sees every metrics row as written."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from marljax.config import load_config
from marljax.train.loop import train
from marljax.train.metrics import read_jsonl
from marljax.train.records import read_record

BASE = [
    "num_envs=4",
    "num_steps=8",
    "total_timesteps=256",
    "num_chunks=4",
    "num_seeds=2",
    "hidden_size=16",
    "eval_every=4",
    "eval_episodes=4",
    "progress=false",
    "plot=false",
]


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


def test_a_finished_run_leaves_its_summary_and_no_lock(tmp_path):
    out = tmp_path / "run"
    res = train(load_config(None, [*BASE, "eval_every=0", f"out_dir={out}"]), log=lambda line: None)
    assert not (out / ".marljax.lock").exists()  # released and removed (it stayed before)
    text = str(res.summary)
    assert text.splitlines()[0].startswith("return per agent ") and "whole process:" in text
    assert f"marljax export {out} policy/" in text
    written = json.loads((out / "summary.json").read_text())
    assert written["update"] == 8 and set(written["timing"]["phases"]) >= {"compile", "training", "checkpoints"}
    assert written["reference"]["random"] < written["reference"]["noop"]  # the default env's, measured


def test_the_lock_file_goes_with_its_holder_and_a_new_holder_gets_a_new_one(tmp_path):
    from marljax.files import DirectoryLock

    first = DirectoryLock(tmp_path)
    assert first.acquire() is None and first.path.exists()
    assert DirectoryLock(tmp_path).acquire() == f"process {os.getpid()}"  # held: refused, naming the holder
    first.release()
    assert not first.path.exists()
    second = DirectoryLock(tmp_path)
    assert second.acquire() is None
    second.release()


def test_jaxmarls_import_banner_is_kept_off_the_terminal():
    quiet = "from marljax.envs.jaxmarl_modules import import_all; import_all(); print('after')"
    loud = "import jaxmarl.registration; print('after')"  # the control: the banner as jaxmarl prints it
    ours, theirs = (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        for code in (quiet, loud)
    )
    assert ours.returncode == 0 and ours.stdout == "after\n", ours.stdout
    assert "Importing submoduled environments..." in theirs.stdout


@pytest.mark.slow
def test_an_installed_build_records_the_commit_it_was_built_from(tmp_path):
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    built = tmp_path / "lib"
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(built)],
        cwd=root,
        check=True,
        capture_output=True,
        timeout=300,
    )
    record = json.loads((built / "marljax" / "_build.json").read_text())
    assert record["git_commit"].startswith(head)
    # imported from the build (as from site-packages), outside any checkout: the recorded commit
    probe = "from marljax.train.records import git_commit; print(git_commit())"
    env = {**os.environ, "PYTHONPATH": str(built)}
    got = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert got.stdout.strip() == record["git_commit"], got.stderr[-2000:]
    (built / "marljax" / "_build.json").unlink()  # the control: without the record, as before
    got = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert got.stdout.strip() == "unknown"


def test_the_cpu_speed_note_names_what_is_slow_on_a_cpu_and_only_there():
    from marljax.train.records import cpu_speed_note

    mlp_obs, image_obs = [(18,)], [(5, 5, 26)]
    sable = load_config(None, ["algo=sable"])
    note = cpu_speed_note(sable, mlp_obs, "cpu")
    assert note and "sable attends over the agents" in note and "marljax bench algo=sable" in note
    assert "CNN" in cpu_speed_note(load_config(None, []), image_obs, "cpu")
    assert cpu_speed_note(load_config(None, []), mlp_obs, "cpu") is None  # IPPO's MLP on MPE: nothing to say
    assert cpu_speed_note(load_config(None, ["torso=mlp"]), image_obs, "cpu") is None  # flattened images: an MLP
    assert cpu_speed_note(sable, image_obs, "gpu") is None  # on an accelerator: what it is built for
