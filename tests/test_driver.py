"""The one run driver (train/driver.py): every lifecycle steps through it, and its parts behave."""

from __future__ import annotations

import math
import signal
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
import pytest

from marljax.config import load_config
from marljax.sweeps.runner import run_sweep
from marljax.sweeps.spec import expand
from marljax.train import driver as driver_module
from marljax.train.driver import Checkpoints, Chunk, Driver, Progress, StopControl, TrainingDiverged
from marljax.train.loop import train
from marljax.train.metrics import chunk_row
from marljax.types import UpdateMetrics

SMALL = ["num_envs=8", "num_steps=16", "total_timesteps=1024", "num_chunks=2", "progress=false", "plot=false"]
SWEEP = {"base": {"num_envs": 8, "num_steps": 16, "total_timesteps": 768, "eval_every": 3, "eval_episodes": 2,
                  "plot": False}, "axes": {"lr": [1e-3, 3e-3]}, "seeds": 2}  # fmt: skip


@pytest.fixture
def steps(monkeypatch):
    """Every `Driver.step` call: (updates in the chunk, rows of the state it was handed)."""
    seen: list[tuple[int, int]] = []
    real = Driver.step

    def spy(self, chunk: Chunk, save: bool = False) -> None:
        seen.append((chunk.n, int(np.shape(chunk.metrics.episodes.count)[0])))
        real(self, chunk, save)

    monkeypatch.setattr(Driver, "step", spy)
    return seen


@pytest.mark.parametrize("mode", ["anakin", "async"])
def test_train_in_both_modes_steps_through_the_driver(tmp_path, steps, mode):
    result = train(
        load_config(None, SMALL + [f"mode={mode}", "num_seeds=2", f"out_dir={tmp_path}"]), log=lambda s: None
    )
    # one driver step per metrics row (a source writing rows itself would leave `steps` empty)
    assert len(steps) == len(result.rows) == 2
    assert sum(n for n, _ in steps) == result.rows[-1]["update"] == 8  # 1024 steps of 8 x 16
    assert {rows for _, rows in steps} == {2}  # the run's seeds


@pytest.mark.slow
def test_a_sweep_steps_through_the_same_driver_with_cells_x_seeds_rows(tmp_path, steps):
    run_sweep(expand(SWEEP | {"out_dir": str(tmp_path)}), log=lambda s: None, progress=False)
    # one program of 2 cells x 2 seeds: 6 updates in chunks ending at every evaluation (3)
    assert [n for n, _ in steps] == [3, 3] and {rows for _, rows in steps} == {4}
    for cell in ("lr-0.001", "lr-0.003"):
        cell_rows = (tmp_path / "cells" / cell / "metrics.jsonl").read_text().splitlines()
        assert len(cell_rows) == 2  # the driver's rows, one per cell and chunk


# ------------------------------------------------------------------------- the parts alone
class _Episodes(NamedTuple):  # a pytree, as the chunk's episode statistics are
    count: np.ndarray  # [S, n]
    return_sum: np.ndarray  # [S, n, A]
    length_sum: np.ndarray  # [S, n]
    won_sum: np.ndarray  # [S, n]


def _episodes(S: int, n: int, A: int, returns: np.ndarray) -> _Episodes:
    return _Episodes(np.ones((S, n)), returns.reshape(S, n, A), np.full((S, n), 25.0), np.zeros((S, n)))


class _Checkpointer:
    directory = Path("nowhere")

    def __init__(self):
        self.saved: list[int] = []

    def save(self, update, state, meta):
        self.saved.append(update)

    def wait(self):
        pass

    def steps(self):
        return self.saved


def _driver(groups, checkpointer, **kwargs) -> Driver:
    config = SimpleNamespace(run_steps_per_update=128, num_updates=4, checkpoint_every=0)
    env = SimpleNamespace(num_agents=1, groups=(), has_win=False)
    checkpoints = Checkpoints(checkpointer, config, lambda update: {}, 0)
    return Driver(config, env, start=0, groups=groups, sinks=[], checkpoints=checkpoints,
                  progress=Progress(False, 4), **kwargs)  # fmt: skip


