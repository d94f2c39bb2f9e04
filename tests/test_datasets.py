"""Offline datasets in OG-MARL's Vault layout (marljax/datasets.py, marljax/train/record.py): a
Vault written with flashbax's own API reads into marljax with every field equal, marljax's datasets
read back with flashbax's Vault reader with every field equal, a damaged one (truncated file,
flipped byte, missing file or field, added file) is refused in one line naming the file, and
`marljax record` describes what it wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("flashbax")

from flashbax.buffers.trajectory_buffer import TrajectoryBufferState  # noqa: E402
from flashbax.vault import Vault  # noqa: E402

from marljax.cli import main  # noqa: E402
from marljax.datasets import (  # noqa: E402
    DESCRIPTION,
    DatasetError,
    DatasetWriter,
    dataset_dir,
    episode_returns,
    read_dataset,
    return_distribution,
)
from marljax.run_settings import RecordSettings  # noqa: E402
from marljax.train.record import record  # noqa: E402

B, T, N, OBS, A = 2, 12, 3, 4, 5


def experience(seed: int = 0, state: bool = True) -> dict:
    """OG-MARL's fields, [B, T, ...]: episodes end at step 4 (terminal) and 9 (truncated) of each stream."""
    rng = np.random.default_rng(seed)
    terminals, truncations = np.zeros((B, T, N), np.float32), np.zeros((B, T, N), np.float32)
    terminals[:, 4], truncations[:, 9] = 1, 1
    infos = {"legals": (rng.random((B, T, N, A)) > 0.3).astype(np.float32)}
    if state:
        infos["state"] = rng.random((B, T, 7)).astype(np.float32)
    return {"observations": rng.random((B, T, N, OBS)).astype(np.float32),
            "actions": rng.integers(0, A, (B, T, N)).astype(np.int32), "rewards": rng.random((B, T, N)).astype(np.float32),
            "terminals": terminals, "truncations": truncations, "infos": infos}  # fmt: skip


def flashbax_vault(root: Path, exp: dict, uid: str = "Good") -> Path:
    """A Vault written by flashbax's API alone, as OG-MARL's recorders write one: <root>/og.vlt/<uid>."""
    state = TrajectoryBufferState(experience=jax.tree.map(jnp.asarray, exp), current_index=jnp.int32(T),
                                  is_full=jnp.bool_(False))  # fmt: skip
    vault = Vault("og.vlt", experience_structure=state.experience, rel_dir=str(root), vault_uid=uid)
    assert vault.write(state, source_interval=(0, T)) == T
    return root / "og.vlt" / uid


def flashbax_read(path: Path) -> dict:
    return Vault(path.parent.name, rel_dir=str(path.parent.parent), vault_uid=path.name).read().experience


def assert_same(a: dict, b: dict) -> None:
    flat_a, flat_b = jax.tree_util.tree_flatten_with_path(a)[0], jax.tree_util.tree_flatten_with_path(b)[0]
    assert [p for p, _ in flat_a] == [p for p, _ in flat_b]
    for (path, x), (_, y) in zip(flat_a, flat_b):
        assert np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(np.asarray(x), np.asarray(y)), path


def marljax_dataset(root: Path, exp: dict) -> Path:
    writer = DatasetWriter(root / "mine.vlt", "Medium", exp, {"env": "test"})
    writer.append(jax.tree.map(lambda x: x[:, :5], exp))  # in two writes, as `record` writes chunks
    writer.append(jax.tree.map(lambda x: x[:, 5:], exp))
    return writer.finish({"env": "test"})


def test_a_vault_written_by_flashbax_reads_into_marljax_with_every_field_equal(tmp_path):
    exp = experience()
    path = flashbax_vault(tmp_path, exp)
    got = read_dataset(tmp_path / "og.vlt")  # the .vlt directory with one dataset in it names it
    assert got.path == path and got.description == {}  # not written by marljax: no digests to check
    assert_same(got.experience, exp)


def test_marljax_datasets_read_back_with_flashbax_with_every_field_equal(tmp_path):
    exp = experience(1)
    path = marljax_dataset(tmp_path, exp)
    assert_same(flashbax_read(path), exp)  # flashbax's own reader, on what marljax wrote in two chunks
    assert_same(read_dataset(path).experience, exp)
    assert read_dataset(path).description["files"]["metadata.json"]["bytes"] == (path / "metadata.json").stat().st_size


def test_episode_returns_are_per_agent_and_leave_out_the_unfinished_episode():
    exp = experience()
    team = exp["rewards"].astype(np.float64).mean(axis=2)  # [B, T]
    expected = [team[b, a:z].sum() for b in range(B) for a, z in ((0, 5), (5, 10))]  # steps 10, 11 run on
    assert np.allclose(episode_returns(exp), expected)
    described = return_distribution(episode_returns(exp))
    assert described["episodes"] == 4 and np.isclose(described["mean"], np.mean(expected))
    assert described["quantiles"]["50"] == pytest.approx(np.median(expected))


