"""Hostile and careless input against saved runs and policies: saved files are data, not code;
one damaged checkpoint does not block resume or export; a failed command creates nothing; a
damaged policy is refused with a line naming the file. Each test reproduces a finding of the
hostile-input review (docs/reliability.md) and checks the fixed behaviour."""

from __future__ import annotations

import json
import re
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


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "marljax.cli", *args], capture_output=True, text=True, timeout=timeout)


def _edit_policy(policy: Path, edit) -> None:
    info = json.loads((policy / "policy.json").read_text())
    edit(info)
    (policy / "policy.json").write_text(json.dumps(info))


# ---- saved files are data, not code


@pytest.mark.slow
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


# issue 66: the newest replaced by a symbolic link (to 6, to nothing) or by a copy of 6
LINKED = {"link to 6": "6", "dangling link": "/nonexistent"}


@pytest.mark.parametrize("damage", ["stray empty directory", "meta deleted", "meta garbled", *LINKED, "copy of 6"])
def test_resume_and_export_fall_back_past_a_damaged_newest_checkpoint(run, tmp_path, damage):
    ckpts = run / "checkpoints"
    if damage == "stray empty directory":
        (ckpts / "999").mkdir()
        expected = 8
    elif damage in LINKED or damage == "copy of 6":
        # before: a link to 6 read as checkpoint 8 (update 6's meta) silently; a dangling link was
        # skipped with no word and the save of update 8 then failed on it
        shutil.rmtree(ckpts / "8")
        if damage in LINKED:
            (ckpts / "8").symlink_to(LINKED[damage])
        else:
            shutil.copytree(ckpts / "6", ckpts / "8")
        why = "its meta is of update 6, not 8" if damage == "copy of 6" else "it is a symbolic link to"
        logs: list[str] = []
        export_policy(run, tmp_path / "before", log=logs.append)  # export reads, moves nothing
        assert any(f"checkpoints/8 is unusable (ValueError: {why}" in line for line in logs), logs
        expected = 6
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
        (
            lambda p: _edit_policy(p, lambda i: i["config"].update(hidden_size=32)),
            r"does not hold the parameters .*is stored with shape \(1, 16, 1\); this network.s is \(1, 32, 1\)",
        ),
        (lambda p: _edit_policy(p, lambda i: i["config"].update(num_envs=-3)), "its config does not load here"),
        (lambda p: _edit_policy(p, lambda i: i["versions"].update(marljax="9.0.0")), "a different major version"),
        (lambda p: (p / "policy.json").write_text("[" * 200_000), "is nested too deep"),  # was a raw RecursionError
        (lambda p: (p / "policy.json").write_text(" " * (17 << 20) + "{}"), "bytes, more than the"),
        (lambda p: _change_one_weight(p), "does not match the fingerprint in policy.json"),  # loaded silently
        # issue 66: an OverflowError of 79 lines; a raw ConfigError; an IsADirectoryError
        (
            lambda p: _edit_policy(p, lambda i: i["config"].update(hidden_size=1e300)),
            r"hidden_size: must be <= 2,147,483,647, got 1e\+300",
        ),
        (
            lambda p: _edit_policy(p, lambda i: i["config"]["env_kwargs"].update(junk=1)),
            "its config does not load here .env_kwargs.junk: MPE_simple_spread_v3 does not use junk",
        ),
        (
            lambda p: ((p / "policy.json").unlink(), (p / "policy.json").mkdir()),
            "policy.json is a directory, not the JSON file marljax export writes",
        ),
    ],
    ids=[
        "garbage",
        "not utf-8",
        "missing",
        "no config",
        "another network",
        "bad config",
        "major version",
        "deeply nested",
        "oversized",
        "a changed weight",
        "hidden_size 1e300",
        "junk env_kwargs",
        "policy.json a directory",
    ],
)
def test_a_damaged_policy_is_refused_naming_the_file(policy, damage, words):
    damage(policy)
    with pytest.raises(PolicyError, match=words) as info:
        marljax.load_policy(policy)
    assert str(policy) in str(info.value)


def test_a_path_that_is_not_a_policy_directory_is_named_as_such(policy, tmp_path):
    """Issue 66: a regular file gave a raw NotADirectoryError."""
    (tmp_path / "afile").write_text("x")
    with pytest.raises(PolicyError, match=r"afile is a file, not a policy directory \(marljax export writes one"):
        marljax.load_policy(tmp_path / "afile")
    with pytest.raises(
        PolicyError, match=f"policy.json is a file, not a policy directory .*; give its directory, {policy}$"
    ):
        marljax.load_policy(policy / "policy.json")
    with pytest.raises(PolicyError, match="nothing does not exist"):
        marljax.load_policy(tmp_path / "nothing")
    assert marljax.load_policy(policy).config.hidden_size == 16  # the control


