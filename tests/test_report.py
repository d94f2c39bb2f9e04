"""The sweep report (statistics, bootstrap CIs, files) and the marl-eval export, on synthetic Results."""

import csv
import json
import math

import numpy as np
import pytest

from marljax.sweeps.marl_eval import to_marl_eval, write_marl_eval
from marljax.sweeps.report import STATISTICS, bootstrap_ci, format_table, iqm, summarize, write_report
from marljax.sweeps.results import METRICS, Results
from marljax.train.marl_eval_run import env_task

S, K, EP, F = 5, 4, 3, 2
FINAL = {  # cell -> final evaluation return per seed (NaN: seed not finished)
    "lr=1e-3": [1.0, 2.0, 3.0, 4.0, 5.0],
    "lr=3e-4": [0.0, 10.0, 20.0, 30.0, 100.0],
    "lr=1e-4": [10.0, 20.0, 30.0, np.nan, np.nan],
}
NUM_EVALS = {"lr=1e-3": 4, "lr=3e-4": 2, "lr=1e-4": 3, "empty": 0}
ENVS = {
    "lr=1e-3": "MPE_simple_spread_v3",
    "lr=3e-4": "MPE_simple_spread_v3",
    "lr=1e-4": "tests.nan_env:make",
    "empty": "SMAX",
}


def synthetic_results() -> Results:
    """4 cells with 4, 2, 3 and 0 evaluations; the third's last two seeds unfinished."""
    names = list(NUM_EVALS)
    C = len(names)
    eval_steps = np.full((C, K), -1, np.int64)  # [C, K]
    evals = np.full((C, S, K, len(METRICS)), np.nan, np.float32)  # [C, S, K, M]
    episodes = np.full((C, S, K, EP), np.nan, np.float32)  # [C, S, K, Ep]
    absolute = np.full((C, S, len(METRICS)), np.nan, np.float32)  # [C, S, M]
    absolute_episodes = np.full((C, S, EP * F), np.nan, np.float32)  # [C, S, Ep*F]
    rng = np.random.default_rng(0)
    for c, name in enumerate(names):
        n = NUM_EVALS[name]
        eval_steps[c, :n] = 1000 * np.arange(1, n + 1)
        if n == 0:
            continue
        finished = ~np.isnan(FINAL[name])  # [S]
        for k in range(n):
            episodes[c, finished, k] = rng.normal(k, 1.0, (finished.sum(), EP))
            evals[c, :, k, 0] = episodes[c, :, k].mean(-1)
            evals[c, finished, k, 1] = 25.0
        evals[c, :, n - 1, 0] = FINAL[name]
        absolute_episodes[c, finished] = rng.normal(5.0, 1.0, (finished.sum(), EP * F))
        absolute[c, :, 0] = absolute_episodes[c].mean(-1)
        absolute[c, finished, 1] = 25.0
    cells = [
        {"name": n, "algo": "ippo", "env": ENVS[n], "values": {"lr": float(n[3:])} if n != "empty" else {}}
        for n in names
    ]
    return Results(cells, S, METRICS, eval_steps, evals, episodes, absolute, absolute_episodes, F)


# ---- statistics ----


def test_iqm_hand_computed():
    assert iqm(np.arange(1, 9)) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    # outliers are dropped: sorted [-1e6, 1, 2, 3, 4, 5, 6, 1e6], 2 cut at each end -> mean of 2, 3, 4, 5
    assert iqm(np.array([6.0, 1e6, 2, 5, -1e6, 1, 4, 3])) == pytest.approx(3.5)
    assert iqm(np.array([1.0, 2, 3, 4, 5, 6, 7, 1e6])) == pytest.approx(4.5)
    # 10 values: int(2.5) = 2 cut at each end -> mean of the middle 6
    assert iqm(np.arange(10.0)) == pytest.approx(4.5)
    assert iqm(np.array([7.0])) == 7.0


def test_iqm_axis_and_empty():
    x = np.arange(24.0).reshape(3, 8)  # rows [0..7], [8..15], [16..23]
    np.testing.assert_allclose(iqm(x), [3.5, 11.5, 19.5])
    np.testing.assert_allclose(iqm(x.T, axis=0), [3.5, 11.5, 19.5])
    assert np.isnan(iqm(np.zeros(0)))


def test_iqm_matches_scipy_trim_mean():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 4, 5, 7, 10, 13, 100):
        x = rng.standard_cauchy((4, n))
        np.testing.assert_allclose(iqm(x), stats.trim_mean(x, 0.25, axis=-1), rtol=1e-12)


def test_statistics_reduce_last_axis():
    x = np.array([[1.0, 2.0, 9.0], [4.0, 4.0, 4.0]])
    np.testing.assert_allclose(STATISTICS["mean"](x), [4.0, 4.0])
    np.testing.assert_allclose(STATISTICS["median"](x), [2.0, 4.0])
    np.testing.assert_allclose(STATISTICS["iqm"](x), [4.0, 4.0])


