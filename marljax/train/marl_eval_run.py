"""One training run's evaluations in the JSON layout read by InstaDeep's marl-eval tools
(the layout a sweep writes, `marljax.sweeps.marl_eval`, with the run as one algorithm):

    {env: {task: {algo: {"seed_N": {"step_K": {"step_count": env steps of one run,
                                                "return": [the seed's mean evaluation return],
                                                "episode_length": [mean length, all seeds]},
                                     ...,
                                     "absolute_metrics": {"return": [...]}}}}}}

Built from the run's metrics rows: the evaluation rows (`eval_every`), in order; step K is the
K-th of them. A metrics row keeps each seed's mean over its evaluation episodes, not every
episode's return, so `return` holds that one mean (a one-element list; marl-eval averages the
list, so its means come out the same) and `episode_length` the evaluation's mean length over
all seeds. Envs with a win condition add `win_rate` (the seed's share of episodes won).

A training run does not re-evaluate its best parameters as a sweep does; `absolute_metrics`
repeats each seed's last evaluation, because marl-eval reads a run's last entry as its final
performance and leaves that entry out of its curves.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from marljax.files import write_text_atomic


def env_task(env_id: str) -> tuple[str, str]:
    """("MPE", "simple_spread_v3") from "MPE_simple_spread_v3"; ("Jumanji", "RobotWarehouse-v0") from
    "jumanji:RobotWarehouse-v0"; ("custom", id) for a `module:callable`."""
    if env_id.startswith("jumanji:"):  # marljax.envs.jumanji.PREFIX, spelled out: this module imports no JAX
        return "Jumanji", env_id.split(":", 1)[1]
    if ":" in env_id:
        return "custom", env_id
    if "_" in env_id:
        env, task = env_id.split("_", 1)
        return env, task
    return env_id, env_id


def _listed(value) -> list[float]:
    """[value] as a plain float, or [] where it is missing, null or NaN."""
    return [] if value is None or math.isnan(value) else [float(value)]


def _seed_values(row: dict, key: str, seed: int) -> list[float]:
    """[row[key][seed]], or [] where the list or the seed's entry is missing, null or NaN."""
    values = row.get(key) or []
    return _listed(values[seed] if seed < len(values) else None)


def _evaluation(row: dict, seed: int) -> dict:
    """marl-eval's entry for `seed` at the evaluation of `row`; {} where the seed has no return."""
    ret = _seed_values(row, "eval_return_per_seed", seed)
    if not ret:
        return {}
    out = {"step_count": int(row["env_steps"]), "return": ret}
    length = _listed(row.get("eval_episode_length"))
    if length:
        out["episode_length"] = length
    win = _seed_values(row, "eval_win_rate_per_seed", seed)
    if win:
        out["win_rate"] = win
    return out


def run_marl_eval(rows: Iterable[dict], config: Any) -> dict:
    """The marl-eval nested dict of a run's evaluation rows (`config`: its Config, for the env,
    algorithm and seed count); {} when no row holds an evaluation."""
    evaluations = [r for r in rows if r.get("eval_return_per_seed")]
    seeds = {}
    for s in range(int(config.num_seeds)):
        steps = {}
        for k, row in enumerate(evaluations):
            entry = _evaluation(row, s)
            if entry:
                steps[f"step_{k}"] = entry
        if steps:
            last = steps[max(steps, key=lambda name: int(name.removeprefix("step_")))]
            steps["absolute_metrics"] = {key: value for key, value in last.items() if key in ("return", "win_rate")}
            seeds[f"seed_{s}"] = steps
    if not seeds:
        return {}
    env, task = env_task(config.env)
    return {env: {task: {config.algo: seeds}}}


def write_run_marl_eval(rows: list[dict], config: Any, out_dir: Path) -> Path | None:
    """Write `run_marl_eval(rows, config)` to `<out_dir>/metrics.json` at once (a temporary file,
    then a rename); None, writing nothing, when the run has no evaluation yet."""
    data = run_marl_eval(rows, config)
    if not data:
        return None
    return write_text_atomic(Path(out_dir) / "metrics.json", json.dumps(data, indent=1, allow_nan=False))
