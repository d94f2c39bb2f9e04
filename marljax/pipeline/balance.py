"""Production/consumption balance for mode=async (`async.balance=rate`).

Two pieces, kept apart so the policy can be tested without threads:

* `RateBalancer`: a pure controller. After every learner update it gets one `Observation`
  (batches waiting behind the one just taken, batches dropped since the last update, how long
  the learner waited for its batch and how long the whole update took) and returns a
  `Decision`: how many actor threads are active, and a window: the most batches started and
  not yet taken by the learner (consumed or dropped).
* `Throttle`: what the actor threads obey. A thread with index >= `active` pauses between
  batches (never inside one: it holds no ticket while paused); a start also waits while
  `window` batches are outstanding. The buffer tells it when the learner takes one (consumed or
  dropped), so a window >= 1 can never starve the pipeline for good.

Why a window of batches and not a delay in seconds: a batch started at version v is dropped
(K=1) when the learner reaches v + 2 before taking it, so what matters is how many batches are
started per learner version; a delay drifts in phase against the updates. A window of 1 starts
the next batch as the learner takes the last one, with the newest parameters: production
equals consumption whenever one rollout is faster than one update.

The controller: the error is over-production (more than `target` batches waiting, or any drop)
or under-production (the learner waited for its batch for more than `starve_fraction` of the
update). In between it holds: that band is the hysteresis, and every change is followed by
`cooldown` updates without one (batches in flight still arrive under the old setting):
* over-producing: window = (window, or the active threads when unlimited) - 1, at least 1;
* under-producing for `patience` updates in a row: window + 1; above `max_active` the limit
  is lifted (asymmetric on purpose: too wide a window costs drops, too narrow a short wait).
It starts at a window of `max_active` (one batch in flight per thread).
Active threads follow the window, within [`min_active`, `max_active`] (threads beyond the
window would only wait). The first `warmup` updates are ignored: they include compilation.

Micro-batches (`async.micro_batches=M`): the buffer's items are slices, an update takes M of
them, and every count here is in items: the window (slices started and not yet taken, starting
at one per thread), the waiting count and the target (`balance_target` batches = M x that many
slices). A slice is what goes stale and what a thread starts, so the window steers at the
granularity the buffer drops at; a window below M does not stall the learner, which takes the
slices of an update one by one as they arrive (each one taken frees the window for the next).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import NamedTuple

from marljax.pipeline.buffer import BufferClosed

MODES = ("off", "rate")


class Observation(NamedTuple):
    waiting: int  # batches held in the buffer right after the learner took its batch
    dropped: int  # batches dropped since the previous observation
    learner_wait_s: float  # seconds the learner waited for this batch
    interval_s: float  # seconds of the whole update cycle (wait + learn + publish)


class Decision(NamedTuple):
    active: int  # actor threads allowed to start batches
    window: int | None  # the most batches started and not yet taken by the learner; None: no limit


@dataclasses.dataclass
class RateBalancer:
    """Occupancy feedback with a hysteresis band on a window of outstanding batches (module doc)."""

    max_active: int
    min_active: int = 1
    target: int = 0  # batches waiting behind the one the learner takes
    starve_fraction: float = 0.25  # a learner wait below this share of an update is noise (thread switches)
    cooldown: int = 2
    warmup: int = 2
    patience: int = 3  # starved updates in a row before widening: one slow rollout is not a trend, and a
    # window too wide costs drops (K=1) while one too narrow costs only a short wait
    active: int = dataclasses.field(init=False)
    window: int | None = dataclasses.field(default=None, init=False)
    _seen: int = dataclasses.field(default=0, init=False)
    _since_change: int = dataclasses.field(default=0, init=False)
    _starved_run: int = dataclasses.field(default=0, init=False)

    def __post_init__(self) -> None:
        if not 1 <= self.min_active <= self.max_active:
            raise ValueError(f"need 1 <= min_active <= max_active, got {self.min_active}, {self.max_active}")
        self.active = self.max_active
        self.window = self.max_active  # one batch in flight per thread: no thread runs ahead of the learner

    def decision(self) -> Decision:
        return Decision(self.active, self.window)

    def update(self, obs: Observation) -> Decision:
        """One learner update's observation in, the threads' setting out."""
        self._seen += 1
        self._since_change += 1
        over = obs.waiting > self.target or obs.dropped > 0
        starved = obs.learner_wait_s > self.starve_fraction * obs.interval_s and not over
        self._starved_run = self._starved_run + 1 if starved else 0
        if self._seen <= self.warmup or self._since_change <= self.cooldown:
            return self.decision()
        if over and self.window != 1:
            self.window = max(1, (self.window if self.window is not None else self.active) - 1)
        elif self._starved_run >= self.patience and self.window is not None:
            self._starved_run = 0
            self.window = self.window + 1 if self.window < self.max_active else None
        else:
            return self.decision()
        self._since_change = 0
        limit = self.window if self.window is not None else self.max_active
        self.active = min(self.max_active, max(self.min_active, limit))
        return self.decision()


class Throttle:
    """The actor threads' side of the controller's decision (thread-safe)."""

    def __init__(self, active: int):
        self._cond = threading.Condition()
        self._active, self._outstanding, self._closed = active, 0, False
        self._window: int | None = None

    def set(self, decision: Decision) -> None:
        with self._cond:
            self._active, self._window = decision.active, decision.window
            self._cond.notify_all()

    def taken(self) -> None:
        """The learner took a batch (consumed or dropped): one fewer outstanding."""
        with self._cond:
            self._outstanding = max(0, self._outstanding - 1)
            self._cond.notify_all()

    def wait_turn(self, i: int, count: int = 1) -> None:
        """Called by actor thread i between batches: wait while it is paused or the window is full,
        then count its `count` items as outstanding (a claim of M slices goes ahead whenever the
        window has room for one: a window below M must not shut it out for good). Raises
        BufferClosed once closed."""
        with self._cond:
            while not self._closed and (i >= self._active or self._window_full()):
                self._cond.wait()
            if self._closed:
                raise BufferClosed("throttle closed")
            self._outstanding += count

    def _window_full(self) -> bool:
        return self._window is not None and self._outstanding >= self._window

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