# ---- bootstrap ----


@pytest.mark.parametrize("name", list(STATISTICS))
def test_bootstrap_constant_collapses(name):
    low, high = bootstrap_ci(np.full(7, 2.5), STATISTICS[name])
    assert low == pytest.approx(2.5) and high == pytest.approx(2.5)


def test_bootstrap_mean_matches_normal_approximation():
    values = np.random.default_rng(123).normal(3.0, 1.0, 2000)
    mean = values.mean()
    half = 1.96 * values.std(ddof=1) / math.sqrt(values.size)
    low, high = bootstrap_ci(values, STATISTICS["mean"])
    assert abs((mean - low) - half) < 0.15 * half
    assert abs((high - mean) - half) < 0.15 * half


def test_bootstrap_deterministic_per_seed():
    values = np.random.default_rng(5).normal(size=10)
    first = bootstrap_ci(values, iqm, seed=3)
    assert bootstrap_ci(values, iqm, seed=3) == first
    assert bootstrap_ci(values, iqm, seed=4) != first
    low, high = first
    assert low < high


def test_bootstrap_drops_nan_seeds():
    values = np.array([1.0, 4.0, np.nan, 2.0, np.nan, 8.0])
    assert bootstrap_ci(values, iqm, seed=7) == bootstrap_ci(values[~np.isnan(values)], iqm, seed=7)
    low, high = bootstrap_ci(values, STATISTICS["mean"])
    assert 1.0 <= low < high <= 8.0
    assert all(math.isnan(v) for v in bootstrap_ci(np.full(3, np.nan), iqm))
    assert all(math.isnan(v) for v in bootstrap_ci(np.zeros(0), iqm))


# ---- summarize and write_report ----


def test_summarize_rows():
    results = synthetic_results()
    rows = summarize(results, num_resamples=200)
    assert [r["cell"] for r in rows] == list(NUM_EVALS)
    for row in rows[:3]:
        final = np.array(FINAL[row["cell"]])
        kept = final[~np.isnan(final)]
        assert row["seeds"] == kept.size and row["num_seeds"] == S
        assert row["final_mean"] == pytest.approx(kept.mean())
        assert row["final_median"] == pytest.approx(np.median(kept))
        assert row["final_iqm"] == pytest.approx(iqm(kept))
        assert row["final_mean_low"] <= row["final_mean"] <= row["final_mean_high"]
        assert row["absolute_seeds"] == kept.size
        assert 3.0 < row["absolute_mean"] < 7.0  # absolute episodes ~ N(5, 1)
        assert row["lr"] == pytest.approx(float(row["cell"][3:]))
    assert rows[1]["final_iqm"] == pytest.approx(20.0)  # 0 and 100 dropped from [0, 10, 20, 30, 100]
    empty = rows[3]
    assert empty["seeds"] == 0 and math.isnan(empty["final_iqm"]) and math.isnan(empty["absolute_iqm_low"])


def test_format_table():
    rows = summarize(synthetic_results(), num_resamples=200)
    text = format_table(rows)
    lines = text.strip().splitlines()
    assert lines[0].startswith("| cell | seeds | final IQM [95% CI]")
    assert len(lines) == 2 + len(rows)
    assert "| lr=1e-3 | 5/5 | 3.00 [" in text
    assert "| lr=1e-4 | 3/5 | 20.00 [" in text
    assert "| empty | 0/5 | n/a |" in text


def test_write_report(tmp_path):
    results = synthetic_results()
    paths = write_report(results, tmp_path / "report", num_resamples=200)
    assert set(paths) == {"report.md", "report.csv", "curves.png", "final.png"}
    for path in paths.values():
        assert path.is_file() and path.parent == tmp_path / "report"
    md = paths["report.md"].read_text()
    assert "| cell | seeds | final IQM [95% CI] | final mean [95% CI]" in md
    for name in NUM_EVALS:
        assert f"| {name} |" in md
    assert "interquartile mean" in md and "bootstrap" in md and f"{F}x" in md
    with paths["report.csv"].open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["cell"] for r in rows] == list(NUM_EVALS)
    for row in rows[:3]:
        final = np.array(FINAL[row["cell"]])
        assert float(row["final_mean"]) == pytest.approx(np.nanmean(final))
        assert int(row["seeds"]) == np.sum(~np.isnan(final))
    assert {"final_iqm_low", "final_iqm_high", "absolute_median_high", "lr"} <= set(rows[0])
    for name in ("curves.png", "final.png"):
        data = paths[name].read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000


