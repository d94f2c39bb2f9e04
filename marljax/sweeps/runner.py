"""`marljax sweep FILE`: every cell of a sweep with its seeds, traced axes vmapped in one program.

A program (see `sweep_spec`) runs R = cells x seeds rows as the `seed` axis of one
compiled chunk: row (cell c, seed i) starts from seed index i's key (the same key
in every cell, so cells are compared on paired seeds) and carries cell c's
hyperparameters in its state (`LearnerState.hparams`). Each row therefore runs what
`marljax train cells/<c>/config.yaml` runs for seed i, and the rows never mix.

Chunks end at every evaluation (`eval_every` updates; by default 20 evaluations per
run). After each: one metrics.jsonl row per cell, an evaluation of every row written
to the results store, each row's best parameters so far kept (by evaluation return),
a checkpoint of the program when one is due. At the end of a program its best
parameters are re-evaluated with 10x the episodes (the absolute metric).

    <out_dir>/sweep.yaml             the sweep as resolved; a rerun must match it
    <out_dir>/progress.json          programs finished (a rerun skips them)
    <out_dir>/cells/<cell>/          config.yaml, metrics.jsonl, returns.png: like `marljax train`
    <out_dir>/programs/<p>/checkpoints   a killed program resumes from here
    <out_dir>/results/               the results store (marljax.sweeps.results)
    <out_dir>/metrics.json           marl-eval's format
    <out_dir>/report/                report.md, report.csv, curves.png, final.png

Rerunning the same command continues a killed sweep: finished programs are skipped,
an unfinished one resumes from its newest checkpoint, and because every random draw
is keyed by seed index and update, the numbers come out as in an uninterrupted sweep.
"""

from __future__ import annotations

import functools
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import yaml
from jax.sharding import PartitionSpec as P

from marljax.envs.host import is_host_env
from marljax.files import DamagedFile, read_json, write_text_atomic
from marljax.parallel import distributed
from marljax.parallel.distributed import host_values
from marljax.parallel.mesh import SEED, compile_chunks, seed_keys, shard_trainer
from marljax.parallel.placement import place, shardings
from marljax.run_settings import check_logins
from marljax.schema import ConfigError
from marljax.sweeps.results import METRICS, ResultsStore, load
from marljax.sweeps.spec import Program, Sweep, located
from marljax.train import compile_cache
from marljax.train.checkpoint import Checkpointer, abstract_like
from marljax.train.chunks import ChunkBudget, chunk_sizes
from marljax.train.driver import Checkpoints, Driver, Progress, RowSink, restore, rows_kept
from marljax.train.evaluate import ABSOLUTE_FACTOR, Evaluation, eval_keys, keep_best, make_evaluator
from marljax.train.memory import MemoryEstimate
from marljax.train.metrics import plot_returns, read_jsonl
from marljax.train.records import config_yaml
from marljax.train.timing import RunClock, Ticker
from marljax.train.trackers import Trackers
from marljax.train.up_front import check_run, sync_estimate
from marljax.train.wiring import prepare
from marljax.types import HParams, hparams_of

DEFAULT_EVALUATIONS = 20  # eval_every when the sweep leaves it 0: this many evaluations per run
_ABSOLUTE_EVALUATION = 0x7FFFFFFF  # the key index of the absolute metric's episodes


class SweepResult(NamedTuple):
    out_dir: Path
    ran: list[str]  # programs run (or continued) by this call
    skipped: list[str]  # programs already finished
    report: dict  # name -> path of the report files


