"""The results store of a sweep: zarr arrays written with tensorstore, indexed by
(cell, seed, evaluation, metric), with their coordinate labels in `coords.json`.

    <sweep_dir>/results/coords.json        cells, seeds, metric names, absolute_factor
    <sweep_dir>/results/evals.zarr         [C, S, K, M] float32  metrics of evaluation k (NaN: not yet)
    <sweep_dir>/results/episodes.zarr      [C, S, K, Ep] float32 every evaluation episode's return
    <sweep_dir>/results/eval_steps.zarr    [C, K] int64          env steps per run at evaluation k (-1: none)
    <sweep_dir>/results/absolute.zarr      [C, S, M] float32     the best parameters re-evaluated
    <sweep_dir>/results/absolute_episodes.zarr [C, S, Ep*F]      ... every one of those episodes' returns
    <sweep_dir>/results/diverged.zarr      [C, S] int64          update at which the run's loss or
                                                                 parameters became non-finite (-1: never)

One evaluation of one cell is one zarr chunk (`[1, S, 1, ...]`), written whole by one
call; tensorstore's file store writes a chunk to a temporary file and renames it, so a
process killed mid-write leaves the chunk as it was (NaN) or complete, never torn.
`load(DIR)` returns numpy arrays with their labels.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import tensorstore as ts

from marljax.files import DamagedFile, read_json, write_text_atomic, zarr_spec

METRICS = (
    "return",
    "episode_length",
    "win_rate",
)  # per evaluation: mean over its episodes, per run (win_rate: NaN without a win condition)


class Results(NamedTuple):
    """A sweep's evaluations as numpy arrays; NaN (or -1 steps) where nothing was written yet."""

    cells: list[dict]  # per cell: {"name": str, "algo": str, "env": str, "values": {field: value}}
    num_seeds: int  # S
    metrics: tuple[str, ...]  # M names, METRICS
    eval_steps: np.ndarray  # [C, K] int64 env steps of one run at evaluation k; -1 where none
    evals: np.ndarray  # [C, S, K, M] float32
    episode_returns: np.ndarray  # [C, S, K, Ep] float32 per-agent return of each evaluation episode
    absolute: np.ndarray  # [C, S, M] float32: best parameters (by evaluation return) re-evaluated
    absolute_episode_returns: np.ndarray  # [C, S, Ep * absolute_factor] float32
    absolute_factor: int  # the absolute metric uses this many times the evaluation episodes
    diverged_at: np.ndarray | None = None  # [C, S] int64 update at which the run diverged, -1: never

    def metric(self, name: str) -> np.ndarray:
        """evals[..., m] for metric `name`: [C, S, K]."""
        return self.evals[..., self.metrics.index(name)]

    def final(self, name: str = "return") -> np.ndarray:
        """[C, S] the metric at each cell's last written evaluation (NaN where a cell has none)."""
        values = self.metric(name)
        out = np.full(values.shape[:2], np.nan, np.float32)
        for c in range(values.shape[0]):
            written = np.nonzero(self.eval_steps[c] >= 0)[0]
            if written.size:
                out[c] = values[c, :, written[-1]]
        return out


# name -> (dtype, axes, chunk): C cells, S seeds, K evaluations, M metrics, E evaluation episodes,
# A absolute-metric episodes (E x F); one chunk holds one evaluation of one cell
_ARRAYS = {
    "evals": ("float32", "CSKM", "1S1M"),
    "episodes": ("float32", "CSKE", "1S1E"),
    "eval_steps": ("int64", "CK", "1K"),
    "absolute": ("float32", "CSM", "1SM"),
    "absolute_episodes": ("float32", "CSA", "1SA"),
    "diverged": ("int64", "CS", "1S"),
}
_ADDED_LATER = {"diverged"}  # stores written before it have none: read as its fill


def _damaged(path: Path, exc: Exception) -> DamagedFile:
    """tensorstore's error on a results array that does not read back, as one line naming the array."""
    text = str(exc)
    where = re.search(r'Error reading local file "([^"]+)": ([^\[]+)', text)
    gist = f"{where[1]}: {where[2].strip()}" if where else text.splitlines()[0][:200]
    way_out = "rerun the sweep with overwrite=true to compute them again, or restore it from a copy"
    return DamagedFile(
        f"{path} does not read back as a results array of the sweep ({gist}); its evaluations are lost: {way_out}"
    )


def _open(path: Path, **spec: Any) -> ts.TensorStore:
    try:
        return ts.open(zarr_spec(path), **spec).result()
    except ValueError as exc:
        raise _damaged(path, exc) from None


def _read(path: Path, array: ts.TensorStore) -> np.ndarray:
    try:
        return array.read().result()
    except ValueError as exc:
        raise _damaged(path, exc) from None


