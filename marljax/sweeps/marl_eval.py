"""Export a sweep's results in the JSON layout read by InstaDeep's marl-eval tools:

    {env: {task: {algo: {"seed_N": {"step_K": {"step_count": int,
                                                "return": [per-episode returns],
                                                "episode_length": [mean length]},
                                     ...,
                                     "absolute_metrics": {"return": [per-episode returns]}}}}}}

`algo` is the cell's name (unique per cell), N the seed index, K the evaluation index.
Evaluations not yet written are left out; so are seeds with nothing written. One training run's
evaluations take the same layout: `marljax.train.marl_eval_run`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from marljax.files import write_text_atomic
from marljax.sweeps.results import Results
from marljax.train.marl_eval_run import env_task


def _floats(values: np.ndarray) -> list[float]:
    """The non-NaN entries of `values` as plain Python floats."""
    return [float(v) for v in np.asarray(values).ravel() if not math.isnan(v)]


def _seed(results: Results, c: int, s: int) -> dict:
    """One run's evaluations `step_K` and, if written, its `absolute_metrics`."""
    ret, length = results.metrics.index("return"), results.metrics.index("episode_length")
    out = {}
    for k, step in enumerate(results.eval_steps[c]):  # [K]
        evaluation = results.evals[c, s, k]  # [M]
        if step < 0 or math.isnan(evaluation[ret]):
            continue
        out[f"step_{k}"] = {
            "step_count": int(step),
            "return": _floats(results.episode_returns[c, s, k]),  # [Ep]
            "episode_length": _floats(evaluation[length : length + 1]),  # [1] the mean we store
        }
        if "win_rate" in results.metrics:  # older stores have no win rate; NaN: no win condition
            win = _floats(evaluation[results.metrics.index("win_rate")][None])
            if win:
                out[f"step_{k}"]["win_rate"] = win
    absolute = _floats(results.absolute_episode_returns[c, s])  # [Ep * F]
    if absolute:
        out["absolute_metrics"] = {"return": absolute}
    return out


def to_marl_eval(results: Results) -> dict:
    """The marl-eval nested dict of every cell, seed and written evaluation (plain floats and ints)."""
    out: dict = {}
    for c, cell in enumerate(results.cells):
        seeds = {f"seed_{s}": _seed(results, c, s) for s in range(results.num_seeds)}
        seeds = {name: runs for name, runs in seeds.items() if runs}
        if seeds:
            env, task = env_task(cell["env"])
            out.setdefault(env, {}).setdefault(task, {})[cell["name"]] = seeds
    return out


def write_marl_eval(results: Results, path: Path) -> Path:
    """Write `to_marl_eval(results)` as JSON to `path` at once (a temporary file, then a rename)."""
    return write_text_atomic(path, json.dumps(to_marl_eval(results), indent=1, allow_nan=False))