def _change_one_weight(policy: Path) -> None:
    """The exported parameters rewritten with one weight changed (-0.35 -> 3.4e18 in the review,
    by a flipped byte; orbax compresses small arrays, so the change is written through orbax)."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    leaves, tree = jax.tree.flatten(jax.device_get(marljax.load_policy(policy).params))
    leaves = [np.array(x) for x in leaves]
    leaves[0].flat[0] = 3.4e18
    shutil.rmtree(policy / "params")
    saver = ocp.StandardCheckpointer()
    saver.save(policy / "params", jax.tree.unflatten(tree, leaves))
    saver.wait_until_finished()
    saver.close()


def test_a_policy_exported_without_a_fingerprint_loads_with_a_warning(policy):
    """Policies exported before fingerprints were written still load; the user is told they are unchecked."""
    from marljax.train.policy import load_policy

    _edit_policy(policy, lambda i: i.pop("params_fingerprint"))
    logs: list[str] = []
    assert load_policy(policy, log=logs.append).config.hidden_size == 16
    assert any("carries no fingerprint" in line for line in logs), logs


def test_a_policy_of_another_minor_version_loads_with_a_warning(policy):
    _edit_policy(policy, lambda i: i["versions"].update(marljax="0.99.0"))
    logs: list[str] = []
    from marljax.train.policy import load_policy

    assert load_policy(policy, log=logs.append).config.hidden_size == 16
    assert any("written by marljax 0.99.0" in line for line in logs), logs


# ---- careless input stops with one line, before anything is created


@pytest.mark.parametrize(
    "text, words",
    [
        (b"lr: 1\nlr: 2\n", "the key 'lr' appears twice in one mapping"),
        (b"lr: [1\n", "is not valid YAML at line 2"),
        (b"\xff\xfe lr: 1\n", "is not UTF-8 text"),
        (b"x: !!python/object/apply:os.system ['true']\n", "could not determine a constructor"),
    ],
    ids=["duplicate key", "malformed", "not utf-8", "python object"],
)
@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_bad_yaml_file_is_one_line_naming_it(tmp_path, command, text, words):
    path = tmp_path / "bad.yaml"
    path.write_bytes(text)
    proc = _cli(command, str(path))
    assert proc.returncode == 2 and words in proc.stderr and str(path) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize(
    "setting, words",
    [
        ("seed=1e23", "seed: must lie in [0, 4294967295]"),
        ("total_timesteps=1e30", "total_timesteps: must lie in [1, 1000000000000000]"),
        ("env=builtins:dict", "returned a dict, not a JaxMARL MultiAgentEnv"),
        ("env=jaxmarl:make env_kwargs.nope=1", "env_kwargs: jaxmarl:make(nope) failed"),
        # MPE takes **kwargs: a misspelt key used to be accepted and ignored
        ("env_kwargs.num_agent=4", "env_kwargs.num_agent: MPE_simple_spread_v3 does not use num_agent"),
        # before: `marljax: RuntimeError: factory exploded on purpose`, nothing saying it came from the env
        (
            "env=tests.broken_env:explode",
            "env: building the env failed: tests.broken_env:explode() raised RuntimeError: factory exploded on purpose",
        ),
        # before: AttributeError: 'NoneType' object has no attribute 'possible_agents'
        (
            "env=pettingzoo:tests.broken_env:nothing mode=async eval_every=0",
            "env: pettingzoo:tests.broken_env:nothing returned a NoneType, not a PettingZoo ParallelEnv",
        ),
        # issue 66: an OverflowError; refused under total_timesteps as 8000000000000000159076998709248 env steps
        ("hidden_size=1e300", "hidden_size: must be <= 2,147,483,647, got 1e+300"),
        ("num_envs=1e30", "num_envs: must be <= 2,147,483,647, got 1e+30"),
        (
            "env=pettingzoo:tests.broken_env:explode mode=async eval_every=0",
            "env: building the env failed: pettingzoo:tests.broken_env:explode raised RuntimeError: factory exploded",
        ),
    ],
)
def test_values_that_used_to_end_in_a_traceback_name_their_field(tmp_path, setting, words):
    if "pettingzoo:" in setting:
        pytest.importorskip("pettingzoo")
    proc = _cli("train", *BASE, *setting.split(), f"out_dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "run").exists()


def test_an_out_dir_that_cannot_be_a_directory_is_refused_before_anything_is_created(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")  # was a raw FileExistsError
    for out, words in [(tmp_path / "afile", "is a file, not a directory"),
                       (tmp_path / "afile" / "run", "is a file, so"),
                       (tmp_path / ("n" * 300), "longer than 255 bytes"),
                       (tmp_path / "loop", "is a symbolic link that leads nowhere (a loop or a missing target)"),
                       (tmp_path / "loop" / "run", "loop is a symbolic link that leads nowhere")]:  # fmt: skip
        proc = _cli("train", *BASE, f"out_dir={out}")
        assert proc.returncode == 2 and "out_dir: " in proc.stderr and words in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "loop"]


def test_an_unexpected_failure_is_one_line_unless_debugging(tmp_path, monkeypatch):
    from marljax import cli

    def broken(*args, **kwargs):
        raise RuntimeError("something inside broke\nsecond line")

    monkeypatch.setattr("marljax.train.loop.train", broken)
    assert cli.main(["train", *BASE, f"out_dir={tmp_path / 'run'}"]) == 1
    monkeypatch.setenv("MARLJAX_DEBUG", "1")
    with pytest.raises(RuntimeError, match="something inside broke"):
        cli.main(["train", *BASE, f"out_dir={tmp_path / 'run'}"])


# ---- no history lost


def test_a_second_writer_on_the_same_out_dir_is_refused(run):
    from marljax.files import DirectoryLock

    lock = DirectoryLock(run)
    assert lock.acquire() is None  # this process now holds the run's directory
    try:
        proc = _cli("train", *BASE, f"out_dir={run}", "resume=true")
        assert proc.returncode == 2 and "is in use by process" in proc.stderr, proc.stderr
    finally:
        lock.release()
    proc = _cli("train", *BASE, f"out_dir={run}", "resume=true")  # the control: free again, it runs
    assert proc.returncode == 0, proc.stderr


def test_a_damaged_metrics_line_is_kept_aside_and_only_it_is_skipped(run):
    path = run / "metrics.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1][: len(lines[1]) // 2]  # row 2 of 4 cut in half
    path.write_text("\n".join(lines) + "\n")
    damaged = path.read_text()
    shutil.rmtree(run / "checkpoints" / "8")  # resume from update 6: rows 1, 3 (updates 2, 6) are kept
    logs: list[str] = []
    res = train(load_config(None, [*BASE, f"out_dir={run}", "resume=true"]), log=logs.append)
    (aside,) = run.glob("metrics.jsonl.damaged-*")
    assert aside.read_text() == damaged and any("line(s) 2 are not metrics rows" in line for line in logs), logs
    assert [r["update"] for r in res.rows] == [2, 6, 8]  # row 3 (update 6) survived the damage before it


def test_overwrite_puts_the_old_run_back_when_the_new_one_fails_before_a_checkpoint(run, monkeypatch):
    before = {
        p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and ".marljax.lock" not in p.name
    }

    def fail(*args, **kwargs):
        raise RuntimeError("compilation failed")

    monkeypatch.setattr("marljax.train.loop.shard_trainer", fail)
    with pytest.raises(RuntimeError, match="compilation failed"):
        train(load_config(None, [*BASE, f"out_dir={run}", "overwrite=true"]), **QUIET)
    after = {
        p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and ".marljax.lock" not in p.name
    }
    assert after == before and not list(run.glob(".overwritten-*"))
    monkeypatch.undo()  # the control: a run that succeeds replaces the old one
    res = train(load_config(None, [*BASE, f"out_dir={run}", "overwrite=true", "seed=1"]), **QUIET)
    assert res.rows[-1]["update"] == 8 and not list(run.glob(".overwritten-*"))
    assert (run / "metrics.jsonl").read_bytes() != before[Path("metrics.jsonl")]


# ---- SIGINT and SIGTERM save at the next chunk boundary


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_at_the_next_chunk_and_resume_finishes(tmp_path):
    import os
    import signal
    import time

    out = tmp_path / "run"
    long = [
        "num_envs=4",
        "num_steps=8",
        "total_timesteps=128000",
        "num_chunks=1000",
        "checkpoint_every=0",
        "hidden_size=16",
        "progress=false",
        "plot=false",
        f"out_dir={out}",
    ]  # 4000 updates, chunks of 4
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "marljax.cli", "train", *long], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    for line in proc.stdout:
        if line.startswith("compiled in"):
            break
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err[-2000:]
    assert "stopped by SIGTERM at update" in err and "continue with resume=true" in err and "Traceback" not in err
    update = int(err.split("stopped by SIGTERM at update ")[1].split(";")[0])
    assert 0 < update < 4000 and (out / "checkpoints" / str(update)).is_dir()
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["update"] == update
    # resume to a nearer end (8 updates on, still in chunks of 4): finishing all 4000 took ~40 s of CI
    end = update + 8
    done = _cli("train", *long, "resume=true", f"total_timesteps={end * 32}", f"num_chunks={end // 4}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"(update {update} of {end})" in done.stdout + done.stderr  # from the checkpoint, not from scratch
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == list(range(4, end + 1, 4))  # every chunk of 4 once, two after the stop


def test_the_first_sigint_is_noted_and_a_second_interrupts_at_once():
    import os
    import signal
    import time

    from marljax.train.chunks import StopSignals

    before = signal.getsignal(signal.SIGINT)
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        assert stop.signum == signal.SIGINT  # noted, not raised: the loop saves, then stops
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back


def test_an_edited_checkpoint_meta_is_unusable_and_resume_falls_back(run):
    """The meta (config, update, versions) carries a digest: an edit is detected like damage."""
    meta = run / "checkpoints" / "8" / "meta" / "metadata"  # orbax's JSON of the meta
    saved = json.loads(meta.read_text())
    saved["config"]["lr"] = 0.5  # a careless edit that still parses
    meta.write_text(json.dumps(saved))
    logs: list[str] = []
    train(load_config(None, [*BASE, f"out_dir={run}", "resume=true"]), log=logs.append)
    assert any("does not match the digest saved with it" in line for line in logs), logs
    assert any("(update 6 of 8)" in line for line in logs if line.startswith("resumed from")), logs


# ---- async mode: a hung host env, SIGTERM, counters across a resume

ASYNC = ["mode=async", "num_envs=4", "num_steps=8", "hidden_size=16", "progress=false", "plot=false"]


@pytest.mark.slow
def test_a_host_env_that_never_returns_fails_the_run_naming_the_actor_and_copy(tmp_path):
    import time

    pytest.importorskip("pettingzoo")
    t0 = time.monotonic()
    # copy 2 of actor 0 hangs in its 40th step (update 5 of 8); the watchdog waits 3 s
    res = _cli("train", *ASYNC, "env=pettingzoo:tests.hang_env:parallel_env", "env_kwargs.hang_copy=2",
               "env_kwargs.hang_at=40", "total_timesteps=256", "async.actor_timeout_s=3", f"out_dir={tmp_path / 'run'}")  # fmt: skip
    assert res.returncode == 1, res.stderr[-2000:]
    assert "actor thread 0 has been in env.step of host env copy 2 (step" in res.stderr, res.stderr[-2000:]
    assert "async.actor_timeout_s=3" in res.stderr and "Traceback" not in res.stderr
    # before: no output for over 100 s; now the timeout, compilation and start-up (measured ~15 s here)
    assert time.monotonic() - t0 < 120


@pytest.mark.nightly  # CI: the same stop and resume by SIGINT in test_async.py (one handler for both signals)
def test_sigterm_stops_an_async_run_with_a_checkpoint_and_resume_keeps_counting(tmp_path):
    import signal
    import time

    out = tmp_path / "run"
    long = [*ASYNC, "total_timesteps=1e6", "num_chunks=2000", "checkpoint_every=0", f"out_dir={out}"]  # 31250 updates
    proc = subprocess.Popen([sys.executable, "-m", "marljax.cli", "train", *long], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    metrics, deadline = out / "metrics.jsonl", time.monotonic() + 240
    while time.monotonic() < deadline and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert "stopped by SIGTERM at update" in err and "Traceback" not in err, err[-2000:]
    update = int(err.split("stopped by SIGTERM at update ")[1].split(";")[0])
    assert 0 < update < 31250 and (out / "checkpoints" / str(update)).is_dir()
    stopped = json.loads(metrics.read_text().splitlines()[-1])
    assert stopped["update"] == update and stopped["consumed"] == update  # block mode: one batch per update
    # resume to a nearer end: the buffer's counters go on from the checkpoint's, not from 0
    done = _cli("train", *long, "resume=true", f"total_timesteps={(update + 8) * 32}")
    assert done.returncode == 0, done.stderr[-2000:]
    last = json.loads(metrics.read_text().splitlines()[-1])
    assert last["update"] == update + 8 and last["consumed"] == update + 8 and last["produced"] >= update + 8


def test_a_trajectory_path_that_cannot_be_written_is_refused_before_compiling(tmp_path, monkeypatch):
    import marljax.train.loop as loop

    # fail loudly if anything were compiled: the refusal must come first
    monkeypatch.setattr(loop, "make_adapter", lambda *a, **k: pytest.fail("got as far as building the env"))
    (tmp_path / "a_file").write_text("")
    (tmp_path / "old" / "index.json").parent.mkdir()
    (tmp_path / "old" / "index.json").write_text('{"count": 3}')
    for path, words in [(tmp_path / "a_file" / "traj", "is a file"), (tmp_path / "old", "already holds a dataset")]:
        cfg = load_config(None, [*ASYNC, "total_timesteps=256", f"out_dir={tmp_path / 'run'}",
                                 f"async.record_trajectories={path}"])  # fmt: skip
        with pytest.raises(marljax.config.ConfigError, match=f"async.record_trajectories.*{words}"):
            train(cfg, **QUIET)
    assert (tmp_path / "old" / "index.json").read_text() == '{"count": 3}'


# ---- round two (issue 39): failing disks end in one line, promptly, and lose nothing


def test_resume_onto_a_checkpoints_file_exits_at_once_and_keeps_the_metrics(run):
    """Before: "no checkpoint ...; starting from scratch", the old metrics.jsonl overwritten, 3 raw
    orbax tracebacks, then a hang until killed."""
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").write_text("x")
    before = (run / "metrics.jsonl").read_bytes()
    proc = _cli("train", *BASE, f"out_dir={run}", "resume=true", timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "checkpoints cannot hold checkpoints: it is a file, not a directory" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "starting from scratch" not in proc.stdout + proc.stderr
    assert (run / "metrics.jsonl").read_bytes() == before and (run / "checkpoints").read_text() == "x"


def _orbax_threads() -> list:
    import threading

    from orbax.checkpoint._src.futures.future import _SignalingThread

    return [t for t in threading.enumerate() if isinstance(t, _SignalingThread) and t.is_alive()]


def test_a_save_that_fails_mid_run_leaves_no_thread_behind_and_its_traces_go_to_the_debug_log(tmp_path, caplog):
    """The checkpoints directory replaced by a file while the run goes on: the save of update 2
    fails. orbax's threads waiting for the directory it never made are not daemons; they kept the
    process alive for minutes. Its error records (with tracebacks) go to debug.log, not stderr."""
    import time

    from marljax.train.checkpoint import CheckpointError

    out = tmp_path / "run"

    def sabotage(row: dict) -> None:  # called after a chunk's row is written, before its checkpoint
        if row["update"] == 2:
            shutil.rmtree(out / "checkpoints")
            (out / "checkpoints").write_text("x")

    with pytest.raises(CheckpointError, match=r"saving the checkpoint of update 2 .*Not a directory"):
        train(load_config(None, [*BASE, f"out_dir={out}"]), on_row=sabotage, **QUIET)
    deadline = time.monotonic() + 10
    while _orbax_threads() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _orbax_threads() == []
    assert not [r for r in caplog.records if r.name == "absl"]  # none reached the log handlers
    log = (out / "debug.log").read_text()
    assert "Traceback" in log and "NotADirectoryError" in log


def test_marljax_debug_keeps_the_library_traces_on_stderr(tmp_path, monkeypatch, caplog):
    """The control of the one above: with MARLJAX_DEBUG=1 an orbax record passes as it was."""
    import logging

    from marljax.train import library_log

    library_log.divert(tmp_path / "debug.log")
    record = logging.LogRecord("absl", logging.ERROR, "/x/site-packages/orbax/checkpoint/y.py", 1, "boom", None, None)
    logging.getLogger("absl").handle(record)
    assert "boom" in (tmp_path / "debug.log").read_text() and not caplog.records
    monkeypatch.setenv("MARLJAX_DEBUG", "1")
    logging.getLogger("absl").handle(record)
    assert [r.getMessage() for r in caplog.records] == ["boom"]


def test_a_librarys_leftover_coroutine_traceback_goes_to_the_debug_log(tmp_path, capsys, monkeypatch):
    """asyncio's "Exception ignored in coroutine ..." / "Event loop is closed" after a failed save
    reach Python's unraisable hook; those of orbax's coroutines go to debug.log, others pass."""
    import sys
    from types import SimpleNamespace

    from marljax.train import library_log

    def unraisable(filename: str) -> SimpleNamespace:
        namespace: dict = {}
        exec(compile("async def commit(): pass", filename, "exec"), namespace)
        return SimpleNamespace(exc_type=RuntimeError, exc_value=RuntimeError("Event loop is closed"), exc_traceback=None,
                               err_msg="Exception ignored in", object=namespace["commit"]())  # fmt: skip

    passed_on: list = []
    monkeypatch.setattr(sys, "unraisablehook", passed_on.append)  # the hook before marljax's
    library_log.divert(tmp_path / "debug.log")
    orbax, ours = unraisable("/x/site-packages/orbax/checkpoint/fake.py"), unraisable("/x/user_code.py")
    sys.unraisablehook(orbax)
    assert "Event loop is closed" in (tmp_path / "debug.log").read_text() and capsys.readouterr().err == ""
    sys.unraisablehook(ours)  # not the library's: passed on
    assert passed_on == [ours] and "user_code" not in (tmp_path / "debug.log").read_text()
    orbax.object.close(), ours.object.close()


def test_resume_with_no_checkpoint_keeps_the_earlier_metrics_aside_and_says_why(run):
    """A run killed before its first checkpoint, then resume=true: it starts from scratch (nothing
    to resume), but the old rows are kept, not overwritten."""
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").mkdir()
    before = (run / "metrics.jsonl").read_bytes()
    logs: list[str] = []
    res = train(load_config(None, [*BASE, f"out_dir={run}", "resume=true"]), log=logs.append)
    assert res.rows[-1]["update"] == 8
    assert any("no checkpoint in" in line and "(none was saved there); starting from scratch" in line for line in logs)
    (kept,) = run.glob("metrics.jsonl.no-checkpoint-*")
    assert kept.read_bytes() == before and any(kept.name in line for line in logs), logs


def test_a_run_set_aside_by_an_interrupted_overwrite_is_named_by_later_commands(run, tmp_path):
    """overwrite=true killed during compile leaves the old run only in a hidden .overwritten-<time>/."""
    aside = run / ".overwritten-20261125-120000-000000"
    aside.mkdir()
    for name in ("checkpoints", "metrics.jsonl", "config.yaml"):
        shutil.move(str(run / name), str(aside / name))
    logs: list[str] = []
    train(load_config(None, [*BASE, f"out_dir={run}", "resume=true"]), log=logs.append)
    assert any(line.startswith(f"note: {aside} holds the run an earlier overwrite=true set aside") for line in logs)
    logs.clear()
    export_policy(run, tmp_path / "policy", log=logs.append)
    assert any(line.startswith(f"note: {aside}") for line in logs), logs
    assert (aside / "metrics.jsonl").exists()  # kept until the user removes it


# ---- round two (issue 39): every message names the thing and the way out


def test_resuming_with_another_algorithm_says_so(run):
    """Before: "saved by an older marljax whose config this version does not read" (same version)."""
    with pytest.raises(marljax.config.ConfigError) as info:
        train(load_config(None, [*BASE, f"out_dir={run}", "resume=true", "algo=mappo"]), **QUIET)
    assert info.value.field == "algo" and "trained with algo=ippo, this config has algo=mappo" in str(info.value)
    assert "resume it with algo=ippo" in str(info.value) and "older marljax" not in str(info.value)


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_config_that_is_not_a_regular_file_is_named_as_such(tmp_path, kind):
    """Before: "file not found" for both."""
    import os

    path = tmp_path / "x.yaml"
    path.mkdir() if kind == "directory" else os.mkfifo(path)
    proc = _cli("train", str(path), timeout=60)
    words = "is a directory, not a YAML file" if kind == "directory" else "is not a regular file (a FIFO"
    assert proc.returncode == 2 and f"config: {path} {words}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_thousands_of_unknown_env_kwargs_are_counted_not_listed(tmp_path):
    """Before: a 2M-key file gave an 18.9 MB one-line error listing every key."""
    path = tmp_path / "many.yaml"
    path.write_text("env_kwargs:\n" + "".join(f"  junk_{i:05d}: 1\n" for i in range(5000)))
    proc = _cli("train", str(path), *BASE, f"out_dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and "does not use junk_00000, junk_00001" in proc.stderr, proc.stderr[:2000]
    assert "and 4992 more" in proc.stderr and len(proc.stderr) < 3000


def test_a_policy_fed_another_envs_observations_names_the_env_it_was_trained_on(policy):
    """Before: flax's ScopeParamShapeError, with no word of the env."""
    import jax
    import jax.numpy as jnp
    from jaxmarl import make

    loaded = marljax.load_policy(policy)
    key = jax.random.PRNGKey(0)
    other, _ = make("MPE_simple_reference_v3").reset(key)  # other agents
    with pytest.raises(PolicyError, match=r"acts in MPE_simple_spread_v3 .*give it MPE_simple_spread_v3's observation"):
        loaded.act(other, key)
    wrong = {a: jnp.zeros(21) for a in loaded.env.agents}  # the same agents, another shape
    with pytest.raises(
        PolicyError, match=r"trained on MPE_simple_spread_v3, whose agents .* observe shape \(18,\); got \(21,\)"
    ):
        jax.jit(loaded.act)(wrong, key)
    right, _ = make("MPE_simple_spread_v3").reset(key)
    actions, _ = jax.jit(loaded.act)(right, key)  # the control
    assert set(actions) == set(loaded.env.agents)