class ResultsStore:
    """Writes a sweep's evaluations as they come. Opening an existing store (a resumed sweep)
    keeps what it holds; `coords` must match it."""

    def __init__(self, directory: str | Path, coords: dict):
        """coords: {"cells": [...], "num_seeds": S, "metrics": [...], "num_evals": K,
        "eval_episodes": Ep, "absolute_factor": F}."""
        self.directory = Path(directory)
        coords_path = self.directory / "coords.json"
        if coords_path.exists():
            saved = read_json(
                coords_path,
                "remove it and rerun the same command: it is written again from the sweep file (the results are kept)",
            )
            if saved != coords:
                raise ValueError(f"{self.directory} holds the results of a different sweep (coords.json differs)")
        self.directory.mkdir(parents=True, exist_ok=True)
        episodes = coords["eval_episodes"]
        size = {
            "C": len(coords["cells"]),
            "S": coords["num_seeds"],
            "K": coords["num_evals"],
            "M": len(coords["metrics"]),
            "E": episodes,
            "A": episodes * coords["absolute_factor"],
            "1": 1,
        }
        self.arrays = {}
        for name, (dtype, axes, chunk) in _ARRAYS.items():
            fill = -1 if dtype == "int64" else np.nan
            self.arrays[name] = _open(
                self.directory / f"{name}.zarr",
                create=True,
                open=True,
                dtype=dtype,
                shape=[size[a] for a in axes],
                chunk_layout=ts.ChunkLayout(chunk_shape=[size[a] for a in chunk]),
                fill_value=fill,
            )
        if not coords_path.exists():
            write_text_atomic(
                coords_path, json.dumps(coords, indent=1)
            )  # last: a store without coords.json is recreated
        self.coords = coords

    def write_eval(self, cell: int, k: int, step: int, metrics: np.ndarray, episodes: np.ndarray) -> None:
        """Evaluation k of `cell`: metrics [S, M], episodes [S, Ep'] (Ep' <= Ep; the rest stays NaN).

        The step is written last: a reader trusts an evaluation only once its step is there.
        """
        ep = np.full(self.arrays["episodes"].shape[-1:], np.nan, np.float32)
        ep = np.broadcast_to(ep, (metrics.shape[0], ep.shape[0])).copy()
        ep[:, : episodes.shape[1]] = episodes
        self.arrays["evals"][cell, :, k, :].write(np.asarray(metrics, np.float32)).result()
        self.arrays["episodes"][cell, :, k, :].write(ep).result()
        self.arrays["eval_steps"][cell, k].write(np.int64(step)).result()

    def write_absolute(self, cell: int, metrics: np.ndarray, episodes: np.ndarray) -> None:
        """The absolute metric of `cell`: metrics [S, M], episodes [S, Ep' * F]."""
        ep = np.full((metrics.shape[0], self.arrays["absolute_episodes"].shape[-1]), np.nan, np.float32)
        ep[:, : episodes.shape[1]] = episodes
        self.arrays["absolute_episodes"][cell].write(ep).result()
        self.arrays["absolute"][cell].write(np.asarray(metrics, np.float32)).result()

    def write_diverged(self, cell: int, seeds: dict[int, int]) -> dict[int, int]:
        """Mark seeds of `cell` as diverged at an update ({seed: update}); a seed marked already
        keeps its first update. Returns the seeds newly marked."""
        at = self.arrays["diverged"][cell].read().result()  # [S]
        new = {s: u for s, u in seeds.items() if at[s] < 0}
        if new:
            at[list(new)] = list(new.values())
            self.arrays["diverged"][cell].write(at).result()
        return new

    def written(self, cell: int) -> int:
        """Evaluations of `cell` whose step is written."""
        return int(np.sum(self.arrays["eval_steps"][cell].read().result() >= 0))


def load(directory: str | Path) -> Results:
    """A sweep's results (`<sweep_dir>` or `<sweep_dir>/results`) as numpy arrays with their labels.

    Evaluations whose step was never written (a sweep still running, or killed) are NaN.
    """
    directory = Path(directory)
    if not (directory / "coords.json").exists() and (directory / "results" / "coords.json").exists():
        directory = directory / "results"
    if not (directory / "coords.json").exists():
        raise FileNotFoundError(f"no results store in {directory} (coords.json is missing)")
    coords = read_json(
        directory / "coords.json",
        f"remove it and rerun `marljax sweep` with the sweep's file on "
        f"{directory.parent}: it is written again (the results are kept)",
    )
    read = {
        name: _read(directory / f"{name}.zarr", _open(directory / f"{name}.zarr"))
        for name in _ARRAYS
        if name not in _ADDED_LATER or (directory / f"{name}.zarr").exists()
    }
    steps = read["eval_steps"]  # [C, K]
    unwritten = steps < 0
    evals = np.where(unwritten[:, None, :, None], np.nan, read["evals"])
    episodes = np.where(unwritten[:, None, :, None], np.nan, read["episodes"])
    return Results(
        cells=coords["cells"],
        num_seeds=coords["num_seeds"],
        metrics=tuple(coords["metrics"]),
        eval_steps=steps,
        evals=evals,
        episode_returns=episodes,
        absolute=read["absolute"],
        absolute_episode_returns=read["absolute_episodes"],
        absolute_factor=coords["absolute_factor"],
        diverged_at=read.get("diverged", np.full(steps.shape[:1] + (coords["num_seeds"],), -1, np.int64)),
    )
