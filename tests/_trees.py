"""Whole-tree comparisons for equality tests: every leaf, every seed and agent, with the leaf's path
in the failure message. `assert_bitwise` for results that are bitwise; `assert_close` for results
equal up to float reduction order, at a tolerance that the calling test justifies by a measurement."""

from __future__ import annotations

import jax
import numpy as np


def _leaves(tree) -> list[tuple[str, np.ndarray]]:
    flat = jax.tree_util.tree_leaves_with_path(jax.device_get(tree))
    return [(jax.tree_util.keystr(path), np.asarray(leaf)) for path, leaf in flat]


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
    """Every float leaf of a within atol + rtol*|b| of b; every other leaf (counts, ids) exactly equal."""
    for path, x, y in _paired(a, b):
        if np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(x, y, atol=atol, rtol=rtol, err_msg=f"leaf {path} differs")
        else:
            np.testing.assert_array_equal(x, y, err_msg=f"leaf {path} differs")


def max_abs_diff(a, b) -> float:
    """The largest absolute difference over every float leaf: the measured drift a test reports."""
    diffs = [float(np.max(np.abs(x.astype(np.float64) - y))) for _, x, y in _paired(a, b)
             if np.issubdtype(x.dtype, np.floating) and x.size]  # fmt: skip
    return max(diffs, default=0.0)
