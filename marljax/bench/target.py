"""`marljax bench target`: wall-clock time until the training return first reaches a target.

`run_target_bench(config, target)` runs `marljax.train.loop.train` itself (the same program and
host loop as `marljax train`) and watches its metrics rows through the loop's `on_row` callback:
after every chunk it takes the mean over seeds of the training return per agent (each seed's
episodes finished in that chunk, as `return_per_seed` in metrics.jsonl) and stops the run by
raising from the callback once that mean is >= target. The time is counted from the call, so it
includes building the environment and compiling; the resolution is one chunk (`num_chunks`).

`total_timesteps` is the budget (and sets the learning-rate schedule, so a run stopped at the
target is the first part of the full run). Reaching the end of it first is `TargetNotReached`.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from typing import Any

from marljax.bench.table import report
from marljax.config import Config, replace
from marljax.schema import ConfigError
from marljax.train.chunks import Stopped
from marljax.train.loop import train

# (env, env_kwargs.scenario) -> default target, return per agent. MPE simple_spread: what JaxMARL's
# own IPPO reaches after its full 10M steps (docs/notes.md). SMAX 3m (heuristic enemy): a return
# of 1.8 per agent goes with winning about 85% of battles in the README's SMAX table.
DEFAULT_TARGETS: dict[tuple[str, str | None], float] = {
    ("MPE_simple_spread_v3", None): -20.3,
    ("HeuristicEnemySMAX", "3m"): 1.8,
}


class TargetNotReached(RuntimeError):
    """The budget (`total_timesteps`) ran out before the mean training return reached the target."""


class StoppedUnsaved(Stopped):
    """SIGINT or SIGTERM stopped a benchmark run whose run directory was its own temporary one: the
    checkpoint went with it, so there is nothing to resume; says how far the curve got instead."""

    def __init__(self, stop: Stopped, seen: str):
        self.signum, self.update = stop.signum, stop.update
        Exception.__init__(
            self, f"{self.head} ({seen}); its run directory was temporary and is removed (give out_dir=D to keep one)"
        )


def best_seen(curve: list[list[Any]]) -> str:
    """'best R at N env steps' over the curve's scored chunks, or that no episode finished."""
    scored = [c for c in curve if c[2] is not None]
    best = max(scored, key=lambda c: c[2], default=None)
    return f"best {best[2]:.3f} at {best[0]:,} env steps" if best else "no episode finished"


class _Reached(Exception):
    """Raised from the `on_row` callback to stop the run at the chunk that reached the target."""


def default_target(config: Config) -> float:
    """The default target of `config.env` (with its `env_kwargs.scenario`); a ConfigError without one."""
    scenario = config.env_kwargs.get("scenario")
    key = (config.env, None if scenario is None else str(scenario))
    if key not in DEFAULT_TARGETS:
        known = ", ".join(f"{e}" + (f" scenario={s}" if s else "") for e, s in DEFAULT_TARGETS)
        raise ConfigError(
            "target",
            f"no default target for env={config.env}"
            + (f" scenario={scenario}" if scenario else "")
            + f"; give target=R (a return per agent). Defaults exist for: {known}",
        )
    return DEFAULT_TARGETS[key]


def seed_mean_return(row: dict) -> float | None:
    """Mean over seeds of the chunk's training return per agent; None if a seed finished no episode."""
    per_seed = row.get("return_per_seed") or []
    if not per_seed or any(r is None for r in per_seed):
        return None
    return sum(per_seed) / len(per_seed)


def run_target_bench(config: Config, target: float | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train `config` until the mean training return over seeds first reaches `target` (None: the
    env's default); print the curve, a table, then one JSON line; return that line's dict.
    Raises TargetNotReached when `total_timesteps` runs out first."""
    target = default_target(config) if target is None else target
    # periodic checkpoints would be timed too; the final save never comes when the run stops early
    run = replace(config, checkpoint_every=0, progress=False, plot=False)
    # [env steps per seed, seconds since the start, mean return or None (no episode finished yet)]
    curve: list[list[Any]] = []
    compile_s: list[float] = []  # train hands it over once its chunk programs are compiled

    log(
        f"marljax bench target: {config.algo} on {config.env}, {config.num_seeds} seed(s), target {target:g} "
        f"(mean training return per agent over seeds), budget {config.total_timesteps:,} env steps per seed"
    )
    start = time.perf_counter()

    def on_row(row: dict) -> None:
        value = seed_mean_return(row)
        curve.append([row["env_steps"], round(time.perf_counter() - start, 3), value])
        shown = "-" if value is None else f"{value:.3f}"
        log(f"  {row['env_steps']:>11,} env steps  {curve[-1][1]:8.1f} s  return {shown}")
        if value is not None and value >= target:
            raise _Reached

    with tempfile.TemporaryDirectory(prefix="marljax_bench_target_") as tmp:
        if not run.out_dir:
            run = replace(run, out_dir=tmp)
        try:
            train(run, log=lambda _line: None, on_row=on_row, on_compiled=compile_s.append)
        except _Reached:
            pass
        except Stopped as stop:
            if run.out_dir != tmp:
                raise  # its checkpoint is in the caller's out_dir: resumable as the message says
            raise StoppedUnsaved(stop, best_seen(curve)) from None
        else:
            raise TargetNotReached(
                f"target={target:g} not reached within total_timesteps={config.total_timesteps:,} env steps per seed "
                f"({time.perf_counter() - start:.1f} s; {best_seen(curve)}): raise total_timesteps or lower the target"
            )
    steps, wall, value = curve[-1]
    result = {
        "algo": config.algo,
        "env": config.env,
        "num_seeds": config.num_seeds,
        "num_envs": config.num_envs,
        "target": target,
        "reached": True,
        "wall_s": wall,
        "compile_s": compile_s[0] if compile_s else None,
        "env_steps": steps,
        "env_steps_all_seeds": steps * config.num_seeds,
        "return": value,
        "chunks": len(curve),
        "curve": curve,
    }
    rows = [
        ("target", f"{target:g}", "mean training return per agent over seeds"),
        ("reached", f"{value:.3f}", f"after {len(curve)} chunk(s)"),
        ("wall time", f"{wall:.1f}", "s from the start, compilation included"),
        ("  compile", "n/a" if result["compile_s"] is None else f"{result['compile_s']:.1f}", "s"),
        ("env steps", f"{steps:,}", f"per seed ({steps * config.num_seeds:,} in all)"),
    ]
    return report(rows, result, log)
