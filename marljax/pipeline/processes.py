"""mode=async on several processes (`distributed.*`): how the processes' pipelines stay in step.

Each process runs the whole pipeline of actor_learner.py on its own devices: its actor threads
on its actor devices, its own bounded buffer, version stamps and staleness counters. Only the
learner is shared: its mesh joins every process's learner devices, and each update is one
jitted program over that mesh whose collectives average the gradients across processes.

How the processes agree, with no messages of their own: every update, each process takes
exactly one local batch (M slices with micro-batches) from its own buffer and hands it in as
its share of the global batch (process p: environment slice p of P, on data shard p). So every
process calls the update the same number of times, in the same order, whatever its actors'
timing; a process whose actors are slower makes the others wait inside the update's
collective. What needs a common decision, and how it is made:

* staleness_policy=drop and balance=rate act on each process's own buffer: a process drops
  its own stale slices and its controller paces its own actor threads, so the processes' counters
  differ; the learner's pace is common all the same (one local batch per process per update,
  a fresh one under drop). Metrics rows carry every process's counters (`by_process`, gathered
  at chunk ends) beside process 0's own;
* recording (async.record_trajectories=PATH): process p writes its own slice's batches to
  PATH/process_<p>, a dataset of its own (recorder.py);
* host (PettingZoo) envs: process p's actor threads make num_envs/P copies per seed (its slice),
  seeded apart from every other process's copies (host_seed_base), and sample actions with
  their own keys;
* mesh.agent > 1: the learner mesh's agent axis lies within each process (async_mesh.py
  refuses a split that would cross processes), so the agent swap stays inside a process and
  each process puts its actors' whole replica of the parameters together from its own
  devices (placement.local_replica); only the data axis, the gradient average, crosses processes;
* stopping (SIGINT/SIGTERM): processes may see a signal at different updates, so they decide
  together at chunk ends (`distributed.any_process`, one tiny all-gather per chunk), and all stop after
  the same update, which every process then checkpoints together.

Process 0 alone writes metrics rows and logs (as in the on-device mode); checkpoints are
written by all processes together (orbax).
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from marljax.parallel.distributed import every_process
from marljax.pipeline.settings import HostRunSettings
from marljax.types import Trajectory

# a process's counters that a metrics row lists for every process (by_process)
COUNTERS = ("produced", "consumed", "dropped", "held", "active_actors")


def env_share() -> tuple[int, int]:
    """(p, P): this process's actors step environment slice p of P, which is data shard p of the
    learner mesh (async_mesh.async_placement orders its devices by process)."""
    return jax.process_index(), jax.process_count()


def with_stats_rows(traj: Trajectory, rows: int) -> Trajectory:
    """This process's batch with its episode statistics ([S, ...]) repeated on a new leading axis
    ([rows, S, ...]), one row per local learner device (async_mesh.trajectory_specs)."""
    stats = jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (rows, *np.shape(x))), traj.stats)
    return traj._replace(stats=stats)


def by_process(produced: int, consumed: int, dropped: int, held: int, active_actors: int) -> dict[str, list[int]]:
    """Every process's buffer counters and active actor threads at this chunk end, by name:
    {counter: [value of process 0, 1, ...]}. An all-gather: every process calls it at the same
    chunk end (the processes' updates are in lockstep)."""
    mine = np.array([produced, consumed, dropped, held, active_actors], np.int64)
    return {name: [int(v) for v in column] for name, column in zip(COUNTERS, every_process(mine).T)}


def dataset_dir(path: str | Path, process: int, processes: int) -> Path:
    """Where process `process` records its batches (async.record_trajectories=path): path itself
    in a single process, path/process_<p> with several (each its own environment slice)."""
    return Path(path) if processes == 1 else Path(path) / f"process_{process}"


def host_seed_base(run: HostRunSettings, thread_index: int, share: tuple[int, int]) -> int:
    """The seed base of actor thread `thread_index`'s host env copies (host_rollout.py,
    host_copies.py): `seed * 1000 + thread index` in one process; with several (share = (p, P)),
    the thread indices run on across processes, so no two processes' copies share a seed."""
    return run.seed * 1000 + share[0] * run.async_.num_actor_threads + thread_index
