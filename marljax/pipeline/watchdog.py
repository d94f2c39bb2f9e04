"""Which actor thread is stuck, and where: heartbeats the learner reads while it waits for a batch.

An actor beats when it starts a piece of work that must finish ("rollout of ticket 3", "host env
step 17 of ticket 3") and goes idle when it waits on the buffer or the parameter store (waiting is
the learner's doing, not a hang). The learner waits for a batch in short slices; between them it
asks `stuck(limit)` for an actor busy with the same piece for longer than `async.actor_timeout_s`
and, if there is one, fails the run naming it (`ActorStuck`) instead of waiting forever on, say,
a PettingZoo env whose `step` never returns. A thread stuck inside foreign code cannot be stopped
from Python; it is a daemon thread and ends with the process.
"""

from __future__ import annotations

import threading
import time


class ActorStuck(RuntimeError):
    """An actor thread made no progress for longer than `async.actor_timeout_s`."""


class Heartbeats:
    def __init__(self):
        self._lock = threading.Lock()
        self._busy: dict[int, tuple[float, str]] = {}  # actor -> (since, what)

    def beat(self, actor: int, what: str, since: float | None = None) -> None:
        """Actor `actor` is on `what`, started at `since` (time.monotonic(); default now), and
        finished whatever it did before. A collector that waits on several env copies beats its
        oldest unanswered one, with the time it was sent."""
        with self._lock:
            self._busy[actor] = (time.monotonic() if since is None else since, what)

    def idle(self, actor: int) -> None:
        """Actor `actor` waits on the pipeline: not its fault if nothing comes."""
        with self._lock:
            self._busy.pop(actor, None)

    def stuck(self, limit_s: float) -> list[tuple[int, str, float]]:
        """(actor, what, seconds) for each actor busy with one piece for more than limit_s
        (none when limit_s is 0: wait forever)."""
        if limit_s <= 0:
            return []
        now = time.monotonic()
        with self._lock:
            return [(i, what, now - t) for i, (t, what) in sorted(self._busy.items()) if now - t > limit_s]


def stuck_message(stuck: list[tuple[int, str, float]], limit_s: float) -> str:
    parts = "; ".join(f"actor thread {i} has been in {what} for {secs:.0f} s" for i, what, secs in stuck)
    return (
        f"{parts} (async.actor_timeout_s={limit_s:g}): an environment that never returns? "
        "The run stopped; its checkpoints so far are kept. Raise async.actor_timeout_s "
        "(0 waits forever) if this step is just slow."
    )
