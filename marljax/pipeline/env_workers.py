"""Host env copies, each on its own worker thread, and the run's env-health counters.

Why threads, not processes: a PettingZoo env that costs time either waits (sleeps, I/O, a
simulator over a socket) or runs native code (physics engines, numpy on large arrays); both
release the GIL, so threads overlap them as well as processes would, with no pickling of
observations and actions on every step and no start-up per copy. A pure-Python env that holds the
GIL gains nothing from threads, and on the 2-core machines this project is tested on, processes
would not help it much either. The one thing a process can do that a thread cannot is be killed:
a copy stuck in `step` is abandoned instead (its thread is a daemon and ends with the process; its
late answer, if any, is ignored) and a fresh copy takes its place.

A worker takes one command at a time (make a fresh env, reset, step) and answers on the
collector's queue, stamped with the worker's incarnation so that an abandoned worker's answer is
recognised and dropped.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from marljax.envs.host import HostCopy, HostEnvAdapter


class Answer(NamedTuple):
    copy: int  # the copy's index in its collector
    incarnation: int  # which worker of that copy answered (a restart after a hang makes a new one)
    kind: str  # "reset" | "step"
    value: Any  # HostCopy.reset's or .step's result, or None after an error
    error: BaseException | None
    seconds: float


class CopyWorker:
    """A daemon thread that owns one env copy and runs its commands in order."""

    def __init__(
        self,
        copy: int,
        incarnation: int,
        adapter: HostEnvAdapter,
        next_seed: Callable[[], int],
        answers: queue.SimpleQueue,
        name: str,
    ):
        self.copy, self.incarnation = copy, incarnation
        self.adapter, self.next_seed, self.answers = adapter, next_seed, answers
        self.env: HostCopy | None = None  # made on the worker: a slow constructor blocks only this copy
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def reset(self) -> None:
        """Reset the copy (making the env first, on a fresh worker); answers ("reset", obs)."""
        self._commands.put(("reset", None))

    def step(self, actions: dict) -> None:
        """Step the copy; answers ("step", (obs, reward, done, episode_done))."""
        self._commands.put(("step", actions))

    def stop(self) -> None:
        """Finish after the command in progress (a worker stuck in `step` never reads this)."""
        self._commands.put(("stop", None))

    def run(self, kind: str, payload: Any) -> Answer:
        """Do one command here, on the calling thread; the answer it would have sent. The collector
        calls this directly for a copy it steps inline (no command in flight on the worker then)."""
        t0 = time.perf_counter()
        try:
            if kind == "reset":
                if self.env is None:
                    self.env = HostCopy(self.adapter, self.adapter.make_one(), self.next_seed)
                value = self.env.reset()
            elif self.env is None:  # the collector resets every copy before it steps one
                raise RuntimeError("a host env copy was stepped before its reset")
            else:
                value = self.env.step(payload)
            error = None
        except BaseException as exc:  # noqa: BLE001 - a failing copy is the collector's to handle
            value, error = None, exc
        return Answer(self.copy, self.incarnation, kind, value, error, time.perf_counter() - t0)

    def _loop(self) -> None:
        while True:
            kind, payload = self._commands.get()
            if kind == "stop":
                return
            self.answers.put(self.run(kind, payload))


class EnvHealth:
    """Counters shared by a run's collectors (thread-safe), reported in every metrics row."""

    # env_steps_inline: steps taken on the collector's own thread (stepping.py), not a worker's;
    # env_copies_parked: times a copy too slow for the staleness bound was parked (host_copies.py)
    KEYS = (
        "env_failures",
        "env_restarts",
        "env_retired",
        "env_steps_discarded",
        "env_steps_inline",
        "env_copies_parked",
    )

    def __init__(self):
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self.KEYS, 0)
        self.last_error = ""

    def add(self, key: str, n: int = 1, error: str | None = None) -> None:
        with self._lock:
            self._counts[key] += n
            if error is not None:
                self.last_error = error

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)
