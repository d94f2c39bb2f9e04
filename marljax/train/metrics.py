"""Metric sinks on the host: chunk rows for metrics.jsonl, and the returns plot.

The jitted chunk returns small per-update arrays ([S, n] per metric); this
module turns them into one JSON row per chunk. Nothing here runs inside jit.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from marljax.files import naming, write_text_atomic

if TYPE_CHECKING:  # an annotation only: the row is built from host copies, without JAX
    from marljax.types import UpdateMetrics


def chunk_row(
    metrics: UpdateMetrics,  # host copies: values [S, n]; episodes' fields [S, n, ...]
    *,
    update: int,
    env_steps: int,
    wall_s: float,
    chunk_env_steps: int,
    num_agents: int,
    groups: tuple = (),
    wins: bool = False,
) -> dict:
    """Aggregate one chunk's per-update metrics into a metrics.jsonl row (`wins`: the env has a
    win condition, so the row also carries the finished episodes' `win_rate`, pooled and per seed)."""
    ep = metrics.episodes
    count = float(np.sum(ep.count))
    per_seed_count = np.sum(ep.count, axis=1)  # [S]
    per_seed_return = np.sum(ep.return_sum, axis=(1, 2))  # [S]
    row = {
        "update": int(update),
        "env_steps": int(env_steps),
        "env_steps_per_s": chunk_env_steps / wall_s if wall_s > 0 else None,
        "wall_s": wall_s,
        "episodes": int(count),
        # mean over agents and over every episode finished in this chunk, all seeds pooled
        "return_mean": float(np.sum(ep.return_sum)) / (count * num_agents) if count else None,
        "return_per_seed": [
            float(r / (c * num_agents)) if c else None for r, c in zip(per_seed_return, per_seed_count)
        ],
        "episode_length": float(np.sum(ep.length_sum)) / count if count else None,
    }
    if wins:
        row["win_rate"] = float(np.sum(ep.won_sum)) / count if count else None
        row["win_rate_per_seed"] = [
            float(w / c) if c else None for w, c in zip(np.sum(ep.won_sum, axis=1), per_seed_count)
        ]
    # per-group returns (competitive envs): `groups` holds (name, size) in agent-concat order
    if len(groups) > 1:
        start = 0
        for name, size in groups:
            part = float(np.sum(ep.return_sum[..., start : start + size]))
            row[f"return_{name}"] = part / (count * size) if count else None
            start += size
    for key, value in metrics.values.items():  # the algorithm's own figures, whatever it names them
        if key not in row:
            row[key] = float(np.mean(value))
    return row


def first_non_finite(row: Mapping[str, Any], losses: Iterable[str]) -> str | None:
    """Name of the first of `losses` in `row` that is NaN or infinite, else None.

    `losses`: what the run's algorithm declares (`Trainer.losses`, `AlgorithmSpec.losses`); the
    caller says which, so this module needs no registry (it sits below the algorithms)."""
    for key in losses:
        value = row.get(key)
        if value is not None and not math.isfinite(value):
            return key
    return None


class JsonlWriter:
    """Appends one JSON object per line, flushed at once (a killed run keeps what it wrote)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a")

    def write(self, row: Mapping[str, Any]) -> None:
        with naming(self.path):
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()

    def close(self) -> None:
        with naming(self.path):
            self._file.close()


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a JSONL file that parse as JSON objects; a damaged line (e.g. the last one,
    cut short by a killed writer) is skipped, never what follows it (see `read_rows_kept`)."""
    return read_jsonl_checked(path)[0]


def read_jsonl_checked(path: Path) -> tuple[list[dict], list[int]]:
    """(the rows that parse as JSON objects with an `update`, the 1-based numbers of the lines that do not)."""
    rows, damaged = [], []
    with Path(path).open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                row = None
            if isinstance(row, dict) and isinstance(row.get("update"), int):
                rows.append(row)
            else:
                damaged.append(number)
    return rows, damaged


def listed_lines(numbers: list[int], most: int = 10) -> str:
    """'3, 7, 9' (the first `most` line numbers, then ', ...') for a warning."""
    return ", ".join(map(str, numbers[:most])) + (", ..." if len(numbers) > most else "")


def read_rows_kept(path: Path, upto: int, log: Callable[[str], None]) -> list[dict]:
    """The rows of `path` up to update `upto`, for a resumed run to rewrite. A file with damaged
    lines is first copied aside whole (`<name>.damaged-<time>`), with a warning naming the lines,
    so that nothing of it is lost when the resumed run rewrites it."""
    rows, damaged = read_jsonl_checked(path) if Path(path).exists() else ([], [])
    aside = None
    if damaged:
        aside = Path(path).with_name(f"{Path(path).name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.copy2(path, aside)
        log(
            f"warning: {path}: line(s) {listed_lines(damaged)} are not metrics rows; the file as it was is kept as {aside}"
        )
    kept = [r for r in rows if r["update"] <= upto]
    last = kept[-1]["update"] if kept else 0
    if last < upto:  # the history stops short of the checkpoint: said, rather than read as the run's end
        why = f"their lines are in {aside}" if aside else "none is in the file" if Path(path).exists() else "no file"
        gap = f"updates {last + 1}..{upto} have no row ({why}); the history goes on from update {upto}"
        held = f"holds rows up to update {last}" if kept else "holds no row"
        log(f"note: {path} {held}, the checkpoint is of update {upto}: {gap}")
    return kept


def history_note(rows: list[dict], num_updates: int) -> str | None:
    """A closing line's caveat: the last row metrics.jsonl holds is not the run's last update (rows
    set aside on resume), so the return it shows is not the final one; None when it is."""
    last = rows[-1]["update"] if rows else 0
    if last >= num_updates:
        return None
    if not rows:
        return f"note: metrics.jsonl holds no row of this run, which ended at update {num_updates}: no return to show"
    return f"note: the return above is update {last}'s, the last row metrics.jsonl holds; the run ended at update {num_updates}"


def write_jsonl_atomic(path: Path, rows: list[dict]) -> None:
    """Replace `path` with `rows`, one JSON object per line, all at once."""
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in rows))


def plot_returns(rows: list[dict], path: Path, title: str) -> None:
    """Training return per chunk against environment steps per run (one faint line per seed and
    the mean), and the evaluation return where the run evaluated."""
    from matplotlib.figure import Figure  # not pyplot: a notebook's backend is left alone

    evals = [r for r in rows if r.get("eval_return") is not None]
    rows = [r for r in rows if r.get("return_mean") is not None]
    fig = Figure(figsize=(6, 3.6), dpi=110)
    ax = fig.subplots()
    if rows:
        steps = [r["env_steps"] for r in rows]
        per_seed = np.array([[np.nan if v is None else v for v in r["return_per_seed"]] for r in rows])
        if per_seed.shape[1] > 1:
            ax.plot(steps, per_seed, color="tab:blue", alpha=0.25, lw=0.8)
        ax.plot(steps, [r["return_mean"] for r in rows], color="tab:blue", lw=2, label="training, mean over seeds")
    if evals:
        ax.plot(
            [r["env_steps"] for r in evals],
            [r["eval_return"] for r in evals],
            color="tab:orange",
            lw=2,
            marker="o",
            ms=3,
            label="evaluation, mean over seeds",
        )
    if rows or evals:
        ax.legend(loc="lower right")
    ax.set_xlabel("environment steps per run (per seed)")
    ax.set_ylabel("episode return per agent")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    tmp = Path(path).with_name(Path(path).stem + ".tmp" + Path(path).suffix)
    fig.savefig(tmp)
    tmp.replace(path)  # atomic: a reader never sees half a picture
