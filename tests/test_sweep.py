"""Sweeps: grid expansion, traced/structural split, file errors, the runner (resume, reruns,
vmapped rows equal to single runs), the results store and the report command."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.algos.ippo import PPOConfig
from marljax.cli import main
from marljax.config import ConfigError, load_config
from marljax.sweeps.report import summarize
from marljax.sweeps.results import ResultsStore, load
from marljax.sweeps.runner import run_sweep
from marljax.sweeps.spec import expand, load_sweep
from marljax.train.wiring import make_adapter, make_trainer
from tests._trees import assert_bitwise, assert_close, max_abs_diff

TINY = {"num_envs": 8, "num_steps": 16, "total_timesteps": 1536, "eval_every": 3, "eval_episodes": 4,
        "checkpoint_every": 3, "plot": False}  # 12 updates, an evaluation and a checkpoint every 3  # fmt: skip
TIMING = ("wall_s", "env_steps_per_s")


def _spec(out: Path | None = None, **extra) -> dict:
    spec = {"base": dict(TINY), "axes": {"lr": [1e-3, 3e-3], "param_sharing": ["shared", "independent"]}, "seeds": 2}
    if out is not None:
        spec["out_dir"] = str(out)
    return spec | extra


# ------------------------------------------------------------------- the sweep file


def test_grid_expansion_and_traced_structural_split():
    sweep = expand(_spec(zip={"ppo.ent_coef": [0.0, 0.01, 0.02], "ppo.clip_eps": [0.1, 0.2, 0.3]}))
    assert len(sweep.cells) == 2 * 2 * 3
    assert sweep.traced == ("lr", "ppo.ent_coef", "ppo.clip_eps") and sweep.structural == ("param_sharing",)
    assert [len(p.cells) for p in sweep.programs] == [6, 6]
    assert [p.rows for p in sweep.programs] == [12, 12]
    # zip axes move together: (0.0, 0.1), (0.01, 0.2), (0.02, 0.3), never (0.0, 0.3)
    pairs = {(c.values["ppo.ent_coef"], c.values["ppo.clip_eps"]) for c in sweep.cells}
    assert pairs == {(0.0, 0.1), (0.01, 0.2), (0.02, 0.3)}
    assert {
        (c.config.section(PPOConfig).ent_coef, c.config.section(PPOConfig).clip_eps) for c in sweep.cells
    } == pairs  # the dotted keys reach the section
    for program in sweep.programs:  # a program's cells share every structural value
        assert len({c.config.param_sharing for c in program.cells}) == 1
    cell = sweep.cells[0]
    assert cell.config.lr == 1e-3 and cell.config.num_seeds == 2 and cell.name.startswith("lr=0.001,")
    assert len({c.name for c in sweep.cells}) == len(sweep.cells)
    assert "traced (vmapped" in sweep.describe() and "param_sharing (2)" in sweep.describe()


def test_traced_list_forces_structural_compiles():
    sweep = expand(_spec(traced=[]))
    assert sweep.traced == () and len(sweep.programs) == 4 and all(p.rows == 2 for p in sweep.programs)


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"axis": {"lr": [1e-3]}}, "sweep.axis", "did you mean 'axes'"),
        ({"axes": {"learning_rate": [1e-3]}}, "axes.learning_rate", "unknown key"),
        ({"axes": {"lr": []}}, "axes.lr", "is empty"),
        ({"axes": {"lr": 1e-3}}, "axes.lr", "expected a list"),
        ({"axes": {"lr": [1e-3, 1e-3]}}, "axes.lr", "distinct"),
        ({"base": {**TINY, "lr": 1e-3}}, "axes.lr", "also set in base"),
        ({"traced": ["param_sharing"]}, "traced.param_sharing", "is structural"),
        ({"traced": ["gamma"]}, "traced.gamma", "is not an axis"),
        ({"zip": {"lr": [1e-3, 2e-3]}}, "zip.lr", "also an axis"),
        ({"zip": {"gamma": [0.9, 0.99], "ppo.ent_coef": [0.0]}}, "zip", "same number of values"),
        ({"seeds": 0}, "seeds", "positive integer"),
        ({"base": {**TINY, "num_seeds": 4}}, "base.num_seeds", "set by the sweep"),
        (
            {"axes": {"ppo.num_minibatches": [3]}},
            "cell ppo.num_minibatches=3: ppo.num_minibatches",
            "must divide num_steps",
        ),
        ({"axes": {"ent_coef": [0.0, 0.1]}}, "axes.ent_coef", "write ppo.ent_coef"),  # a flat key of old
        ({"axes": {"q.td_lambda": [0.5]}}, "axes.q.td_lambda", "section q.* of algo=pqn_vdn"),  # another algo's section
        ({"base": {"replay": {"tau": 0.1}}}, "base.replay.tau", "algo=ippo takes ppo.*"),
        (
            {"axes": {"param_sharing": ["shared", "everything"]}},
            "cell param_sharing=everything: param_sharing",
            "allowed",
        ),
    ],
)
def test_malformed_sweeps_are_refused_with_the_key(change, field, words):
    with pytest.raises(ConfigError) as info:
        expand(_spec() | change)
    assert info.value.field == field and words in str(info.value)


def test_a_grid_of_millions_of_cells_is_refused_at_once_naming_its_size():
    # seven axes of ten values: 10^7 cells, which before this check sat silent for minutes making them
    axes = {k: [round(0.1 * (i + 1), 2) for i in range(10)] for k in
            ("lr", "gamma", "ppo.gae_lambda", "ppo.clip_eps", "ppo.ent_coef", "ppo.vf_coef", "max_grad_norm")}  # fmt: skip
    with pytest.raises(ConfigError) as info:  # refused before any cell is made
        expand(_spec() | {"axes": axes})
    assert info.value.field == "axes" and "the grid has 10,000,000 cells (lr 10 x gamma 10 x" in str(info.value)
    assert "max_cells=4,096" in str(info.value)
    small = {k: v[:2] for k, v in list(axes.items())[:3]}  # 8 cells: the control
    assert len(expand(_spec() | {"axes": small}).cells) == 8
    with pytest.raises(ConfigError, match="the grid has 8 cells .* more than max_cells=4"):
        expand(_spec() | {"axes": small, "max_cells": 4})  # a sweep file may lower (or raise) the limit
    assert len(expand(_spec() | {"axes": small, "zip": {"ppo.ent_coef": [0.0, 0.01]}, "max_cells": 16}).cells) == 16
    with pytest.raises(ConfigError, match="max_cells: must be a positive integer"):
        expand(_spec() | {"max_cells": 0})


def test_cli_refuses_a_bad_sweep_file_before_compiling(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("base: {lr: 1e-3}\naxes: {lr: [1e-3, 3e-3]}\n")
    assert main(["sweep", str(path)]) == 2
    err = capsys.readouterr().err
    assert "axes.lr" in err and "also set in base" in err
    assert not (Path("runs") / "sweeps" / "bad").exists()


def test_overrides_change_base_and_seeds(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(_spec(tmp_path / "out")))  # JSON is YAML
    sweep = load_sweep(path, ["seeds=3", "gamma=0.9"])
    assert sweep.seeds == 3 and all(c.config.gamma == 0.9 and c.config.num_seeds == 3 for c in sweep.cells)
    with pytest.raises(ConfigError, match="lr"):
        load_sweep(path, ["lr=1e-3"])  # an axis can't also be fixed


# ------------------------------------------------------------------- the results store


def test_results_store_round_trip(tmp_path):
    coords = {"cells": [{"name": "a", "algo": "ippo", "env": "MPE_x", "values": {"lr": 0.1}},
                        {"name": "b", "algo": "ippo", "env": "MPE_x", "values": {"lr": 0.2}}],
              "num_seeds": 3, "metrics": ["return", "episode_length"], "num_evals": 4,
              "eval_episodes": 5, "absolute_factor": 10}  # fmt: skip
    store = ResultsStore(tmp_path, coords)
    m = np.arange(6, dtype=np.float32).reshape(3, 2)
    store.write_eval(1, 2, 300, m, np.ones((3, 4), np.float32))  # 4 of 5 episodes: the 5th stays NaN
    store.write_absolute(0, m + 1, np.zeros((3, 50), np.float32))
    res = load(tmp_path.parent / tmp_path.name)
    assert res.eval_steps.tolist() == [[-1, -1, -1, -1], [-1, -1, 300, -1]]
    np.testing.assert_array_equal(res.evals[1, :, 2], m)
    assert np.isnan(res.evals[0]).all() and np.isnan(res.evals[1, :, :2]).all()
    np.testing.assert_array_equal(res.episode_returns[1, :, 2, :4], 1.0)
    assert np.isnan(res.episode_returns[1, :, 2, 4]).all()
    np.testing.assert_array_equal(res.absolute[0], m + 1)
    assert res.cells[1]["values"] == {"lr": 0.2} and res.metrics == ("return", "episode_length")
    assert ResultsStore(tmp_path, coords).written(1) == 1  # reopening keeps what was written
    with pytest.raises(ValueError, match="different sweep"):
        ResultsStore(tmp_path, {**coords, "num_seeds": 4})


def test_a_run_marked_diverged_keeps_its_first_update_and_older_stores_read_as_none_diverged(tmp_path):
    import shutil

    coords = {"cells": [{"name": "a", "algo": "ippo", "env": "MPE_x", "values": {}}], "num_seeds": 3,
              "metrics": ["return"], "num_evals": 2, "eval_episodes": 2, "absolute_factor": 10}  # fmt: skip
    store = ResultsStore(tmp_path, coords)
    assert store.write_diverged(0, {0: 3}) == {0: 3}
    assert store.write_diverged(0, {0: 6, 2: 6}) == {2: 6}  # seed 0 noticed again after a resume: kept at 3
    assert load(tmp_path).diverged_at.tolist() == [[3, -1, 6]]
    shutil.rmtree(tmp_path / "diverged.zarr")  # a store written before runs were marked
    assert load(tmp_path).diverged_at.tolist() == [[-1, -1, -1]]


def test_an_evaluation_without_its_step_reads_as_not_written(tmp_path):
    """The step is written last; values whose step is missing (a kill in between) are NaN."""
    coords = {"cells": [{"name": "a", "algo": "ippo", "env": "e", "values": {}}], "num_seeds": 2,
              "metrics": ["return", "episode_length"], "num_evals": 2, "eval_episodes": 1, "absolute_factor": 10}  # fmt: skip
    store = ResultsStore(tmp_path, coords)
    store.arrays["evals"][0, :, 0, :].write(np.ones((2, 2), np.float32)).result()  # no step: torn evaluation
    assert np.isnan(load(tmp_path).evals).all()


# ------------------------------------------------------------------- running sweeps


def _strip(rows):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def _cells_rows(out: Path) -> dict:
    return {p.name: _strip([json.loads(line) for line in (p / "metrics.jsonl").read_text().splitlines()])
            for p in sorted((out / "cells").iterdir())}  # fmt: skip


def _assert_same_results(a: Path, b: Path) -> None:
    ra, rb = load(a), load(b)
    for field in ("eval_steps", "evals", "episode_returns", "absolute", "absolute_episode_returns"):
        np.testing.assert_array_equal(getattr(ra, field), getattr(rb, field), err_msg=field)
    assert _cells_rows(a) == _cells_rows(b)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One uninterrupted sweep: 4 cells (2 traced lr x 2 structural sharing) x 2 seeds."""
    out = tmp_path_factory.mktemp("sweep") / "ref"
    logs: list[str] = []
    result = run_sweep(expand(_spec(out)), log=logs.append, progress=False)
    return out, result, logs


