"""Kill a `marljax train` process, resume it, compare it with an uninterrupted run.

What `tests/test_sigkill.py` and `experiments/kill_resume.py` share: start `marljax train` in a
child process (this interpreter, `python -m marljax.cli`, so that it imports the same marljax),
SIGKILL it, resume it with `resume=true`, and say of the result, separately, whether the process
was really killed, whether the resume restored a checkpoint (and which) rather than starting from
scratch, and whether the metrics rows (wall-clock fields left out) and every array of the final
checkpoint equal a reference run's bit for bit.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from marljax.train.metrics import read_jsonl

TIMING = ("wall_s", "env_steps_per_s")  # metrics fields that measure the clock, not the training
_RESUMED = re.compile(r"^resumed from .* \(update (\d+) of \d+\)$")  # the line marljax.train.loop logs


def start_train(overrides: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """`marljax train overrides...` in a child process (its own session: a kill reaches all of it),
    stdout and stderr merged and unbuffered, so that lines arrive as they are printed."""
    cmd = [sys.executable, "-m", "marljax.cli", "train", *overrides]
    env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    here = str(Path(__file__).resolve().parents[2])  # the child imports this very marljax (marljax/testing/faults.py)
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env
    )


def run_to_end(overrides: list[str], env: dict[str, str] | None = None) -> tuple[str, float]:
    """Run `marljax train` to the end: (its output, seconds until it printed `compiled in`).
    RuntimeError with the output's tail when it fails."""
    t0 = time.perf_counter()
    proc = start_train(overrides, env)
    lines, compiled_at = [], 0.0
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("compiled in") and not compiled_at:
            compiled_at = time.perf_counter() - t0
    proc.wait()
    out = "".join(lines)
    if proc.returncode != 0:
        raise RuntimeError(f"marljax train {' '.join(overrides)} failed ({proc.returncode}):\n{out[-3000:]}")
    return out, compiled_at


def sigkill(proc: subprocess.Popen) -> int:
    """SIGKILL the process's whole session and reap it; its return code (-9 when the kill took it,
    anything else when it had already exited)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # already gone (and reaped)
        pass
    return proc.wait()


def kill_when(proc: subprocess.Popen, ready: Callable[[str | None], bool], timeout: float = 300) -> tuple[int, str]:
    """SIGKILL the process as soon as `ready` says so: `ready(line)` for each line it prints,
    `ready(None)` every 10 ms between them (to watch the disk). (return code, output read until
    then). A process that ends first is not killed: its own return code comes back."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)  # end of output

    threading.Thread(target=read, daemon=True).start()
    out: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.01)
        except queue.Empty:
            line = ""
        if line is None:  # it exited by itself
            return proc.wait(), "".join(out)
        if line:
            out.append(line)
        if ready(line.rstrip("\n") if line else None):
            return sigkill(proc), "".join(out)
    sigkill(proc)
    raise TimeoutError(f"not ready to kill within {timeout}s; its output:\n{''.join(out)[-3000:]}")


def finished_steps(out_dir: Path) -> list[int]:
    """Updates whose checkpoint orbax has finalized: it writes into `<step>.orbax-checkpoint-tmp-*`
    and renames that to `<step>` when every file is written, so a bare number is a finished save."""
    ckpts = Path(out_dir) / "checkpoints"
    return sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit()) if ckpts.is_dir() else []


def unfinished_saves(out_dir: Path) -> list[str]:
    """Names of the temporary directories of saves not finalized (in flight, or cut off by a kill)."""
    ckpts = Path(out_dir) / "checkpoints"
    return sorted(p.name for p in ckpts.iterdir() if ".orbax-checkpoint-tmp" in p.name) if ckpts.is_dir() else []


def resumed_from(log: str) -> int | None:
    """The update of the checkpoint a `resume=true` run restored (its `resumed from` line); None when
    it started from scratch."""
    for line in log.splitlines():
        m = _RESUMED.match(line.strip())
        if m:
            return int(m.group(1))
    return None


def metrics_rows(out_dir: Path) -> list[dict]:
    """The run's metrics.jsonl rows without the wall-clock fields."""
    return [{k: v for k, v in r.items() if k not in TIMING} for r in read_jsonl(Path(out_dir) / "metrics.jsonl")]


@dataclass(frozen=True)
class FinishedRun:
    """What a finished run left: its metrics rows (no wall-clock fields) and its final checkpoint."""

    rows: list[dict]
    update: int  # the final checkpoint's update
    state: Any  # every array of the final checkpoint (params, Adam, keys, env states, counters), on the host

    @classmethod
    def read(cls, out_dir: Path) -> FinishedRun:
        from marljax.train.policy import restore_run

        state, meta, _ = restore_run(out_dir, log=lambda s: None)
        return cls(metrics_rows(out_dir), int(meta["update"]), jax.device_get(state))


def first_difference(run: FinishedRun, reference: FinishedRun) -> str | None:
    """None when the two runs are bitwise equal: the same metrics rows and final update, and every
    array of the final state with the same path, dtype, shape and bits (NaNs in the same places
    count as equal). Else what differs first, e.g. `leaf .learner.opt_state[0].mu[...] differs`."""
    for i, (a, b) in enumerate(zip(run.rows, reference.rows)):
        if a != b:
            return f"metrics row {i} (update {b.get('update')}) differs: {_diff(a, b)}"
    if len(run.rows) != len(reference.rows):
        return f"{len(run.rows)} metrics rows, the reference has {len(reference.rows)}"
    if run.update != reference.update:
        return f"the final checkpoint is of update {run.update}, the reference's of {reference.update}"
    leaves = jax.tree_util.tree_flatten_with_path(run.state)[0]
    ref_leaves, ref_def = jax.tree_util.tree_flatten_with_path(reference.state)
    if jax.tree_util.tree_structure(run.state) != ref_def:  # type: ignore[operator]  # jaxlib has no stub for PyTreeDef
        return "the final states have different tree structures"
    for (path, x), (_, y) in zip(leaves, ref_leaves):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype != y.dtype or x.shape != y.shape or not np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"):
            return f"leaf {jax.tree_util.keystr(path)} differs ({x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)})"
    return None


def _diff(a: dict, b: dict) -> str:
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return ", ".join(f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in keys[:4])


@dataclass(frozen=True)
class Outcome:
    """What became of one killed-and-resumed run, each point apart."""

    killed: bool  # the kill took the process (return code -9), not a run that had already ended
    resumed_from: int | None  # the update the resume restored; None: it started from scratch
    difference: str | None  # first_difference from the reference; None: bitwise equal

    @property
    def identical(self) -> bool:
        """Counted only when the trial tested what it is meant to: killed, resumed from a
        checkpoint, and then bitwise equal to the reference."""
        return self.killed and self.resumed_from is not None and self.difference is None
