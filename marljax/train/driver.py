"""The one run driver: what the host does between chunks, for every source of training chunks.

A *source* runs the training and hands each finished chunk of updates to `Driver.step`:

    source                                        what it hands over (a `Chunk`)
    ────────────────────────────────────────      ──────────────────────────────────────────────
    marljax train    (train/loop.py)               the jitted chunk program's state and metrics
    mode=async       (train/actor_learner.py)      the learner after n updates, the async counters
    marljax sweep    (sweeps/runner.py)            the vmapped program: rows = cells x seeds

`Driver.step` then calls each part once, in this order (the brax `progress_fn` /
big_vision evaluator shape, on the host, never inside jit):

    evaluation (when due) ─► metrics rows (one per group of rows: a run, or a sweep's cell)
      ─► metrics.jsonl + trackers + `on_row` (`RowSink`) ─► NaN guard (`nan_guard`; a sweep's
      rows are independent runs, so there it marks a diverged row before the evaluation instead)
      ─► checkpoint, when due or on a stop (`Checkpoints`) ─► progress bar (`Progress`)

Around the loop: `resume` (the newest good checkpoint, or a fresh start), `StopControl`
(SIGINT/SIGTERM noted, and the processes of a multi-host run agreeing to stop at a chunk end),
`Driver.close` (files closed; trackers ended as failed when the run failed).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from marljax.config import Config
from marljax.parallel import distributed
from marljax.parallel.distributed import any_process, host_values
from marljax.schema import ConfigError
from marljax.train.checkpoint import Checkpointer, CheckpointError, check_resumable, with_weak_types
from marljax.train.chunks import ChunkBudget, Stopped, StopSignals, checkpoint_due, run_chunks
from marljax.train.evaluate import EvalResult, Evaluation, eval_fields
from marljax.train.metrics import JsonlWriter, chunk_row, first_non_finite, read_rows_kept, write_jsonl_atomic
from marljax.train.timing import RunClock
from marljax.train.trackers import Trackers
from marljax.types import UpdateMetrics


class TrainingDiverged(RuntimeError):
    """A loss became NaN or infinite; the message names the update and the metric."""


class Chunk(NamedTuple):
    """One finished chunk of `n` updates, as a source hands it to `Driver.step`."""

    state: Any  # what a checkpoint saves
    metrics: UpdateMetrics  # host copies: values [R, n], episodes' fields [R, n, ...]
    n: int
    wall: float  # seconds the chunk took
    params: Any  # the acting parameters, leaves [R, ...]: evaluated and checked by the NaN guard
    extra: dict | None = None  # further fields of every row (the async counters)
    extra_meta: dict | None = None  # further fields of the checkpoint's meta


# ---------------------------------------------------------------------------------- resume
def restore(checkpointer: Checkpointer, target, check: Callable[[dict], None] | None = None) -> tuple[Any, dict] | None:
    """(state, meta) of the newest checkpoint that reads back intact, restored into `target`
    (ShapeDtypeStructs with the shardings), every newer one (unusable) moved aside so that the run
    saves those updates afresh; None when there is no checkpoint. `check(meta)` sees the newest
    readable meta before anything is restored and may refuse. Checkpoints there but none readable:
    CheckpointError, nothing changed. Both `marljax train resume=true` and a sweep's programs
    resume through here."""
    if not checkpointer.steps():
        return None
    found = checkpointer.newest_meta()
    if found is None:  # every checkpoint there is unreadable
        raise CheckpointError(
            f"no checkpoint in {checkpointer.directory} could be read (see the warnings above); "
            "nothing was changed: move it aside, or start over with overwrite=true"
        )
    if check is not None:
        check(found[1])
    restored = checkpointer.restore_latest(target)
    if restored is None:
        raise CheckpointError(f"no checkpoint in {checkpointer.directory} could be read; see the warnings above")
    checkpointer.set_aside_newer(int(restored[1]["update"]))
    return with_weak_types(restored[0], target), restored[1]


def resume(config: Config, target, fresh: Callable, checkpointer: Checkpointer, metrics_path: Path, log):
    """(state, first update, metrics rows kept, the checkpoint's meta or {}): with `resume=true` the
    newest good checkpoint (its metrics rows up to it kept, the later ones dropped), else `fresh()`.

    target: ShapeDtypeStructs with the shardings to restore into.
    """
    restored = None
    if config.resume:
        restored = restore(
            checkpointer, target, lambda meta: check_resumable(meta["config"], config, checkpointer.directory)
        )
    if restored is not None:
        state, meta = restored
        start = int(meta["update"])
        if start > config.num_updates:
            raise ConfigError(
                "total_timesteps",
                f"the run in {checkpointer.directory.parent} is already at update {start}, past this config's "
                f"{config.num_updates} updates; raise total_timesteps to continue it",
            )
        rows = rows_kept(metrics_path, start, log) if distributed.is_primary() else []
        log(f"resumed from {checkpointer.directory / str(start)} (update {start} of {config.num_updates})")
        return state, start, rows, meta
    if config.resume:
        log(f"{_why_no_checkpoint(checkpointer.directory)}; starting from scratch")
    if metrics_path.exists() and distributed.is_primary():
        if config.resume and metrics_path.stat().st_size:  # rows of a run that saved no checkpoint: kept
            kept = metrics_path.with_name(
                f"{metrics_path.name}.no-checkpoint-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
            )
            metrics_path.replace(kept)
            log(
                f"the rows of the earlier run in {metrics_path.parent}, which saved no checkpoint, are kept in {kept.name}"
            )
        else:
            metrics_path.unlink()
    return fresh(), 0, [], {}


def rows_kept(path: Path, start: int, log: Callable[[str], None]) -> list[dict]:
    """A resumed run's metrics.jsonl rewritten with its rows up to update `start` (the later ones
    are replaced, not duplicated); returns those rows."""
    rows = read_rows_kept(path, start, log) if start else []
    write_jsonl_atomic(path, rows)
    return rows


def _why_no_checkpoint(directory: Path) -> str:
    """`resume=true` found nothing to resume from: why, in words."""
    unfinished = sorted(p.name for p in directory.iterdir() if "tmp" in p.name) if directory.is_dir() else []
    if unfinished:
        return f"no finished checkpoint in {directory} (only {', '.join(unfinished[:3])}: a save that did not complete)"
    return f"no checkpoint in {directory} (none was saved there)"


# ----------------------------------------------------------------------------------- parts
class RowSink:
    """Where one run's metrics rows go (a sweep has one per cell): its metrics.jsonl (None on
    processes other than 0), its trackers, `rows` (kept in memory) and `on_row(copy)`."""

    def __init__(
        self,
        path: Path | None,
        trackers: Trackers,
        config_text: str,
        rows: list[dict] | None = None,
        on_row: Callable[[dict], None] | None = None,
    ):
        self.writer = JsonlWriter(path) if path is not None else None
        self.trackers, self.config_text, self.rows, self.on_row = trackers, config_text, rows, on_row

    def write(self, row: dict) -> None:
        if self.writer is not None:
            self.writer.write(row)
        if self.rows is not None:
            self.rows.append(row)
        self.trackers.row(row)
        if self.on_row is not None:
            self.on_row(dict(row))  # a copy: the callback cannot change what is kept

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    def finish(self, plot: Path | None, failed: bool = False) -> None:
        """The trackers' last records (the plot, the config) and the end of their runs."""
        self.trackers.finish(plot, self.config_text, failed=failed)