@pytest.mark.slow
def test_sweep_writes_cells_store_marl_eval_and_report(finished):
    out, result, logs = finished
    assert result.ran == ["param_sharing=shared", "param_sharing=independent"] and result.skipped == []
    res = load(out)
    assert res.evals.shape == (4, 2, 4, 3) and res.metrics == ("return", "episode_length", "win_rate")
    assert not np.isnan(res.evals[..., :2]).any() and np.isnan(res.metric("win_rate")).all()  # MPE: no win condition
    assert res.eval_steps[0].tolist() == [3 * 128, 6 * 128, 9 * 128, 12 * 128]  # env steps of one run
    assert not np.isnan(res.absolute[..., :2]).any() and res.absolute_episode_returns.shape == (4, 2, 40)
    # the best parameters' absolute return is one of theirs, re-measured with 10x the episodes:
    # it must lie within the range of returns those parameters could plausibly get (not a copy)
    assert not np.array_equal(res.absolute[..., 0], res.evals[..., 0].max(axis=2))
    # 2 seeds a cell: the brackets are said not to be intervals, in the log and in report.md
    warned = [line for line in logs if line.startswith("warning: every cell: 2 seed(s) with a value, fewer than 8")]
    assert len(warned) == 1 and warned[0] in (out / "report" / "report.md").read_text()
    # the last line: where the wall time went, every program together (issue 67)
    # (a phase under 0.05 s is left out of the line: only training is sure to be there)
    total = float(re.match(r"time ([0-9.]+) s, whole process: ", logs[-1]).group(1))
    phases = {name: float(sec) for name, sec in re.findall(r"(\S+) ([0-9.]+) s \(\d+%\)", logs[-1])}
    assert "training" in phases and abs(sum(phases.values()) - total) < 0.05 * 8 + 0.1, logs[-1]
    for cell in (out / "cells").iterdir():
        rows = [json.loads(line) for line in (cell / "metrics.jsonl").read_text().splitlines()]
        assert [r["update"] for r in rows] == [3, 6, 9, 12]
        assert all(len(r["eval_return_per_seed"]) == 2 for r in rows)
        assert load_config(cell / "config.yaml").num_seeds == 2
    metrics = json.loads((out / "metrics.json").read_text())
    algos = metrics["MPE"]["simple_spread_v3"]
    assert len(algos) == 4 and set(algos[next(iter(algos))]) == {"seed_0", "seed_1"}
    report = (out / "report" / "report.md").read_text()
    assert all(c["name"] in report for c in res.cells)
    assert (out / "report" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert any("2 compiled program(s)" in line for line in logs)


@pytest.mark.slow
def test_a_diverged_cell_is_left_out_while_the_others_go_on_unchanged(tmp_path, finished):
    """lr=1e37 makes the loss NaN in the first chunk. Before the sweep's NaN guard its NaN
    parameters were evaluated (a fixed action: spread's no-op scores about -25) and that cell
    ranked first by final and absolute return."""
    ref, _, _ = finished

    def sweep(out: Path, guard: bool) -> tuple[list[str], list[dict]]:
        spec = _spec(out, axes={"lr": [1e-3, 1e37]})
        spec["base"] = {**spec["base"], "nan_guard": guard}
        logs: list[str] = []
        run_sweep(expand(spec), log=logs.append, progress=False)
        return logs, summarize(load(out))

    logs, rows = sweep(tmp_path / "guarded", True)
    res, was = load(tmp_path / "guarded"), load(ref)
    assert (res.diverged_at[1] > 0).all() and (res.diverged_at[0] == -1).all()
    assert np.isnan(res.evals[1]).all() and np.isnan(res.absolute[1]).all()  # diverged before the first evaluation
    named = [line.split(":")[0] for line in logs if "diverged by update" in line]
    assert named == ["cell lr=1e+37, seed 0", "cell lr=1e+37, seed 1"]  # once each
    assert rows[1]["seeds"] == 0 and rows[1]["diverged"] == 2 and rows[0]["diverged"] == 0
    assert "| lr=1e+37 | 0/2 (2 diverged) | n/a |" in (tmp_path / "guarded" / "report" / "report.md").read_text()
    # the cell that did not diverge: bitwise what it gave beside lr=3e-3 (the same program shape)
    same = next(c for c, cell in enumerate(was.cells) if cell["values"] == {"lr": 1e-3, "param_sharing": "shared"})
    np.testing.assert_array_equal(res.evals[0], was.evals[same])
    np.testing.assert_array_equal(res.absolute[0], was.absolute[same])
    # negative control: without the guard the NaN parameters' evaluations count, and that cell "wins"
    _, unguarded = sweep(tmp_path / "unguarded", False)
    assert unguarded[1]["seeds"] == 2 and unguarded[1]["final_mean"] > unguarded[0]["final_mean"]
    assert (load(tmp_path / "unguarded").diverged_at == -1).all()


@pytest.mark.slow
def test_killed_sweep_resumes_to_the_same_numbers_and_finished_cells_are_not_rerun(tmp_path, finished):
    ref, _, _ = finished
    out = tmp_path / "killed"
    # "killed" after 6 chunks: program 1 done (4 chunks), program 2 stopped after its update 6
    partial = run_sweep(expand(_spec(out)), log=lambda s: None, progress=False, max_chunks=6)
    assert partial.report == {} and json.loads((out / "progress.json").read_text())["done"] == ["param_sharing=shared"]
    assert np.isnan(load(out).evals[1]).any()  # the second program's cells are unfinished
    logs: list[str] = []
    resumed = run_sweep(expand(_spec(out)), log=logs.append, progress=False)
    assert resumed.skipped == ["param_sharing=shared"] and resumed.ran == ["param_sharing=independent"]
    assert any("resumed at update 6 of 12" in line for line in logs)
    _assert_same_results(ref, out)
    again = run_sweep(expand(_spec(out)), log=lambda s: None, progress=False)  # nothing left to run
    assert again.ran == [] and len(again.skipped) == 2
    _assert_same_results(ref, out)


@pytest.mark.slow
def test_a_sweep_whose_newest_checkpoint_is_damaged_resumes_from_the_one_before(tmp_path, finished):
    """Sweeps resume through the run driver's `restore`, as `marljax train` does: the damaged
    checkpoint is skipped with a warning and moved aside, and the program saves that update again.
    (The sweep's own resume path restored the older checkpoint but left the damaged one in place.)"""
    ref, _, _ = finished
    out = tmp_path / "damaged"
    run_sweep(expand(_spec(out)), log=lambda s: None, progress=False, max_chunks=6)  # program 2 at update 6
    checkpoints = out / "programs" / "1" / "checkpoints"
    assert sorted(int(p.name) for p in checkpoints.iterdir() if p.name.isdigit()) == [3, 6]
    victim = max((p for p in (checkpoints / "6" / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    logs: list[str] = []
    run_sweep(expand(_spec(out)), log=logs.append, progress=False)
    assert any("checkpoints/6 is unusable" in line for line in logs), logs
    assert any("resumed at update 3 of 12" in line for line in logs)
    assert any("moved the unusable checkpoint" in line for line in logs)
    assert (out / "programs" / "1" / "checkpoints_unusable").is_dir()
    _assert_same_results(ref, out)


@pytest.mark.slow
def test_rerunning_a_sweep_from_scratch_gives_identical_numbers(tmp_path, finished):
    ref, _, _ = finished
    run_sweep(expand(_spec(tmp_path / "again")), log=lambda s: None, progress=False)
    _assert_same_results(ref, tmp_path / "again")


def test_a_different_sweep_in_the_same_out_dir_is_refused(tmp_path, finished):
    ref, _, _ = finished
    with pytest.raises(ConfigError, match="different sweep"):
        run_sweep(expand(_spec(ref, seeds=3)), log=lambda s: None, progress=False)


@pytest.mark.nightly  # since 2026-11-30: CI's time (issue 63); 49 s in CI's quick run
@pytest.mark.optimized  # its tolerance is a drift measured on optimised compiles (tests/conftest.py)
def test_a_vmapped_row_runs_what_train_runs_for_its_cell():
    """Row (cell c, seed i) of a program is seed i of `marljax train` on cell c's config.

    Bitwise where the two programs have the same vmap width: the single cell's trainer, vmapped over
    as many rows as the program (its two seeds twice), gives rows equal bit for bit, state and
    metrics, for 4 updates. At train's own width (2 rows, not 4) XLA's CPU reductions run in another
    order: measured there, the whole tree agrees to 6e-8 after 1 update, after which Adam can turn a
    gradient element near its eps into a 2e-3 step (seen at update 2 on an Intel Xeon), so that
    width is compared for 1 update at 5e-7. Negative control: cell 1's rows are not cell 0's run."""
    from marljax.parallel.mesh import seed_keys
    from marljax.sweeps.runner import row_hparams

    sweep = expand(_spec())
    program = sweep.programs[0]
    trainer = make_trainer(program.config, make_adapter(program.config))  # unsharded
    keys = jnp.tile(seed_keys(0, 2), (2, 1))  # [4, 2]: rows (cell, seed)
    state = jax.vmap(trainer.init)(keys)
    state = state.replace(learner=state.learner.replace(hparams=row_hparams(program, 2, type(state.learner.hparams))))
    swept = jax.jit(jax.vmap(lambda s: trainer.run_updates(s, 4)))(state)
    rows = lambda tree, c: jax.tree.map(lambda x: x[2 * c : 2 * c + 2], tree)  # noqa: E731
    singles = [make_trainer(cell.config, make_adapter(cell.config)) for cell in program.cells]
    alone = []
    for single in singles:
        out = jax.jit(jax.vmap(lambda s: single.run_updates(s, 4)))(jax.vmap(single.init)(keys))  # noqa: B023 (traced here, at once)
        alone.append(rows(out, 0))
    for c in range(len(program.cells)):
        assert_bitwise(rows(swept, c), alone[c])
    with pytest.raises(AssertionError, match="differs"):  # the cells really trained with their own lr
        assert_bitwise(rows(swept, 1), alone[0])
    assert max_abs_diff(rows(swept, 1)[0].learner.params, alone[0][0].learner.params) > 1e-3

    # train's own width: 2 rows, one update, equal to reduction order
    narrow = jax.jit(jax.vmap(lambda s: singles[0].run_updates(s, 1)))(jax.vmap(singles[0].init)(seed_keys(0, 2)))
    wide = jax.jit(jax.vmap(lambda s: trainer.run_updates(s, 1)))(state)
    assert_close(rows(wide, 0), narrow, atol=5e-7)


@pytest.mark.slow
def test_report_command_renders(finished, tmp_path, capsys):
    ref, _, _ = finished
    assert main(["report", str(ref)]) == 0
    printed = capsys.readouterr().out
    assert "| cell |" in printed and "lr=0.003,param_sharing=independent" in printed
    assert main(["report", str(tmp_path)]) == 2


@pytest.mark.slow
def test_compare_takes_sweep_cells(finished, tmp_path, capsys):
    """`marljax compare SWEEP_DIR:CELL ...`: each seed's final value read from the cell's metrics.jsonl
    is the results store's final evaluation return of that cell and seed."""
    ref, _, _ = finished
    res = load(ref)
    names = [c["name"] for c in res.cells[:2]]
    assert main(["compare", *(f"{ref}:{name}" for name in names), "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert all(f"| {ref}:{name} | ippo | 2/2 | {12 * 128} | " in printed for name in names)
    with (tmp_path / "final.csv").open() as f:
        final = list(csv.DictReader(f))
    reported = summarize(res)  # `marljax report`'s table: compare's IQM and CI must be the same figures
    for c, row in enumerate(final):
        np.testing.assert_allclose(json.loads(row["final_per_seed"]), res.final("return")[c], rtol=1e-6)
        for column in ("final_iqm", "final_iqm_low", "final_iqm_high", "final_mean"):
            np.testing.assert_allclose(float(row[column]), reported[c][column], rtol=1e-6, err_msg=column)
    assert (tmp_path / "improvement.csv").is_file()


@pytest.mark.slow
@pytest.mark.nightly  # nightly since 2026-11-28: CI's time (issue 63); a bench's figures, not a contract of training
def test_bench_sweep_times_the_same_runs_both_ways(capfd):
    from marljax.bench.sweep import run_sweep_bench

    config = load_config(None, ["num_envs=8", "num_steps=16", "total_timesteps=512", "num_chunks=2", "progress=false"])
    result = run_sweep_bench(config, log=print, lrs=(1e-3,), seeds=2)
    last = capfd.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == result
    assert result["runs"] == 2 and result["vmapped_run_s"] > 0 and result["sequential_run_s"] > 0
    # the vmapped rows are the sequential runs up to reduction order (2 rows vs 1 reduce in another order;
    # measured on the sweep test above: <1e-7 after 1 update, up to 1.1e-3 of a leaf once Adam amplifies a
    # near-eps gradient element); a row run with another seed or lr differs by more than 1e-1
    assert result["max_param_rel_diff"] < 2e-2
    assert abs(result["return_vmapped"] - result["return_sequential"]) < 1e-3


def test_a_program_that_cannot_run_is_refused_before_out_dir_is_touched(tmp_path):
    spec = _spec(tmp_path / "out") | {"base": {**TINY, "mode": "async"}}
    with pytest.raises(ConfigError, match="program param_sharing=shared: mode"):
        run_sweep(expand(spec), log=lambda s: None, progress=False)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------- moved and damaged sweep directories


def test_a_moved_sweep_directory_continues(tmp_path, finished):
    """Before: "holds a different sweep" (only the stored out_dir differed), and the suggested
    overwrite=true threw the results away."""
    import shutil

    ref, _, _ = finished
    moved = tmp_path / "moved"
    shutil.copytree(ref, moved)
    logs: list[str] = []
    again = run_sweep(expand(_spec(moved)), log=logs.append, progress=False)
    assert again.ran == [] and len(again.skipped) == 2
    assert any(f"holds this sweep, started in {ref}: continuing it here" in line for line in logs), logs
    _assert_same_results(ref, moved)


@pytest.mark.parametrize(
    "name, words",
    [("progress.json", "is not valid JSON .*remove it and rerun the same command"),
     ("results/coords.json", "is not valid JSON .*remove it and rerun the same command"),
     ("sweep.yaml", "is damaged .*restore it from a copy to continue the sweep")],
)  # fmt: skip
def test_a_damaged_sweep_file_is_named_with_the_way_out(tmp_path, finished, capsys, name, words):
    """Before: an unnamed JSONDecodeError (a yaml error for sweep.yaml). Following the advice
    continues the sweep with its results kept."""
    import shutil

    from marljax.files import DamagedFile

    ref, _, _ = finished
    out = tmp_path / "sweep"
    shutil.copytree(ref, out)
    (out / name).write_text('{"done": ["param_sh')
    with pytest.raises(DamagedFile, match=rf"{out / name} {words}"):
        run_sweep(expand(_spec(out)), log=lambda s: None, progress=False)
    if name == "results/coords.json":
        assert main(["report", str(out)]) == 1
        assert f"{out / name} is not valid JSON" in capsys.readouterr().err
    if name == "sweep.yaml":
        shutil.copy(ref / name, out / name)  # "restore it from a copy"
    else:
        (out / name).unlink()
    run_sweep(expand(_spec(out)), log=lambda s: None, progress=False)
    _assert_same_results(ref, out)


@pytest.mark.slow
def test_sigterm_stops_a_sweep_at_a_chunk_end_with_a_checkpoint_and_a_rerun_resumes_there(tmp_path):
    """As `marljax train`: the first SIGTERM lets the chunk finish, saves, exits 143 naming how to
    continue (the same command); the rerun resumes the program at that update, not from scratch."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "sweep"
    long = {"num_envs": 4, "num_steps": 8, "total_timesteps": 128000, "eval_every": 4, "eval_episodes": 2,
            "checkpoint_every": 0, "hidden_size": 16, "plot": False}  # 4000 updates, a chunk (and evaluation) every 4  # fmt: skip
    path = tmp_path / "long.yaml"
    path.write_text(json.dumps({"base": long, "axes": {"lr": [1e-3, 3e-3]}, "seeds": 1, "out_dir": str(out)}))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "marljax.cli", "sweep", str(path), "progress=false"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    for line in proc.stdout:
        if "compiled in" in line:
            break
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err[-2000:]
    assert "stopped by SIGTERM at update" in err and "the same `marljax sweep` command" in err, err[-2000:]
    assert "Traceback" not in err
    update = int(err.split("stopped by SIGTERM at update ")[1].split(";")[0])
    assert 0 < update < 4000 and update % 4 == 0
    assert (out / "programs" / "0" / "checkpoints" / str(update)).is_dir()
    for cell in (out / "cells").iterdir():  # every cell's rows reach the stop, none beyond
        assert json.loads((cell / "metrics.jsonl").read_text().splitlines()[-1])["update"] == update
    logs: list[str] = []
    partial = run_sweep(load_sweep(path, []), log=logs.append, progress=False, max_chunks=1)
    assert len(partial.ran) == 1 and partial.report == {}  # one program (lr is traced), stopped by the budget
    assert any(f"resumed at update {update} of 4000" in line for line in logs), logs


def test_a_sweep_that_streams_to_a_tracker_without_a_login_is_refused_before_it_writes(tmp_path, monkeypatch):
    """The run's pre-flight (tests/test_trackers.py), for a sweep: refused naming log.offline, nothing written.
    Control: with the login set, the same check passes (the sweep itself is not run here)."""
    from marljax.run_settings import check_logins

    monkeypatch.delenv("NEPTUNE_API_TOKEN", raising=False)
    spec = _spec(tmp_path / "sweep")
    spec["base"] = {**spec["base"], "log": {"backends": ["neptune"], "offline": False}}
    sweep = expand(spec)
    with pytest.raises(ConfigError, match=r"^log\.offline: false streams to neptune, which finds no login here"):
        run_sweep(sweep, log=lambda line: None, progress=False)
    assert not (tmp_path / "sweep").exists()
    monkeypatch.setenv("NEPTUNE_API_TOKEN", "x" * 40)
    check_logins(sweep.programs[0].config.log)


def test_the_few_seeds_note_names_the_cells_below_eight_and_is_silent_at_eight():
    from marljax.sweeps.report import few_seeds_note

    rows = [{"cell": "lr=0.001", "seeds": 8}, {"cell": "lr=0.01", "seeds": 3}]
    assert few_seeds_note(rows).startswith("warning: lr=0.01: 3 seed(s) with a value, fewer than 8")
    assert few_seeds_note(rows[:1]) is None  # 8 seeds: an interval, nothing to say
