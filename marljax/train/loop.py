"""`marljax train`: claim out_dir, build the run's source of chunks, and let the driver run it.

The source is the on-device chunk program (`_train_sync`: compiled once, run chunk by chunk) or
the async pipeline (`_train_async`, train/actor_learner.py); what happens between chunks
(metrics rows, evaluation, NaN guard, checkpoints, progress, stop signals) is `train.driver`'s.
At the start the resolved config goes to `<out_dir>/config.yaml`; at the end the returns plot to
`<out_dir>/returns.png`.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from marljax.config import Config, replace
from marljax.files import DirectoryLock, check_writable_dir, expand_home, write_text_atomic
from marljax.parallel import distributed
from marljax.parallel.mesh import compile_chunks, seed_keys, shard_trainer
from marljax.pipeline.async_mesh import async_placement
from marljax.pipeline.env_workers import EnvHealth
from marljax.pipeline.processes import dataset_dir
from marljax.run_settings import check_logins
from marljax.schema import ConfigError
from marljax.train import compile_cache
from marljax.train.budget import continue_budget, saved_run
from marljax.train.checkpoint import (
    Checkpointer,
    CheckpointError,
    abstract_like,
    check_resumable,
    not_a_checkpoint_dir,
)
from marljax.train.chunks import ChunkBudget, chunk_sizes
from marljax.train.compile_cache import CacheEvents
from marljax.train.driver import (
    Checkpoints,
    Chunk,
    Driver,
    Progress,
    RowSink,
    StopControl,
    TrainingDiverged,
    resume,
)
from marljax.train.evaluate import Evaluation
from marljax.train.marl_eval_run import write_run_marl_eval
from marljax.train.metrics import plot_returns
from marljax.train.records import config_yaml, cpu_speed_note, family_note
from marljax.train.summary import SUMMARY_FILE, RunSummary, return_line, summarize
from marljax.train.timing import RunClock, Ticker
from marljax.train.trackers import Trackers
from marljax.train.up_front import async_estimate, check_run, sync_estimate
from marljax.train.wiring import check_agent_axis, make_adapter, make_trainer, prepare, warn_slow_dtype
from marljax.types import TrainState, UpdateMetrics

__all__ = ["RunResult", "TrainingDiverged", "default_out_dir", "set_aside_runs", "summary", "train"]


class RunResult(NamedTuple):
    state: TrainState
    rows: list[dict]
    out_dir: Path
    compile_s: float
    checkpoints: list[int]  # updates at which this call saved a checkpoint
    summary: RunSummary | None = None  # what the run found, its time breakdown and what to run next: print(it)


def default_out_dir(config: Config) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return str(Path("runs") / f"{config.algo}_{config.env.replace(':', '.')}_{stamp}")


def train(
    config: Config,
    log: Callable[[str], None] = print,
    max_chunks: int | None = None,
    on_row: Callable[[dict], None] | None = None,
    on_compiled: Callable[[float], None] | None = None,
    started: float | None = None,
) -> RunResult:
    """Run `config` to the end and return the final (sharded) state, the metrics rows and the
    run's summary (`print(result.summary)`: the return first to last, the time breakdown, where
    the outputs are and what to run next; also in `<out_dir>/summary.json`).

    With `resume=true`, continue from the newest good checkpoint in `out_dir` (or start fresh
    when there is none). `max_chunks` stops after that many chunks, as if the run had been
    killed there (for tests and time-boxed jobs); checkpoints already saved stay valid.
    `on_row(row)` is called with every metrics row (a dict, as written to metrics.jsonl) as soon
    as it is written, e.g. to plot live in a notebook; an exception in it stops the run.
    `on_compiled(seconds)` is called once the chunk programs are compiled, before the first chunk
    runs (the on-device mode only: `mode=async` compiles inside its actor and learner threads).

    `started`: the epoch time the run's wall time is counted from (`marljax train` passes its
    process's start, so that the breakdown's "start-up" holds the imports); None: from this call.

    Multi-host (`distributed.*`): every process calls this with the same config; process 0
    alone logs and writes files, checkpoints are written by all together.
    """
    clock = RunClock(started).listen()
    try:
        with clock.phase("build"):
            config, log, out_dir, lock, has_run = _claim(config, log)
        try:
            if config.resume:
                with clock.phase("build"):
                    config = _budget(config, out_dir, log)
            return _run(config, log, out_dir, has_run, clock, max_chunks, on_row, on_compiled)
        finally:
            lock.release()
    finally:
        clock.close()


def _claim(
    config: Config, log: Callable[[str], None]
) -> tuple[Config, Callable[[str], None], Path, DirectoryLock, bool]:
    """Everything refused before the run is built, then out_dir locked: (config with its out_dir,
    the log (silent on processes other than 0), out_dir, the lock, whether out_dir held a run)."""
    distributed.initialize(config.distributed, config.to_dict, Path(config.out_dir) if config.out_dir else None)
    config, log = primary_only(config, log)
    compile_cache.use(config.compile_cache, log)  # before anything compiles
    if not config.out_dir:
        if jax.process_count() > 1:
            raise ConfigError("out_dir", "a multi-host run needs an explicit out_dir that every process can reach")
        config = replace(config, out_dir=default_out_dir(config))
    if config.out_dir != (home := expand_home(config.out_dir, "out_dir")):  # out_dir: ~/runs/x in a YAML file
        config = replace(config, out_dir=home)
    out_dir = Path(config.out_dir)
    problem = check_writable_dir(out_dir)
    if problem:
        raise ConfigError("out_dir", problem)
    if distributed.is_primary():  # process 0 alone opens the trackers
        check_logins(config.log)
    record = config.async_.record_trajectories if config.mode == "async" else None  # only ippo/mappo have async.*
    if record and distributed.is_primary():  # refused now, not after compiling and starting the actors
        problem = check_writable_dir(Path(record))
        P = jax.process_count()  # several processes: one dataset per process under record (processes.py)
        if problem is None and any((dataset_dir(record, p, P) / "index.json").exists() for p in range(P)):
            problem = f"{Path(record).absolute()} already holds a dataset; choose a new path"
        if problem:
            raise ConfigError("async.record_trajectories", problem)
    metrics_path = out_dir / "metrics.jsonl"
    ckpt_dir = out_dir / "checkpoints"
    has_run = (metrics_path.exists() and metrics_path.stat().st_size) or ckpt_dir.exists()
    if has_run and not (config.overwrite or config.resume):
        raise ConfigError(
            "out_dir",
            f"{out_dir} already holds a run; continue it with resume=true, replace it with overwrite=true, "
            "or choose another out_dir",
        )
    if config.resume and (problem := not_a_checkpoint_dir(ckpt_dir)):  # refused before anything is built
        raise CheckpointError(problem)
    for line in set_aside_runs(out_dir):
        log(line)
    lock = DirectoryLock(out_dir)
    if distributed.is_primary():
        holder = lock.acquire()
        if holder:
            raise ConfigError(
                "out_dir",
                f"{out_dir} is in use by {holder} (another marljax run writing there); "
                "wait for it, or choose another out_dir",
            )
    return config, log, out_dir, lock, bool(has_run)


def _budget(config: Config, out_dir: Path, log: Callable[[str], None]) -> Config:
    """resume=true with another total_timesteps: the chunk length and the learning rate go on
    (`train.budget`); refused first if the run may not resume at all."""
    found = saved_run(out_dir / "checkpoints", config.keep_checkpoints)
    if found is None:
        return config
    check_resumable(found[1], config, out_dir / "checkpoints")
    return continue_budget(config, found[1], found[0], log)


def _run(
    config: Config, log, out_dir: Path, has_run: bool, clock: RunClock, max_chunks, on_row, on_compiled
) -> RunResult:
    """The run in the locked out_dir; an overwritten run's files put back if it fails first."""
    aside = _set_aside_for_overwrite(config, out_dir, log) if has_run and config.overwrite else None
    try:
        if config.mode == "async":
            result = _train_async(config, out_dir, log, clock, max_chunks, on_row)
        else:
            result = _train_sync(config, out_dir, log, clock, max_chunks, on_row, on_compiled)
    except BaseException:
        if aside is not None:
            _put_back(aside, out_dir, log)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return result


