"""`marljax compare`: the statistics on hand-written runs with known values, the files it writes,
its errors (one line, exit code 2), sweep cells, and two real tiny training runs of different
lengths (their marl-eval metrics.json beside them)."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from marljax.cli import main
from marljax.config import load_config
from marljax.sweeps.compare import (
    improvement_ci,
    improvements,
    load_run,
    long_rows,
    probability_of_improvement,
    series,
    summarize_runs,
)
from marljax.sweeps.report import iqm_curve
from marljax.train.loop import train
from marljax.train.metrics import read_jsonl

MPE = "MPE_simple_spread_v3"


def _write_run(path: Path, rows: list[dict], num_seeds: int, env: str = MPE, **config) -> Path:
    path.mkdir(parents=True)
    values = {"algo": "ippo", "env": env, "num_seeds": num_seeds, **config}
    (path / "config.yaml").write_text("# written by a test\n" + yaml.safe_dump(values))
    (path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _row(update: int, steps: int, train: list, evaluation: list | None = None) -> dict:
    row = {"update": update, "env_steps": steps, "return_mean": None, "return_per_seed": train}
    if evaluation is not None:
        row.update(eval_return=0.0, eval_return_per_seed=evaluation)
    return row


# run A: 4 seeds to 300 env steps; seed 1's last evaluation missing, so its final is the one at 200
A_ROWS = [_row(1, 100, [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]),
          _row(2, 200, [1.0, 1.5, 2.0, None], [1.0, 2.0, 3.0, 100.0]),
          _row(3, 300, [3.0, 3.0, 3.0, 3.0], [4.0, None, 6.0, 20.0])]  # fmt: skip
A_FINAL = [4.0, 2.0, 6.0, 20.0]  # sorted 2, 4, 6, 20: IQM 5 (the middle two), mean 8, median 5
# run B: 3 seeds, shorter (to 200 env steps), every seed below every seed of A
B_ROWS = [_row(1, 100, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]), _row(2, 200, [0.5, 0.5, 0.5], [1.0, 1.0, 1.0])]


@pytest.fixture
def hand_runs(tmp_path):
    """A and B above, and C: B's values again."""
    return [_write_run(tmp_path / "a", A_ROWS, 4), _write_run(tmp_path / "b", B_ROWS, 3),
            _write_run(tmp_path / "c", B_ROWS, 3)]  # fmt: skip


# ---- statistics ----


def test_probability_of_improvement_known_values():
    assert probability_of_improvement([4.0, 5.0, 6.0], [1.0, 2.0]) == 1.0  # every seed of A above every seed of B
    assert probability_of_improvement([1.0, 2.0], [4.0, 5.0, 6.0]) == 0.0
    assert probability_of_improvement([3.0, 3.0], [3.0, 3.0, 3.0]) == 0.5  # all ties
    assert probability_of_improvement([1.0, 2.0, 3.0], [2.0]) == 0.5  # 0 + 1/2 + 1 over 3 pairs
    assert probability_of_improvement([3.0, 4.0], [1.0, 4.0]) == 0.625  # (1 + 0 + 1 + 1/2) / 4
    x, y = np.array([0.3, 2.0, np.nan, 5.0]), np.array([1.0, 2.0, 6.0])
    assert probability_of_improvement(x, y) == probability_of_improvement(x[~np.isnan(x)], y)  # NaN seeds left out
    assert probability_of_improvement(x, y) + probability_of_improvement(y, x) == pytest.approx(1.0)
    assert math.isnan(probability_of_improvement([np.nan], [1.0]))


def test_improvement_ci():
    assert improvement_ci([4.0, 5.0, 6.0], [1.0, 2.0]) == (1.0, 1.0)  # every resample still all above
    assert improvement_ci([3.0, 3.0], [3.0, 3.0]) == (0.5, 0.5)
    x, y = [1.0, 3.0, 5.0, 7.0, 9.0], [2.0, 4.0, 6.0, 8.0]
    low, high = improvement_ci(x, y, num_resamples=500, seed=1)
    assert 0.0 <= low < probability_of_improvement(x, y) < high <= 1.0
    assert improvement_ci(x, y, num_resamples=500, seed=1) == (low, high)  # deterministic per seed
    assert all(math.isnan(v) for v in improvement_ci([np.nan], [1.0]))


