"""Whether independent host env copies step on their worker threads or on the collector's own.

A copy on a worker thread (env_workers.py) costs two thread hand-offs per step, and each waits
for the GIL. For copies that cost tens of microseconds (a small numpy env) the hand-offs cost
more than the step: with 8 such copies, independent stepping ran at 0.44x lockstep's env-steps/s.
Stepped on the collector's thread ("inline") they run at about lockstep's rate (0.96x, the
median of 5 pairs; docs/performance.md, section 6). Copies that wait instead (sleep, I/O, a simulator
that releases the GIL) step faster on workers, side by side. Neither the step time alone nor the
GIL says which case a copy is in, so:

- Copies whose summed step time is at most `CHEAP_SHARE` of one policy call step inline, with no
  probe: workers could save at most that sum per round, less what the hand-offs cost.
- Otherwise a probe measures both: `PROBE` items with workers and `PROBE` inline, alternately,
  and the faster (its best item's env steps per second of collect time; whatever else runs on the
  machine only slows an item down) is used until the next probe, `PROBE_EVERY` items later,
  twice as late each time the winner holds. Workers must win by `WORKERS_BY` (see there). An
  inline probe is skipped when the copies' step times already say it would lose by far (stepped
  one after another they would take more than `SKIP_INLINE` times as long as the worker items
  did): probing 5 ms copies inline would cost more than the probe can win. Likewise the probe's
  later worker items step inline once a worker item ran below the inline item's rate by
  `SKIP_WORKERS`: copies that a hand-off costs more than their step would spend the probe at
  half rate.

Whatever is chosen, a copy much slower than the others (`STRAGGLER` times the median step time,
recomputed every round) steps on its worker, so it never holds back the rest; failures are
handled the same either way (a raising step is an `Answer` with its error). A hung inline step
cannot be abandoned, so with `async.env_step_timeout_s` set every copy stays on its worker;
without it a hung step, inline or not, stops the run after `async.actor_timeout_s`, as in
lockstep.
"""

from __future__ import annotations

import time

PROBE = 3  # items measured per mode in one probe (the best of them counts)
PROBE_EVERY = 64  # items from the start of one probe to the next; doubled (up to MAX_EVERY) while the winner holds
MAX_EVERY = 1024
STRAGGLER = 4.0  # a copy slower than this many times the median step time stays on its worker
CHEAP_SHARE = 0.5  # copies whose summed step time is at most this share of a policy call step inline, unprobed
SKIP_INLINE = 2.0  # no inline probe when its estimated rate is below the worker rate / this
SKIP_WORKERS = 1.5  # no more worker items in a probe once one ran below the inline rate / this
WORKERS_BY = 1.25  # workers are chosen only when measured this much faster: inline is what lockstep costs,
# and where workers pay off (copies that wait, side by side) they win by far more; a noisy probe on a
# shared machine must not send cheap copies to workers, which costs them half their rate


class SteppingChoice:
    """Per collector: for each item, whether its equal copies step inline (measured, see module doc)."""

    def __init__(self, allowed: bool):
        self.allowed = allowed  # False: every copy always steps on its worker
        self.items = 0
        self.inline = False  # this item's choice
        self._probe: dict[bool, list[float]] = {False: [], True: []}  # mode -> the probe's item rates (steps/s)
        self._faster: bool | None = None  # the last probe's winner (inline?); None before the first
        self._probe_at, self._every = 1, PROBE_EVERY  # item 0 compiles the policy: no probe
        self._t0 = 0.0
        self.probing = False  # this item is measured for the probe

    def _phase(self) -> int | None:
        """Which probe item this is (0 .. 2*PROBE-1), or None."""
        phase = self.items - self._probe_at
        return phase if self.allowed and 0 <= phase < 2 * PROBE else None

    def begin(self, inline_estimate: float, cheap: bool = False) -> bool:
        """Start an item; whether its equal copies step inline. inline_estimate: env steps/s if they
        did, from their step times (copies / (policy call + the sum of their step times)). cheap:
        their summed step time is at most CHEAP_SHARE of a policy call, so workers could not win
        (they save at most that sum per round, and pay hand-offs): inline, without probing."""
        phase = self._phase()
        self.probing = phase is not None and not (cheap and self.allowed)
        if cheap and self.allowed:
            if phase is not None:
                # the probe pauses (not restarts) while the copies are cheap: a judgement that flickers on a
                # loaded machine would otherwise spend a worker item on every restart
                self._probe_at += 1
            self.inline = True
        elif phase is not None:
            if phase == 0:
                self._probe = {False: [], True: []}
            self.inline = bool(phase % 2)
            if self.inline and self._probe[False] and inline_estimate * SKIP_INLINE < max(self._probe[False]):
                self.inline = False  # hopeless: measured with workers again instead
            elif (
                not self.inline
                and self._probe[True]
                and max(self._probe[False]) * SKIP_WORKERS < max(self._probe[True])
            ):
                self.inline = True  # workers lost by far already: measured inline again instead
        else:
            self.inline = bool(self.allowed and self._faster)
        self._t0 = time.perf_counter()
        return self.inline

    def end(self, env_steps: int) -> None:
        """Finish the item that took `env_steps` copy-steps."""
        if self.probing:
            self._probe[self.inline].append(env_steps / max(time.perf_counter() - self._t0, 1e-9))
            if self._phase() == 2 * PROBE - 1:
                self._settle()
        self.items += 1

    def _settle(self) -> None:
        """The probe's winner, by each mode's best item (whatever else runs on the machine only ever
        slows an item down); the next probe comes later while the winner holds."""
        faster = bool(self._probe[True]) and max(self._probe[False]) < WORKERS_BY * max(self._probe[True])
        self._every = min(2 * self._every, MAX_EVERY) if faster == self._faster else PROBE_EVERY
        self._faster, self._probe_at = faster, self._probe_at + self._every

    @staticmethod
    def inline_below(step_times: list[float]) -> float:
        """The step time above which a copy is a straggler and stays on its worker."""
        if not step_times:
            return 0.0
        return STRAGGLER * sorted(step_times)[len(step_times) // 2]