RUN_FILES = ("checkpoints", "metrics.jsonl", "config.yaml", "returns.png")
OVERWRITTEN = ".overwritten-"  # the prefix of the directory an overwrite=true sets the old run aside in


def set_aside_runs(out_dir: Path) -> list[str]:
    """One line per old run that an interrupted `overwrite=true` left set aside in `out_dir`
    (`.overwritten-<time>/`, hidden): said by every command on out_dir until the user removes it."""
    if not Path(out_dir).is_dir():
        return []
    return [
        f"note: {aside} holds the run an earlier overwrite=true set aside and did not finish replacing; "
        "it is kept until you remove it (or move its files back to continue that run)"
        for aside in sorted(p for p in Path(out_dir).iterdir() if p.name.startswith(OVERWRITTEN) and p.is_dir())
    ]


def _set_aside_for_overwrite(config: Config, out_dir: Path, log) -> Path | None:
    """overwrite=true: move the old run's files into `out_dir/.overwritten-<time>/` (process 0),
    removed once the new run has finished, put back if it fails before its first checkpoint."""
    aside = out_dir / f"{OVERWRITTEN}{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    if distributed.is_primary():
        aside.mkdir()
        for name in RUN_FILES:
            if (out_dir / name).exists():
                shutil.move(str(out_dir / name), str(aside / name))
        log(f"overwrite=true: the old run in {out_dir} is kept in {aside.name}/ until this one finishes")
    distributed.barrier("marljax_overwrite")
    return aside