def test_final_table_and_runs_of_different_lengths(hand_runs):
    a, b, _ = (load_run(str(p)) for p in hand_runs)
    steps, values = series(a, "eval_return")
    np.testing.assert_array_equal(steps, [100, 200, 300])
    assert values.shape == (4, 3) and np.isnan(values[1, 2])
    assert series(b, "eval_return")[0].tolist() == [100, 200]  # B stops at 200
    curve_a, curve_b = (iqm_curve(*series(run, "eval_return")) for run in (a, b))
    assert curve_a[0].tolist() == [100, 200, 300] and curve_b[0].tolist() == [100, 200]
    assert curve_a[1].tolist() == [0.0, 2.5, 10.0]  # 1, 2, 3, 100 -> mean of 2, 3; three seeds 4, 6, 20: no cut
    rows = summarize_runs([a, b], "eval_return", num_resamples=200)
    assert [r["run"] for r in rows] == [str(hand_runs[0]), str(hand_runs[1])]
    first, second = rows
    assert (first["seeds"], first["num_seeds"], first["env_steps"]) == (4, 4, 300)
    assert (first["final_iqm"], first["final_mean"], first["final_median"]) == (5.0, 8.0, 5.0)
    assert json.loads(first["final_per_seed"]) == A_FINAL
    assert first["final_iqm_low"] <= 5.0 <= first["final_iqm_high"]
    assert (second["seeds"], second["env_steps"], second["final_iqm"], second["final_mean"]) == (3, 200, 1.0, 1.0)
    assert (second["final_iqm_low"], second["final_iqm_high"]) == (1.0, 1.0)
    # the training return: each seed's last non-null value, seed 3's at 200 steps missing
    train = summarize_runs([a], "return_mean", num_resamples=50)[0]
    assert json.loads(train["final_per_seed"]) == [3.0, 3.0, 3.0, 3.0] and train["final_mean"] == 3.0