def eval_every(config) -> int:
    return config.eval_every or max(1, config.num_updates // DEFAULT_EVALUATIONS)


def _prepare(program: Program):
    """Env, mesh and trainer of a program: everything that can fail on input, before compiling."""
    config = program.config
    if is_host_env(config.env) or config.mode != "anakin":
        raise ConfigError(f"program {program.name}: mode", "sweeps run on device (mode=anakin, JaxMARL envs)")
    with located(f"program {program.name}"):
        return prepare(config)


def _estimate(program: Program, trainer) -> MemoryEstimate:
    """The bytes one program holds: its cells x seeds rows, with each row's best parameters."""
    shapes = jax.eval_shape(jax.vmap(trainer.init), jax.ShapeDtypeStruct((program.rows, 2), jnp.uint32))
    return sync_estimate(program.config, trainer, shapes, best_params=True)


def _coords(sweep: Sweep) -> dict:
    return {
        "cells": [
            {"name": c.name, "algo": c.config.algo, "env": c.config.env, "values": c.values} for c in sweep.cells
        ],
        "num_seeds": sweep.seeds,
        "metrics": list(METRICS),
        "num_evals": max(len(chunk_sizes(p.config.num_updates, eval_every(p.config))) for p in sweep.programs),
        "eval_episodes": max(c.config.eval_episodes for c in sweep.cells),
        "absolute_factor": ABSOLUTE_FACTOR,
    }


def _claim_out_dir(sweep: Sweep, overwrite: bool, log) -> None:
    """Start or continue the sweep in out_dir; refuse a directory that holds a different sweep."""
    out = sweep.out_dir
    spec_path = out / "sweep.yaml"
    spec = _comparable(sweep.spec)
    if overwrite and out.exists():
        log(f"overwrite=true: removing {out}")
        shutil.rmtree(out)
    if spec_path.exists():
        saved = _saved_spec(spec_path)
        same = _comparable(saved) == spec
        if same and saved.get("out_dir") not in (None, str(out)):
            log(f"{out} holds this sweep, started in {saved['out_dir']}: continuing it here")
        if not same:
            raise ConfigError(
                "out_dir",
                f"{out} holds a different sweep (its sweep.yaml differs); continue that one with its own file, "
                "replace it with overwrite=true, or set out_dir",
            )
    elif out.exists() and any(out.iterdir()):
        raise ConfigError("out_dir", f"{out} is not empty and holds no sweep; choose another out_dir")
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(spec_path, yaml.safe_dump({**spec, "out_dir": str(out)}, sort_keys=False))


def _saved_spec(path: Path) -> dict:
    """The sweep.yaml a sweep directory holds; DamagedFile when it does not read as a mapping."""
    try:
        saved = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        saved = exc
    if not isinstance(saved, dict):
        raise DamagedFile(
            f"{path} is damaged (not the mapping marljax wrote); restore it from a copy to continue the "
            "sweep, or start over with overwrite=true (which removes its results)"
        )
    return saved


def _comparable(spec: dict) -> dict:
    """The sweep without `base.distributed` and `out_dir`: where it runs, not what it runs (a
    sweep directory moved or copied elsewhere continues)."""
    base = {k: v for k, v in (spec.get("base") or {}).items() if k != "distributed"}
    return {k: v for k, v in spec.items() if k != "out_dir"} | {"base": base}


def _done(out: Path) -> list[str]:
    """The programs finished, as progress.json lists them; DamagedFile when it does not read."""
    path = out / "progress.json"
    if not path.exists():
        return []
    remedy = "remove it and rerun the same command: each program continues from its newest checkpoint"
    progress = read_json(path, remedy)
    done = progress.get("done") if isinstance(progress, dict) else None
    if not isinstance(done, list) or not all(isinstance(name, str) for name in done):
        raise DamagedFile(f"{path} holds no list of finished programs under 'done'; {remedy}")
    return done


def _mark_done(out: Path, name: str) -> None:
    write_text_atomic(out / "progress.json", json.dumps({"done": _done(out) + [name]}))


def run_sweep(
    sweep: Sweep,
    log: Callable[[str], None] = print,
    *,
    overwrite: bool = False,
    progress: bool = True,
    max_chunks: int | None = None,
    started: float | None = None,
) -> SweepResult:
    """Run (or continue) every program of `sweep`, then write marl-eval's JSON and the report;
    the last line says where the wall time went (every program together).

    `max_chunks` stops after that many chunks in all, as if the process had been killed
    there (tests); what was written stays valid and a rerun continues from it. `started`: the
    epoch time the wall time counts from (`marljax sweep` passes its process's start).
    """
    clock = RunClock(started).listen()
    try:
        return _sweep(sweep, log, overwrite, progress, max_chunks, clock)
    finally:
        clock.close()


def _sweep(sweep: Sweep, log, overwrite: bool, progress: bool, max_chunks: int | None, clock: RunClock) -> SweepResult:
    first = sweep.programs[0].config
    distributed.initialize(first.distributed, first.to_dict, sweep.out_dir, "rerun the same marljax sweep command")
    primary = distributed.is_primary()
    if not primary:  # multi-host: process 0 alone logs and writes files; all train and checkpoint
        log, progress = (lambda _line: None), False
    compile_cache.use(sweep.programs[0].config.compile_cache, log)  # before anything compiles
    if primary:  # process 0 alone opens the trackers
        check_logins(sweep.programs[0].config.log)
    with clock.phase("build"):
        prepared = [_prepare(p) for p in sweep.programs]  # errors before anything runs
    for program, (_, mesh, trainer) in zip(sweep.programs, prepared):  # programs run one after another
        with located(f"program {program.name}"):
            check_run(
                program.config,
                functools.partial(_estimate, program, trainer),
                mesh.devices.flat,
                log,
                eval_every(program.config),
                seeds_field="cells x seeds",
            )
    if primary:
        _claim_out_dir(sweep, overwrite, log)
    distributed.barrier("marljax_sweep_out_dir")
    log(sweep.describe())
    store = ResultsStore(sweep.out_dir / "results", _coords(sweep)) if primary else None
    done = _done(sweep.out_dir)
    bar = Progress(  # in runs (cells x seeds) finished
        progress,
        len(sweep.cells) * sweep.seeds,
        sum(len(p.cells) * sweep.seeds for p in sweep.programs if p.name in done),
        unit=" runs",
        desc="sweep, runs finished",
    )
    ran, skipped, budget = [], [], ChunkBudget(max_chunks)
    try:
        for program, (env, mesh, trainer) in zip(sweep.programs, prepared):
            if program.name in done:
                skipped.append(program.name)
                continue
            ran.append(program.name)
            finished = _run_program(sweep, program, env, mesh, trainer, store, log, progress, budget, clock)
            if not finished:
                return SweepResult(sweep.out_dir, ran, skipped, {})
            if primary:
                _mark_done(sweep.out_dir, program.name)
            bar.advance(len(program.cells) * sweep.seeds)
    finally:
        bar.close()
    if skipped:
        log(f"already finished, not rerun: {', '.join(skipped)}")
    with clock.phase("plot"):  # the report and its figures
        paths = finish(sweep.out_dir, log) if primary else {}
    log(clock.line())
    return SweepResult(sweep.out_dir, ran, skipped, paths)


def finish(out_dir: Path, log: Callable[[str], None] = print) -> dict:
    """marl-eval's metrics.json and the report of the sweep in `out_dir` (what `marljax report` does)."""
    from marljax.sweeps.marl_eval import write_marl_eval
    from marljax.sweeps.report import few_seeds_note, format_table, summarize, write_report

    results, out_dir = load(out_dir), Path(out_dir)
    marl_eval = write_marl_eval(results, out_dir / "metrics.json")
    rows = summarize(results)
    paths = write_report(results, out_dir / "report", rows=rows)
    log(format_table(rows))
    if note := few_seeds_note(rows):
        log(note)
    log(f"report: {paths['report.md']}; marl-eval: {marl_eval}")
    return paths


def row_hparams(program: Program, seeds: int, kind: type[HParams]) -> HParams:
    """Every row's traced hyperparameters [R] (`kind`: the algorithm's class of them): cell c's
    values for its `seeds` rows."""
    return hparams_of(kind, lambda key: [c.config.value(key) for c in program.cells for _ in range(seeds)])


def _run_program(
    sweep: Sweep,
    program: Program,
    env,
    mesh,
    trainer,
    store: ResultsStore | None,
    log,
    progress,
    budget,
    clock: RunClock,
) -> bool:
    """Run one program to its end (True) or until the chunk budget is spent (False)."""
    config, S = program.config, sweep.seeds
    fns = shard_trainer(trainer, mesh)
    every = eval_every(config)
    schedule = chunk_sizes(config.num_updates, every)
    seed_index = jnp.tile(jnp.arange(S), len(program.cells))  # [R]
    hp_sharding, hp_kind = fns.shardings.learner.hparams, type(fns.shapes.learner.hparams)
    per_row = shardings(fns.mesh, P(SEED))  # [R]: split over `seed`, as every row's metrics are

    def fresh():
        state = fns.init(jnp.tile(seed_keys(config.seed, S), (len(program.cells), 1)))
        hparams = place(row_hparams(program, S, hp_kind), hp_sharding)
        state = state.replace(learner=state.learner.replace(hparams=hparams))
        best = jax.tree.map(lambda x: x.copy(), state.learner.params)  # a copy: the chunk donates the state
        return {
            "state": state,
            "best_params": best,
            "best_score": place(jnp.full(program.rows, -jnp.inf), per_row),
        }

    target = abstract_like(
        {
            "state": fns.shapes,
            "best_params": fns.shapes.learner.params,
            "best_score": jax.ShapeDtypeStruct((program.rows,), jnp.float32),
        },
        {"state": fns.shardings, "best_params": fns.shardings.learner.params, "best_score": per_row},
    )
    checkpointer = Checkpointer(
        sweep.out_dir / "programs" / str(program.index) / "checkpoints", config.keep_checkpoints, log
    )
    try:
        start, restored = 0, restore(checkpointer, target)
        if restored is not None:
            run, start = restored[0], int(restored[1]["update"])
            log(f"program {program.name}: resumed at update {start} of {config.num_updates}")
        else:
            run = fresh()
        sinks = _cell_sinks(sweep, program, start)
        done_chunks = len(chunk_sizes(start, every)) if start else 0
        todo = schedule[done_chunks:]
        t0 = time.perf_counter()
        log(
            f"program {program.index + 1}/{len(sweep.programs)} {program.name}: compiling its chunk program "
            f"({program.rows} rows)"
        )
        with clock.phase("compile"), Ticker("compiling", progress):
            compiled = compile_chunks(fns, run["state"], todo)
        log(
            f"program {program.index + 1}/{len(sweep.programs)} {program.name}: {len(program.cells)} cell(s) x {S} seeds "
            f"= {program.rows} rows, {config.num_updates} updates, evaluation every {every}; compiled in "
            f"{time.perf_counter() - t0:.1f}s"
        )
        k = done_chunks  # the evaluation's index in the results store

        def keep(state, result) -> dict:
            """Each row's best parameters so far (by evaluation return): with the state, what a checkpoint saves."""
            nonlocal run
            score = jnp.mean(result.returns, axis=1)  # [R]
            best_params, best_score = keep_best(run["best_params"], run["best_score"], state.learner.params, score)
            run = {"state": state, "best_params": best_params, "best_score": best_score}
            return run

        def record(rows: list[dict], result, update: int) -> None:
            """Evaluation k of every cell in the results store (process 0)."""
            nonlocal k
            if store is not None:
                for ci, cell in enumerate(program.cells):
                    cell_rows = slice(ci * S, (ci + 1) * S)
                    store.write_eval(
                        cell.index,
                        k,
                        update * config.run_steps_per_update,
                        _eval_metrics(result, cell_rows, env.has_win),
                        result.returns[cell_rows],
                    )
            k += 1

        def diverged(rows: dict[int, str], update: int) -> None:
            """Rows whose loss or parameters became non-finite: marked in the results store (the
            first update is kept across resumes) and named once in the log."""
            for ci, cell in enumerate(program.cells):
                seeds = {r - ci * S: what for r, what in rows.items() if ci * S <= r < (ci + 1) * S}
                new = seeds if store is None else store.write_diverged(cell.index, dict.fromkeys(seeds, update))
                for seed in new:
                    log(
                        f"cell {cell.name}, seed {seed}: diverged by update {update} ({seeds[seed]}); "
                        "its later evaluations are left out, the other runs go on"
                    )

        meta = {"config": config.to_dict(), "program": program.name}
        driver = Driver(
            config,
            env,
            start=start,
            groups=[slice(ci * S, (ci + 1) * S) for ci in range(len(program.cells))],
            sinks=sinks,
            checkpoints=Checkpoints(checkpointer, config, lambda update: meta, start, clock=clock),
            progress=Progress(
                progress,
                config.num_updates,
                start,
                len(program.cells) * S * config.run_steps_per_update,
                show_row=True,
                unit=" env-steps",
                desc=program.name[:40],
                leave=False,
            ),
            evaluation=Evaluation(trainer, seed_index, every, config.num_updates),
            on_eval=keep,
            on_rows=record,
            guard=trainer.losses if config.nan_guard else None,
            on_diverged=diverged,
        )

        ok = finished = False
        try:
            _, finished = driver.run_chunks(
                compiled,
                run["state"],
                todo,
                budget,
                "the same `marljax sweep` command (it resumes every unfinished program)",
            )
            ok = True
            if not finished:
                return False
        finally:
            driver.close(failed=not ok)
            if ok and not finished:  # stopped to continue later: the trackers' runs continue then
                for sink in sinks:
                    sink.finish(None)
        absolute = make_evaluator(trainer, config.eval_episodes * ABSOLUTE_FACTOR, config.eval_greedy)
        result = host_values(absolute(run["best_params"], eval_keys(config.seed, seed_index, _ABSOLUTE_EVALUATION)))
        never = ~np.isfinite(host_values(run["best_score"]))  # [R] no finite evaluation: diverged before the first
        if store is None:  # process 0 writes
            return True
        for ci, cell in enumerate(program.cells):
            rows = slice(ci * S, (ci + 1) * S)
            metrics, returns = _eval_metrics(result, rows, env.has_win), np.array(result.returns[rows])
            metrics[never[rows]], returns[never[rows]] = np.nan, np.nan  # not the initial parameters' return
            store.write_absolute(cell.index, metrics, returns)
            cell_dir = sweep.out_dir / "cells" / cell.dirname
            plot = cell_dir / "returns.png" if config.plot else None
            if plot is not None:
                plot_returns(read_jsonl(cell_dir / "metrics.jsonl"), plot, f"{cell.name}, {S} seed(s)")
            sinks[ci].finish(plot)
        return True
    finally:
        checkpointer.close()


def _eval_metrics(result, rows: slice, wins: bool) -> np.ndarray:
    """[S, M] in METRICS order: mean return, episode length and win rate (NaN where the env has
    no win condition) of each row's episodes."""
    won = result.won[rows].mean(axis=1) if wins else np.full(result.won[rows].shape[:1], np.nan)
    return np.stack([result.returns[rows].mean(axis=1), result.lengths[rows].mean(axis=1), won], axis=1)


def _cell_sinks(sweep: Sweep, program: Program, start: int) -> list[RowSink]:
    """Each cell's directory like a `marljax train` run's (metrics rows after `start` are dropped),
    and its row sink: metrics.jsonl and one tracker run per cell, grouped under the sweep's name
    (`log.group` overrides). None on processes other than 0."""
    if not distributed.is_primary():
        return []
    sinks = []
    for cell in program.cells:
        cell_dir = sweep.out_dir / "cells" / cell.dirname
        cell_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cell_dir / "config.yaml", config_yaml(cell.config))
        path = cell_dir / "metrics.jsonl"
        rows_kept(path, start, print)
        trackers = Trackers(cell.config, cell_dir, name=cell.name, group=sweep.out_dir.name, store=sweep.out_dir)
        sinks.append(RowSink(path, trackers, config_yaml(cell.config)))
    return sinks
