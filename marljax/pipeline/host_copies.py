"""Host env copies that never wait for each other (`async.host_stepping=independent`).

A batch is [T steps x E envs] per seed; each of its E columns must be T consecutive steps of ONE
copy (GAE runs along a column and bootstraps from its end). Here a column is a *segment*: every
copy steps on its own worker thread (env_workers.py) at its own pace and cuts its stream of
steps into T-step segments; a seed's batch takes the first E segments its copies finish, from
whichever copies finish them. A fast copy fills several columns while a slow one fills none, so
one slow copy delays only its own trajectory, and a copy that fails loses only its own segment.
(The alternative, each copy filling its own column and the batch waiting for all of them, lets
the slowest copy set the pace: 1 copy in 8 at 10x the cost would cost about half the rate.)

The policy forward is batched over whichever copies are ready: one jitted call on every copy's
current observation (fixed shapes, no recompiling), whose outputs are used for the ready ones.
After the first answer of a round the collector waits a little for copies expected back within
about one policy call (each copy's own step time is tracked), so that equal copies still share
one forward, while a straggler is not waited for.

Cheap copies (a small numpy env, where a worker's two thread hand-offs cost more than the step)
step on the collector's own thread instead, when that is measured faster (stepping.py); the
segments, versions and failures below are the same either way.

Policy versions: a segment may span batches (a copy is part-way through one when a batch
completes), and each step uses the newest published parameters (`newest`, refreshed every
policy call). A segment's version is that of its first step, and a batch's the oldest of its
segments. At the start of a batch, carried segments older than max(min_version, version - K)
are discarded (counted in `env_steps_discarded`; the copy goes on from where it is), so the
staleness bound holds by construction as before, and a copy too slow to finish a segment within
K versions contributes no steps.

Parking: a copy too slow to finish a segment within the staleness bound contributes no steps,
yet each of its steps costs the process (its GIL time, the collector's bookkeeping). After its
unfinished segment (or its step in flight) was discarded as stale at PARK_AFTER batch starts in
a row, it is parked: it keeps
its place in its episode but is not stepped for PARK_ITEMS[0] items, then tried again, parked
twice as long each time it fails again (up to PARK_ITEMS[1] items) and back to the start once it
finishes a segment. At most (E - 1) // 2 copies of a seed are parked at once, so the others
always fill the batch; `env_copies_parked` counts the parkings.

Micro-batches (`async.micro_batches=M`): an item is B = E/M segments per seed instead of E, so
the collector hands over a slice as soon as any B segments of each seed are done; all E copies
keep stepping meanwhile (a copy waits only while its seed's slice is already full, until the
next call). Each slice carries the oldest version of its own segments. A thread claims a whole
update's M slices at once (`claim`, buffer.start(count=M)): its copies finish segments for all M
slices at about the same time, and a slice ticket shared out between threads would leave the
carried segments waiting a thread's turn, stale by then (measured: 8x the env steps discarded
with 2 threads, README "Micro-batches").

Failures: a copy whose `reset`/`step` raises, or whose step takes longer than
`async.env_step_timeout_s`, has failed: its unfinished segment is discarded and its episode
dropped (no return is reported for it), and it is restarted from a fresh reset (after a timeout,
on a fresh env and worker: the stuck one is abandoned). At `async.max_env_failures` failures in a
row (a finished episode ends the row) it is retired; when fewer than `async.min_env_copies`
copies of one seed remain, the actor fails with a message saying so.
"""

from __future__ import annotations

import collections
import itertools
import queue
import time
from collections.abc import Callable
from typing import Any, NamedTuple, cast

import jax
import numpy as np

from marljax.envs.host import HostCopy
from marljax.parallel.placement import place
from marljax.pipeline.buffer import BufferClosed
from marljax.pipeline.env_workers import Answer, CopyWorker, EnvHealth
from marljax.pipeline.processes import host_seed_base
from marljax.pipeline.settings import HostRunSettings
from marljax.pipeline.stepping import CHEAP_SHARE, SteppingChoice
from marljax.types import EpisodeStats, GroupBatch, Trajectory