class Checkpoints:
    """A checkpoint at the last update, every `checkpoint_every` updates, and on a stop (the time
    the run waits for a save counted as `clock`'s "checkpoints")."""

    def __init__(
        self,
        checkpointer: Checkpointer,
        config: Config,
        meta: Callable[[int], dict],
        saved: int,
        clock: RunClock | None = None,
    ):
        self.checkpointer, self.config, self.meta, self.saved = checkpointer, config, meta, saved
        self.clock = clock or RunClock()
        self.saved_at: list[int] = []  # updates at which this session saved

    def after_chunk(self, update: int, state, now: bool = False, extra_meta: dict | None = None) -> None:
        if now or checkpoint_due(self.config.checkpoint_every, self.config.num_updates, update, self.saved):
            with self.clock.phase("checkpoints"):
                self.checkpointer.save(update, state, {**self.meta(update), **(extra_meta or {})})
            self.saved = update
            self.saved_at.append(update)

    def wait(self) -> None:
        """Until every save started is on disk."""
        with self.clock.phase("checkpoints"):
            self.checkpointer.wait()


@jax.jit
def _finite_by_group(params: dict) -> dict:
    """Top-level parameter key (group, or the central critic) -> every leaf finite."""
    return {k: jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(v)])) for k, v in params.items()}


