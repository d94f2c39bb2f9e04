"""`marljax compare RUN...`: training runs and sweep cells side by side, with statistics over seeds.

A RUN is named in one of two ways:

    RUN_DIR          a training run's out_dir (config.yaml and metrics.jsonl; a metrics.json
                     of marl-eval's beside them changes nothing)
    SWEEP_DIR:CELL   a cell of a sweep, by its name (`lr=0.001,param_sharing=shared`) or by its
                     directory name (`lr-0.001_param_sharing-shared`). The cell's directory,
                     SWEEP_DIR/cells/<dir>, is a run directory too and may be named instead.

Every number comes from the runs' metrics.jsonl rows (damaged lines are skipped with a warning),
per seed: a metric's `<metric>_per_seed` list (`return_per_seed` for `return_mean`). x is
`env_steps`, the env steps of one run (one seed), so runs with different seed counts, evaluation
intervals or lengths line up on one axis; a run's curve stops where the run stops.

    final      per seed, its last row with a value of the metric; per run, the mean, median and
               IQM over seeds with 95% percentile bootstrap CIs (`marljax.sweeps.report`)
    P(A > B)   probability of improvement (Agarwal et al., 2021): the chance that a seed of A
               ends above a seed of B, over every pair of their seeds, ties counting 1/2; its 95%
               CI from a bootstrap that resamples the seeds of A and of B independently

Written to the output directory (and the tables printed):

    curves_<metric>.png   per metric any run has: IQM over seeds and its CI band per run
    final.csv             the final-performance table of the chosen metric
    improvement.csv       P(A > B) for every pair of runs
    compare.md            the printed tables and what they mean
and, with --csv PATH, every value in long format (run, seed, env_steps, metric, value).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np
import yaml

from marljax.files import check_writable_dir, read_json, write_text_atomic
from marljax.sweeps.report import (
    MIN_SEEDS,
    estimate,
    finite,
    iqm_curve,
    percentile_interval,
    plot_iqm_curves,
    stat_columns,
    write_csv,
)
from marljax.sweeps.spec import cell_dirname
from marljax.train.metrics import listed_lines, read_jsonl_checked

METRICS = {  # metric -> (the rows' per-seed key, what it is)
    "return_mean": ("return_per_seed", "training return"),
    "eval_return": ("eval_return_per_seed", "evaluation return"),
    "win_rate": ("win_rate_per_seed", "training win rate"),
    "eval_win_rate": ("eval_win_rate_per_seed", "evaluation win rate"),
}
RUN_FILES = ("config.yaml", "metrics.jsonl")
FORMS = "RUN_DIR (config.yaml and metrics.jsonl) or SWEEP_DIR:CELL"


class CompareError(ValueError):
    """A bad input: the message names the path or the metric, and what is allowed."""


class Run(NamedTuple):
    label: str  # as named on the command line
    path: Path  # the directory holding config.yaml and metrics.jsonl
    env: str  # the env id, with its env_kwargs where it has any
    algo: str
    num_seeds: int
    rows: list[dict]  # metrics.jsonl


# ---- finding and reading runs ----


def is_sweep(path: Path) -> bool:
    return (path / "sweep.yaml").is_file() or (path / "results" / "coords.json").is_file()


def _cell_names(sweep: Path) -> list[str]:
    """The names of a sweep's cells (from its results store), else its cell directories' names."""
    coords = sweep / "results" / "coords.json"
    if coords.is_file():
        remedy = f"remove it and rerun `marljax sweep` on {sweep}: it is written again (the results are kept)"
        return [c["name"] for c in read_json(coords, remedy)["cells"]]
    return sorted(d.name for d in (sweep / "cells").iterdir() if d.is_dir()) if (sweep / "cells").is_dir() else []


def sweep_cells(sweep: Path) -> dict[str, Path]:
    """A sweep's cells by name and by directory name -> their directories."""
    cells = {name: sweep / "cells" / cell_dirname(name) for name in _cell_names(sweep)}
    return {**cells, **{path.name: path for path in cells.values()}}


def _listed_cells(sweep: Path) -> str:
    return ", ".join(_cell_names(sweep)) or "none yet"


