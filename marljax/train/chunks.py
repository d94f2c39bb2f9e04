"""The chunk loop that `marljax train` and `marljax sweep` share.

The jitted unit is a chunk of updates (`parallel.mesh.compile_chunks`); between chunks the host
does everything else. `run_chunks` runs a chunk schedule under JAX's transfer guard, so an
accidental host<->device copy in the hot path (a Python scalar or a numpy array slipped into the
state, a leaf placed on the wrong devices) fails loudly instead of silently slowing every chunk.
The metrics come back with one explicit copy per chunk, which the guard allows.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import jax

from marljax.config import Config
from marljax.parallel.distributed import host_values


def chunk_sizes(num_updates: int, per_chunk: int) -> list[int]:
    """`num_updates` split into chunks of `per_chunk` (the last one shorter)."""
    full, rest = divmod(num_updates, per_chunk)
    return [per_chunk] * full + ([rest] if rest else [])


def checkpoint_due(config: Config, update: int, saved: int) -> bool:
    """A checkpoint is due at the last update, and `checkpoint_every` updates after the last one saved."""
    return update == config.num_updates or bool(config.checkpoint_every and update - saved >= config.checkpoint_every)


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


def run_chunks(
    compiled: dict[int, Callable],
    state: Any,
    schedule: Sequence[int],
    on_chunk: Callable[[Any, dict, int, float], None],
    budget: ChunkBudget | None = None,
) -> tuple[Any, bool]:
    """Run `compiled[n](state)` for each chunk size n of `schedule`; after each, on the host,
    `on_chunk(state, metrics, n, wall_s)` with the metrics copied to numpy.

    Returns (final state, True) or, when the budget runs out first, (state so far, False).
    """
    for n in schedule:
        if budget is not None and not budget.take():
            return state, False
        t = time.perf_counter()
        with jax.transfer_guard("disallow"):
            state, metrics = compiled[n](state)
        metrics = host_values(metrics)  # waits for the chunk to finish
        on_chunk(state, metrics, n, time.perf_counter() - t)
    return state, True