def nan_guard(row: dict, params: dict, update: int, checkpointer: Checkpointer, losses: Iterable[str]) -> None:
    """Stop before a non-finite loss (of `losses`: the algorithm's declared ones) or parameter is
    checkpointed; name what went bad."""
    bad = first_non_finite(row, losses)
    what = f"{bad} is {row[bad]}" if bad is not None else None
    if what is None:
        finite = host_values(_finite_by_group(params))
        broken = [k for k, ok in finite.items() if not ok]
        what = f"parameters of {', '.join(broken)} are" if broken else None
    if what is not None:
        checkpointer.wait()
        steps = checkpointer.steps()
        kept = f"last good checkpoint: update {steps[-1]} in {checkpointer.directory}" if steps else "no checkpoint yet"
        raise TrainingDiverged(f"update {update}: {what} (non-finite); run stopped, {kept}")


@jax.jit
def _finite_by_row(params) -> jax.Array:
    """[R]: every parameter of row r finite (leaves [R, ...])."""
    leaves = jax.tree.leaves(params)
    return jnp.stack([jnp.all(jnp.isfinite(x.reshape(x.shape[0], -1)), axis=1) for x in leaves]).all(axis=0)


def diverged_rows(metrics: UpdateMetrics, params, losses: Iterable[str]) -> dict[int, str]:
    """Row -> what became non-finite in this chunk (the first of the declared `losses` at any of
    its updates, else its parameters), for the rows where something did (metrics: host [R, n])."""
    finite = host_values(_finite_by_row(params))  # [R]
    out = {}
    for r in range(finite.shape[0]):
        bad = next((k for k in losses if k in metrics.values and not np.all(np.isfinite(metrics[k][r]))), None)
        if bad is not None:
            out[r] = f"{bad} became {metrics[bad][r][~np.isfinite(metrics[bad][r])][0]}"
        elif not finite[r]:
            out[r] = "a parameter became non-finite"
    return out


@jax.jit
def _without_rows(result: EvalResult, rows) -> EvalResult:
    """The evaluation with the `rows` [R] bool left out: returns and lengths NaN, nothing won."""
    nan = jnp.float32(jnp.nan)
    return EvalResult(
        jnp.where(rows[:, None], nan, result.returns),
        jnp.where(rows[:, None], nan, result.lengths.astype(jnp.float32)),
        result.won & ~rows[:, None],
    )


def pooled(rows: list[dict]) -> dict:
    """The return and win rate averaged over rows (a sweep program's cells) that have them."""
    out = {}
    for key in ("return_mean", "win_rate"):
        values = [r[key] for r in rows if r.get(key) is not None]
        out[key] = sum(values) / len(values) if values else None
    return out