FIELDS = ("obs", "action", "logp", "value", "reward", "done", "reset", "hidden")
# the fields written when a step is sent (reward and done are written when it answers)
ACTED = ("obs", "action", "logp", "value", "reset", "hidden")
WAIT_SLICE_S = 0.25  # the longest single wait for an answer: timeouts and heartbeats are checked between
# a copy's cost for the straggler rule: the least of its last FLOOR_STEPS step times. A step that
# waited for the GIL or for the CPU only adds time, and a process-wide pause (a 1 s stall on a loaded
# machine) inflates every step in flight at once: a moving average then lifted the median, hence the
# line, above a real straggler's cost for a dozen steps, and a 120 ms copy stepped on the collector.
FLOOR_STEPS = 8
PARK_AFTER = 2  # a copy whose unfinished segments went stale this many times in a row is parked ...
PARK_ITEMS = (4, 64)  # ... for this many items the first time, twice as many each time again, up to the second


class EnvCopiesExhausted(RuntimeError):
    """Too few host env copies of one seed are left to fill a batch."""


class Segment(NamedTuple):
    rows: dict  # field -> group -> [T, A_g, ...]: its T steps
    last_value: dict  # group -> [A_g]: the value of the observation after the last step
    version: int  # the policy version of its first step


class _Copy:
    """The collector's view of one env copy (only the actor thread touches it)."""

    def __init__(self, index: int, worker: CopyWorker):
        self.index, self.worker = index, worker
        self.ready = False  # its observation is current and it waits for an action
        self.busy_since: float | None = None  # monotonic time of the command in flight
        self.busy_what = ""
        self.pending: int | None = None  # the policy version of the step in flight (its row is `filled`), or None
        # the unfinished segment: steps 0 .. filled-1 of `rows` (field -> group -> [T, A_g, ...]),
        # written in place as they come; made at its first step (shapes and dtypes from that step)
        self.rows: dict | None = None
        self.filled = 0
        self.segment_version = 0
        self.step_what = f"env.step of host env copy {index}"
        self.step_s: float | None = None  # moving average of its step time
        self.recent_s: collections.deque[float] = collections.deque(maxlen=FLOOR_STEPS)  # its last steps' times
        self.inline = False  # steps on the collector's thread (stepping.py), not its worker
        self.failures_in_a_row = 0
        self.stale_in_a_row = 0  # its unfinished segments discarded as stale since it last finished one
        self.parked_until = 0  # not stepped before this item (module doc, "Parking")
        self.park_items = PARK_ITEMS[0]
        self.retired = False
        self.steps = 0
        self.ep_return: np.ndarray | None = None
        self.ep_length = 0

    def segment(self) -> dict:
        """`rows`, which exist while a step is in flight or steps are filled (`_act` makes them)."""
        if self.rows is None:
            raise RuntimeError(f"host env copy {self.index} has no unfinished segment (stepped without an action)")
        return self.rows

    def busy_start(self) -> float:
        """`busy_since` of a copy with a command in flight."""
        if self.busy_since is None:
            raise RuntimeError(f"host env copy {self.index} has no command in flight")
        return self.busy_since


def _floor(copy: _Copy) -> float:
    """The least of the copy's recent step times (FLOOR_STEPS): its cost without waits."""
    return min(copy.recent_s)


