"""The host-side trajectory buffer between actor threads and the learner, and the parameter store.

Policy versions: the learner's version V is the number of updates it has finished; each
update consumes one batch. A batch generated with parameters of version v and dequeued
when the learner is at V has staleness V - v. `max_staleness` = K bounds it:

* `block`: batches are numbered by *tickets* in the order actors start them, and the
  learner consumes them in ticket order. Ticket t is consumed when the learner is at
  version t (every earlier ticket was consumed first, none dropped), so its staleness is
  t - v; an actor may start ticket t only with parameters of version v >= t - K
  (`ParamStore.wait_for(t - K)`), and only while t < V + capacity. Staleness <= K holds
  by construction, whatever the actors' speeds; nothing is dropped.
* `drop`: batches are consumed in arrival order; a batch older than K at dequeue is dropped
  and counted with the reason "stale". Actors wait only for room in the buffer.

Micro-batches (`micro_batches` = M > 1): an item is a slice of a batch (num_envs/M environments
of one actor thread) and an update consumes M items, so every count above is in items and
"ticket t" reads "ticket t, consumed by update t // M": in block mode the learner at version V
takes tickets V*M .. V*M+M-1 in order, an actor starts ticket t with a version >= t//M - K, and
only while t < (V + capacity) * M (capacity stays in batches of M items, in drop mode too: the
queue holds capacity * M items). Staleness is per item;
the M items of one update may come from different actors and versions. M = 1 is the plain case.

Counting is exact: produced == consumed + dropped + held, at every moment under the lock;
at `close()` what is still held is dropped with the reason "end of run".

Nothing here touches JAX: a batch is any object. Threads wait on one condition variable;
`close(error)` wakes every waiter, which raises `BufferClosed`.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

POLICIES = ("block", "drop")


class BufferClosed(RuntimeError):
    """The pipeline is shutting down (end of run, Ctrl-C, or an error in another thread)."""


class Stamped(NamedTuple):
    data: Any  # one rollout batch
    version: int  # policy version of the parameters that generated it
    actor: int  # actor thread id
    seq: int  # the actor's own sequence number
    ticket: int  # global start order (block mode consumes in this order)


class BufferStats(NamedTuple):
    produced: int
    consumed: int
    dropped: dict  # reason -> count
    held: int  # in the buffer now
    staleness_hist: dict  # staleness -> consumed batches
    staleness_max: int
    staleness_mean: float
    occupancy_mean: float  # batches held, averaged over dequeues
    actor_wait_s: float  # summed over actor threads
    learner_wait_s: float
    version: int  # learner version


class TrajectoryBuffer:
    def __init__(self, capacity: int, max_staleness: int, policy: str = "block", micro_batches: int = 1):
        if capacity < 1:
            raise ValueError(f"buffer_capacity must be >= 1, got {capacity}")
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        if policy not in POLICIES:
            raise ValueError(f"staleness_policy must be one of {POLICIES}, got {policy!r}")
        if micro_batches < 1:
            raise ValueError(f"micro_batches must be >= 1, got {micro_batches}")
        self.capacity, self.max_staleness, self.policy = capacity, max_staleness, policy
        self.micro_batches = micro_batches
        self._part = 0  # items taken for the update in progress (block: the next ticket is version * M + part)
        self._cond = threading.Condition()
        self._items: dict[int, Stamped] = {}  # block: ticket -> batch
        self._fifo: collections.deque[Stamped] = collections.deque()  # drop: arrival order
        self._next_ticket = 0
        self._version = 0
        self._closed: BaseException | bool = False
        self._produced = self._consumed = 0
        self._dropped: collections.Counter = collections.Counter()
        self._hist: collections.Counter = collections.Counter()
        self._occupancy_sum = 0
        self._actor_wait = self._learner_wait = 0.0
        self.on_taken: Callable[[], None] | None = None  # called (under the lock) per batch consumed or dropped stale

    # ------------------------------------------------------------------ helpers
    def _held(self) -> int:
        return len(self._items) + len(self._fifo)

    def _wait(self, ready, timeout: float | None, who: str) -> None:
        """Wait (holding the lock) until ready() or closed; the seconds waited, a timeout's
        included, count as `who`'s ("actor" or "learner") wait time."""
        t0 = time.perf_counter()
        deadline = None if timeout is None else t0 + timeout
        try:
            while not ready():
                if self._closed:
                    raise BufferClosed("buffer closed") from (
                        self._closed if isinstance(self._closed, BaseException) else None
                    )
                left = None if deadline is None else deadline - time.perf_counter()
                if left is not None and left <= 0:
                    raise TimeoutError("buffer wait timed out")
                self._cond.wait(left)
            if self._closed:
                raise BufferClosed("buffer closed")
        finally:
            waited = time.perf_counter() - t0
            if who == "actor":
                self._actor_wait += waited
            else:
                self._learner_wait += waited

    # ----------------------------------------------------------------- producers
    def start(self, timeout: float | None = None, count: int = 1) -> tuple[int, int]:
        """Reserve the next `count` items before generating them: (the first of their consecutive
        tickets, minimum policy version to use).

        block: waits while `capacity` batches (of M items) are already started and not consumed.
        drop: returns at once (the minimum version is 0).
        count = M claims a whole update's slices for one actor (a host env thread whose copies
        finish all of its slices together, host_copies.py); then every actor must claim M, so
        that tickets stay aligned to updates and the minimum version holds for all M.
        """
        M = self.micro_batches
        with self._cond:
            if self.policy == "block":
                self._wait(lambda: self._next_ticket + count <= (self._version + self.capacity) * M, timeout, "actor")
            ticket = self._next_ticket
            self._next_ticket += count
            return ticket, (max(0, ticket // M - self.max_staleness) if self.policy == "block" else 0)

    def put(self, batch: Stamped, timeout: float | None = None) -> None:
        """Hand a finished batch to the learner (drop: waits while the buffer is full)."""
        with self._cond:
            if self.policy == "drop":
                self._wait(lambda: len(self._fifo) < self.capacity * self.micro_batches, timeout, "actor")
                self._fifo.append(batch)
            else:
                if self._closed:
                    raise BufferClosed("buffer closed")
                self._items[batch.ticket] = batch
            self._produced += 1
            self._cond.notify_all()

    def record_actor_wait(self, seconds: float) -> None:
        """Time an actor spent waiting outside the buffer (for parameters of a recent enough version)."""
        with self._cond:
            self._actor_wait += seconds

    # ------------------------------------------------------------------ learner
    def get(self, timeout: float | None = None) -> Stamped:
        """The next batch (item) within the staleness bound (drop: older ones are dropped on the way)."""
        with self._cond:
            while True:
                if self.policy == "block":
                    ticket = self._version * self.micro_batches + self._part
                    self._wait(lambda: ticket in self._items, timeout, "learner")  # noqa: B023 (_wait calls it before returning)
                    batch = self._items.pop(ticket)
                else:
                    self._wait(lambda: bool(self._fifo), timeout, "learner")
                    batch = self._fifo.popleft()
                staleness = self._version - batch.version
                self._occupancy_sum += self._held() + 1
                if staleness > self.max_staleness:
                    assert self.policy == "drop", "block mode cannot produce a stale batch"
                    self._dropped["stale"] += 1
                    if self.on_taken is not None:
                        self.on_taken()
                    self._cond.notify_all()
                    continue
                self._consumed += 1
                self._part += 1
                self._hist[staleness] += 1
                if self.on_taken is not None:
                    self.on_taken()
                self._cond.notify_all()
                return batch

    def finish_update(self) -> int:
        """The learner finished one update with the last batch (M items): version += 1. Returns it."""
        with self._cond:
            self._version += 1
            self._part = 0
            self._cond.notify_all()
            return self._version

    # ---------------------------------------------------------------- lifecycle
    def close(self, error: BaseException | None = None) -> None:
        """Wake every waiter (they raise BufferClosed); what is still held is dropped and counted."""
        with self._cond:
            if not self._closed:
                self._closed = error if error is not None else True
            held = self._held()
            if held:
                self._dropped["end of run"] += held
                self._items.clear()
                self._fifo.clear()
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return bool(self._closed)

    def stats(self) -> BufferStats:
        with self._cond:
            n = sum(self._hist.values())
            dequeues = n + sum(v for k, v in self._dropped.items() if k == "stale")
            return BufferStats(
                produced=self._produced,
                consumed=self._consumed,
                dropped=dict(self._dropped),
                held=self._held(),
                staleness_hist=dict(sorted(self._hist.items())),
                staleness_max=max(self._hist) if self._hist else 0,
                staleness_mean=sum(k * v for k, v in self._hist.items()) / n if n else 0.0,
                occupancy_mean=self._occupancy_sum / dequeues if dequeues else 0.0,
                actor_wait_s=self._actor_wait,
                learner_wait_s=self._learner_wait,
                version=self._version,
            )


class ParamStore:
    """Published parameters by policy version; actors read the newest, or wait for one.

    Keeps the last `keep` versions, so a deterministic actor can take exactly version t - K.
    """

    def __init__(self, keep: int):
        self._cond = threading.Condition()
        self._params: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._keep = max(1, keep)
        self._closed = False

    def publish(self, version: int, params: Any) -> None:
        with self._cond:
            self._params[version] = params
            while len(self._params) > self._keep:
                self._params.popitem(last=False)
            self._cond.notify_all()

    def wait_for(self, min_version: int, exact: bool = False, timeout: float | None = None) -> tuple[int, Any, float]:
        """(version, params, seconds waited): the newest version >= min_version (or exactly it)."""
        t0 = time.perf_counter()
        deadline = None if timeout is None else t0 + timeout
        with self._cond:
            while True:
                if self._closed:
                    raise BufferClosed("parameter store closed")
                if exact and min_version in self._params:
                    return min_version, self._params[min_version], time.perf_counter() - t0
                newest = next(reversed(self._params), -1)
                if not exact and newest >= min_version:
                    return newest, self._params[newest], time.perf_counter() - t0
                if exact and newest > min_version:
                    raise KeyError(f"version {min_version} is no longer kept (newest {newest})")
                left = None if deadline is None else deadline - time.perf_counter()
                if left is not None and left <= 0:
                    raise TimeoutError(f"no parameters of version >= {min_version}")
                self._cond.wait(left)

    def newest(self) -> tuple[int, Any]:
        """(version, params) of the newest published parameters, without waiting."""
        with self._cond:
            if self._closed:
                raise BufferClosed("parameter store closed")
            version = next(reversed(self._params))
            return version, self._params[version]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