class Progress:
    """A tqdm bar (none when disabled) advanced by `per_update` per update of `unit` (a name, with
    its leading space: " env-steps"): one rate, in those units, elapsed and remaining time.
    `show_row`: after the bar, the last row's training return (kept until a chunk finishes an
    episode again) and, where the env has a win condition, its win rate."""

    def __init__(
        self,
        enabled: bool,
        total: int,
        initial: int = 0,
        per_update: int = 1,
        show_row: bool = False,
        unit: str = " updates",
        desc: str = "",
        leave: bool = True,
    ):
        self.per_update, self.show_row, self.bar = per_update, show_row, None
        self.shown: dict[str, str] = {}
        if enabled:
            from tqdm import tqdm

            bar_format = (
                "{desc}{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}{unit} [{elapsed}<{remaining}, {rate_fmt}]{postfix}"
            )
            self.bar = tqdm(
                total=total * per_update,
                initial=initial * per_update,
                unit=unit,
                unit_scale=per_update > 1,
                desc=f"{desc}: " if desc else "",
                leave=leave,
                bar_format=bar_format,
            )

    def advance(self, n: int, row: dict | None = None) -> None:
        if self.bar is None:
            return
        self.bar.update(n * self.per_update)
        if self.show_row and row is not None:
            if row.get("return_mean") is not None:
                self.shown["return"] = f"return {row['return_mean']:.2f}"
            if row.get("win_rate") is not None:
                self.shown["win"] = f"win rate {row['win_rate']:.2f}"
            self.bar.set_postfix_str(", ".join(self.shown.values()) or "return: no episode finished yet", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class StopControl:
    """While active (a context manager): SIGINT/SIGTERM are noted (`StopSignals`), and
    `control(chunk_end)` says whether the run stops after this update. One process stops on its
    own signal; several (each update is a collective) decide together, at chunk ends only: any
    process's signal stops them all. `stopping` is the last answer (a chunk handed over then saves)."""

    def __init__(self, processes: int | None = None):
        self.processes = jax.process_count() if processes is None else processes
        self.signals = StopSignals()
        self.stopping = False

    def __enter__(self) -> StopControl:
        self.signals.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.signals.__exit__(*exc)

    @property
    def signum(self) -> int | None:
        return self.signals.signum

    def __call__(self, chunk_end: bool = True) -> bool:
        seen = self.signals.signum is not None
        self.stopping = seen if self.processes == 1 else chunk_end and any_process(seen)
        return self.stopping

    def raise_if_stopped(self, update: int, last: int, where: Path, again: str = "resume=true") -> None:
        """Stopped (with the checkpoint's path and how to continue) when a signal ended the run
        before its last update."""
        if self.signum is not None and update < last:
            raise Stopped(self.signum, update, str(where / str(update)), again)


# ---------------------------------------------------------------------------------- the loop
def _whole(tree):
    return tree


class Driver:
    """The host side of one run (or one sweep program): `step(chunk)` after every chunk, `close`.

    groups: the rows of the state each sink reports (a run: all its seeds; a sweep: each cell's
    seeds), one `RowSink` each (none on processes other than 0 of a sweep).
    on_eval(state, evaluation on device) -> state to checkpoint (a sweep keeps the best parameters).
    on_rows(rows, evaluation on the host, update): after the rows are written (a sweep's results store).
    guard: the algorithm's losses the NaN guard watches (None: no guard). Without `on_diverged` the
    first non-finite loss or parameter stops the run (`TrainingDiverged`). With it (a sweep, whose
    rows are independent runs) a diverged row is a result, not the end: on_diverged({row: what},
    update) is told once per row, and from then on the row's evaluations are NaN (left out of the
    best parameters, the final metric and the statistics), while the other rows go on.
    """

    def __init__(
        self,
        config: Config,
        env,
        *,
        start: int,
        groups: list[slice],
        sinks: list[RowSink],
        checkpoints: Checkpoints,
        progress: Progress,
        evaluation: Evaluation | None = None,
        guard: Iterable[str] | None = None,
        on_eval: Callable | None = None,
        on_rows: Callable | None = None,
        on_diverged: Callable | None = None,
    ):
        self.config, self.env, self.groups, self.sinks = config, env, groups, sinks
        self.checkpoints, self.progress, self.evaluation, self.guard = checkpoints, progress, evaluation, guard
        self.clock = checkpoints.clock  # the run's phases (evaluation, checkpoints, training)
        self.on_eval, self.on_rows, self.on_diverged = on_eval, on_rows, on_diverged
        self.update = start
        self.diverged = np.zeros(groups[-1].stop if groups else 0, bool)  # [R] rows left out (on_diverged)

    def rows(self, chunk: Chunk, result) -> list[dict]:
        """One metrics row per group of rows (`env_steps` per run; throughput over the group's rows)."""
        env, per_run = self.env, self.config.run_steps_per_update
        out = []
        for group in self.groups:
            # this group's rows of every metric (all of them when there is one group)
            pick = functools.partial(jax.tree.map, operator.itemgetter(group)) if len(self.groups) > 1 else _whole
            row = chunk_row(
                pick(chunk.metrics),
                update=self.update,
                env_steps=self.update * per_run,
                wall_s=chunk.wall,
                chunk_env_steps=chunk.n * per_run * (group.stop - group.start),
                num_agents=env.num_agents,
                groups=tuple((g.name, g.size) for g in env.groups),
                wins=env.has_win,
            )
            row.update(chunk.extra or {})
            if result is not None:
                part = pick(result)
                row.update(eval_fields(part.returns, part.lengths, part.won if env.has_win else None))
            out.append(row)
        return out

    def step(self, chunk: Chunk, save: bool = False) -> None:
        """After one chunk: evaluation when due, the rows, the NaN guard, a checkpoint when due
        (now if `save`), the progress bar."""
        previous, self.update = self.update, self.update + chunk.n
        state, result = chunk.state, None
        if self.guard is not None and self.on_diverged is not None:
            self._note_diverged(chunk)
        if self.evaluation is not None and self.evaluation.due(self.update, previous):
            with self.clock.phase("evaluation"):
                result = self.evaluation(chunk.params, self.update)
                if self.diverged.any():
                    result = _without_rows(result, self.diverged)
                if self.on_eval is not None:
                    state = self.on_eval(state, result)
                result = host_values(result)  # a collective on a multi-host run: every process gathers
        rows = self.rows(chunk, result)
        for sink, row in zip(self.sinks, rows):
            sink.write(row)
        if self.on_rows is not None:
            self.on_rows(rows, result, self.update)
        if self.guard is not None and self.on_diverged is None:
            nan_guard(rows[0], chunk.params, self.update, self.checkpoints.checkpointer, self.guard)
        self.checkpoints.after_chunk(self.update, state, save, chunk.extra_meta)
        self.progress.advance(chunk.n, rows[0] if len(rows) == 1 else pooled(rows))

    def _note_diverged(self, chunk: Chunk) -> None:
        """Rows that diverged in this chunk, marked and handed to on_diverged (each row once)."""
        assert self.guard is not None and self.on_diverged is not None
        new = {
            r: what
            for r, what in diverged_rows(chunk.metrics, chunk.params, self.guard).items()
            if not self.diverged[r]
        }
        if new:
            self.diverged[list(new)] = True
            self.on_diverged(new, self.update)

    def run_chunks(
        self,
        compiled: dict[int, Callable],
        state,
        schedule: list[int],
        budget: ChunkBudget | None,
        again: str = "resume=true",
        then: Callable[[], None] | None = None,
    ) -> tuple[Any, bool]:
        """The on-device chunk programs, each chunk through `step`, until the schedule or the budget
        ends: (state, finished). SIGINT/SIGTERM: the chunk in progress ends with a checkpoint, then
        `Stopped`, which says to continue with `again`. `then()` runs after the last chunk, while
        its checkpoint is still being written (to overlap the run's end with it)."""
        with StopControl() as stop:

            def step(state, metrics: UpdateMetrics, n: int, wall: float) -> None:
                self.step(Chunk(state, metrics, n, wall, state.learner.params), save=stop())

            with self.clock.phase("training"):
                state, finished = run_chunks(compiled, state, schedule, step, budget, lambda: stop.stopping)
            if then is not None:
                then()
            self.checkpoints.wait()
        stop.raise_if_stopped(self.update, self.config.num_updates, self.checkpoints.checkpointer.directory, again)
        return state, finished

    def close(self, failed: bool = False) -> None:
        """Close the files and the bar; on a failure also end the trackers' runs as failed (on
        success the caller ends them, after the plot)."""
        for sink in self.sinks:
            sink.close()
        self.progress.close()
        if failed:
            for sink in self.sinks:
                sink.finish(None, failed=True)