def test_act_refuses_inputs_that_are_not_one_envs_observations_and_a_key(policy):
    """Issue 66: key=None and an int key were raw TypeErrors; a list of observations instead of the
    dict, an extra agent, a carry for a feed-forward policy and masks of no agent were used or
    ignored silently. Each is one PolicyError line, checked when act is traced."""
    import jax
    import jax.numpy as jnp
    from jaxmarl import make

    loaded = marljax.load_policy(policy)
    key = jax.random.PRNGKey(0)
    obs, _ = make("MPE_simple_spread_v3").reset(key)
    bad = {
        "key None": ((obs, None), r"act: key must be one PRNG key .*got None$"),
        "key int": ((obs, 3), "got an int$"),
        "key shape": ((obs, jnp.zeros(5, jnp.uint32)), r"got an array of shape \(5,\) and dtype uint32"),
        "obs list": (
            (list(obs.values()), key),
            "obs must be a dict of agent name -> array, as MPE_simple_spread_v3 gives them; got a list",
        ),
        "extra agent": (
            ({**obs, "agent_9": obs["agent_0"]}, key),
            "obs holds 'agent_9', which MPE_simple_spread_v3 has no agent of",
        ),
        "missing agent": (({k: v for k, v in obs.items() if k != "agent_1"}, key), "these observations lack agent_1"),
        "carry": ((obs, key, {"h": jnp.zeros(3)}), "this policy is feed-forward and keeps no carry"),
        "masks": ((obs, key, None, {"x": jnp.ones(5, bool)}), "avail_actions lacks agent_0, agent_1, agent_2"),
    }
    for name, (args, words) in bad.items():
        with pytest.raises(PolicyError, match=words):
            jax.jit(loaded.act)(*args) if name not in ("key None", "key int") else loaded.act(*args)
    for good in (key, jax.random.key(1)):  # the controls: both kinds of key
        actions, carry = jax.jit(loaded.act)(obs, good)
        assert set(actions) == set(loaded.env.agents) and carry is None


