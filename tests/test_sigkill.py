"""SIGKILL a real `marljax train` process, resume it, and get an uninterrupted run's bits.

Two kill points, each in a child process (`python -m marljax.cli train`, this marljax):

* right after the first checkpoint is finalized on disk (a bare `<update>/` directory);
* while a save is in flight: the MARLJAX_TEST_SAVE_DELAY_S test hook (marljax.train.checkpoint)
  holds the save of update 8 after orbax has written it into its temporary directory and before
  the rename, and the process is killed during that hold.

Each is then resumed with `resume=true` to the end. The test checks that the kill took the
process (-9), that the resume restored a checkpoint (not a fresh start), and that the metrics rows
(wall-clock fields left out) and every array of the final checkpoint equal the reference's bit
for bit. The runs share the session's compilation cache (tests/conftest.py), so only the first
compiles.
"""

from __future__ import annotations

import signal

import pytest

from marljax.testing.faults import (
    FinishedRun,
    finished_steps,
    first_difference,
    kill_when,
    resumed_from,
    run_to_end,
    start_train,
    unfinished_saves,
)
from marljax.train.checkpoint import TEST_SAVE_DELAY

# 40 updates of 8 envs x 16 steps, in chunks of 2, a checkpoint every 4 (the newest 3 kept)
BASE = ["num_envs=8", "num_steps=16", "total_timesteps=5120", "num_chunks=20", "checkpoint_every=4",
        "progress=false", "plot=false"]  # fmt: skip
HELD = 8  # the update whose save is held in flight and killed


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> FinishedRun:
    out = tmp_path_factory.mktemp("sigkill") / "reference"
    run_to_end(BASE + [f"out_dir={out}"])
    return FinishedRun.read(out)


def _resume_and_compare(out, reference: FinishedRun, expected_start: int) -> None:
    log, _ = run_to_end(BASE + [f"out_dir={out}", "resume=true"])
    assert "starting from scratch" not in log
    assert resumed_from(log) == expected_start, log[-2000:]
    difference = first_difference(FinishedRun.read(out), reference)
    assert difference is None, difference


@pytest.mark.slow
def test_sigkill_right_after_the_first_checkpoint_resumes_bitwise(tmp_path, reference):
    out = tmp_path / "run"
    proc = start_train(BASE + [f"out_dir={out}"])
    returncode, log = kill_when(proc, lambda line: bool(finished_steps(out)))
    assert returncode == -signal.SIGKILL, f"the run was not killed (return code {returncode}):\n{log[-2000:]}"
    steps = finished_steps(out)
    assert steps and steps[-1] < 40, steps  # killed in the middle of training
    _resume_and_compare(out, reference, expected_start=steps[-1])


@pytest.mark.slow
def test_sigkill_while_a_save_is_in_flight_resumes_bitwise(tmp_path, reference):
    out = tmp_path / "run"
    proc = start_train(BASE + [f"out_dir={out}"], env={TEST_SAVE_DELAY: f"120@{HELD}"})
    returncode, log = kill_when(proc, lambda line: bool(line) and line.startswith(f"test hook {TEST_SAVE_DELAY}"))
    assert f"the save of update {HELD} is written but not renamed" in log, log[-2000:]
    assert returncode == -signal.SIGKILL, f"the run was not killed (return code {returncode}):\n{log[-2000:]}"
    # the held save was cut off: its temporary directory is left, never renamed; update 4's is whole
    assert finished_steps(out) == [4]
    assert [name.split(".")[0] for name in unfinished_saves(out)] == [str(HELD)], unfinished_saves(out)
    _resume_and_compare(out, reference, expected_start=4)
