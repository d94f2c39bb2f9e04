"""Whole-tree comparisons for equality tests: every leaf, every seed and agent, with the leaf's path
in the failure message. `assert_bitwise` for results that are bitwise; `assert_close` for results
equal up to float reduction order, at a tolerance that the calling test justifies by a measurement."""

from __future__ import annotations

import os
from functools import partial

import jax
import numpy as np
import pytest


def _leaves(tree) -> list[tuple[str, np.ndarray]]:
    flat = jax.tree_util.tree_leaves_with_path(jax.device_get(tree))
    return [(jax.tree_util.keystr(path), np.asarray(leaf)) for path, leaf in flat]


def flat(tree) -> dict[str, np.ndarray]:
    """`tree` on the host as a flat dict, leaf path (e.g. "['learner'].params[...]") -> array."""
    return dict(_leaves(tree))


def _paired(a, b) -> list[tuple[str, np.ndarray, np.ndarray]]:
    la, lb = _leaves(a), _leaves(b)
    assert [p for p, _ in la] == [p for p, _ in lb], "the two trees have different structures"
    for (path, x), (_, y) in zip(la, lb):
        assert x.shape == y.shape, f"{path}: shapes {x.shape} vs {y.shape}"
    return [(path, x, y) for (path, x), (_, y) in zip(la, lb)]


def assert_bitwise(a, b) -> None:
    """Every leaf of a equals b's bit for bit (NaNs in the same places count as equal)."""
    for path, x, y in _paired(a, b):
        np.testing.assert_array_equal(x, y, err_msg=f"leaf {path} differs")


def assert_close(a, b, *, atol: float, rtol: float = 0.0) -> None:
    """Every float leaf of a within atol + rtol*|b| of b; every other leaf (counts, ids) exactly equal.
    With MARLJAX_TEST_DRIFT=1 in the environment it first prints the measured drift (run pytest
    with -s to see it): how a tolerance's measurement is repeated."""
    if os.environ.get("MARLJAX_TEST_DRIFT"):
        print(drift_report(a, b, atol=atol, rtol=rtol), flush=True)
    for path, x, y in _paired(a, b):
        if np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(x, y, atol=atol, rtol=rtol, err_msg=f"leaf {path} differs")
        else:
            np.testing.assert_array_equal(x, y, err_msg=f"leaf {path} differs")


def drift_report(a, b, *, atol: float, rtol: float) -> str:
    """The largest |a - b| over the state's float leaves and over the metrics rows' (with the value
    it is measured on), and the largest share of the tolerance atol + rtol*|b| any leaf uses."""
    state, rows, used, worst = 0.0, (0.0, 0.0), 0.0, ""
    for path, x, y in _paired(a, b):
        if not (np.issubdtype(x.dtype, np.floating) and x.size):
            continue
        d = np.abs(x.astype(np.float64) - y)
        d = np.where(np.isnan(d), 0.0, d)  # NaN against NaN: equal (no episode ended)
        i = int(np.argmax(d))
        if "rows" in path:
            rows = max(rows, (float(d.flat[i]), float(np.abs(y).flat[i])))
        else:
            state = max(state, float(d.flat[i]))
        share = float(np.max(d / (atol + rtol * np.where(np.isnan(y), 0.0, np.abs(y)))))
        if share > used:
            used, worst = share, path
    return (
        f"drift: state max |diff| {state:.2g}; rows max |diff| {rows[0]:.2g} (on a value of {rows[1]:.3g}); "
        f"{used:.2f} of the tolerance used, at {worst}"
    )


def max_abs_diff(a, b) -> float:
    """The largest absolute difference over every float leaf: the measured drift a test reports."""
    diffs = [float(np.max(np.abs(x.astype(np.float64) - y))) for _, x, y in _paired(a, b)
             if np.issubdtype(x.dtype, np.floating) and x.size]  # fmt: skip
    return max(diffs, default=0.0)


# -- whole runs, saved by a test subprocess and compared by the test ------------------------------