def _chunk(loss: float, S: int = 2, n: int = 2) -> Chunk:
    metrics = UpdateMetrics({"loss_total": np.full((S, n), loss)}, _episodes(S, n, 1, np.arange(S * n, dtype=float)))
    return Chunk(None, metrics, n, 1.0, {"agent": {"w": np.ones((S, 3))}})


def test_rows_are_one_per_group_of_rows_each_from_its_own_slice():
    chunk = _chunk(0.5)
    per_cell = _driver([slice(0, 1), slice(1, 2)], _Checkpointer()).rows(chunk, None)
    whole = _driver([slice(0, 2)], _Checkpointer()).rows(chunk, None)
    for i, row in enumerate(per_cell):
        part = UpdateMetrics(
            {"loss_total": np.full((1, 2), 0.5)}, _episodes(1, 2, 1, np.arange(4, dtype=float)[2 * i : 2 * i + 2])
        )
        expected = chunk_row(part, update=0, env_steps=0, wall_s=1.0, chunk_env_steps=2 * 128, num_agents=1)
        assert row == expected
    assert [row["return_mean"] for row in per_cell] == [0.5, 2.5] and whole[0]["return_mean"] == 1.5  # control


def test_the_nan_guard_stops_before_the_checkpoint_is_saved():
    saved = _Checkpointer()
    guarded = _driver([slice(0, 2)], saved, guard=("loss_total",))
    guarded.step(_chunk(0.5), save=True)
    with pytest.raises(TrainingDiverged, match=r"update 4: loss_total is nan .*last good checkpoint: update 2"):
        guarded.step(_chunk(math.nan), save=True)
    assert saved.saved == [2]  # the signal's save came after the guard: never the broken state
    unguarded = _Checkpointer()  # control: the same chunks without the guard save both
    plain = _driver([slice(0, 2)], unguarded)
    plain.step(_chunk(0.5), save=True)
    plain.step(_chunk(math.nan))
    assert unguarded.saved == [2, 4]
    other = _Checkpointer()  # control: a guard on another algorithm's losses lets this NaN through
    elsewhere = _driver([slice(0, 2)], other, guard=("q_mean",))
    elsewhere.step(_chunk(0.5), save=True)
    elsewhere.step(_chunk(math.nan), save=True)
    assert other.saved == [2, 4]


def test_several_processes_agree_to_stop_at_chunk_ends_only(monkeypatch):
    asked: list[bool] = []
    monkeypatch.setattr(driver_module, "any_process", lambda flag: asked.append(flag) or flag)
    together, alone = StopControl(processes=2), StopControl(processes=1)
    for control in (together, alone):
        control.signals.signum = signal.SIGTERM
    assert together(chunk_end=False) is False and asked == []  # mid-chunk: no collective, no stop
    assert together(chunk_end=True) is True and asked == [True] and together.stopping
    assert alone(chunk_end=False) is True and asked == [True]  # control: one process stops on its own signal
    quiet = StopControl(processes=2)
    assert quiet(chunk_end=True) is False and asked == [True, False]
    with pytest.raises(driver_module.Stopped, match="SIGTERM at update 3"):
        together.raise_if_stopped(3, 4, Path("ckpt"))
    together.raise_if_stopped(4, 4, Path("ckpt"))  # the last update: finished, not stopped


def test_the_run_summary_line_gives_a_slow_rate_in_full():
    from marljax.train.loop import summary

    def rows(rate: float) -> list[dict]:
        return [{"return_mean": -27.0, "env_steps_per_s": rate, "wall_s": 10.0},
                {"return_mean": -10.0, "env_steps_per_s": rate, "wall_s": 10.0}]  # fmt: skip

    assert summary(rows(350.0)) == "return per agent -27.00 -> -10.00 (+17.00); 350 env-steps/s"  # was "0k"
    assert summary(rows(61_000.0)).endswith("; 61k env-steps/s")
    assert summary([{"return_mean": None, "wall_s": 1.0}]) == "no episode finished"
