"""A sweep's report: per-cell statistics over seeds with bootstrap confidence intervals.

Statistics follow rliable (Agarwal et al., 2021): the interquartile mean (IQM) next to the
mean and the median, each with a 95% percentile bootstrap confidence interval over seeds.
With one task, rliable's stratified bootstrap resamples the runs of a cell with replacement.
Seeds that have not written a value (NaN) are left out. Nothing here needs JAX.

    report.md    the table and what its numbers mean
    report.csv   every column of `summarize` (the win rate's too, where an env has a win condition)
    curves.png   IQM of the evaluation return against env steps, with its 95% CI band
    final.png    IQM, mean and median of the final (and absolute) return per cell, with CIs
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from marljax.files import write_text_atomic
from marljax.sweeps.results import Results

Statistic = Callable[[np.ndarray], np.ndarray]  # reduces the last axis


def iqm(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean: the mean of the middle 50% of sorted values (scipy's trim_mean(x, 0.25))."""
    x = np.sort(np.moveaxis(np.asarray(x, np.float64), axis, -1), axis=-1)
    n = x.shape[-1]
    cut = int(0.25 * n)  # dropped at each end, as scipy rounds it
    if n == 0:
        return np.full(x.shape[:-1], np.nan)
    return x[..., cut : n - cut].mean(axis=-1)


STATISTICS: dict[str, Statistic] = {
    "mean": lambda x: np.mean(x, axis=-1),
    "median": lambda x: np.median(x, axis=-1),
    "iqm": iqm,
}


def finite(values: np.ndarray) -> np.ndarray:
    """The non-NaN entries of a 1-D array, as float64."""
    values = np.asarray(values, np.float64).ravel()
    return values[~np.isnan(values)]


def point(values: np.ndarray, statistic: Statistic) -> float:
    """`statistic` of the non-NaN runs in `values` [S]; NaN if there are none."""
    values = finite(values)
    return float(statistic(values)) if values.size else math.nan