@pytest.mark.parametrize("where", ["not this host", "port taken"])
def test_a_coordinator_process_0_cannot_serve_is_one_line_not_a_native_abort(tmp_path, where):
    """Before: marljax's hint, then JAX's C++ check failure (exit 134) once distributed.timeout_s passed."""
    import socket

    with socket.socket() as taken:
        if where == "port taken":
            taken.bind(("127.0.0.1", 0))
            taken.listen()
        address = "192.0.2.1:29517" if where == "not this host" else f"127.0.0.1:{taken.getsockname()[1]}"  # TEST-NET-1
        proc = _cli("train", *BASE, f"distributed.coordinator={address}", "distributed.num_processes=2",
                    "distributed.process_id=0", "distributed.timeout_s=5", f"out_dir={tmp_path / 'run'}", timeout=120)  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"process 0 runs the coordinator, but cannot listen on {address} (distributed.coordinator)" in proc.stderr
    assert "Check failure" not in proc.stderr and not (tmp_path / "run").exists()


# ---- round three (issue 66): no exception's own text as the message


@pytest.mark.parametrize(
    "text, words",
    [
        ("[a, b]: 1\n", "is not valid YAML at line 1, column 1: a key must be a name or a number, got a list"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "is nested too deep to be a config file"),
    ],
    ids=["a list as a key", "deep"],
)
def test_yaml_that_python_cannot_hold_is_one_config_error(tmp_path, text, words):
    """Before: `TypeError: unhashable type: 'list'`, `RecursionError: maximum recursion depth exceeded`."""
    from marljax.config import ConfigError
    from marljax.sweeps.spec import load_sweep

    path = tmp_path / "bad.yaml"
    path.write_text(text)
    for read in (load_config, load_sweep):
        with pytest.raises(ConfigError, match=words) as info:
            read(path)
        assert str(path) in str(info.value)