def _damage(path: Path, how: str) -> Path:
    """Damage the dataset at `path` as `how` says; -> the file damaged."""
    data = sorted((path / "d").iterdir(), key=lambda p: p.stat().st_size)[-1]  # the largest data file
    if how == "truncated":
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    elif how == "flipped":
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        data.write_bytes(bytes(raw))
    elif how == "missing":
        data.unlink()
    elif how == "added":
        data = path / "d" / "0000extra"
        data.write_bytes(b"x")
    elif how == "field":  # a field taken out of the Vault's structure
        data = path / "metadata.json"
        meta = json.loads(data.read_text())
        del meta["structure_shape"]["terminals"], meta["structure_dtype"]["terminals"]
        data.write_text(json.dumps(meta))
    return data


@pytest.mark.parametrize("how", ["truncated", "flipped", "missing", "added", "field"])
def test_a_damaged_dataset_is_refused_in_one_line_naming_the_file(tmp_path, how):
    path = marljax_dataset(tmp_path, experience())
    read_dataset(path)  # the control: whole, it reads
    damaged = _damage(path, how)
    with pytest.raises(DatasetError) as info:
        read_dataset(path)
    message = str(info.value)
    assert "\n" not in message and str(damaged) in message, message


def test_a_vault_without_a_field_or_with_damaged_data_is_refused_without_digests(tmp_path):
    """A Vault marljax did not write has no digests: its structure and its arrays are still checked."""
    exp = experience(state=False)
    del exp["truncations"]
    path = flashbax_vault(tmp_path, exp)
    with pytest.raises(DatasetError, match=r"metadata.json has no field truncations \(its fields: actions, infos"):
        read_dataset(path)
    whole = flashbax_vault(tmp_path / "b", experience())
    for f in (whole / "d").iterdir():
        f.write_bytes(b"")  # every data file emptied
    with pytest.raises(DatasetError) as info:
        read_dataset(whole)
    assert "\n" not in str(info.value) and str(whole) in str(info.value)


def test_where_a_dataset_is_named(tmp_path):
    exp = experience()
    path = marljax_dataset(tmp_path, exp)
    assert dataset_dir(path.parent) == path == dataset_dir(path)
    DatasetWriter(path.parent, "Poor", exp).finish({})
    with pytest.raises(DatasetError, match=r"holds 2 datasets \(Medium, Poor\); name one"):
        dataset_dir(path.parent)
    with pytest.raises(DatasetError, match="no such dataset"):
        dataset_dir(tmp_path / "nothing")
    with pytest.raises(DatasetError, match="already exists"):
        DatasetWriter(path.parent, "Medium", exp)


def test_an_interrupted_recording_leaves_no_dataset_that_looks_whole(tmp_path):
    exp = experience()
    writer = DatasetWriter(tmp_path / "x.vlt", "Good", exp)
    writer.append(exp)
    assert not (tmp_path / "x.vlt" / "Good").exists()  # written under a hidden name until finished
    writer.abort()
    assert os.listdir(tmp_path / "x.vlt") == []


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A random policy's dataset on MPE spread, 3 envs x 30 steps (one episode ends per env)."""
    out = tmp_path_factory.mktemp("recorded") / "spread.vlt"
    return record("random", out, RecordSettings(transitions=90, num_envs=3, seed=3), log=lambda _: None)


def test_record_writes_the_experience_and_its_description(recorded):
    described = json.loads((recorded / DESCRIPTION).read_text())
    assert (
        recorded.name == "Poor" and described["quality"] == "Poor" and described["quality_from"].startswith("derived")
    )
    assert described["env"] == "MPE_simple_spread_v3" and described["agents"] == ["agent_0", "agent_1", "agent_2"]
    got = read_dataset(recorded).experience
    assert got["observations"].shape == (3, 30, 3, 18) and got["actions"].dtype == np.int32
    assert got["infos"]["legals"].shape == (3, 30, 3, 5) and "state" not in got["infos"]  # MPE has no global state
    # MPE's episodes end only at its time limit (26 steps from a reset): truncations, never terminals
    assert np.all(got["truncations"][:, 25] == 1) and got["truncations"].sum() == 3 * 3 and got["terminals"].sum() == 0
    assert described["returns"]["episodes"] == 3
    assert described["returns"]["mean"] == pytest.approx(float(episode_returns(got).mean()))
    assert_same(flashbax_read(recorded), got)


def test_record_refuses_bad_settings_in_one_line(tmp_path, capsys):
    assert main(["record", "random", str(tmp_path / "a.vlt"), "epsilon=2"]) == 2
    assert capsys.readouterr().err.strip() == "marljax: config error: epsilon: must lie in [0, 1], got 2.0"
    assert main(["record", str(tmp_path / "nowhere"), str(tmp_path / "b.vlt")]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "neither a run's directory" in err
    assert not (tmp_path / "a.vlt").exists() and not (tmp_path / "b.vlt").exists()


def test_an_env_whose_agents_differ_is_refused_before_recording(tmp_path):
    """OG-MARL's layout stacks the agents: simple_adversary's adversary sees 8 numbers, the others 10."""
    with pytest.raises(DatasetError, match=r"^env MPE_simple_adversary_v3: its agents differ \(adversary: obs \(8,\)"):
        record("random", tmp_path / "x.vlt", RecordSettings(transitions=8, num_envs=2), ["env=MPE_simple_adversary_v3"])
    assert not (tmp_path / "x.vlt").exists()
