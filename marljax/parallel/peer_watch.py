"""A lost process of a multi-process run, named by every survivor within seconds.

Without this, a process killed mid-run left the others blocked: a survivor's collective failed
(gloo: "Connection reset by peer"), then JAX's shutdown waited for the dead process until its
runtime aborted from C++ about 94 s later (exit 134, a C++ stack, no word of which process).

Every process beats into JAX's coordination service (a key per process, every `BEAT_S`) and reads
every beat at once (one directory read, so N processes cost N reads per beat, not N^2). A process
whose beat has not changed for `LOST_AFTER_S` is lost: each survivor prints one line naming it and
the newest checkpoint to resume from, and exits 1 at once (os._exit: the runtime's own shutdown
would wait for the lost process). A process that ends, normally or not, keeps beating while JAX's
shutdown holds it for the others (the beat is a daemon thread), so an end is never taken for a loss.

Process 0 is watched like the others: its coordination service runs in a child process of its own
(coordinator.py), which outlives it. Not covered: the loss of the service itself (process 0's host
down, or a `distributed=auto` run, where JAX serves it inside process 0): JAX's runtime in every
survivor then aborts within about a second (its callback for that case cannot be replaced from
Python in jax 0.10-0.12); the join message says what such an abort means.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BEAT_S = 1.0
LOST_AFTER_S = 15.0  # well under JAX's own heartbeat timeout (100 s), well over a beat missed under load
PREFIX = "marljax/peer_watch"


def newest_checkpoint(under: Path) -> Path | None:
    """The newest finished checkpoint under `under` (a run's, or every program's of a sweep):
    a directory named by its update in a `checkpoints` directory (unfinished saves are `N.orbax-checkpoint-tmp`)."""
    found = [p for p in under.glob("**/checkpoints/*") if p.name.isdigit() and p.is_dir() and not p.is_symlink()]
    return max(found, key=lambda p: int(p.name), default=None)


def lost_line(lost: list[int], num_processes: int, silent_s: float, under: Path | None, again: str) -> str:
    """The survivors' one line: which process, for how long, and where to resume."""
    who = ", ".join(str(p) for p in lost)
    newest = newest_checkpoint(under) if under is not None else None
    if newest is not None:
        resume = f"The newest checkpoint is {newest}: {again}, on the same number of processes or fewer"
    else:
        resume = "No checkpoint was saved yet: start the run again"
    why = f"no heartbeat for {silent_s:.0f} s: killed, crashed, or its host unreachable"
    return f"marljax: process {who} of {num_processes} was lost ({why}); this process stops too. {resume}"


class PeerWatch:
    """The beat and the watch of one process (daemon threads, until `stop()`)."""

    def __init__(
        self,
        client: Any,
        me: int,
        num_processes: int,
        on_lost: Callable[[list[int], float], None],
        lost_after_s: float = LOST_AFTER_S,
        beat_s: float = BEAT_S,
    ):
        self.client, self.me, self.n = client, me, num_processes
        self.on_lost, self.lost_after_s, self.beat_s = on_lost, lost_after_s, beat_s
        self._stopped = threading.Event()
        self._beats = 0

    def start(self) -> PeerWatch:
        for target in (self._beat, self._watch):
            threading.Thread(target=target, name=f"marljax-{target.__name__[1:]}", daemon=True).start()
        return self

    def stop(self) -> None:
        """End the beat and the watch (the others then take this process for lost)."""
        self._stopped.set()

    def _beat(self) -> None:
        while not self._stopped.is_set():
            self._beats += 1
            try:
                self.client.key_value_set(f"{PREFIX}/beat/{self.me}", str(self._beats), allow_overwrite=True)
            except Exception:  # noqa: BLE001 - a failed beat is a missed one; the others judge
                pass
            self._stopped.wait(self.beat_s)

    def _read(self, kind: str) -> dict[int, str]:
        """{process: value} of every process's key under PREFIX/kind, in one call."""
        pairs = self.client.key_value_dir_get(f"{PREFIX}/{kind}/")
        return {int(key.rsplit("/", 1)[1]): value for key, value in pairs}

    def _watch(self) -> None:
        start = time.monotonic()
        last: dict[int, tuple[str | None, float]] = {p: (None, start) for p in range(self.n) if p != self.me}
        while not self._stopped.wait(self.beat_s):
            try:
                beats = self._read("beat")
            except Exception:  # noqa: BLE001 - the service is unreachable: its host is gone (see the module doc)
                continue
            now = time.monotonic()
            for p, (seen, _) in list(last.items()):
                if beats.get(p) != seen:
                    last[p] = (beats.get(p), now)
            silent = {p: now - since for p, (_, since) in last.items() if now - since > self.lost_after_s}
            if silent and not self._stopped.is_set():
                self.on_lost(sorted(silent), max(silent.values()))
                return


def exit_lost(num_processes: int, under: Path | None, again: str) -> Callable[[list[int], float], None]:
    """`on_lost` of a command-line run: the one line on stderr, then exit 1 at once."""

    def on_lost(lost: list[int], silent_s: float) -> None:
        print(lost_line(lost, num_processes, silent_s, under, again), file=sys.stderr, flush=True)
        os._exit(1)

    return on_lost


ACTIVE: list[PeerWatch] = []  # this process's watch, once a multi-process run has joined

# what a survivor's collective or checkpoint raises when a peer is gone, before the watch decides
PEER_GONE = re.compile(r"Gloo|Connection reset by peer|Connection refused|Broken pipe|UNAVAILABLE")


def start(client: Any, me: int, num_processes: int, under: Path | None, again: str) -> None:
    """Watch the other processes of this run (once per process)."""
    if not ACTIVE:
        ACTIVE.append(PeerWatch(client, me, num_processes, exit_lost(num_processes, under, again)).start())


def settle(exc: BaseException) -> None:
    """Before a failure that a lost peer may have caused is printed: give the watch the time it takes
    to decide, so that the survivor's one line names the lost process (the watch exits the process
    then) rather than quoting the collective's error. Returns at once for any other failure."""
    if ACTIVE and PEER_GONE.search(str(exc)):
        time.sleep(ACTIVE[0].lost_after_s + 3 * ACTIVE[0].beat_s)