def _put_back(aside: Path, out_dir: Path, log) -> None:
    """The new run failed: if it saved no checkpoint, restore the old run it was replacing."""
    if not distributed.is_primary():
        return
    ckpts = out_dir / "checkpoints"
    if ckpts.exists() and any(p.name.isdigit() for p in ckpts.iterdir()):
        log(f"the old run replaced by overwrite=true stays in {aside} (this run saved a checkpoint first)")
        return
    for name in RUN_FILES:
        if (out_dir / name).exists():
            shutil.rmtree(out_dir / name) if (out_dir / name).is_dir() else (out_dir / name).unlink()
        if (aside / name).exists():
            shutil.move(str(aside / name), str(out_dir / name))
    shutil.rmtree(aside, ignore_errors=True)
    log(f"this run failed before its first checkpoint: the old run in {out_dir} is restored")


def _train_sync(
    config: Config, out_dir: Path, log, clock: RunClock, max_chunks: int | None, on_row=None, on_compiled=None
) -> RunResult:
    """The on-device mode: the sharded chunk of updates, compiled once, run chunk by chunk (the
    source of chunks `train.driver.Driver` steps through)."""
    metrics_path, ckpt_dir = out_dir / "metrics.jsonl", out_dir / "checkpoints"
    with clock.phase("build"):
        log(f"{clock.stamp()} building {config.env} and {config.algo}'s trainer")
        with Ticker("building", config.progress and distributed.is_primary()):
            env, mesh, trainer = prepare(config)
        log(f"marljax {config.algo} on {env.describe()}")
        if note := family_note(config):
            log(note)
        platform = mesh.devices.flat[0].platform
        if note := cpu_speed_note(config, [g.obs_shape for g in env.groups], platform):
            log(note)
        log(
            f"mesh {dict(mesh.shape)} on {mesh.devices.size} {mesh.devices.flat[0].platform} device(s); "
            f"{config.num_seeds} seed(s) x {config.num_envs} envs; {config.num_updates} updates "
            f"in chunks of {config.updates_per_chunk}; out_dir {out_dir}"
        )
        fns = shard_trainer(trainer, mesh)
        log(f"{clock.stamp()} checking memory and making the {'restored' if config.resume else 'initial'} state")
        ticker = Ticker("setting up", config.progress and distributed.is_primary()).__enter__()
        try:
            check_run(
                config,
                lambda: sync_estimate(config, trainer, fns.shapes),
                mesh.devices.flat,
                log,
                config.updates_per_chunk,
            )
            _ready(ckpt_dir)
            checkpointer = Checkpointer(ckpt_dir, config.keep_checkpoints, log)
        except BaseException:
            ticker.__exit__()
            raise
    try:
        with clock.phase("build"):
            target = abstract_like(fns.shapes, fns.shardings)
            fresh = lambda: fns.init(seed_keys(config.seed, config.num_seeds))  # noqa: E731
            state, start, rows, _ = resume(config, target, fresh, checkpointer, metrics_path, log)
            if distributed.is_primary():
                write_text_atomic(out_dir / "config.yaml", config_yaml(config))
            schedule = chunk_sizes(config.num_updates - start, config.updates_per_chunk)
            ticker.__exit__()
        with clock.phase("compile"):
            sizes = " and ".join(map(str, sorted(set(schedule))))
            log(
                f"{clock.stamp()} compiling the chunk program (chunks of {sizes} update{'s' if sizes != '1' else ''}; "
                "the first time on a machine takes longest, later runs read it back from the compile cache)"
            )
            t0 = time.perf_counter()
            with CacheEvents() as cache, Ticker("compiling", config.progress and distributed.is_primary()):
                compiled = compile_chunks(fns, state, schedule)
            compile_s = time.perf_counter() - t0
            log(f"compiled in {compile_s:.1f}s{_cache_note(cache)}")
        if on_compiled is not None:
            on_compiled(compile_s)
        log(
            f"{clock.stamp()} training: updates {start + 1} to {config.num_updates}, "
            f"{(config.num_updates - start) * config.run_steps_per_update:,} env steps per seed"
        )
        driver = _driver(config, env, trainer, checkpointer, start, rows, on_row, clock)
        plot = _Plot(config, out_dir, rows, clock)
        ok = False
        try:
            state, _ = driver.run_chunks(compiled, state, schedule, ChunkBudget(max_chunks), then=plot.start)
            ok = True
        finally:
            driver.close(failed=not ok)
    finally:
        ticker.__exit__()
        with clock.phase("checkpoints"):
            checkpointer.close()
    result = RunResult(state, rows, out_dir, compile_s, driver.checkpoints.saved_at)
    return _finish(config, result, log, clock, driver, plot)