def resolve(spec: str) -> Path:
    """The run directory named by `spec` (RUN_DIR or SWEEP_DIR:CELL)."""
    path = Path(spec)
    if path.is_dir():
        if all((path / name).is_file() for name in RUN_FILES):
            return path
        if is_sweep(path):
            raise CompareError(
                f"{spec} is a sweep; name one of its cells as {spec}:CELL (cells: {_listed_cells(path)})"
            )
        if not any(path.iterdir()):
            raise CompareError(f"{spec} is an empty directory; expected {FORMS}")
        missing = " and ".join(name for name in RUN_FILES if not (path / name).is_file())
        raise CompareError(f"{spec} is neither a training run nor a sweep (it has no {missing}); expected {FORMS}")
    for i, char in enumerate(spec):  # SWEEP_DIR:CELL; a cell's name may hold ':' too (env=module:fn)
        if char == ":" and Path(spec[:i]).is_dir() and is_sweep(Path(spec[:i])):
            sweep, cell = Path(spec[:i]), spec[i + 1 :]
            directory = sweep_cells(sweep).get(cell)
            if directory is None:
                raise CompareError(f"{spec}: the sweep {sweep} has no cell {cell!r} (cells: {_listed_cells(sweep)})")
            if not all((directory / name).is_file() for name in RUN_FILES):
                raise CompareError(f"{spec}: the cell has not written its config.yaml and metrics.jsonl yet")
            return directory
    if path.exists():
        raise CompareError(f"{spec} is a file, not a directory; expected {FORMS}")
    raise CompareError(f"{spec}: no such directory; expected {FORMS}")


def _env_name(config: dict) -> str:
    """'MPE_simple_spread_v3', or 'HeuristicEnemySMAX(scenario=3m)' where env_kwargs set something."""
    kwargs = config.get("env_kwargs") or {}
    inner = ",".join(f"{key}={value}" for key, value in sorted(kwargs.items()))
    return f"{config.get('env')}({inner})" if inner else str(config.get("env"))