def _with_win_rate() -> Results:
    """synthetic_results with a win rate in the first cell (an env with a win condition): its final
    evaluation's per seed, and the absolute metric's."""
    results = synthetic_results()
    w = results.metrics.index("win_rate")
    evals, absolute = results.evals.copy(), results.absolute.copy()
    evals[0, :, :, w] = 0.1
    evals[0, :, NUM_EVALS["lr=1e-3"] - 1, w] = [0.0, 0.25, 0.5, 0.75, 1.0]  # IQM of the middle 3: 0.5
    absolute[0, :, w] = [1.0, 1.0, 0.8, 0.6, 0.6]  # IQM 0.8, mean 0.8
    return results._replace(evals=evals, absolute=absolute)


def test_report_win_rate(tmp_path):
    rows = summarize(_with_win_rate(), num_resamples=200)
    first = rows[0]
    assert first["final_win_rate_iqm"] == pytest.approx(0.5) and first["final_win_rate_mean"] == pytest.approx(0.5)
    assert first["final_win_rate_median"] == pytest.approx(0.5)
    assert first["absolute_win_rate_iqm"] == pytest.approx(0.8) and first["absolute_win_rate_mean"] == pytest.approx(
        0.8
    )
    assert 0.0 <= first["final_win_rate_iqm_low"] <= 0.5 <= first["final_win_rate_iqm_high"] <= 1.0
    assert all(math.isnan(r["final_win_rate_iqm"]) for r in rows[1:])  # their envs have no win condition
    text = format_table(rows)
    assert text.splitlines()[0].endswith("| final win rate IQM [95% CI] | absolute win rate IQM [95% CI] |")
    first_line, second_line = text.splitlines()[2:4]
    assert "| 0.50 [" in first_line and first_line.endswith("| 0.80 [0.60, 1.00] |")
    assert second_line.endswith("| n/a | n/a |")
    paths = write_report(_with_win_rate(), tmp_path, num_resamples=200)
    with paths["report.csv"].open(newline="") as f:
        csv_rows = list(csv.DictReader(f))
    assert float(csv_rows[0]["final_win_rate_iqm"]) == pytest.approx(0.5)
    assert float(csv_rows[0]["absolute_win_rate_mean"]) == pytest.approx(0.8)
    assert "win rate" in paths["report.md"].read_text()
    # no win condition anywhere (or a store from before win rates): no win-rate columns at all
    plain = summarize(synthetic_results(), num_resamples=50)
    assert not any("win_rate" in key for key in plain[0]) and "win rate" not in format_table(plain)


def test_write_report_deterministic(tmp_path):
    results = synthetic_results()
    a = write_report(results, tmp_path / "a", num_resamples=100)
    b = write_report(results, tmp_path / "b", num_resamples=100)
    assert a["report.csv"].read_text() == b["report.csv"].read_text()
    assert a["report.md"].read_text() == b["report.md"].read_text()


# ---- marl-eval ----


def test_env_task():
    assert env_task("MPE_simple_spread_v3") == ("MPE", "simple_spread_v3")
    assert env_task("SMAX") == ("SMAX", "SMAX")
    assert env_task("tests.nan_env:make_env") == ("custom", "tests.nan_env:make_env")


def test_marl_eval_schema(tmp_path):
    results = synthetic_results()
    data = to_marl_eval(results)
    assert set(data) == {"MPE", "custom"}  # the empty SMAX cell has nothing written
    assert set(data["MPE"]) == {"simple_spread_v3"}
    assert set(data["MPE"]["simple_spread_v3"]) == {"lr=1e-3", "lr=3e-4"}
    assert set(data["custom"]) == {"tests.nan_env:make"}
    algos = {**data["MPE"]["simple_spread_v3"], **data["custom"]["tests.nan_env:make"]}
    for name, seeds in algos.items():
        finished = np.nonzero(~np.isnan(FINAL[name]))[0]
        assert set(seeds) == {f"seed_{s}" for s in finished}
        for run in seeds.values():
            steps = [key for key in run if key.startswith("step_")]
            assert steps == [f"step_{k}" for k in range(NUM_EVALS[name])]
            for k, key in enumerate(steps):
                step = run[key]
                assert set(step) == {"step_count", "return", "episode_length"}
                assert type(step["step_count"]) is int and step["step_count"] == 1000 * (k + 1)
                assert len(step["return"]) == EP and all(type(v) is float for v in step["return"])
                assert step["episode_length"] == [25.0]
            absolute = run["absolute_metrics"]["return"]
            assert len(absolute) == EP * F and all(type(v) is float for v in absolute)
    c = list(NUM_EVALS).index("lr=3e-4")
    run = data["MPE"]["simple_spread_v3"]["lr=3e-4"]["seed_2"]
    np.testing.assert_allclose(run["step_1"]["return"], results.episode_returns[c, 2, 1], rtol=1e-6)

    path = write_marl_eval(results, tmp_path / "marl_eval.json")
    assert json.loads(path.read_text()) == data
    assert not (tmp_path / "marl_eval.json.tmp").exists()