def _cache_note(cache: CacheEvents) -> str:
    """' (read back from the compile cache)' when every program came from JAX's persistent cache."""
    if cache.hits and not cache.misses:
        return " (read back from the compile cache)"
    return ""


def _driver(
    config: Config, env, trainer, checkpointer: Checkpointer, start: int, rows: list[dict], on_row, clock: RunClock
) -> Driver:
    """`marljax train`'s parts (both modes): one metrics.jsonl and its trackers, evaluation every
    `eval_every` updates, the NaN guard, checkpoints, the progress bar in env steps."""
    primary, out_dir = distributed.is_primary(), Path(config.out_dir)
    sink = RowSink(
        out_dir / "metrics.jsonl" if primary else None,
        Trackers(config, out_dir),
        config_yaml(config),
        rows,
        on_row if primary else None,
    )
    evaluation = None
    if config.eval_every:
        evaluation = Evaluation(trainer, jnp.arange(config.num_seeds), config.eval_every, config.num_updates)
    meta = {"config": config.to_dict()}
    checkpoints = Checkpoints(
        checkpointer, config, lambda update: {**meta, "env_steps": update * config.run_steps_per_update}, start, clock
    )
    progress = Progress(
        config.progress,
        config.num_updates,
        start,
        config.env_steps_per_update,
        show_row=True,
        unit=" env-steps",
        desc="training",
    )
    return Driver(
        config,
        env,
        start=start,
        groups=[slice(0, config.num_seeds)],
        sinks=[sink],
        checkpoints=checkpoints,
        progress=progress,
        evaluation=evaluation,
        guard=trainer.losses if config.nan_guard else None,
    )


def primary_only(config: Config, log: Callable[[str], None]) -> tuple[Config, Callable[[str], None]]:
    """On processes other than 0 of a multi-host run: no log lines, no progress bar, no plot."""
    if distributed.is_primary():
        return config, log
    return replace(config, progress=False, plot=False), lambda _line: None


