"""The asynchronous actor-learner mode (`mode=async`): actor threads and a learner overlap.

    actor thread i (device actor_devices[i])          main thread (learner mesh)
    ─────────────────────────────────────────         ────────────────────────────────
    ticket, v_min = buffer.start()                    batch = buffer.get()
    v, params = store.wait_for(v_min)                 place batch on the learner mesh
    traj = collect(params, envs, key(ticket))         learner = learn(learner, batch)
    start the device-to-host copy                     v = buffer.finish_update()
    buffer.put(Stamped(traj, v, i, seq, ticket))      store.publish(v, params -> actor devices)

Both sides run the algorithm's own pieces (`Trainer.collect` and `Trainer.learn`); this
module knows no algorithm by name. Staleness is bounded by the buffer (see buffer.py) and
corrected in `learn` (`correction`). With `deterministic=true` the one actor uses exactly
version `ticket // M - K`, so the pipeline runs in lockstep with a fixed lag and a seed
reproduces bitwise while generation and learning still overlap.

Micro-batches (`async.micro_batches=M`, micro_batches.py): each pass of the actor loop above
rolls out one slice of num_envs/M of the thread's environments, as its own jitted rollout, and
puts it in the buffer at once with its own version; the learner takes M slices (`get` M times),
joins them along the environment axis and learns once. Cutting the rollout itself (not only its
result) is what lets the pipeline overlap more: the first slices are on their way to the
learner (device-to-host copy, buffer) while the actor rolls out the next, each slice picks up
the newest parameters allowed, and with several actor threads an update's M slices are rolled
out in parallel by whichever threads are free (with K = 0, M = 1 leaves all threads but one
waiting for the next version; host env copies stepped independently are the exception: their
thread claims an update's M slices at once, host_copies.py). Counters (produced, consumed,
dropped) count slices, and so does the balance controller (`async.balance=rate`: its window and
target are in slices).

Several processes (`distributed.*`, processes.py): each process runs all of the above on its own
actor devices with its own buffer and version counter; the learner mesh spans every process's
learner devices, process p's actors step environment slice p of P, and every update each process
hands in exactly one local batch as its share of the global batch, so all processes call `learn`
the same number of times and its collectives average the gradients across them.

Concurrency traps, and what is done about them:
* every wait is on the buffer's or the store's condition variable; `close()` wakes them all,
  so no thread can hang at shutdown; actor threads are joined with a timeout;
* an exception in an actor thread closes the buffer with that exception attached; the
  learner's next `get` raises, and the main thread re-raises the actor's error with its
  traceback (`ActorFailed`);
* an actor that hangs (a host env whose `step` never returns) is named by the watchdog
  (watchdog.py): the learner waits in one-second slices and fails the run (`ActorStuck`)
  once an actor has been on one piece of work for `async.actor_timeout_s`;
* a stop request (SIGINT/SIGTERM, `stop(chunk_end)`) is honoured after the update in progress: the
  updates so far are handed to `on_chunk` as a last, shorter chunk (which saves), and the
  pipeline stops;
* JAX dispatch is thread-safe; each actor thread only touches its own environments and
  reads published parameters, which are never mutated (new versions are new arrays).
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from marljax.config import Config
from marljax.parallel.distributed import host_values
from marljax.parallel.layouts import Layout
from marljax.parallel.mesh import learner_specs, mesh_layout, seed_keys, split_groups
from marljax.parallel.placement import copy_to_devices, local_replica, place, place_process_local
from marljax.pipeline import processes
from marljax.pipeline.async_mesh import async_placement, learner_on_mesh, shard_learn, trajectory_shardings
from marljax.pipeline.balance import Observation, RateBalancer, Throttle
from marljax.pipeline.buffer import BufferClosed, ParamStore, Stamped, TrajectoryBuffer
from marljax.pipeline.env_workers import EnvHealth
from marljax.pipeline.micro_batches import SliceRotation, join_slices, slice_actors
from marljax.pipeline.settings import HostRunSettings
from marljax.pipeline.watchdog import ActorStuck, Heartbeats, stuck_message
from marljax.types import Trajectory


class ActorFailed(RuntimeError):
    """An actor thread raised; the message carries its traceback."""


class AsyncRun:
    """Build once (placement, jitted pieces); `run(updates, on_chunk)` drives the pipeline."""

    def __init__(self, config: Config, env, make_trainer: Callable, log: Callable[[str], None] = print):
        self.config, self.env, self.log = config, env, log
        self.placement = async_placement(config.async_, config.mesh.agent, config.num_envs)
        mesh = self.placement.learner_mesh
        layout = mesh_layout(mesh)
        n_learn = layout.num_env_shards  # every learner device
        # several processes (processes.py): process p's actors step environment slice p of P
        self.process, self.processes = processes.env_share()
        self.local_learners = n_stats = n_learn // self.processes  # this process's learner devices
        self.actor_trainer = make_trainer(config, env, Layout())
        self.learner_trainer = make_trainer(config, env, layout)
        S = config.num_seeds
        keys = seed_keys(config.seed, S)  # [S, 2]
        # learning layout on the learner mesh: per-agent sets split over `agent` (mesh.agent > 1)
        shapes = jax.eval_shape(jax.vmap(self.learner_trainer.init_learner), keys)
        learner_spec = learner_specs(shapes, split_groups(self.learner_trainer), None)
        # params, Adam, hparams, keys, update: [S, ...] created on the learner mesh
        self.learner = learner_on_mesh(self.learner_trainer.init_learner, keys, mesh, learner_spec)
        self.host = getattr(env, "host", False)
        self.actor_init = None if self.host else jax.jit(jax.vmap(self.actor_trainer.init_actors))
        self.actor_keys = keys
        self.collect = jax.jit(jax.vmap(self.actor_trainer.collect))
        self.micro_batches = M = config.async_.micro_batches
        # M > 1 or several processes: one rollout program per environment slice this process
        # steps (M compilations of E/(P*M) envs; slice index p*M + j of P*M)
        n_slices, first = self.processes * M, self.process * M
        self.slice_collects = (
            [
                jax.jit(jax.vmap(make_trainer(config, env, Layout.env_slice_of(first + j, n_slices)).collect))
                for j in range(M)
            ]
            if n_slices > 1
            else []
        )
        self.host_policy = jax.jit(jax.vmap(self.actor_trainer.policy_step))  # host envs: one step, all copies
        # a batch arrives in the acting layout: environments split over every learner device
        per_device = self.processes > 1
        self.traj_shardings = trajectory_shardings(mesh, per_device_stats=per_device)

        def learn_local(learner, traj: Trajectory):
            # one process: the rollout's episode totals are replicated on every learner device;
            # learn sums them over all of them, so each device contributes its 1/n share. Several:
            # each device holds its process's totals ([1, S, ...]) and contributes 1/n_stats of them
            stats = (
                jax.tree.map(lambda x: x[0] / n_stats, traj.stats)
                if per_device
                else jax.tree.map(lambda x: x / n_learn, traj.stats)
            )
            traj = traj._replace(stats=stats)

            def one(state, t):
                key, k_epochs = jax.random.split(state.key)
                return self.learner_trainer.learn(state.replace(key=key), t, k_epochs)

            return jax.vmap(one)(learner, traj)

        self.learn = shard_learn(learn_local, mesh, learner_spec, per_device)  # donates the learner state
        self.samples_per_batch = config.num_steps * config.num_envs * S  # one update's
        self.health = EnvHealth()  # host env copies' failures, restarts, retirements (a new one every run)

    def to_learner_mesh(self, traj: Trajectory) -> Trajectory:
        """A batch from the host buffer placed on the learner mesh, as `learn` takes it (several
        processes: this process's environments become its share of the global batch)."""
        if self.processes == 1:
            return place(traj, self.traj_shardings)
        return place_process_local(processes.with_stats_rows(traj, self.local_learners), self.traj_shardings)

    def acting_params(self, params) -> Any:
        """The learner's parameters as this process can read them (several processes: its own replica)."""
        return params if self.processes == 1 else local_replica(params)

    # ------------------------------------------------------------------ threads
    def thread_keys(self, i: int) -> jax.Array:
        """Actor thread i's environment keys, one per seed: [S, 2]."""
        return jax.vmap(lambda k: jax.random.fold_in(k, 10_000 + i))(self.actor_keys)

    @staticmethod
    @jax.jit
    def step_keys(keys: jax.Array, ticket) -> jax.Array:
        """The rollout keys of batch `ticket`: [S, 2] (a function of the ticket, for determinism)."""
        return jax.vmap(lambda k: jax.random.fold_in(k, ticket))(keys)

    def make_collector(self, i: int):
        """Actor thread i's rollout maker: `.collect(params_on_its_device, ticket, version, min_version)
        -> (Trajectory, the oldest policy version in it)`."""
        device = self.placement.actor_devices[i % len(self.placement.actor_devices)]
        keys = place(self.thread_keys(i), device)
        share = (self.process, self.processes)  # host envs: this process's slice of num_envs
        if self.host and self.processes > 1:  # and its own sampling keys (JAX envs: keys of global env indices)
            keys = jax.vmap(lambda k: jax.random.fold_in(k, self.process))(keys)
        if self.host and self.config.async_.stepping() == "independent":
            from marljax.pipeline.host_copies import IndependentHostCollector

            return IndependentHostCollector(
                HostRunSettings.of(self.config), self.env, self.host_policy, device, keys, i, self.health, share
            )
        if self.host:
            from marljax.pipeline.host_rollout import HostCollector

            M, (p, P) = self.micro_batches, share
            if M == 1:
                return HostCollector(
                    HostRunSettings.of(self.config), self.env, self.host_policy, device, keys, i, share
                )
            # lockstep, M slices: M collectors of num_envs/(P*M) copies, slice j of process p being
            # share p*M + j of P*M (its own env seeds), rolled out in turn
            return SliceRotation(
                [
                    HostCollector(
                        HostRunSettings.of(self.config), self.env, self.host_policy, device, keys, i, (p * M + j, P * M)
                    )
                    for j in range(M)
                ]
            )
        return _JaxCollector(self, device, keys)

    # ------------------------------------------------------------------ threads (bodies)
    def _publish(self, store: ParamStore, version: int, params) -> None:
        """Copy params to every actor device (dispatch is asynchronous) and publish them."""
        # a real copy even on a shared device (never an alias), since the learner donates its state
        store.publish(version, copy_to_devices(self.acting_params(params), self.placement.actor_devices))

    def _actor(
        self,
        i: int,
        buffer: TrajectoryBuffer,
        store: ParamStore,
        budget: int | None,
        errors: list,
        heart: Heartbeats,
        throttle: Throttle | None = None,
    ) -> None:
        config = self.config
        collector = None
        try:
            heart.beat(i, "setting up its environments")
            collector = self.make_collector(i)
            collector.beat = lambda what, since=None: heart.beat(i, what, since)
            collector.cancelled = lambda: buffer.closed
            collector.newest = lambda: _on(store.newest(), collector.device)  # per-step refresh (host_copies.py)
            claim = getattr(collector, "claim", 1)  # items started at once (host_copies.py: a whole update's)
            seq = 0
            while True:
                heart.idle(i)
                if throttle is not None:
                    throttle.wait_turn(i, claim)  # balance=rate: paused, or held by the window, holding no ticket
                first, min_version = buffer.start(count=claim)
                if budget is not None and first >= budget:
                    return  # block mode: every update's batch is spoken for
                version, params, waited = store.wait_for(min_version, exact=config.async_.deterministic)
                buffer.record_actor_wait(waited)
                for ticket in range(first, first + claim):
                    heart.beat(i, f"the rollout of batch {ticket}")
                    # a collector may carry env steps over from earlier batches: it returns the oldest
                    # version in the batch, never below min_version (host_copies.py)
                    traj, v = collector.collect(
                        params[collector.device], ticket, version=version, min_version=min_version
                    )
                    heart.idle(i)
                    for leaf in jax.tree.leaves(traj):
                        if isinstance(leaf, jax.Array):
                            leaf.copy_to_host_async()
                    buffer.put(Stamped(traj, v, i, seq, ticket))
                    seq += 1
        except BufferClosed:
            pass
        except BaseException as exc:  # noqa: BLE001 - surfaced in the main thread
            errors.append((i, exc, traceback.format_exc()))
            buffer.close(exc)
        finally:
            if collector is not None and hasattr(collector, "close"):
                collector.close()  # waits for env copies in flight, beating: the watchdog names a hung one
            heart.idle(i)

    # ------------------------------------------------------------------- driver
    def _next_batch(self, buffer: TrajectoryBuffer, heart: Heartbeats) -> Stamped:
        """buffer.get(), failing the run when an actor hangs (see watchdog.py)."""
        limit = self.config.async_.actor_timeout_s
        while True:
            try:
                return buffer.get(timeout=1.0)
            except TimeoutError:
                stuck = heart.stuck(limit)
                if stuck:
                    raise ActorStuck(stuck_message(stuck, limit)) from None

    def _check_stuck(self, heart: Heartbeats) -> None:
        limit = self.config.async_.actor_timeout_s
        stuck = heart.stuck(limit)
        if stuck:
            raise ActorStuck(stuck_message(stuck, limit))

    def _join(self, threads: list[threading.Thread], heart: Heartbeats, raise_stuck: bool) -> None:
        """Join the actor threads. An actor still waiting on a hung env copy at the end of a clean run
        fails it (ActorStuck) once the watchdog's limit is reached; otherwise hung threads are left
        (daemons: they end with the process) and the others get 30 s."""
        deadline = time.monotonic() + 30
        for i, t in enumerate(threads):
            while t.is_alive():
                t.join(timeout=0.25)
                stuck = heart.stuck(self.config.async_.actor_timeout_s)
                if stuck and raise_stuck:
                    raise ActorStuck(stuck_message(stuck, self.config.async_.actor_timeout_s))
                if (stuck and i in {j for j, _, _ in stuck}) or (time.monotonic() > deadline and not raise_stuck):
                    break

    def run(self, updates: int, on_chunk: Callable, chunk: int, stop: Callable[[bool], bool] | None = None) -> Any:
        """Run `updates` learner updates; every `chunk` of them call
        on_chunk(stacked metrics [S, n], wall seconds, async fields of the row, learner state).
        After every update `stop(chunk_end)` (train.driver.StopControl: several processes agree,
        at chunk ends only, since each update is a collective) says whether to stop: the updates
        since the last chunk are then handed over and the run ends."""
        config = self.config
        buffer = TrajectoryBuffer(
            config.async_.buffer_capacity,
            config.async_.max_staleness,
            config.async_.staleness_policy,
            self.micro_batches,
        )
        store = ParamStore(keep=config.async_.max_staleness + 2)
        self._publish(store, 0, self.learner.params)
        # block mode: the tickets every update's items need (the actors stop there)
        budget = updates * self.micro_batches if config.async_.staleness_policy == "block" else None
        self.health = EnvHealth()
        errors: list = []
        heart = Heartbeats()
        n_threads = config.async_.num_actor_threads
        balancer = throttle = None
        if config.async_.balanced():  # deterministic mode never gets here: its lockstep must not depend on timing
            # in items: with micro-batches the window, the waiting count and the target are in slices
            balancer = RateBalancer(
                n_threads, config.async_.min_actor_threads, config.async_.balance_target * self.micro_batches
            )
            throttle = Throttle(n_threads)
            buffer.on_taken = throttle.taken
        threads = [
            threading.Thread(
                target=self._actor,
                args=(i, buffer, store, budget, errors, heart, throttle),
                name=f"actor{i}",
                daemon=True,
            )
            for i in range(n_threads)
        ]
        for t in threads:
            t.start()
        recorder = None
        if config.async_.record_trajectories:
            from marljax.pipeline.recorder import TrajectoryRecorder

            recorder = TrajectoryRecorder(
                processes.dataset_dir(config.async_.record_trajectories, self.process, self.processes)
            )
        clean = stopped = False
        pending: list[dict] = []
        staleness: list[int] = []  # per consumed item (slice) in this chunk
        slices: list[list[tuple[int, int]]] = []  # micro-batches: per update, each slice's (version, staleness)
        last = buffer.stats()
        dropped_before = 0
        t_chunk = time.perf_counter()
        try:
            t_update = time.perf_counter()
            for u in range(updates):
                try:
                    items = [self._next_batch(buffer, heart) for _ in range(self.micro_batches)]
                except BufferClosed:
                    break
                got = buffer.stats()
                learner_version, got_at = got.version, time.perf_counter()
                for item in items:  # each slice keeps its own stamps
                    staleness.append(learner_version - item.version)
                    if recorder is not None:
                        stamps = dict(
                            version=item.version,
                            actor=item.actor,
                            seq=item.seq,
                            ticket=item.ticket,
                            learner_version=learner_version,
                        )
                        recorder.append(item.data, stamps)
                if self.micro_batches > 1:
                    slices.append([(item.version, learner_version - item.version) for item in items])
                data = items[0].data if len(items) == 1 else join_slices([item.data for item in items])
                self.learner, metrics = self.learn(self.learner, self.to_learner_mesh(data))
                self._check_stuck(heart)  # an env copy may hang while the other copies keep the learner fed
                version = buffer.finish_update()
                self._publish(store, version, self.learner.params)
                if balancer is not None:
                    assert throttle is not None  # made with the balancer
                    end = time.perf_counter()
                    dropped = sum(got.dropped.values())
                    throttle.set(
                        balancer.update(
                            Observation(got.held, dropped - dropped_before, got_at - t_update, end - t_update)
                        )
                    )
                    dropped_before, t_update = dropped, end
                pending.append(metrics)
                chunk_end = len(pending) == chunk or u == updates - 1
                stopping = stop is not None and stop(chunk_end)
                if chunk_end or stopping:
                    stacked = jax.tree.map(lambda *xs: np.stack(xs, axis=1), *host_values(pending))
                    now, wall = buffer.stats(), time.perf_counter() - t_chunk
                    row = async_row(
                        now, last, staleness, wall, self.samples_per_batch // self.micro_batches, self.health.snapshot()
                    )
                    if self.micro_batches > 1:
                        row.update(
                            slice_versions=[[v for v, _ in one] for one in slices],
                            slice_staleness=[[k for _, k in one] for one in slices],
                        )
                    row.update(
                        active_actors=balancer.active if balancer else n_threads,
                        batch_window=balancer.window if balancer else None,
                        balance_target=config.async_.balance_target if balancer else None,
                    )
                    if self.processes > 1:  # the scalars above are this process's (process 0 writes the row)
                        row["by_process"] = processes.by_process(
                            now.produced, now.consumed, row["dropped"], now.held, row["active_actors"]
                        )
                    on_chunk(stacked, wall, row, self.learner)
                    pending, staleness, slices, last, t_chunk = [], [], [], now, time.perf_counter()
                if stopping:
                    stopped = True
                    break
            clean = not stopped
        except BaseException as exc:
            buffer.close(exc)
            raise
        finally:
            buffer.close()
            store.close()
            if throttle is not None:
                throttle.close()
            self._join(threads, heart, raise_stuck=clean and not errors)
        if errors:
            i, error, tb = errors[0]
            raise ActorFailed(f"actor thread {i} failed: {type(error).__name__}: {error}\n{tb}") from error
        hung = [t.name for t in threads if t.is_alive()]
        if hung:
            print(f"warning: actor threads still running after shutdown: {hung}", file=sys.stderr)
        return buffer.stats()


class _JaxCollector:
    """A JAX env's rollouts on one actor device: the jitted `collect`, its env states carried along.

    Inputs committed to `device` make every jitted call run there (no `default_device` context:
    it is part of jit's cache key and would compile `collect` again in each thread).
    """

    beat: Callable[[str], None] = staticmethod(lambda what: None)  # one rollout is one piece of work

    def __init__(self, runner: AsyncRun, device, keys: jax.Array):
        self.runner, self.device, self.keys = runner, device, keys
        if runner.actor_init is None:  # make_collector makes this collector for JAX envs only
            raise RuntimeError("a JAX env's collector was asked of a run on a host env")
        actors = runner.actor_init(keys)  # leaves [S, E, ...]
        M, P, p = runner.micro_batches, runner.processes, runner.process
        self.actors = actors if M * P == 1 else None
        # micro-batches and/or processes: this process's M states of E/(P*M) environments, rolled
        # out in turn (leaves [S, E/(P*M), ...]); process p keeps slices p*M .. p*M+M-1 of P*M
        self.slices = slice_actors(actors, P * M)[p * M : (p + 1) * M] if M * P > 1 else []
        self.next_slice = 0

    def collect(self, params, ticket: int, version: int = 0, min_version: int = 0) -> tuple[Trajectory, int]:
        """(the rollout of batch `ticket` with `params`, their version); with micro-batches, of the
        next of this thread's environment slices, with the keys of batch ticket // M."""
        runner, M = self.runner, self.runner.micro_batches
        if self.actors is not None:
            self.actors, traj = runner.collect(params, self.actors, runner.step_keys(self.keys, ticket))
            return traj, version
        j = self.next_slice
        self.slices[j], traj = runner.slice_collects[j](
            params, self.slices[j], runner.step_keys(self.keys, ticket // M)
        )
        self.next_slice = (j + 1) % M
        return traj, version


def _on(newest: tuple[int, dict], device) -> tuple[int, Any]:
    """(version, params on `device`) from the store's newest entry (params by device)."""
    return newest[0], newest[1][device]


def async_row(now, last, staleness: list[int], wall: float, samples_per_item: int, env: dict | None = None) -> dict:
    """The async fields of one metrics row (counters cumulative; rates and staleness over the chunk's
    consumed items: batches, or slices with micro-batches; `env`: the host env copies' failure
    counters, zero for JAX envs)."""
    return {
        **(env if env is not None else dict.fromkeys(EnvHealth.KEYS, 0)),
        "policy_version": now.version,
        "staleness_mean": float(np.mean(staleness)) if staleness else None,
        "staleness_max": int(max(staleness)) if staleness else None,
        "produced": now.produced,
        "consumed": now.consumed,
        "dropped": sum(now.dropped.values()),
        "dropped_by_reason": now.dropped,
        "buffer_occupancy": now.held,
        "actor_wait_s": now.actor_wait_s,
        "learner_wait_s": now.learner_wait_s,
        "production_rate": (now.produced - last.produced) * samples_per_item / wall if wall > 0 else None,
        "consumption_rate": (now.consumed - last.consumed) * samples_per_item / wall if wall > 0 else None,
    }
