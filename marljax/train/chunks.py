"""The chunk loop that `marljax train` and `marljax sweep` share.

The jitted unit is a chunk of updates (`parallel.mesh.compile_chunks`); between chunks the host
does everything else. `run_chunks` runs a chunk schedule under JAX's transfer guard, so an
accidental host<->device copy in the hot path (a Python scalar or a numpy array slipped into the
state, a leaf placed on the wrong devices) fails loudly instead of silently slowing every chunk.
The metrics come back with one explicit copy per chunk, which the guard allows.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax

from marljax.parallel.distributed import host_values
from marljax.types import UpdateMetrics


def chunk_sizes(num_updates: int, per_chunk: int) -> list[int]:
    """`num_updates` split into chunks of `per_chunk` (the last one shorter)."""
    full, rest = divmod(num_updates, per_chunk)
    return [per_chunk] * full + ([rest] if rest else [])


def checkpoint_due(every: int, last: int, update: int, saved: int) -> bool:
    """A checkpoint is due at the `last` update, and `every` updates (`checkpoint_every`; 0: never)
    after the last one saved."""
    return update == last or bool(every and update - saved >= every)


class ChunkBudget:
    """How many more chunks may run (None: no limit); a sweep shares one across its programs."""

    def __init__(self, chunks: int | None):
        self.left = chunks

    def take(self) -> bool:
        """Spend one chunk; False when none is left."""
        if self.left is None:
            return True
        if self.left <= 0:
            return False
        self.left -= 1
        return True


class Stopped(Exception):
    """The run stopped at a chunk boundary on SIGINT, SIGTERM or SIGHUP, after saving a checkpoint."""

    def __init__(self, signum: int, update: int, where: str, again: str = "resume=true"):
        self.signum, self.update = signum, update
        super().__init__(f"{self.head}; its checkpoint is in {where}: continue with {again}")

    @property
    def head(self) -> str:
        """What stopped the run, and where: 'stopped by SIGTERM at update 24'."""
        return f"stopped by {signal.Signals(self.signum).name} at update {self.update}"

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP, as a shell reports them


class StopSignals:
    """While active (a context manager, main thread only): the first SIGINT, SIGTERM or SIGHUP is noted
    (`signum`), so that the chunk loop saves a checkpoint at the next chunk boundary and stops;
    a second SIGINT interrupts at once (KeyboardInterrupt)."""

    # SIGHUP: a closed terminal or ssh session, or a scheduler's stop, ends a run as SIGTERM does
    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict = {}

    def _note(self, signum, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = self.signum or signum

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._note) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)


def run_chunks(
    compiled: dict[int, Callable],
    state: Any,
    schedule: Sequence[int],
    on_chunk: Callable[[Any, UpdateMetrics, int, float], None],
    budget: ChunkBudget | None = None,
    stop: Callable[[], bool] | None = None,
) -> tuple[Any, bool]:
    """Run `compiled[n](state)` for each chunk size n of `schedule`; after each, on the host,
    `on_chunk(state, metrics, n, wall_s)` with the metrics copied to numpy.

    Returns (final state, True) or, when the budget runs out or `stop()` says so after a
    chunk's `on_chunk` (which then saved a checkpoint), (state so far, False).
    """
    for n in schedule:
        if budget is not None and not budget.take():
            return state, False
        t = time.perf_counter()
        with jax.transfer_guard("disallow"):
            state, metrics = compiled[n](state)
        # waits for the chunk to finish; a chunk shorter than its program's leaves rows past n unused
        metrics = jax.tree.map(lambda m, n=n: m[:, :n], host_values(metrics))
        on_chunk(state, metrics, n, time.perf_counter() - t)
        if stop is not None and stop():
            return state, False
    return state, True