def test_a_config_path_too_long_for_the_filesystem_is_named():
    """Before: `OSError: [Errno 36] File name too long`."""
    from marljax.config import ConfigError

    with pytest.raises(ConfigError, match=r"^config: a{60}\.\.\.a{7}\.yaml cannot be read: File name too long$"):
        load_config("a" * 300 + ".yaml")


def test_a_mistyped_command_suggests_the_nearest_and_prints_only_its_usage_line(capsys):
    """Before: the 47-line usage after `marljax: unknown command 'trian'`."""
    from marljax.cli import COMMANDS, main

    assert main(["trian"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "marljax: unknown command 'trian'; did you mean 'train'?",
        "usage: marljax train [CONFIG.yaml] [key=value ...]",
    ]
    assert main(["bench", "scael"]) == 2
    assert capsys.readouterr().err.splitlines()[0] == "marljax: unknown bench 'scael'; did you mean 'scale'?"
    assert main(["xyzzy"]) == 2  # nothing near: the commands, on one line
    names = ", ".join(command.name for command in COMMANDS)
    assert capsys.readouterr().err.splitlines() == [
        f"marljax: unknown command 'xyzzy'; allowed: {names} (marljax --help says more)"
    ]
    assert names.startswith("train, sweep, report, compare, bench, export")
    # a command's arguments of the wrong shape: one line naming the argument, ending in its own usage
    assert main(["report"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "marljax: report: missing SWEEP_DIR (usage: marljax report SWEEP_DIR)"
    ]
    assert main(["bench", "scale", "--max-env", "64"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "marljax: bench scale: unknown option --max-env; did you mean --max-envs? "
        "(usage: marljax bench scale [CONFIG.yaml] [--max-envs N] [--timeout S] [key=value ...])"
    ]


@pytest.mark.parametrize(
    "factory, words",
    [
        ("base_exception", "tests.broken_env:base_exception() raised OwnBaseException: the factory raised its own"),
        ("exits", "tests.broken_env:exits() raised SystemExit: 3"),
    ],
)
def test_a_factory_raising_a_base_exception_is_one_config_error(factory, words):
    """Before: a raw traceback (a BaseException subclass), or the process gone with exit 3 and no word."""
    from marljax.config import ConfigError
    from marljax.envs.registry import make_env

    with pytest.raises(ConfigError, match=re.escape(f"env: building the env failed: {words}")):
        make_env(f"tests.broken_env:{factory}")


@pytest.mark.parametrize("factory", ["spins", "naps"])
def test_a_factory_that_never_returns_is_one_config_error_after_the_limit(factory):
    """Before: the run waited forever (a host env's step was guarded, its construction was not)."""
    import time

    from marljax.config import ConfigError
    from marljax.envs.registry import make_env

    started = time.monotonic()
    with pytest.raises(
        ConfigError, match=rf"env: building the env did not return in 1 s: tests.broken_env:{factory}\(\) hangs"
    ):
        make_env(f"tests.broken_env:{factory}", timeout_s=1.0)
    assert time.monotonic() - started < 10
    # control: a factory that returns within its limit builds its env, and a test's own timer runs on after
    import signal

    signal.setitimer(signal.ITIMER_REAL, 600.0)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    try:
        env = make_env("tests.broken_env:naps", {"seconds": 0.1}, timeout_s=5.0)
        assert env.num_agents == 3 and signal.getitimer(signal.ITIMER_REAL)[0] > 500
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


@pytest.mark.parametrize(
    "env, code, words",
    [
        (
            "tests.broken_env:exits_now",
            2,
            "marljax: config error: env: building the env failed: tests.broken_env:exits_now() called os._exit(3), "
            "which would have ended the process with nothing said; fix the factory or env_kwargs",
        ),
        (
            "pettingzoo:tests.broken_env:exits_now",
            2,
            "marljax: config error: env: building the env failed: pettingzoo:tests.broken_env:exits_now called "
            "os._exit(3),",
        ),
        (
            "tests.broken_env:segfaults",
            -11,  # SIGSEGV: the process is gone; the line comes from the watcher of the build
            "marljax: env: this process ended while tests.broken_env:segfaults() was building the env: it crashed "
            "(a segmentation fault, an abort), exited from native code, or was killed",
        ),
    ],
    ids=["os._exit", "host os._exit", "segfault"],
)
def test_a_factory_that_ends_the_process_is_named_in_one_line(tmp_path, env, code, words):
    """Before: the process ended with exit 3 (os._exit) or -11 (a segmentation fault) and no word
    of which factory ended it. The control: a factory that builds says nothing more."""
    extra = ["mode=async", "eval_every=0"] if env.startswith("pettingzoo:") else []
    done = _cli("train", *BASE, f"env={env}", *extra, f"out_dir={tmp_path / 'r'}", timeout=120)
    assert done.returncode == code, done.stderr[-2000:]
    assert done.stderr.splitlines()[-1].startswith(words), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    # a crash leaves the directory it had made with its lock (stale: a rerun takes it), nothing else
    left = sorted(p.name for p in (tmp_path / "r").iterdir()) if (tmp_path / "r").exists() else []
    assert left == ([".marljax.lock"] if code < 0 else [])


def test_a_factory_that_builds_leaves_no_word_and_other_threads_exit_as_they_ask():
    """The controls of the build's guard: after a build that returns, its watcher prints nothing;
    os._exit from another thread during a build ends the process as asked (in a child process)."""
    script = (
        "import os, threading, time\n"
        "from marljax.envs.factory import build_guard\n"
        "with build_guard('built()', 0):\n"
        "    pass\n"
        "time.sleep(0.5)\n"
        "with build_guard('slow()', 0):\n"
        "    threading.Thread(target=os._exit, args=(5,)).start()\n"
        "    time.sleep(30)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 5
    # the second build was interrupted by the other thread's exit: its watcher names it, the first's said nothing
    assert done.stderr.strip().splitlines() == [
        "marljax: env: this process ended while slow() was building the env: it crashed (a segmentation fault, an "
        "abort), exited from native code, or was killed (the out-of-memory killer?); fix the factory or env_kwargs"
    ], done.stderr


def test_a_user_module_that_does_not_compile_is_named(tmp_path, monkeypatch):
    """Before: `marljax: SyntaxError: invalid syntax (badmod.py, line 1)`, nothing saying it came from env=."""
    from marljax.config import ConfigError
    from marljax.envs.registry import make_env

    (tmp_path / "badmod_66.py").write_text("def make(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ConfigError,
        match=r"env: importing module 'badmod_66' for 'badmod_66:make' failed: "
        r"SyntaxError: .*badmod_66.py, line 1",
    ):
        make_env("badmod_66:make")


def test_env_kwargs_of_another_kind_than_the_constructors_default_or_absurd_size_are_refused(tmp_path):
    """Before: `env_kwargs.max_steps=abc` trained until a traced comparison failed ('>=' not supported
    between a tracer and a str); `num_agents=100000000` was still building the env at 120 s, out_dir made."""
    from marljax.config import ConfigError
    from marljax.envs.registry import make_env

    with pytest.raises(
        ConfigError,
        match=r"env_kwargs.max_steps: MPE_simple_spread_v3 takes a number .* \(its default is 25\), got 'abc'",
    ):
        make_env("MPE_simple_spread_v3", {"max_steps": "abc"})
    with pytest.raises(ConfigError, match="env_kwargs.num_agents: 100,000,000 is more than 100,000: one env copy"):
        load_config(None, [*BASE, "env_kwargs.num_agents=100000000", f"out_dir={tmp_path / 'run'}"])
    assert make_env("MPE_simple_spread_v3", {"max_steps": 30, "num_agents": 4}).max_steps == 30  # the control


def test_an_out_dir_starting_with_a_tilde_is_the_home_directory(tmp_path, monkeypatch):
    """Before: `out_dir: ~/x` in a YAML file (or quoted) made a directory named '~' in the working directory."""
    from marljax.config import ConfigError
    from marljax.files import expand_home
    from marljax.sweeps.spec import load_sweep

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    train(load_config(None, [*BASE, "out_dir=~/run", "checkpoint_every=0"]), **QUIET)
    assert (tmp_path / "home" / "run" / "metrics.jsonl").is_file() and not (tmp_path / "~").exists()
    (tmp_path / "s.yaml").write_text("axes: {lr: [0.001, 0.002]}\nout_dir: ~/sweeps/s\n")
    assert load_sweep(tmp_path / "s.yaml").out_dir == tmp_path / "home" / "sweeps" / "s"
    with pytest.raises(ConfigError, match="~nosuchuser66 names no user of this machine"):
        expand_home("~nosuchuser66/x", "out_dir")


@pytest.mark.parametrize(
    "variable, words",
    [
        (
            "XLA_FLAGS=--xla_force_host_platform_device_count=abc",
            "XLA_FLAGS: --xla_force_host_platform_device_count='abc': the number of CPU devices must be a positive integer",
        ),
        (
            "MPLBACKEND=junk",
            "MPLBACKEND: 'junk' is not a matplotlib backend (the returns plot and several JaxMARL envs import matplotlib, which reads it)",
        ),
        ("JAX_PLATFORMS=gpu", "JAX_PLATFORMS=gpu: JAX cannot start that backend on this machine"),
    ],
    ids=["xla flags", "mpl backend", "jax platforms"],
)
def test_environment_variables_jax_and_matplotlib_reject_are_one_line(tmp_path, variable, words):
    """Before: XLA's fatal flag-parser error with its list of every flag (a native abort), matplotlib's
    ValueError listing its backends, `Unable to initialize backend 'rocm'` for JAX_PLATFORMS=gpu."""
    import os

    name, value = variable.split("=", 1)
    if name == "JAX_PLATFORMS":
        import jax

        if jax.default_backend() != "cpu":
            pytest.skip("this machine has an accelerator: JAX_PLATFORMS=gpu may start")
    env = {**os.environ, name: value}
    proc = subprocess.run(
        [sys.executable, "-m", "marljax.cli", "train", *BASE, f"out_dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    err = [line for line in proc.stderr.splitlines() if not line.startswith(("Importing", "Submoduled"))]
    assert proc.returncode == 2 and len(err) == 1 and err[0] == f"marljax: {words}" + err[0][len(words) + 9 :], (
        proc.stderr
    )
    assert not (tmp_path / "run").exists()


def test_compare_refuses_a_run_whose_metrics_hold_no_row(finished, tmp_path, capsys):
    """Before: a table whose row for that run was n/a throughout."""
    from marljax.cli import main

    for name, text in [("empty", ""), ("garbage", "garbage\n{not json\n")]:
        shutil.copytree(finished, tmp_path / name, ignore=shutil.ignore_patterns("checkpoints"))
        (tmp_path / name / "metrics.jsonl").write_text(text)
        assert main(["compare", str(tmp_path / name), str(finished), "--out", str(tmp_path / "cmp")]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and f"{tmp_path / name / 'metrics.jsonl'} holds no metrics rows" in err[0], err
    assert not (tmp_path / "cmp").exists()


def test_a_damaged_sweep_results_array_is_named_with_what_was_lost(tmp_path):
    """Before: tensorstore's FAILED_PRECONDITION with its JSON spec (a resumed sweep, `marljax report`)."""
    import numpy as np

    from marljax.files import DamagedFile
    from marljax.sweeps.results import ResultsStore, load

    coords = {
        "cells": ["a", "b"],
        "num_seeds": 2,
        "metrics": ["return"],
        "num_evals": 3,
        "eval_episodes": 2,
        "absolute_factor": 2,
    }
    ResultsStore(tmp_path, coords).write_eval(0, 0, 10, np.zeros((2, 1)), np.zeros((2, 2)))
    assert load(tmp_path).eval_steps[0, 0] == 10  # the control
    (tmp_path / "evals.zarr" / "0.0.0.0").write_bytes(b"garbage")
    with pytest.raises(
        DamagedFile, match=r"evals.zarr does not read back as a results array of the sweep \(.*0.0.0.0: Invalid"
    ):
        load(tmp_path)
    (tmp_path / "evals.zarr" / ".zarray").write_text('{"chunks": [1, 2')
    for read in (lambda: ResultsStore(tmp_path, coords), lambda: load(tmp_path)):
        with pytest.raises(DamagedFile, match=r"\.zarray: Invalid JSON\); its evaluations are lost: rerun the sweep"):
            read()


def test_sighup_stops_a_run_as_sigterm_does():
    """Before: SIGHUP mid-run exited 129 with no message and no stop checkpoint. The chunk loop's
    handler now notes it (a subprocess: unhandled, SIGHUP would end the test's own process)."""
    script = (
        "import os, signal\n"
        "from marljax.train.chunks import Stopped, StopSignals\n"
        "with StopSignals() as signals:\n"
        "    os.kill(os.getpid(), signal.SIGHUP)\n"
        "print(signals.signum == signal.SIGHUP, Stopped(signals.signum, 8, 'run/checkpoints/8').exit_code)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["True", "129"], proc.stdout + proc.stderr[-2000:]


def test_sigterm_while_the_env_is_built_is_one_line(tmp_path):
    """Before: SIGTERM during start-up (here a factory that takes a minute) ended the process with
    nothing said; now one line, exit 143, and the out_dir's lock released with the directory."""
    import os
    import signal

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [
        sys.executable,
        "-m",
        "marljax.cli",
        "train",
        *BASE,
        "env=tests.broken_env:sleeps",
        f"out_dir={tmp_path / 'r'}",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    for line in proc.stdout:
        if line.startswith("factory started"):
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert err.splitlines()[-1].startswith("marljax: stopped by SIGTERM outside the training chunks (starting up"), err
    assert "Traceback" not in err and not (tmp_path / "r").exists()


def test_a_full_disk_while_writing_a_small_file_names_the_file(tmp_path, monkeypatch):
    """Before: `marljax: OSError: [Errno 28] No space left on device`, no file named (config.yaml at
    4 KiB free, metrics.jsonl at 8 KiB: a write() and a close() carry no file name)."""
    import errno

    from marljax.files import disk_full, write_text_atomic
    from marljax.train.metrics import JsonlWriter

    if Path("/dev/full").exists():  # a device every write to fails with ENOSPC
        writer = JsonlWriter(Path("/dev/full"))
        with pytest.raises(OSError) as info:
            writer.write({"update": 1})
        assert disk_full(info.value).startswith("writing /dev/full failed: No space left on device (the disk is full)")

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError) as info:
        write_text_atomic(tmp_path / "config.yaml", "lr: 1\n")
    assert disk_full(info.value).startswith(f"writing {tmp_path / 'config.yaml'} failed: No space left on device")
    assert list(tmp_path.iterdir()) == []  # no half-written temporary file beside it
    assert disk_full(OSError(errno.EACCES, "Permission denied", "x")) is None  # the control


def test_a_full_disk_in_a_run_is_one_line_naming_the_file(tmp_path):
    """The same through `marljax train` and `marljax export` on a real full tmpfs (needs mount rights)."""
    from tests.test_checkpoint import _tmpfs

    mnt = tmp_path / "full"
    if not _tmpfs(mnt, "4k"):
        pytest.skip("cannot mount a tmpfs here (needs root); the injected-error test covers the handling")
    try:
        proc = _cli("train", *BASE, f"out_dir={mnt / 'run'}")
        err = [line for line in proc.stderr.splitlines() if not line.startswith(("Importing", "Submoduled"))]
        assert proc.returncode == 1 and len(err) == 1, proc.stderr
        assert err[0].startswith(f"marljax: writing {mnt / 'run' / 'config.yaml'} failed: No space left on device")
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_a_coordinator_port_outside_the_tcp_range_is_refused_up_front():
    """Before: `distributed.coordinator=127.0.0.1:99999` was accepted; 125 s later the coordinator 'did not answer'."""
    from marljax.config import ConfigError

    with pytest.raises(ConfigError, match=r"distributed.coordinator: port 99999 of '127.0.0.1:99999' is no TCP port"):
        load_config(None, ["distributed.coordinator=127.0.0.1:99999", "distributed.num_processes=2"])
    config = load_config(None, ["distributed.coordinator=127.0.0.1:65535", "distributed.num_processes=2"])
    assert config.distributed.coordinator == "127.0.0.1:65535"  # the control: the highest port


def test_a_sweep_axis_is_checked_for_repeats_in_one_pass():
    """Before: `values.count(v)` for every value, quadratic: an axis of 100,000 values never reached
    the max_cells check. Counted here by the values' own comparisons, not timed."""
    from marljax.config import ConfigError
    from marljax.sweeps.spec import _values_list

    class Value:
        compared = 0

        def __init__(self, x: int):
            self.x = x

        def __eq__(self, other):
            Value.compared += 1
            return isinstance(other, Value) and other.x == self.x

        def __hash__(self):
            return hash(self.x)

        def __repr__(self):
            return f"V{self.x}"

    values = [Value(i) for i in range(5000)]
    assert _values_list("axes.lr", values) == values
    assert Value.compared < 5 * len(values), Value.compared  # quadratic: 25,000,000
    with pytest.raises(ConfigError, match=r"axes.lr: repeats V7; every value must be distinct"):
        _values_list("axes.lr", [*values, Value(7)])
    with pytest.raises(ConfigError, match=r"repeats \{'a': 1\}"):  # unhashable values are still compared
        _values_list("axes.network", [{"a": 1}, {"a": 2}, {"a": 1}])


def test_a_host_env_that_returns_no_reward_for_an_agent_that_acted_fails_its_step():
    """Before: the missing reward was read as 0 and the run trained "successfully". Now the step
    raises, naming the agent: a failure of that copy (restarted, then retired, as any failing step)."""
    pytest.importorskip("pettingzoo")
    import numpy as np

    from marljax.envs.host import HostCopy, HostEnvAdapter, host_env_factory

    actions = {"agents": np.zeros(3, np.int32)}
    names = ["pettingzoo:tests.unpaid_env:parallel_env", "pettingzoo:marljax.testing.host_spread:parallel_env"]
    for name, fails in zip(names, [True, False], strict=True):
        adapter = HostEnvAdapter(host_env_factory(name, {}), name)
        copy = HostCopy(adapter, adapter.make_one(), lambda: 0)
        copy.reset()
        if fails:
            with pytest.raises(
                ValueError, match=r"unpaid_env:parallel_env: step returned no reward for agent_0, which acted"
            ):
                copy.step(actions)
        else:  # the control: the same env paying every agent
            assert set(copy.step(actions)[1]) == {"agents"}


def test_a_resumed_history_that_stops_short_of_the_checkpoint_says_so(run):
    """Before: a finished run whose metrics.jsonl's last line was cut short, resumed, ended with
    rows up to update 6 and a closing line showing update 6's return as the final one, unqualified;
    with metrics.jsonl deleted it said "no episode finished"."""
    path = run / "metrics.jsonl"
    path.write_text(path.read_text().rstrip("\n")[:-40])  # the row of update 8 cut short
    logs: list[str] = []
    train(load_config(None, [*BASE, f"out_dir={run}", "resume=true"]), log=logs.append)
    aside = next(run.glob("metrics.jsonl.damaged-*"))
    gap = f"updates 7..8 have no row (their lines are in {aside}); the history goes on from update 8"
    assert f"note: {path} holds rows up to update 6, the checkpoint is of update 8: {gap}" in logs, logs
    closing = next(line for line in logs if line.startswith("return per agent")).splitlines()
    assert (
        closing[1]
        == "note: the return above is update 6's, the last row metrics.jsonl holds; the run ended at update 8"
    )
    path.unlink()
    logs.clear()
    train(load_config(None, [*BASE, f"out_dir={run}", "resume=true"]), log=logs.append)
    gap = "updates 1..8 have no row (no file); the history goes on from update 8"
    assert f"note: {path} holds no row, the checkpoint is of update 8: {gap}" in logs, logs
    closing = next(line for line in logs if line.startswith("no metrics row to summarise")).splitlines()
    assert closing[1] == "note: metrics.jsonl holds no row of this run, which ended at update 8: no return to show"