def test_compare_writes_tables_and_files(hand_runs, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compare", *map(str, hand_runs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    a, b, c = map(str, hand_runs)
    assert (
        f"| {a} | ippo | 4/4 | 300 | 5.00 [" in printed and f"| {b} | ippo | 3/3 | 200 | 1.00 [1.00, 1.00] |" in printed
    )
    assert f"| {a} | {b} | 1.00 [1.00, 1.00] |" in printed  # every seed of A ends above every seed of B
    assert f"| {b} | {c} | 0.50 [0.50, 0.50] |" in printed  # the same values: no improvement either way
    assert "eval_return" in printed.splitlines()[0]  # the default: every run evaluated
    with (out / "final.csv").open(newline="") as f:
        final = list(csv.DictReader(f))
    assert [r["run"] for r in final] == [a, b, c]
    assert float(final[0]["final_iqm"]) == 5.0 and float(final[0]["final_mean"]) == 8.0
    assert json.loads(final[0]["final_per_seed"]) == A_FINAL and final[1]["env_steps"] == "200"
    with (out / "improvement.csv").open(newline="") as f:
        pairs = {(r["run_a"], r["run_b"]): r for r in csv.DictReader(f)}
    assert set(pairs) == {(a, b), (a, c), (b, c)}
    assert float(pairs[a, b]["p_a_beats_b"]) == 1.0 and float(pairs[b, c]["p_a_beats_b"]) == 0.5
    assert (pairs[a, b]["seeds_a"], pairs[a, b]["seeds_b"]) == ("4", "3")
    for metric in ("return_mean", "eval_return"):
        assert (out / f"curves_{metric}.png").read_bytes().startswith(b"\x89PNG")
    assert not (out / "curves_win_rate.png").exists()  # no run has a win rate
    assert "probability of improvement" in (out / "compare.md").read_text()


def _expected_long(label: str, rows: list[dict]) -> set[tuple]:
    """(run, seed, env_steps, metric, value) of every non-null per-seed value in metrics rows."""
    keys = {"return_mean": "return_per_seed", "eval_return": "eval_return_per_seed",
            "win_rate": "win_rate_per_seed", "eval_win_rate": "eval_win_rate_per_seed"}  # fmt: skip
    return {(label, s, row["env_steps"], metric, value) for row in rows for metric, key in keys.items()
            for s, value in enumerate(row.get(key) or []) if value is not None}  # fmt: skip


def _read_long(path: Path) -> list[tuple]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == ["run", "seed", "env_steps", "metric", "value"]
        return [(r["run"], int(r["seed"]), int(r["env_steps"]), r["metric"], float(r["value"])) for r in reader]


def test_long_csv_holds_every_value(hand_runs, tmp_path):
    path = tmp_path / "deep" / "long.csv"
    assert main(["compare", str(hand_runs[0]), str(hand_runs[1]), "--out", str(tmp_path / "o"), f"--csv={path}"]) == 0
    found = _read_long(path)
    assert len(found) == len(set(found))
    assert set(found) == _expected_long(str(hand_runs[0]), A_ROWS) | _expected_long(str(hand_runs[1]), B_ROWS)


def test_damaged_lines_are_left_out_with_a_warning(hand_runs, tmp_path, capsys):
    with (hand_runs[0] / "metrics.jsonl").open("a") as f:
        f.write('{"update": 4, "env_steps": 400, "eval_return_per_seed": [9')  # a writer killed mid-line
    assert main(["compare", str(hand_runs[0]), str(hand_runs[1]), "--out", str(tmp_path / "o")]) == 0
    captured = capsys.readouterr()
    assert captured.err == f"warning: {hand_runs[0] / 'metrics.jsonl'}: line(s) 4 are not metrics rows; left out\n"
    assert f"| {hand_runs[0]} | ippo | 4/4 | 300 | 5.00 [" in captured.out


def test_win_rate_metrics(tmp_path):
    rows = [{"update": 1, "env_steps": 64, "return_per_seed": [1.0, 2.0], "win_rate": 0.5, "win_rate_per_seed": [0.25, 0.75],
             "eval_return": 0.0, "eval_return_per_seed": [1.0, 1.0], "eval_win_rate": 0.5, "eval_win_rate_per_seed": [0.0, 1.0]}]  # fmt: skip
    smax = {"env": "HeuristicEnemySMAX", "env_kwargs": {"scenario": "3m"}}
    run = _write_run(tmp_path / "smax", rows, 2, **smax)
    # written before rows carried win_rate_per_seed: a one-seed run's pooled win rate is its own
    old = _write_run(
        tmp_path / "old", [{"update": 1, "env_steps": 64, "return_per_seed": [1.0], "win_rate": 0.4}], 1, **smax
    )
    runs = [load_run(str(run)), load_run(str(old))]
    assert runs[0].env == "HeuristicEnemySMAX(scenario=3m)"
    table = summarize_runs(runs, "win_rate", num_resamples=50)
    assert json.loads(table[0]["final_per_seed"]) == [0.25, 0.75] and json.loads(table[1]["final_per_seed"]) == [0.4]
    assert json.loads(summarize_runs(runs, "eval_win_rate", num_resamples=50)[0]["final_per_seed"]) == [0.0, 1.0]
    assert improvements(runs, "win_rate", num_resamples=50)[0]["p_a_beats_b"] == 0.5  # 0.25 < 0.4 < 0.75
    assert {r["metric"] for r in long_rows(runs)} == {"return_mean", "eval_return", "win_rate", "eval_win_rate"}
    assert main(["compare", str(run), str(old), "--metric", "win_rate", "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "curves_eval_win_rate.png").is_file() and (
        tmp_path / "o" / "curves_win_rate.png"
    ).is_file()


# ---- sweep cells ----


def _sweep(tmp_path: Path) -> Path:
    """A sweep directory as `marljax sweep` leaves it: sweep.yaml, results/coords.json, cells/<dir>/."""
    sweep = tmp_path / "sweep"
    names = ["lr=0.001,param_sharing=shared", "lr=0.0003,param_sharing=shared"]
    for name, rows in zip(names, (A_ROWS, B_ROWS)):
        _write_run(sweep / "cells" / name.replace("=", "-").replace(",", "_"), rows, len(rows[0]["return_per_seed"]))
    (sweep / "sweep.yaml").write_text("name: sweep\n")
    (sweep / "results").mkdir()
    (sweep / "results" / "coords.json").write_text(json.dumps({"cells": [{"name": n, "env": MPE} for n in names]}))
    return sweep


def test_sweep_cells_by_name_and_directory(tmp_path, capsys):
    sweep = _sweep(tmp_path)
    by_name = load_run(f"{sweep}:lr=0.001,param_sharing=shared")
    by_dirname = load_run(f"{sweep}:lr-0.001_param_sharing-shared")
    as_run_dir = load_run(str(sweep / "cells" / "lr-0.001_param_sharing-shared"))
    assert by_name.path == by_dirname.path == as_run_dir.path and by_name.rows == A_ROWS
    assert by_name.label == f"{sweep}:lr=0.001,param_sharing=shared"
    second = f"{sweep}:lr=0.0003,param_sharing=shared"
    assert main(["compare", f"{sweep}:lr=0.001,param_sharing=shared", second, "--out", str(tmp_path / "o")]) == 0
    assert f"| {second} | ippo | 3/3 | 200 | 1.00 [1.00, 1.00] |" in capsys.readouterr().out


# ---- errors: one line, exit code 2 ----


def _error(capsys, *args: str) -> str:
    code = main(["compare", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("marljax: compare: ") and "Traceback" not in err, err
    return lines[0]


def test_mixed_envs_refused_unless_allowed(hand_runs, tmp_path, capsys):
    smax = _write_run(tmp_path / "smax", B_ROWS, 3, env="HeuristicEnemySMAX", env_kwargs={"scenario": "3m"})
    a, b = map(str, hand_runs[:2])
    line = _error(capsys, a, b, str(smax), "--out", str(tmp_path / "o"))
    assert f"{a}, {b} on {MPE}" in line and f"{smax} on HeuristicEnemySMAX(scenario=3m)" in line
    assert "--allow-mixed" in line and not (tmp_path / "o").exists()
    # the same env with other env_kwargs is another task too
    other = _write_run(tmp_path / "mpe5", B_ROWS, 3, env_kwargs={"num_agents": 5})
    assert f"{other} on {MPE}(num_agents=5)" in _error(capsys, a, str(other))
    assert main(["compare", a, str(smax), "--allow-mixed", "--out", str(tmp_path / "o")]) == 0
    printed = capsys.readouterr().out
    assert "| run | env | algo |" in printed and f"| {smax} | HeuristicEnemySMAX(scenario=3m) | ippo | 3/3 |" in printed


def test_input_errors(hand_runs, tmp_path, capsys):
    a = str(hand_runs[0])
    assert "no such directory" in _error(capsys, a, str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    assert f"{tmp_path / 'empty'} is an empty directory" in _error(capsys, a, str(tmp_path / "empty"))
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.yaml").write_text("env: MPE_simple_spread_v3\n")
    line = _error(capsys, a, str(tmp_path / "half"))
    assert f"{tmp_path / 'half'} is neither a training run nor a sweep (it has no metrics.jsonl)" in line
    assert "RUN_DIR" in line and "SWEEP_DIR:CELL" in line
    assert "is a file" in _error(capsys, str(hand_runs[0] / "config.yaml"))
    sweep = _sweep(tmp_path)
    line = _error(capsys, str(sweep))
    assert (
        f"{sweep} is a sweep; name one of its cells as {sweep}:CELL" in line
        and "lr=0.0003,param_sharing=shared" in line
    )
    assert "has no cell 'lr=9'" in _error(capsys, f"{sweep}:lr=9")
    assert "--metric win_rate: none of the runs has it (they have: return_mean, eval_return)" in _error(
        capsys, a, "--metric", "win_rate")  # fmt: skip
    assert "--metric loss: expected one of return_mean, eval_return, win_rate, eval_win_rate" in _error(
        capsys, a, "--metric=loss"
    )
    assert "unknown option --metrics" in _error(capsys, a, "--metrics", "x")
    assert "--out takes a value" in _error(capsys, a, "--out")
    assert "one or more runs" in _error(capsys)
    assert f"--csv {tmp_path} is a directory" in _error(capsys, a, "--out", str(tmp_path / "o"), "--csv", str(tmp_path))
    assert "is a file, not a directory" in _error(capsys, a, "--out", str(hand_runs[0] / "config.yaml"))
    assert "names the same run" in _error(capsys, a, a + "/")


def test_cli_help_and_subprocess_exit_code(tmp_path, capsys):
    assert main(["compare", "--help"]) == 0
    assert "SWEEP_DIR:CELL" in capsys.readouterr().out
    assert main(["--help"]) == 0
    assert "marljax compare RUN_DIR|SWEEP_DIR:CELL" in capsys.readouterr().out
    proc = subprocess.run([sys.executable, "-m", "marljax.cli", "compare", str(tmp_path / "nope")], capture_output=True,
                          text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"marljax: compare: {tmp_path / 'nope'}: no such directory; expected RUN_DIR (config.yaml and metrics.jsonl) "
        "or SWEEP_DIR:CELL"]  # fmt: skip


# ---- two real training runs ----

TINY = ["num_envs=4", "num_steps=8", "total_timesteps=256", "num_chunks=4", "num_seeds=2", "hidden_size=16",
        "eval_every=4", "eval_episodes=4", "progress=false", "plot=false", "ppo.num_minibatches=1", "ppo.update_epochs=1"]  # fmt: skip


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    """Two 2-seed runs of one program: `long` to 256 env steps, `short` (another seed) stopped after
    2 of its 4 chunks (128 env steps); each evaluates every 4 updates, and train writes its marl-eval JSON."""
    root = tmp_path_factory.mktemp("real")
    runs = {}
    for name, extra, chunks in (("long", [], None), ("short", ["seed=1"], 2)):
        config = load_config(None, [*TINY, *extra, f"out_dir={root / name}"])
        train(config, log=lambda _line: None, max_chunks=chunks)  # writes metrics.json at its end
        runs[name] = root / name
    return runs


@pytest.mark.slow
def test_real_runs(real_runs, tmp_path, capsys):
    long, short = real_runs["long"], real_runs["short"]
    assert (long / "metrics.json").is_file() and (short / "metrics.json").is_file()  # still runs to compare
    out, path = tmp_path / "out", tmp_path / "long.csv"
    assert main(["compare", str(long), str(short), "--out", str(out), "--csv", str(path)]) == 0
    printed = capsys.readouterr().out
    rows = {name: read_jsonl(real_runs[name] / "metrics.jsonl") for name in real_runs}
    assert [r["env_steps"] for r in rows["long"]] == [64, 128, 192, 256] and rows["short"][-1]["env_steps"] == 128
    with (out / "final.csv").open(newline="") as f:
        final = {r["run"]: r for r in csv.DictReader(f)}
    for name, steps in (("long", "256"), ("short", "128")):
        last_eval = [r for r in rows[name] if "eval_return_per_seed" in r][-1]
        row = final[str(real_runs[name])]
        assert json.loads(row["final_per_seed"]) == last_eval["eval_return_per_seed"] and row["env_steps"] == steps
        assert float(row["final_mean"]) == pytest.approx(np.mean(last_eval["eval_return_per_seed"]))
        assert f"| {real_runs[name]} | ippo | 2/2 | {steps} | " in printed
        marl_eval = json.loads((real_runs[name] / "metrics.json").read_text())["MPE"]["simple_spread_v3"]["ippo"]
        assert [marl_eval[f"seed_{s}"]["absolute_metrics"]["return"][0] for s in range(2)] == last_eval[
            "eval_return_per_seed"
        ]
        assert marl_eval["seed_0"]["step_0"]["step_count"] == 128
    found = _read_long(path)
    assert sorted(found) == sorted(_expected_long(str(long), rows["long"]) | _expected_long(str(short), rows["short"]))
    assert max(s for run, _, s, *_ in found if run == str(short)) == 128  # the short run's values stop there
    assert (out / "curves_eval_return.png").is_file() and (out / "curves_return_mean.png").is_file()


def test_few_seeds_degenerate_intervals_and_ties_with_half_are_said(tmp_path, capsys):
    """Fewer than 8 seeds, an interval of one value and a P(A > B) whose interval covers 0.5 each get
    a line; 8 seeds apart, with every seed of one above the other's, get none (the control)."""
    from marljax.sweeps.compare import MIN_SEEDS, compare

    def run(name: str, finals: list[float]) -> Path:
        return _write_run(tmp_path / name, [_row(1, 100, finals)], num_seeds=len(finals))

    apart = [run("low", [float(i) for i in range(MIN_SEEDS)]), run("high", [100.0 + i for i in range(MIN_SEEDS)])]
    compare([str(p) for p in apart], metric="return_mean", out_dir=tmp_path / "out1")
    assert "warning" not in capsys.readouterr().out and "covers 0.5" not in (tmp_path / "out1/compare.md").read_text()

    few = [run("a", [1.0, 2.0, 3.0, 4.0]), run("b", [1.5, 2.5, 3.5, 4.5]), run("flat", [5.0, 5.0, 5.0])]
    compare([str(p) for p in few], metric="return_mean", out_dir=tmp_path / "out2")
    out = capsys.readouterr().out
    assert "/a has 4 seed(s) with a final value, fewer than 8" in out  # runs are named by their paths
    assert "/flat's interval is degenerate ([5.0, 5.0])" in out
    assert "/b: P(A > B) 0.38 [" in out and "covers 0.5: no significant difference" in out
    assert "covers 0.5" in (tmp_path / "out2/compare.md").read_text()