class IndependentHostCollector:
    beat: Callable[..., None] = staticmethod(lambda what, since=None: None)  # set by the actor thread (watchdog.py)
    newest: Callable[[], tuple[int, Any]] | None = None  # set by the actor thread: (version, params on this device)
    cancelled: Callable[[], bool] = staticmethod(lambda: False)  # set by the actor thread: the pipeline is closing

    def __init__(
        self,
        run: HostRunSettings,
        adapter,
        policy_step,
        device,
        keys: jax.Array,
        thread_index: int,
        health: EnvHealth,
        share: tuple[int, int] = (0, 1),
    ):
        """policy_step: jitted, seed-vmapped `Trainer.policy_step`, shared by the threads. share:
        (p, P), this process's slice of num_envs (processes.env_share)."""
        a = run.async_
        self.run, self.adapter, self.device, self.health = run, adapter, device, health
        self.S, self.E, self.T = run.num_seeds, run.num_envs // share[1], run.num_steps
        self.B = self.E // a.micro_batches  # segments per seed in one item (a batch, or one of its M slices)
        self.claim = a.micro_batches  # items the actor thread starts at once: a whole update's (module doc)
        self.K, self.timeout_s = a.max_staleness, a.env_step_timeout_s
        self.max_failures, self.min_copies = a.max_env_failures, a.min_env_copies
        self.thread_index, self.keys, self.step_fn = thread_index, keys, policy_step
        self.groups, self.rnn = adapter.groups, run.recurrent
        n = self.S * self.E
        self.answers: queue.SimpleQueue = queue.SimpleQueue()
        self.obs = {g.name: np.zeros((n, g.size) + g.obs_shape, np.float32) for g in self.groups}
        self.reset_flags = {g.name: np.ones((n, g.size), bool) for g in self.groups}
        self.hidden = {g.name: np.zeros((n, g.size, run.gru_hidden_size), np.float32) for g in self.groups}
        self.finished: list[list[Segment]] = [[] for _ in range(self.S)]  # finished, not yet in a batch
        self.policy_s = 0.001  # moving average of one policy call
        # cheap equal copies step on this thread when that is measured faster (stepping.py); never
        # with env_step_timeout_s, which needs a worker to abandon a hung step
        self.choice = SteppingChoice(allowed=not self.timeout_s)
        self._inline_below = 0.0  # now: copies with a step time up to this step inline (0: none)
        self._steps_taken = self._steps_inline = 0  # this item's
        self.items = 0  # items collected so far
        base = host_seed_base(run, thread_index, share)
        self._seeds = [itertools.count((base * 4099 + c) * 1_000_003 + 1) for c in range(n)]
        self.copies: list[_Copy] = []
        for c in range(n):  # made here, in order (copy c is the c-th env made), then reset on their workers
            worker = self._worker(c, 0)
            worker.env = HostCopy(adapter, adapter.make_one(), worker.next_seed)
            self.copies.append(_Copy(c, worker))
        for copy in self.copies:
            self._send_reset(copy)

    # ------------------------------------------------------------------ copies
    def _worker(self, c: int, incarnation: int) -> CopyWorker:
        return CopyWorker(
            c,
            incarnation,
            self.adapter,
            lambda: next(self._seeds[c]),
            self.answers,
            name=f"actor{self.thread_index}-env{c}",
        )

    def _send_reset(self, copy: _Copy) -> None:
        copy.ready, copy.pending, copy.filled = False, None, 0
        copy.ep_return, copy.ep_length = np.zeros(self.adapter.num_agents, np.float32), 0
        copy.busy_since, copy.busy_what = time.monotonic(), f"reset of host env copy {copy.index}"
        copy.worker.reset()

    def _fail(self, copy: _Copy, why: str, hung: bool = False) -> None:
        """Count the failure, drop the copy's unfinished segment and episode; restart or retire it."""
        self.health.add("env_failures", error=f"host env copy {copy.index} of actor thread {self.thread_index}: {why}")
        self.health.add("env_steps_discarded", copy.filled + (copy.pending is not None))
        copy.failures_in_a_row += 1
        if hung:  # the stuck worker is abandoned (see env_workers.py); a fresh env on a fresh worker replaces it
            copy.worker = self._worker(copy.index, copy.worker.incarnation + 1)
        if copy.failures_in_a_row >= self.max_failures:
            copy.retired, copy.ready, copy.busy_since, copy.pending, copy.filled = True, False, None, None, 0
            copy.worker.stop()
            self.health.add("env_retired")
            self._check_enough_copies()
            return
        self.health.add("env_restarts")
        self._send_reset(copy)

    def seed_copies(self, s: int) -> list[_Copy]:
        """The E copies of seed s (copy c belongs to seed c // E)."""
        return self.copies[s * self.E : (s + 1) * self.E]

    def _check_enough_copies(self) -> None:
        for s in range(self.S):
            live = sum(not c.retired for c in self.seed_copies(s))
            if live < self.min_copies:
                raise EnvCopiesExhausted(
                    f"actor thread {self.thread_index}: {live} of {self.E} host env copies of seed {s} are left, fewer than "
                    f"async.min_env_copies={self.min_copies}; the others were retired after async.max_env_failures="
                    f"{self.max_failures} failures in a row each. Last failure: {self.health.last_error}"
                )

    # ------------------------------------------------------------------ answers
    def _take(self, ans: Answer, stats: dict) -> None:
        copy = self.copies[ans.copy]
        if ans.incarnation != copy.worker.incarnation or copy.retired:
            return  # an abandoned worker's late answer
        copy.busy_since = None
        if ans.error is not None:
            self._fail(copy, f"{ans.kind} raised {type(ans.error).__name__}: {ans.error}")
            return
        if ans.kind == "reset":
            self._set_obs(copy, ans.value, {g.name: np.ones(g.size, bool) for g in self.groups})
            self.hidden_zero(copy.index)
            return
        obs, reward, done, ep_done = ans.value
        copy.step_s = ans.seconds if copy.step_s is None else 0.8 * copy.step_s + 0.2 * ans.seconds
        copy.recent_s.append(ans.seconds)
        copy.steps += 1
        self._steps_taken += 1
        if copy.pending is not None:  # None: a step of a segment discarded as stale while it was in flight
            rows, t = copy.segment(), copy.filled
            for g in self.groups:
                rows["reward"][g.name][t], rows["done"][g.name][t] = reward[g.name], done[g.name]
            if t == 0:
                copy.segment_version = copy.pending
            copy.filled = t + 1
        else:
            self.health.add("env_steps_discarded")
        copy.pending = None
        copy.ep_return += np.concatenate([reward[g.name] for g in self.groups])
        copy.ep_length += 1
        if ep_done:
            s = copy.index // self.E
            stats["return"][s] += copy.ep_return
            stats["length"][s] += copy.ep_length
            stats["count"][s] += 1
            copy.ep_return[:], copy.ep_length, copy.failures_in_a_row = 0.0, 0, 0
        self._set_obs(copy, obs, done)

    def hidden_zero(self, c: int) -> None:
        for g in self.groups:
            self.hidden[g.name][c] = 0.0

    def _set_obs(self, copy: _Copy, obs: dict, reset: dict) -> None:
        for g in self.groups:
            self.obs[g.name][copy.index] = obs[g.name]
            self.reset_flags[g.name][copy.index] = reset[g.name]
        copy.ready = True

    def _gather(self, stats: dict, ticket: int) -> None:
        """Wait for the first answer (unless copies are ready to act already), then for copies
        expected back within about one policy call."""
        first = not any(self._can_act(c) for c in self.copies)
        while True:
            busy = [c for c in self.copies if c.busy_since is not None]
            if not busy:
                return
            if self.cancelled():
                raise BufferClosed("the pipeline is closing")
            self._check_timeouts(busy)
            busy = [c for c in busy if c.busy_since is not None]  # a copy timed out just now is waited on no more
            if not busy:
                continue
            oldest = min(busy, key=lambda c: c.busy_start())
            self.beat(f"{oldest.busy_what} (step {oldest.steps} of the copy, batch {ticket})", since=oldest.busy_since)
            now = time.monotonic()
            if first:
                wait = WAIT_SLICE_S
            else:
                soon = [c.busy_start() + 1.5 * (c.step_s or 0.0) for c in busy]
                soon = [t for t in soon if t <= now + self.policy_s]
                if not soon:
                    return
                wait = max(0.0, max(soon) - now)
            try:
                self._take(self.answers.get(timeout=wait), stats)
                first = False
            except queue.Empty:
                if not first:
                    return
            while True:  # everything already answered, without waiting
                try:
                    self._take(self.answers.get_nowait(), stats)
                    first = False
                except queue.Empty:
                    break

    def _check_timeouts(self, busy: list[_Copy]) -> None:
        if not self.timeout_s:
            return
        now = time.monotonic()
        for copy in busy:
            if copy.busy_since is not None and now - copy.busy_since > self.timeout_s:
                copy.busy_since = None
                self._fail(
                    copy, f"{copy.busy_what} took longer than async.env_step_timeout_s={self.timeout_s:g}", hung=True
                )

    # ------------------------------------------------------------------ a batch
    def _discard_stale(self, keep_from: int) -> None:
        """Drop carried segments older than `keep_from` (the staleness bound); copies go on."""
        for s in range(self.S):
            old = [seg for seg in self.finished[s] if seg.version < keep_from]
            self.finished[s] = [seg for seg in self.finished[s] if seg.version >= keep_from]
            self.health.add("env_steps_discarded", self.T * len(old))
        for copy in self.copies:
            stale = copy.pending is not None and copy.pending < keep_from
            if stale:
                copy.pending = None  # counted when its answer comes
            if copy.filled and copy.segment_version < keep_from:
                self.health.add("env_steps_discarded", copy.filled)
                stale = True
            if stale:
                self._stale(copy)
                if copy.pending is not None:  # the step in flight starts the copy's next segment
                    for field in ACTED:
                        for arr in copy.segment().get(field, {}).values():
                            arr[0] = arr[copy.filled]
                copy.filled = 0

    def _can_act(self, copy: _Copy) -> bool:
        """Whether the copy waits for an action that it gets now: its seed's item has room, it is not parked."""
        return copy.ready and len(self.finished[copy.index // self.E]) < self.B and copy.parked_until <= self.items

    def _stale(self, copy: _Copy) -> None:
        """The copy's unfinished segment (or step in flight) was discarded as stale: park it after
        PARK_AFTER in a row, while at most (E - 1) // 2 copies of its seed are parked (module doc)."""
        copy.stale_in_a_row += 1
        parked = sum(c.parked_until > self.items for c in self.seed_copies(copy.index // self.E))
        if copy.stale_in_a_row >= PARK_AFTER and parked < (self.E - 1) // 2:
            copy.parked_until, copy.stale_in_a_row = self.items + copy.park_items, 0
            copy.park_items = min(2 * copy.park_items, PARK_ITEMS[1])
            self.health.add("env_copies_parked")

    def _policy(self, params, key) -> dict:
        t0 = time.perf_counter()

        def split(tree):
            return {k: place(v.reshape((self.S, self.E) + v.shape[1:]), self.device) for k, v in tree.items()}

        hidden = split(self.hidden) if self.rnn else {}
        out = jax.device_get(self.step_fn(params, split(self.obs), split(self.reset_flags), hidden, key))
        self.policy_s = 0.8 * self.policy_s + 0.2 * (time.perf_counter() - t0)
        flat = lambda x: np.reshape(x, (self.S * self.E,) + np.shape(x)[2:]) if np.ndim(x) >= 2 else x  # noqa: E731
        return {g: tuple(flat(x) for x in out[g]) for g in out}  # [S*E, ...]; a feed-forward net's hidden is a stub

    def collect(self, params, ticket: int, version: int = 0, min_version: int = 0) -> tuple[Trajectory, int]:
        """(an item of B segments per seed: a batch, or with micro-batches one of its M slices; the
        oldest policy version in it)."""
        self._discard_stale(max(min_version, version - self.K))
        S, E, B = self.S, self.E, self.B
        stats = {
            "return": np.zeros((S, self.adapter.num_agents), np.float32),
            "length": np.zeros(S, np.float32),
            "count": np.zeros(S, np.float32),
        }
        key = _fold(self.keys, ticket)
        self._steps_taken, self._steps_inline = 0, 0
        inline = self._choose_stepping()
        for tick in itertools.count():
            if all(len(self.finished[s]) >= B for s in range(S)):
                break
            inline = inline or (tick > 0 and self._turned_cheap())  # e.g. the first item, once steps are timed
            # the straggler line, from the step times as they are now (early ones include warm-up)
            self._inline_below = self._step_times()[0] if inline else 0.0
            self._check_enough_copies()
            ready = [c for c in self.copies if self._can_act(c)]
            if ready:
                v, p = self.newest() if self.newest is not None else (version, params)
                v = max(v, version)
                self.beat(f"the policy step of batch {ticket}")
                out = self._policy(p, _fold(key, tick))
                for copy in ready:  # all closes first: a copy steps on only while its seed's item has room
                    self._close_segment(copy, out)
                for copy in ready:
                    if len(self.finished[copy.index // E]) < B:
                        self._act(copy, out, v, stats)
            self._gather(stats, ticket)
        self.choice.end(self._steps_taken)
        self.items += 1
        self.health.add("env_steps_inline", self._steps_inline)
        batch, oldest = self._assemble()
        self.beat(f"the rollout of batch {ticket}")
        return Trajectory(
            batch[0], batch[1], EpisodeStats(stats["return"], stats["length"], stats["count"], np.zeros(S, np.float32))
        ), oldest

    def _step_times(self) -> tuple[float, list[float], bool]:
        """(the straggler line: STRAGGLER x the median of the copies' floors; the average step times
        of the copies whose floor is within it; whether those are cheap: their sum at most
        CHEAP_SHARE of a policy call, every live copy timed)."""
        timed = [c for c in self.copies if c.step_s is not None and not c.retired]
        floors = [_floor(c) for c in timed]
        below = SteppingChoice.inline_below(floors)
        equal = cast(list[float], [c.step_s for c, floor in zip(timed, floors) if floor <= below])  # timed: step_s set
        timed_all = len(timed) == sum(not c.retired for c in self.copies)
        return below, equal, bool(equal) and timed_all and sum(equal) <= CHEAP_SHARE * self.policy_s

    def _choose_stepping(self) -> bool:
        """This item's stepping (stepping.py): whether its equal copies step inline."""
        _, equal, cheap = self._step_times()
        estimate = len(equal) / (self.policy_s + sum(equal)) if equal else 0.0
        return self.choice.begin(estimate, cheap)

    def _turned_cheap(self) -> bool:
        """Mid-item, outside a probe, stepping on workers: whether the copies now count as cheap."""
        if not self.choice.allowed or self.choice.probing or self.choice.inline:
            return False
        return self._step_times()[2]

    def _close_segment(self, copy: _Copy, out: dict) -> None:
        """Finish the copy's segment if it is T steps long (`out`: the policy on its current observation)."""
        if copy.filled == self.T:
            last_value = {g: out[g][2][copy.index] for g in out}
            self.finished[copy.index // self.E].append(Segment(copy.segment(), last_value, copy.segment_version))
            copy.rows, copy.filled = None, 0
            copy.stale_in_a_row, copy.park_items = 0, PARK_ITEMS[0]

    def _act(self, copy: _Copy, out: dict, version: int, stats: dict) -> None:
        """Send the copy its next action (or step it inline; `stats`: the item's episode statistics)."""
        c, t = copy.index, copy.filled
        if copy.rows is None:  # a new segment's arrays
            copy.rows = self._new_rows(c, out)
        rows = copy.rows
        for g in self.groups:
            action, logp, value, h = out[g.name]
            name = g.name
            rows["obs"][name][t] = self.obs[name][c]
            rows["action"][name][t], rows["logp"][name][t], rows["value"][name][t] = action[c], logp[c], value[c]
            if self.rnn:
                rows["reset"][name][t], rows["hidden"][name][t] = self.reset_flags[name][c], self.hidden[name][c]
                self.hidden[name][c] = h[c]
        copy.pending, copy.ready = version, False
        copy.busy_since, copy.busy_what = time.monotonic(), copy.step_what
        actions = {g.name: out[g.name][0][c] for g in self.groups}
        # a straggler: each of its last FLOOR_STEPS steps over the line
        copy.inline = copy.step_s is not None and _floor(copy) <= self._inline_below
        if copy.inline:  # named to the watchdog first: a hung inline step stops the run after actor_timeout_s
            self.beat(
                f"env.step of host env copy {c} (step {copy.steps} of the copy, stepped inline)", since=copy.busy_since
            )
            self._steps_inline += 1
            self._take(copy.worker.run("step", actions), stats)
        else:
            copy.worker.step(actions)

    def _new_rows(self, c: int, out: dict) -> dict:
        """Empty [T, ...] arrays for each field of a segment of copy c, shaped as its step's values."""
        first = {"obs": self.obs, "reward": self.reset_flags, "done": self.reset_flags}
        first.update({f: {g: x[i] for g, x in out.items()} for i, f in enumerate(("action", "logp", "value"))})
        if self.rnn:
            first.update(reset=self.reset_flags, hidden=self.hidden)
        dtypes = {"reward": np.float32, "done": bool}
        return {
            f: {
                g.name: np.empty((self.T,) + np.shape(x[g.name][c]), dtypes.get(f, np.asarray(x[g.name][c]).dtype))
                for g in self.groups
            }
            for f, x in first.items()
        }

    def _assemble(self) -> tuple[tuple[dict, dict], int]:
        """The first B finished segments of every seed -> (batch, last_value) arrays [S, T, B, ...]."""
        S, B = self.S, self.B
        used = [self.finished[s][:B] for s in range(S)]
        self.finished = [self.finished[s][B:] for s in range(S)]

        def stack(field: str, g: str) -> np.ndarray:  # [S, T, B, ...]
            return np.stack([np.stack([seg.rows[field][g] for seg in segs], axis=1) for segs in used])

        batch = {
            g.name: GroupBatch(
                **{f: stack(f, g.name) for f in FIELDS[:6]},
                mask=None,
                reset=stack("reset", g.name) if self.rnn else None,
                hidden=stack("hidden", g.name) if self.rnn else None,
                world=None,
            )
            for g in self.groups
        }
        last_value = {
            g.name: np.stack([np.stack([seg.last_value[g.name] for seg in segs]) for segs in used]) for g in self.groups
        }
        return (batch, last_value), min(seg.version for segs in used for seg in segs)

    # ------------------------------------------------------------------ shutdown
    def close(self) -> None:
        """Wait for the commands in flight (beating, so that the watchdog names a hung copy), then
        stop the workers. A copy is given up on after env_step_timeout_s, or 5 s after the watchdog
        has had its chance (actor_timeout_s; 0 waits forever, as the watchdog does)."""
        limit = self.timeout_s or (self.run.async_.actor_timeout_s + 5.0 if self.run.async_.actor_timeout_s else 0.0)
        while True:
            busy = [c for c in self.copies if c.busy_since is not None and not c.retired]
            if not busy:
                break
            oldest = min(busy, key=lambda c: c.busy_start())
            self.beat(
                f"{oldest.busy_what} (step {oldest.steps} of the copy, at the end of the run)", since=oldest.busy_since
            )
            if limit and time.monotonic() - oldest.busy_start() > limit:
                oldest.busy_since = None  # abandoned: the run is over, nothing to restart
                continue
            try:
                ans = self.answers.get(timeout=WAIT_SLICE_S)
            except queue.Empty:
                continue
            copy = self.copies[ans.copy]
            if ans.incarnation == copy.worker.incarnation:
                copy.busy_since = None
        for copy in self.copies:
            copy.worker.stop()


_fold = jax.jit(jax.vmap(jax.random.fold_in, (0, None)))  # [S, 2] keys, one int -> [S, 2]