# row fields that measure time or thread interleaving, not the numbers a run computes
NOT_NUMBERS = ("wall_s", "env_steps_per_s", "actor_wait_s", "learner_wait_s", "production_rate",
               "consumption_rate", "buffer_occupancy", "produced", "dropped", "dropped_by_reason",
               "active_actors", "batch_window")  # fmt: skip


def run_tree(res) -> dict:
    """A train() result as one tree: the learner's whole state (parameters, optimizer state,
    hyperparameters, key, update count; leaves [S, ...], per-agent ones [S, A, ...]), the
    algorithm's extra state (the Q family's target network and replay buffer; none for PPO) and
    every metric of every row (a field's values over the rows stacked: [rows, ...])."""
    learner, extra = jax.device_get((res.state.learner, res.state.extra))
    return {"learner": learner, "extra": extra, "rows": rows_tree(res.rows)}


def rows_tree(rows: list[dict]) -> dict[str, np.ndarray]:
    """Metrics rows (a run's `rows`, or metrics.jsonl's lines) as field -> values over the rows."""
    return {k: np.asarray([_nan_for_none(r[k]) for r in rows]) for k, v in rows[0].items()
            if k not in NOT_NUMBERS and not isinstance(v, (str, dict))}  # fmt: skip


def _nan_for_none(v):
    """A row's value with None (no episode ended in that row) as NaN, which compares equal to NaN."""
    return [_nan_for_none(x) for x in v] if isinstance(v, list) else np.nan if v is None else v


def save_run(res, path) -> None:
    """Write run_tree(res) to `path` (.npz), leaf path -> array, for load_run in the parent."""
    np.savez(path, **flat(run_tree(res)))


def load_run(path) -> dict[str, np.ndarray]:
    """What save_run wrote: a flat tree, leaf path (e.g. "['learner'].params[...]") -> array."""
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


def load_checkpoint(step_dir) -> dict[str, np.ndarray]:
    """The whole state of one checkpoint (<out_dir>/checkpoints/<update>), read back to host arrays
    whatever mesh saved it, flat as load_run gives a run: "['learner']['params'][...]" -> array."""
    import orbax.checkpoint as ocp

    reader = ocp.PyTreeCheckpointer()
    shapes = reader.metadata(f"{step_dir}/state").item_metadata.tree
    as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), shapes)
    return flat(reader.restore(f"{step_dir}/state", restore_args=as_numpy))


def swap(tree: dict[str, np.ndarray], i: int, j: int, *, axis: int, where: str) -> dict[str, np.ndarray]:
    """A negative control: `tree` (flat, as load_run gives) with indices i and j exchanged along
    `axis` in every leaf whose path contains `where` (e.g. axis 0 of "['params']" for two seeds,
    axis 1 for two agents' parameter sets and their Adam moments)."""
    out = {}
    for path, x in tree.items():
        if where in path and x.ndim > axis and x.shape[axis] > max(i, j):
            x = x.copy()
            x[(slice(None),) * axis + ([i, j],)] = x[(slice(None),) * axis + ([j, i],)]
        out[path] = x
    return out


# the negative controls: exchanged in the other run's learner state, each must fail a comparison
SEEDS = dict(axis=0, where="['params']")  # seeds 0 and 1: their parameters and Adam moments [S, ...]
AGENTS = dict(axis=1, where="['params']")  # agents 0 and 1: their parameter sets and Adam moments [S, A, ...]


def assert_same_run(one: dict, other: dict, *, atol: float, rtol: float = 0.0, controls=(SEEDS,)) -> None:
    """Two run trees (load_run) equal within the tolerance, every leaf, and each control (indices
    0 and 1 exchanged in `other`) fails the same comparison: a wrong layout could not pass.
    atol=0, rtol=0 asserts bitwise equality."""
    compare = partial(assert_close, atol=atol, rtol=rtol) if atol or rtol else assert_bitwise
    compare(one, other)
    for control in controls:
        with pytest.raises(AssertionError, match=r"leaf .*\['params'\].* differs"):
            compare(one, swap(other, 0, 1, **control))