def _ready(ckpt_dir: Path) -> None:
    """The run's directory exists (process 0 makes it), then every process may go on."""
    ckpt_dir.parent.mkdir(parents=True, exist_ok=True)
    distributed.barrier("marljax_out_dir")


def _train_async(
    config: Config, out_dir: Path, log, clock: RunClock, max_chunks: int | None = None, on_row=None
) -> RunResult:
    """mode=async: actor threads and the learner joined by the trajectory buffer (marljax.pipeline).

    Checkpoints hold the learner's state (parameters, Adam, keys, update) and the buffer's
    counters. A resumed async run continues the learner and the counters; the actors start their
    environments afresh, so it is not bitwise equal to an uninterrupted run. SIGINT/SIGTERM:
    the update in progress finishes, a checkpoint is saved, and the run raises `Stopped`.
    """
    from marljax.train.actor_learner import AsyncRun

    with clock.phase("build"):
        log(f"{clock.stamp()} building {config.env} and {config.algo}'s trainer")
        env = make_adapter(config)
        check_agent_axis(config, env)
        warn_slow_dtype(config)
        placement = async_placement(
            config.async_, config.mesh.agent, config.num_envs
        )  # (AsyncRun places again; this compiles nothing)
        check_run(
            config,
            lambda: async_estimate(config, make_trainer(config, env), getattr(env, "host", False)),
            {*placement.actor_devices, *placement.learner_mesh.devices.flat},
            log,
        )
        log(f"marljax {config.algo} (async) on {env.describe()}")
        if note := family_note(config):
            log(note)
        runner = AsyncRun(config, env, make_trainer, log)
    log(
        f"actors: {config.async_.num_actor_threads} thread(s) on {len(runner.placement.actor_devices)} "
        f"{runner.placement.actor_devices[0].platform} device(s); learner on {runner.placement.learner_mesh.devices.size} "
        f"{runner.placement.learner_mesh.devices.flat[0].platform}; K={config.async_.max_staleness} ({config.async_.staleness_policy}), "
        f"correction={config.async_.correction}{', deterministic' if config.async_.deterministic else ''}; out_dir {out_dir}"
    )
    ckpt_dir, metrics_path = out_dir / "checkpoints", out_dir / "metrics.jsonl"
    _ready(ckpt_dir)
    checkpointer = Checkpointer(ckpt_dir, config.keep_checkpoints, log)
    try:
        with clock.phase("build"):
            target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), runner.learner)
            learner, start, rows, meta = resume(config, target, lambda: runner.learner, checkpointer, metrics_path, log)
            runner.learner = learner
            before = meta.get("async_counters", {})  # the counters of the sessions before a resume
            if distributed.is_primary():
                write_text_atomic(out_dir / "config.yaml", config_yaml(config))
        driver = _driver(config, env, runner.actor_trainer, checkpointer, start, rows, on_row, clock)
        plot = _Plot(config, out_dir, rows, clock)
        log(
            f"{clock.stamp()} training: actors and learner compile their programs first (compile time counts "
            "as training in this mode)"
        )

        def on_chunk(metrics: UpdateMetrics, wall: float, extra: dict, learner) -> None:
            counters = _add_counters(
                before,
                {
                    k: extra[k]
                    for k in ("produced", "consumed", "dropped", "dropped_by_reason", "by_process", *EnvHealth.KEYS)
                    if k in extra
                },
            )
            chunk = Chunk(
                learner,
                metrics,
                int(np.shape(metrics.episodes.count)[1]),  # updates in this chunk: [S, n]
                wall,
                runner.acting_params(learner.params),
                extra={**extra, **counters, "policy_version": start + extra["policy_version"]},
                extra_meta={"async_counters": counters},
            )
            driver.step(chunk, save=stop.stopping)  # several processes: the stop they agreed on

        ok = False
        try:
            with StopControl(runner.processes) as stop:
                with clock.phase("training"):
                    final = runner.run(config.num_updates - start, on_chunk, config.updates_per_chunk, stop=stop)
                plot.start()
                driver.checkpoints.wait()
            log(
                f"async counters: produced {final.produced}, consumed {final.consumed}, "
                f"dropped {sum(final.dropped.values())}, {final.dropped}; staleness {final.staleness_hist}"
                + (" (this session; metrics.jsonl counts from the start)" if start else "")
            )
            stop.raise_if_stopped(driver.update, config.num_updates, checkpointer.directory)
            ok = True
        finally:
            driver.close(failed=not ok)
    finally:
        with clock.phase("checkpoints"):
            checkpointer.close()
    result = RunResult(TrainState(runner.learner, None), rows, out_dir, 0.0, driver.checkpoints.saved_at)
    return _finish(config, result, log, clock, driver, plot)


