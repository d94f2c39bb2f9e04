"""Recorded trajectories: what the async learner consumed, as zarr arrays written with tensorstore.

`record_trajectories=PATH` (mode=async) appends every consumed batch to PATH:

    PATH/<leaf>/          one zarr array per trajectory leaf, [N, S, T, E, ...] (N: batches)
    PATH/version/ ...     [N] int64 policy version, actor id, sequence number, ticket, learner version
    PATH/index.json       {"count": N, "leaves": [...]}: rewritten atomically after a batch is complete

A batch's arrays are written first and `count` moves after them, so a process killed
mid-write leaves a dataset whose first `count` batches are whole; readers trust `count`.
`load_trajectories(PATH)` returns {leaf name: np.ndarray [count, ...]} and the stamps.
This is a start on offline MARL datasets, not a replay buffer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import numpy as np
import tensorstore as ts

from marljax.files import write_text_atomic, zarr_spec

STAMPS = ("version", "actor", "seq", "ticket", "learner_version")


def _leaf_names(tree: Any) -> list[tuple[str, Any]]:
    """(path name, leaf) of every array in a trajectory pytree, e.g. 'batch.agents.obs'."""
    named = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        parts = []
        for k in path:
            parts.append(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))))
        named.append((".".join(parts), leaf))
    return named


class TrajectoryRecorder:
    """Appends batches to a zarr dataset; `append` returns once the batch is on disk."""

    def __init__(self, path: str | Path):
        self.path = Path(path).absolute()
        if (self.path / "index.json").exists():
            raise FileExistsError(f"async.record_trajectories: {self.path} already holds a dataset; choose a new path")
        self.path.mkdir(parents=True, exist_ok=True)
        self._arrays: dict[str, ts.TensorStore] = {}
        self.count = 0

    def _open(self, name: str, leaf: np.ndarray) -> ts.TensorStore:
        if name not in self._arrays:
            self._arrays[name] = ts.open(
                zarr_spec(self.path / name),
                create=True,
                dtype=leaf.dtype,
                shape=[0, *leaf.shape],
                chunk_layout=ts.ChunkLayout(chunk_shape=[1, *leaf.shape]),
            ).result()
        return self._arrays[name]

    def append(self, traj: Any, stamps: dict[str, int]) -> None:
        leaves = [(n, np.asarray(x)) for n, x in _leaf_names(jax.device_get(traj))]
        leaves += [(k, np.asarray(stamps[k], np.int64)) for k in STAMPS]
        writes = []
        for name, leaf in leaves:
            array = self._open(name, leaf)
            array = array.resize(exclusive_max=[self.count + 1, *leaf.shape], resize_metadata_only=True).result()
            self._arrays[name] = array
            writes.append(array[self.count].write(leaf))
        for w in writes:
            w.result()
        self.count += 1
        index = {"count": self.count, "leaves": [n for n, _ in leaves]}
        write_text_atomic(self.path / "index.json", json.dumps(index))


def load_trajectories(path: str | Path) -> dict[str, np.ndarray]:
    """Every complete recorded batch: {leaf name or stamp: np.ndarray [count, ...]}."""
    path = Path(path)
    index = json.loads((path / "index.json").read_text())
    n = index["count"]
    return {name: ts.open(zarr_spec(path / name)).result()[:n].read().result() for name in index["leaves"]}


__all__ = ["TrajectoryRecorder", "load_trajectories"]
