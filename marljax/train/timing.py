"""Where a run's wall time goes: start-up, build, compile, training, evaluation, checkpoints, plot.

`RunClock` times a run in phases (`with clock.phase("evaluation"): ...`). Phases nest: the time
of an inner phase is its own, not the outer one's (a checkpoint saved between chunks counts as
"checkpoints", not "training"). Every XLA compile in the run's thread (a program's trace,
lowering and backend compile, as jax.monitoring reports them), whatever phase it happens in,
counts as "compile": the evaluator compiled at its first evaluation is compile time, not
evaluation. Work that overlaps the run (an asynchronous checkpoint write, the plot drawn in the
background) counts only where the run waits for it. "start-up" is the time from the process's
start (the operating system's record of it) to the run's first line of code: the interpreter,
the imports, reading the config. "other" is the rest of the whole.

`breakdown()` is the record (summary.json's `timing`); `line()` is what the log ends with.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

PHASES = ("start-up", "build", "compile", "training", "evaluation", "checkpoints", "plot", "other")
WHAT = {  # what each phase covers, for the record's readers
    "start-up": "from the process's start: the interpreter, imports, reading the config",
    "build": "the environment, mesh, trainer, memory check, initial or restored state",
    "compile": "every XLA compile (tracing, lowering, compiling or reading back from the cache)",
    "training": "the chunk programs running, and the host's work between chunks (metrics rows, progress)",
    "evaluation": "greedy evaluation episodes (eval_every)",
    "checkpoints": "the time the run waited for checkpoint saves (they are written in the background)",
    "plot": "the time the run waited for returns.png (drawn in the background)",
    "other": "everything else: writing config.yaml and the marl-eval file, trackers, closing",
}
_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def process_start() -> float | None:
    """The epoch time this process started, from /proc (10 ms resolution); None where there is no
    /proc (the start-up phase is then counted from the first import of marljax.cli)."""
    try:
        with open("/proc/self/stat") as f:
            after_name = f.read().rpartition(")")[2].split()  # field 3 on (the name may hold spaces)
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        started_after_boot = int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (uptime - started_after_boot)


class RunClock:
    """Wall time per phase of one run. `since`: the epoch time the whole is counted from (the
    process's start, for `marljax train`); None: from the clock's creation (no start-up phase)."""

    def __init__(self, since: float | None = None):
        self.created = time.time()
        self._t0 = time.perf_counter()
        self.since = self.created if since is None else min(since, self.created)
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.seconds["start-up"] = self.created - self.since
        self._stack: list[list[Any]] = []  # [phase, entered at (perf_counter)] of the phases open now
        self._thread = threading.get_ident()
        self._moved: dict[str, list[tuple[float, float]]] = {}  # phase -> (start, end) of compiles inside it
        self._listening = False

    # ---- phases
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as `name` (one of PHASES), excluding the phases nested inside it."""
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; one of {PHASES}")
        now = time.perf_counter()
        if self._stack:
            outer = self._stack[-1]
            self.seconds[outer[0]] += now - outer[1]
        self._stack.append([name, now])
        try:
            yield
        finally:
            now = time.perf_counter()
            inner = self._stack.pop()
            self.seconds[inner[0]] += now - inner[1]
            if self._stack:
                self._stack[-1][1] = now  # the outer phase runs again from here

    def elapsed(self) -> float:
        """Seconds since `since` (the whole so far)."""
        return self.created - self.since + time.perf_counter() - self._t0

    def stamp(self) -> str:
        """'[12.3s]': the whole so far, for a line that says what starts now."""
        return f"[{self.elapsed():.1f}s]"

    # ---- compiles, wherever they happen
    def listen(self) -> RunClock:
        """Count every compile of this thread as compile time from now on (until `close`)."""
        import jax

        if not self._listening:
            jax.monitoring.register_event_duration_secs_listener(self._compiled)
            self._listening = True
        return self

    def close(self) -> None:
        if self._listening:
            import jax

            jax.monitoring.unregister_event_duration_listener(self._compiled)
            self._listening = False

    def _compiled(self, event: str, duration_secs: float, **_: str | int) -> None:
        if event not in _COMPILE_EVENTS or threading.get_ident() != self._thread:
            return
        if not self._stack or self._stack[-1][0] == "compile":  # the compile phase times itself
            return
        end = time.perf_counter()  # a trace's span holds the spans of what it traced: `_union` counts them once
        self._moved.setdefault(self._stack[-1][0], []).append((end - duration_secs, end))

    # ---- the record
    def breakdown(self) -> dict:
        """{"total_s", "phases": {phase: seconds}, "shares": {phase: fraction}, "covers": WHAT}."""
        total = self.elapsed()
        seconds = dict(self.seconds)
        for phase, spans in self._moved.items():
            moved = min(_union(spans), seconds[phase])
            seconds[phase] -= moved
            seconds["compile"] += moved
        seconds["other"] = max(0.0, total - sum(v for k, v in seconds.items() if k != "other"))
        return {
            "total_s": round(total, 3),
            "phases": {k: round(v, 3) for k, v in seconds.items()},
            "shares": {k: round(v / total, 4) if total > 0 else 0.0 for k, v in seconds.items()},
            "covers": dict(WHAT),
        }

    def line(self) -> str:
        """'time 36.0 s: start-up 2.1 s (6%), build 1.2 s (3%), ...' (a phase under 0.05 s left out)."""
        return time_line(self.breakdown())


class Ticker:
    """While open (a context manager), `what` with the seconds since it opened, every `every`
    seconds: in place on a terminal (stderr), else one line each time, so that a long step (a cold
    compile: a minute on a 2-core CPU) is never silent for longer than that. `enabled=False`: nothing."""

    def __init__(self, what: str, enabled: bool = True, every: float = 5.0, stream: Any = None):
        import sys

        self.what, self.enabled, self.every = what, enabled, every
        self.stream = stream or sys.stderr
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._wrote = False

    def __enter__(self) -> Ticker:
        if self.enabled:
            self._t0 = time.perf_counter()
            self._thread = threading.Thread(target=self._tick, name="marljax-ticker", daemon=True)
            self._thread.start()
        return self

    def _tick(self) -> None:
        tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        step = 1.0 if tty else self.every
        while not self._done.wait(step):
            seconds = time.perf_counter() - self._t0
            if tty:
                self.stream.write(f"\r{self.what}: {seconds:.0f}s")
            elif seconds >= self.every:
                self.stream.write(f"{self.what}: {seconds:.0f}s so far\n")
            self.stream.flush()
            self._wrote = tty

    def __exit__(self, *exc: Any) -> None:
        """Stop (again: nothing more)."""
        if self._thread is not None:
            self._done.set()
            self._thread.join()
            self._thread = None
            if self._wrote:
                self.stream.write("\r\033[K")  # the counter's line cleared for what comes next
                self.stream.flush()


def time_line(record: dict) -> str:
    """The one-line form of a `breakdown()` record."""
    parts = [f"{k} {v:.1f} s ({record['shares'][k]:.0%})" for k, v in record["phases"].items() if v >= 0.05]
    return f"time {record['total_s']:.1f} s, whole process: " + ", ".join(parts)


def _union(spans: list[tuple[float, float]]) -> float:
    """Total length of the union of the intervals."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


__all__ = ["PHASES", "RunClock", "Ticker", "process_start", "time_line"]