def _add_counters(before: dict, now: dict) -> dict:
    """Async buffer counters of the sessions before a resume plus this session's (several processes:
    each process's too; `held` and `active_actors` are states, not counts)."""
    cumulative = ("produced", "consumed", "dropped")
    out = {k: before.get(k, 0) + now[k] for k in (*cumulative, *EnvHealth.KEYS)}
    reasons = dict(before.get("dropped_by_reason", {}))
    for reason, n in now["dropped_by_reason"].items():
        reasons[reason] = reasons.get(reason, 0) + n
    if "by_process" in now:
        was = before.get("by_process", {})
        out["by_process"] = {
            k: [a + b for a, b in zip(was.get(k, [0] * len(v)), v)] if k in cumulative else v
            for k, v in now["by_process"].items()
        }
    return {**out, "dropped_by_reason": reasons}


class _Plot:
    """returns.png, drawn in a background thread started once the last chunk is done (while its
    checkpoint is still being written); `wait()` joins it. The picture is written to a temporary
    file and renamed, so a run that fails meanwhile leaves the old picture or the new one."""

    def __init__(self, config: Config, out_dir: Path, rows: list[dict], clock: RunClock):
        self.path = out_dir / "returns.png" if config.plot else None
        mode = " (async)" if config.mode == "async" else ""
        self.title = f"{config.algo}{mode} on {config.env}, {config.num_seeds} seed(s)"
        self.rows, self.clock = rows, clock
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        if self.path is None or self.thread is not None:
            return
        rows = list(self.rows)  # what the run wrote up to now; the thread never sees later changes
        self.thread = threading.Thread(
            target=self._draw, args=(rows,), name="marljax-plot"
        )  # not a daemon: finished even on a stop
        self.thread.start()

    def _draw(self, rows: list[dict]) -> None:
        assert self.path is not None  # start() draws only with a path
        try:
            plot_returns(rows, self.path, self.title)
        except BaseException as exc:  # noqa: BLE001 - raised again by wait(), in the run's thread
            self.error = exc

    def wait(self) -> Path | None:
        """The picture's path once it is written (None: plot=false)."""
        if self.path is None:
            return None
        self.start()
        assert self.thread is not None
        with self.clock.phase("plot"):
            self.thread.join()
        if self.error is not None:
            raise self.error
        return self.path


def _finish(config: Config, result: RunResult, log, clock: RunClock, driver: Driver, plot: _Plot) -> RunResult:
    """The end of every run: the returns plot (if asked for), the trackers' last records, and the
    summary: the return first to last, where the time went, the outputs and what to run next
    (also `<out_dir>/summary.json` and `result.summary`)."""
    picture = plot.wait()
    if distributed.is_primary():  # marl-eval's layout of the run's evaluations, beside metrics.jsonl
        write_run_marl_eval(result.rows, config, result.out_dir)
    for sink in driver.sinks:
        sink.finish(picture)
    outputs = [name for name in ("metrics.jsonl", "returns.png", "config.yaml") if (result.out_dir / name).exists()]
    if result.checkpoints:
        outputs.append(f"checkpoints/ (update {result.checkpoints[-1]})")
    outputs.append(SUMMARY_FILE)
    found = summarize(
        config,
        result.rows,
        result.out_dir,
        driver.update,
        clock.breakdown(),
        outputs,
        finished=driver.update >= config.num_updates,
    )
    if distributed.is_primary():
        found.write(result.out_dir)
    log(str(found))
    return result._replace(summary=found)


summary = return_line  # the summary's first line (kept under its old name)