def bootstrap_ci(
    values: np.ndarray,
    statistic: Statistic,
    *,
    num_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of `statistic` over the runs `values` [S]; NaN runs are dropped."""
    values = finite(values)  # [n]
    if values.size < 1:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    index = rng.integers(0, values.size, size=(num_resamples, values.size))  # [R, n]
    return percentile_interval(statistic(values[index]), confidence)  # over [R]


def percentile_interval(stats: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The central `confidence` interval of bootstrap statistics `stats` [R] (percentile method)."""
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(stats, [tail, 100 - tail])
    return float(low), float(high)


def stat_columns(prefix: str, values: np.ndarray, num_resamples: int, seed: int) -> dict:
    """{prefix}_{stat}, _low, _high for every statistic of the runs `values` [S]."""
    row = {}
    for name, statistic in STATISTICS.items():
        low, high = bootstrap_ci(values, statistic, num_resamples=num_resamples, seed=seed)
        row[f"{prefix}_{name}"] = point(values, statistic)
        row[f"{prefix}_{name}_low"] = low
        row[f"{prefix}_{name}_high"] = high
    return row


def has_win_rate(results: Results) -> bool:
    """The sweep stores a win rate and some cell's env has a win condition (a value that is not NaN)."""
    if "win_rate" not in results.metrics:  # a store written before win rates were recorded
        return False
    w = results.metrics.index("win_rate")
    return bool(np.any(~np.isnan(results.evals[..., w])) or np.any(~np.isnan(results.absolute[..., w])))


def summarize(results: Results, num_resamples: int = 2000, seed: int = 0) -> list[dict]:
    """One row per cell: its name and values, seeds counted, and the final and absolute return's
    mean/median/IQM with 95% bootstrap CIs (columns `final_iqm`, `final_iqm_low`, `absolute_mean`, ...).
    Where an env has a win condition (`has_win_rate`), the same for the win rate (`final_win_rate_iqm`,
    `absolute_win_rate_mean`, ...; NaN for cells whose env has none).
    The cell's swept values come as columns of their own, named by their field."""
    final = results.final("return")  # [C, S]
    absolute = results.absolute[..., results.metrics.index("return")]  # [C, S]
    wins = has_win_rate(results)
    if wins:
        final_win = results.final("win_rate")  # [C, S]
        absolute_win = results.absolute[..., results.metrics.index("win_rate")]  # [C, S]
    rows = []
    for c, cell in enumerate(results.cells):
        row = {"cell": cell["name"], **cell.get("values", {})}
        row["seeds"] = int(np.sum(~np.isnan(final[c])))
        row["absolute_seeds"] = int(np.sum(~np.isnan(absolute[c])))
        row["num_seeds"] = results.num_seeds
        row["diverged"] = int(np.sum(results.diverged_at[c] >= 0)) if results.diverged_at is not None else 0
        row.update(stat_columns("final", final[c], num_resamples, seed))
        row.update(stat_columns("absolute", absolute[c], num_resamples, seed))
        if wins:
            row.update(stat_columns("final_win_rate", final_win[c], num_resamples, seed))
            row.update(stat_columns("absolute_win_rate", absolute_win[c], num_resamples, seed))
        rows.append(row)
    return rows


def estimate(row: dict, column: str) -> str:
    """'12.34 [11.02, 13.50]' for `column` and its CI columns; 'n/a' when nothing was counted."""
    value, low, high = row[column], row[f"{column}_low"], row[f"{column}_high"]
    if math.isnan(value):
        return "n/a"
    return f"{value:.2f} [{low:.2f}, {high:.2f}]"


TABLE_COLUMNS = (  # (header, summarize column)
    ("final IQM [95% CI]", "final_iqm"),
    ("final mean [95% CI]", "final_mean"),
    ("final median [95% CI]", "final_median"),
    ("absolute IQM [95% CI]", "absolute_iqm"),
    ("absolute mean [95% CI]", "absolute_mean"),
    ("absolute median [95% CI]", "absolute_median"),
)
WIN_RATE_COLUMNS = (  # shown where summarize found a win rate
    ("final win rate IQM [95% CI]", "final_win_rate_iqm"),
    ("absolute win rate IQM [95% CI]", "absolute_win_rate_iqm"),
)


MIN_SEEDS = 8  # fewer runs than this make a bootstrap interval little more than the runs' range


def few_seeds_note(rows: list[dict]) -> str | None:
    """One line where some rows have fewer than MIN_SEEDS seeds with a value: their brackets are
    not 95% intervals. None where every row has enough."""
    few = [row for row in rows if row["seeds"] < MIN_SEEDS]
    if not few:
        return None
    which = "every cell" if len(few) == len(rows) else ", ".join(str(row["cell"]) for row in few)
    counted = sorted({row["seeds"] for row in few})
    return (
        f"warning: {which}: {' or '.join(map(str, counted))} seed(s) with a value, fewer than {MIN_SEEDS}: "
        f"the brackets are the bootstrap's spread over so few runs, not 95% intervals "
        f"(rerun with seeds={MIN_SEEDS} or more)"
    )


def format_table(rows: list[dict]) -> str:
    """The markdown table of `summarize` rows: cell, seeds counted, and each estimate with its CI
    (the win rate's too, where the rows have one)."""
    columns = TABLE_COLUMNS + (WIN_RATE_COLUMNS if any("final_win_rate_iqm" in row for row in rows) else ())
    header = ["cell", "seeds"] + [title for title, _ in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        diverged = f" ({row['diverged']} diverged)" if row.get("diverged") else ""
        cells = [str(row["cell"]), f"{row['seeds']}/{row['num_seeds']}{diverged}"]
        cells += [estimate(row, column) for _, column in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _explanation(results: Results) -> str:
    wins = (
        " The *win rate* is the share of evaluation episodes won (envs with a win condition; n/a for the "
        "others); its final and absolute values come from the same evaluations as the return's."
        if has_win_rate(results)
        else ""
    )
    return (
        "Each cell is one configuration of the sweep; its seeds are independent runs. "
        "*final* is the evaluation return at the cell's last evaluation; *absolute* is the return of "
        f"each run's best parameters (by evaluation return) re-evaluated with {results.absolute_factor}x "
        "the evaluation episodes. IQM is the interquartile mean over seeds: the mean of the middle 50% "
        "of runs, robust to outlier runs and less noisy than the median. Brackets hold 95% confidence "
        "intervals from a percentile bootstrap over seeds (rliable's stratified bootstrap, which with "
        "a single task resamples a cell's runs with replacement). *seeds* counts the runs with a value; "
        "runs not yet finished are left out. A run *diverged* when its loss or parameters became "
        "non-finite: its evaluations from then on are left out (its absolute metric, too, when that "
        "happened before its first evaluation)." + wins + "\n"
    )


def write_csv(rows: list[dict], path: Path, fields: Sequence[str] | None = None) -> Path:
    """`rows` as CSV, written at once; columns `fields`, by default the union of the rows' keys
    in first-seen order."""
    fields = list(dict.fromkeys(key for row in rows for key in row)) if fields is None else list(fields)
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    return write_text_atomic(path, text.getvalue())


def figure(**kwargs):
    """A matplotlib Figure that is not registered with pyplot, so a notebook's backend is left alone."""
    from matplotlib.figure import Figure

    return Figure(dpi=110, **kwargs)


def iqm_curve(
    steps: np.ndarray, values: np.ndarray, num_resamples: int = 2000, seed: int = 0
) -> tuple[np.ndarray, ...]:
    """Steps [k] where some seed has a value of `values` [S, K] (and the step is written, >= 0),
    the IQM over seeds there [k] and its 95% bootstrap CI low, high [k]."""
    keep = (np.asarray(steps) >= 0) & np.any(~np.isnan(values), axis=0)  # [K]
    ks = np.nonzero(keep)[0]
    middle = np.array([point(values[:, k], iqm) for k in ks], np.float64)  # [k]
    cis = [bootstrap_ci(values[:, k], iqm, num_resamples=num_resamples, seed=seed) for k in ks]
    low, high = np.array(cis, np.float64).reshape(-1, 2).T  # [k] each
    return np.asarray(steps)[keep], middle, low, high


def plot_iqm_curves(curves: list[tuple[str, tuple[np.ndarray, ...]]], path: Path, quantity: str) -> None:
    """One line per (label, `iqm_curve` output) with its CI band, against env steps of one run."""
    fig = figure(figsize=(7, 4.2))
    ax = fig.subplots()
    for label, (steps, middle, low, high) in curves:
        if steps.size == 0:
            continue
        (line,) = ax.plot(steps, middle, lw=1.8, marker="." if steps.size < 3 else None, label=label)
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, lw=0)
    if ax.lines:
        ax.legend(fontsize=7, loc="best")
    ax.set_xlabel("environment steps (one run)")
    ax.set_ylabel(f"{quantity} (IQM over seeds)")
    ax.set_title(f"{quantity}, IQM and 95% bootstrap CI over seeds", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)


def plot_curves(results: Results, path: Path, num_resamples: int = 2000, seed: int = 0) -> None:
    """IQM of the evaluation return over seeds against env steps of one run, one line per cell."""
    returns = results.metric("return")  # [C, S, K]
    curves = [
        (cell["name"], iqm_curve(results.eval_steps[c], returns[c], num_resamples, seed))
        for c, cell in enumerate(results.cells)
    ]
    plot_iqm_curves(curves, path, "evaluation return")


def plot_final(rows: list[dict], path: Path) -> None:
    """Interval plot: a panel per statistic, a row per cell, final (and absolute) return with CIs."""
    y = np.arange(len(rows))  # [C]
    fig = figure(figsize=(11, 1.2 + 0.45 * max(len(rows), 1)))
    axes = fig.subplots(1, 3, sharey=True)
    for ax, name in zip(axes, ("iqm", "mean", "median")):
        for prefix, offset, color in (("final", -0.12, "tab:blue"), ("absolute", 0.12, "tab:orange")):
            columns = [f"{prefix}_{name}{end}" for end in ("", "_low", "_high")]
            values = np.array([[r[col] for col in columns] for r in rows], np.float64).reshape(-1, 3)  # [C, 3]
            ax.hlines(y + offset, values[:, 1], values[:, 2], color=color, lw=4, alpha=0.4)
            ax.plot(values[:, 0], y + offset, "o", color=color, ms=4, label=prefix)
        ax.set_title(name.upper() if name == "iqm" else name, fontsize=9)
        ax.set_xlabel("return")
        ax.grid(alpha=0.3, axis="x")
    axes[0].set_yticks(y, [str(r["cell"]) for r in rows], fontsize=7)
    axes[0].set_ylim(-0.6, len(rows) - 0.4)
    axes[0].invert_yaxis()
    axes[-1].legend(fontsize=7, loc="best")
    fig.suptitle("final and absolute return per cell, 95% bootstrap CI over seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)


def write_report(
    results: Results, out_dir: Path, num_resamples: int = 2000, seed: int = 0, rows: list[dict] | None = None
) -> dict[str, Path]:
    """Write report.md, report.csv, curves.png and final.png into `out_dir`; returns their paths.
    `rows`: `summarize(results, num_resamples, seed)` when the caller already has it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = summarize(results, num_resamples=num_resamples, seed=seed) if rows is None else rows
    paths = {name: out_dir / name for name in ("report.md", "report.csv", "curves.png", "final.png")}
    note = few_seeds_note(rows)
    table = format_table(rows) + (f"\n{note}\n" if note else "")
    write_text_atomic(paths["report.md"], "# Sweep report\n\n" + table + "\n" + _explanation(results))
    write_csv(rows, paths["report.csv"])
    plot_curves(results, paths["curves.png"], num_resamples=num_resamples, seed=seed)
    plot_final(rows, paths["final.png"])
    return paths