def load_run(spec: str, log: Callable[[str], None] = print) -> Run:
    """The run named by `spec`: its config's env, algorithm and seeds, and its metrics rows."""
    path = resolve(spec)
    try:
        config = yaml.safe_load((path / "config.yaml").read_text())
    except yaml.YAMLError as exc:
        raise CompareError(f"{path / 'config.yaml'} is not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(config, dict) or "env" not in config:
        raise CompareError(f"{path / 'config.yaml'} is not a run's config (it names no env)")
    rows, damaged = read_jsonl_checked(path / "metrics.jsonl")
    if not rows:  # nothing to compare: refused rather than a row of n/a
        what = f"none of its {len(damaged)} line(s) is a metrics row" if damaged else "it is empty"
        why = "a run that has not finished its first chunk, or a damaged file; leave it out"
        raise CompareError(f"{path / 'metrics.jsonl'} holds no metrics rows ({what}): {why}")
    if damaged:
        log(f"warning: {path / 'metrics.jsonl'}: line(s) {listed_lines(damaged)} are not metrics rows; left out")
    label = spec.rstrip("/") or spec
    return Run(label, path, _env_name(config), str(config.get("algo", "?")), int(config.get("num_seeds", 1)), rows)


# ---- per-seed values ----


def _seed_values(row: dict, metric: str, num_seeds: int) -> list | None:
    """The row's per-seed values of `metric` (None entries where a seed has none), or None where the
    row has none. A row without the per-seed list (older win rates) serves a one-seed run alone."""
    values = row.get(METRICS[metric][0])
    if values is None and num_seeds == 1 and row.get(metric) is not None:
        values = [row[metric]]
    return values if values and any(v is not None for v in values) else None


def series(run: Run, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(env steps [K] ascending, values [S, K]) of the rows holding `metric`; NaN where a seed has
    no value. A later row at the same env steps replaces an earlier one."""
    by_step: dict[int, list] = {}
    for row in run.rows:
        values = _seed_values(row, metric, run.num_seeds)
        if values is not None and "env_steps" in row:
            by_step[int(row["env_steps"])] = values
    steps = np.array(sorted(by_step), np.int64)  # [K]
    num_seeds = max([run.num_seeds, *(len(v) for v in by_step.values())])
    table = np.full((num_seeds, steps.size), np.nan)  # [S, K]
    for k, step in enumerate(steps):
        column = by_step[int(step)]
        table[: len(column), k] = [np.nan if v is None else v for v in column]
    return steps, table


def final(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each seed's last value [S] (NaN: none) and the env steps it was taken at [S] (-1: none)."""
    out, at = np.full(values.shape[0], np.nan), np.full(values.shape[0], -1, np.int64)
    for s, row in enumerate(values):
        written = np.nonzero(~np.isnan(row))[0]
        if written.size:
            out[s], at[s] = row[written[-1]], steps[written[-1]]
    return out, at


def has_metric(run: Run, metric: str) -> bool:
    return any(_seed_values(row, metric, run.num_seeds) is not None for row in run.rows)


# ---- statistics ----


def _improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) per resample: x [R, n], y [R, m] -> [R]; ties count 1/2."""
    above = (x[:, :, None] > y[:, None, :]).mean(axis=(1, 2))
    ties = (x[:, :, None] == y[:, None, :]).mean(axis=(1, 2))
    return above + 0.5 * ties


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) over every pair of a seed of X [n] and a seed of Y [m] (NaN seeds left out), ties
    counting 1/2 (Agarwal et al., 2021); NaN when either has no seed."""
    x, y = finite(x), finite(y)
    return float(_improvement(x[None], y[None])[0]) if x.size and y.size else math.nan


def improvement_ci(
    x: np.ndarray, y: np.ndarray, *, num_resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of `probability_of_improvement(x, y)`, the seeds of X and of Y
    resampled independently with replacement (rliable's stratified bootstrap, one task)."""
    x, y = finite(x), finite(y)
    if not (x.size and y.size):
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    ix = rng.integers(0, x.size, size=(num_resamples, x.size))  # [R, n]
    iy = rng.integers(0, y.size, size=(num_resamples, y.size))  # [R, m]
    return percentile_interval(_improvement(x[ix], y[iy]), confidence)


def summarize_runs(runs: list[Run], metric: str, num_resamples: int = 2000, seed: int = 0) -> list[dict]:
    """One row per run: its label, env, algorithm, seeds with a final value, env steps of the last
    value, and the final value's mean/median/IQM with 95% bootstrap CIs (`final_iqm`, `_low`, `_high`)."""
    out = []
    for run in runs:
        values, at = final(*series(run, metric))  # [S] each
        row = {
            "run": run.label,
            "env": run.env,
            "algo": run.algo,
            "metric": metric,
            "seeds": int(np.sum(~np.isnan(values))),
            "num_seeds": run.num_seeds,
            "env_steps": int(at.max()) if at.size and at.max() >= 0 else None,
        }
        row.update(stat_columns("final", values, num_resamples, seed))
        row["final_per_seed"] = json.dumps([None if math.isnan(v) else float(v) for v in values])
        out.append(row)
    return out


def improvements(runs: list[Run], metric: str, num_resamples: int = 2000, seed: int = 0) -> list[dict]:
    """P(A > B) of the final values with its 95% CI, for every pair of runs A before B."""
    finals = [final(*series(run, metric))[0] for run in runs]
    out = []
    for a in range(len(runs)):
        for b in range(a + 1, len(runs)):
            low, high = improvement_ci(finals[a], finals[b], num_resamples=num_resamples, seed=seed)
            out.append(
                {
                    "run_a": runs[a].label,
                    "run_b": runs[b].label,
                    "metric": metric,
                    "p_a_beats_b": probability_of_improvement(finals[a], finals[b]),
                    "low": low,
                    "high": high,
                    "seeds_a": int(np.sum(~np.isnan(finals[a]))),
                    "seeds_b": int(np.sum(~np.isnan(finals[b]))),
                }
            )
    return out


def statistical_notes(rows: list[dict], pairs: list[dict]) -> list[str]:
    """What the tables cannot claim, one line each: a run with fewer than MIN_SEEDS seeds (its bracket
    is not a 95% interval), a degenerate interval (one value, or every seed equal), and a P(A > B)
    whose interval covers 0.5 (no significant difference)."""
    notes = []
    for row in rows:
        low, high = row.get("final_iqm_low"), row.get("final_iqm_high")
        if row["seeds"] < MIN_SEEDS:
            notes.append(
                f"warning: {row['run']} has {row['seeds']} seed(s) with a final value, fewer than "
                f"{MIN_SEEDS}: its brackets are not 95% intervals (rerun with num_seeds={MIN_SEEDS} or more)"
            )
        if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)) or low == high:
            notes.append(
                f"warning: {row['run']}'s interval is degenerate ([{low}, {high}]): it says nothing of the spread"
            )
    for pair in pairs:
        low, high = pair["low"], pair["high"]
        if math.isfinite(low) and math.isfinite(high) and low <= 0.5 <= high:
            notes.append(
                f"{pair['run_a']} vs {pair['run_b']}: P(A > B) {pair['p_a_beats_b']:.2f} [{low:.2f}, "
                f"{high:.2f}] covers 0.5: no significant difference"
            )
    return notes


def long_rows(runs: list[Run]) -> list[dict]:
    """Every value of every metric, seed and row: {run, seed, env_steps, metric, value}."""
    out = []
    for run in runs:
        for metric in METRICS:
            steps, values = series(run, metric)
            for k, step in enumerate(steps):
                for s in np.nonzero(~np.isnan(values[:, k]))[0]:
                    out.append(
                        {
                            "run": run.label,
                            "seed": int(s),
                            "env_steps": int(step),
                            "metric": metric,
                            "value": float(values[s, k]),
                        }
                    )
    return out


# ---- the command ----


def format_final(rows: list[dict], show_env: bool) -> str:
    """Markdown table of `summarize_runs` rows."""
    header = [
        "run",
        *(["env"] if show_env else []),
        "algo",
        "seeds",
        "env steps",
        "final IQM [95% CI]",
        "final mean [95% CI]",
        "final median [95% CI]",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [
            row["run"],
            *([row["env"]] if show_env else []),
            row["algo"],
            f"{row['seeds']}/{row['num_seeds']}",
            str(row["env_steps"] if row["env_steps"] is not None else "n/a"),
            *(estimate(row, f"final_{name}") for name in ("iqm", "mean", "median")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def format_improvements(rows: list[dict]) -> str:
    """Markdown table of `improvements` rows."""
    lines = ["| A | B | P(A > B) [95% CI] |", "|---|---|---|"]
    for row in rows:
        shown = (
            "n/a"
            if math.isnan(row["p_a_beats_b"])
            else f"{row['p_a_beats_b']:.2f} [{row['low']:.2f}, {row['high']:.2f}]"
        )
        lines.append(f"| {row['run_a']} | {row['run_b']} | {shown} |")
    return "\n".join(lines) + "\n"


def _explanation(metric: str) -> str:
    return (
        f"*final* is each seed's last value of `{metric}` ({METRICS[metric][1]}); *env steps* the latest step "
        "at which a seed's final value was taken (env steps of one run). IQM is the interquartile mean over "
        "seeds (the mean of the middle 50%). Brackets hold 95% percentile bootstrap confidence intervals over "
        "seeds. P(A > B) is the probability of improvement (Agarwal et al., 2021): the share of pairs (a seed "
        "of A, a seed of B) in which A's final value is higher, ties counting 1/2; 0.5 means no difference, "
        "and its CI resamples the seeds of A and of B independently.\n"
    )


def _check_envs(runs: list[Run]) -> None:
    envs: dict[str, list[str]] = {}
    for run in runs:
        envs.setdefault(run.env, []).append(run.label)
    if len(envs) > 1:
        listed = "; ".join(f"{', '.join(labels)} on {env}" for env, labels in envs.items())
        raise CompareError(f"the runs are on different envs: {listed}; compare runs of one env, or pass --allow-mixed")


def _choose_metric(runs: list[Run], metric: str | None, log: Callable[[str], None]) -> str:
    """`metric`, checked; by default eval_return where every run evaluated, else return_mean."""
    has = {m: [run for run in runs if has_metric(run, m)] for m in METRICS}
    if metric is None:
        metric = "eval_return" if len(has["eval_return"]) == len(runs) else "return_mean"
    if metric not in METRICS:
        raise CompareError(f"--metric {metric}: expected one of {', '.join(METRICS)}")
    if not has[metric]:
        present = [m for m in METRICS if has[m]]
        raise CompareError(
            f"--metric {metric}: none of the runs has it (they have: {', '.join(present) or 'no values yet'})"
        )
    lacking = [run.label for run in runs if not has_metric(run, metric)]
    if lacking:
        log(f"warning: {', '.join(lacking)}: no {metric} values (n/a below)")
    return metric


def default_out_dir() -> Path:
    return Path("runs") / f"compare_{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def compare(
    specs: list[str],
    metric: str | None = None,
    out_dir: Path | None = None,
    *,
    allow_mixed: bool = False,
    csv_path: Path | None = None,
    log: Callable[[str], None] = print,
    warn: Callable[[str], None] | None = None,
    num_resamples: int = 2000,
    seed: int = 0,
) -> dict[str, Path]:
    """Compare the runs named by `specs`: print the final-performance and P(A > B) tables, write
    them (CSV and compare.md) and a curves PNG per metric into `out_dir`, and with `csv_path` every
    value in long format. Returns the written files by name. Bad inputs raise CompareError."""
    warn = log if warn is None else warn
    if not specs:
        raise CompareError(f"compare takes one or more runs: {FORMS}")
    runs = [load_run(spec, warn) for spec in specs]
    seen: dict[Path, str] = {}
    for run in runs:
        if run.path.resolve() in seen:
            raise CompareError(f"{run.label} names the same run as {seen[run.path.resolve()]}")
        seen[run.path.resolve()] = run.label
    if not allow_mixed:
        _check_envs(runs)
    metric = _choose_metric(runs, metric, warn)
    out_dir = default_out_dir() if out_dir is None else Path(out_dir)
    for directory in (out_dir, *([Path(csv_path).parent] if csv_path is not None else [])):
        problem = check_writable_dir(directory)
        if problem:
            raise CompareError(f"{directory}: {problem}")
    if csv_path is not None and Path(csv_path).is_dir():
        raise CompareError(f"--csv {csv_path} is a directory; expected a file path")
    out_dir.mkdir(parents=True, exist_ok=True)

    rows = summarize_runs(runs, metric, num_resamples, seed)
    pairs = improvements(runs, metric, num_resamples, seed)
    envs = sorted({run.env for run in runs})
    text = (
        f"{metric} ({METRICS[metric][1]}), final value per seed, {len(runs)} runs on {', '.join(envs)}\n\n"
        + format_final(rows, show_env=len(envs) > 1)
    )
    if pairs:
        text += "\nprobability of improvement of the final value\n\n" + format_improvements(pairs)
    notes = statistical_notes(rows, pairs)
    if notes:
        text += "\n" + "\n".join(notes) + "\n"
    log(text)
    paths = {"final.csv": write_csv(rows, out_dir / "final.csv")}
    if pairs:
        paths["improvement.csv"] = write_csv(pairs, out_dir / "improvement.csv")
    paths["compare.md"] = write_text_atomic(
        out_dir / "compare.md", "# Comparison\n\n" + text + "\n" + _explanation(metric)
    )
    for name, (_, quantity) in METRICS.items():
        if any(has_metric(run, name) for run in runs):
            curves = [(run.label, iqm_curve(*series(run, name), num_resamples, seed)) for run in runs]
            paths[f"curves_{name}.png"] = out_dir / f"curves_{name}.png"
            plot_iqm_curves(curves, paths[f"curves_{name}.png"], quantity)
    if csv_path is not None:
        Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
        paths["csv"] = write_csv(
            long_rows(runs), Path(csv_path), fields=("run", "seed", "env_steps", "metric", "value")
        )
    log(
        f"written to {out_dir}: {', '.join(name for name in paths if name != 'csv')}"
        + (f"; every value: {paths['csv']}" if csv_path is not None else "")
    )
    return paths
