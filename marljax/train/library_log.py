"""The checkpoint library's own noise, kept off the user's terminal.

When a save or restore fails (a full disk, a deleted manifest, a `checkpoints` that is a file),
marljax says so in one line. orbax, meanwhile, logs the same failure from each of its background
threads with a traceback (absl `ERROR` records), and its asyncio and tensorstore callbacks leave
"Event loop is closed" and "Exception ignored in coroutine" tracebacks behind (Python's
unraisable-exception hook): up to 50 of them before marljax's line. Here they go to a debug log
instead: `<out_dir>/debug.log` for a run (appended to; skipped when it cannot be written, e.g. on a
full disk). `MARLJAX_DEBUG=1` leaves them on stderr as they were.

`release_waiting_threads` ends orbax's background threads that still wait for a step of a failed
save which will never come (they are not daemons, so the process could not exit for minutes).
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import threading
import traceback
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any

DEBUG_ENV = "MARLJAX_DEBUG"
LIBRARIES = ("orbax", "tensorstore", "asyncio")  # package directories whose traces are diverted


def debugging() -> bool:
    return os.environ.get(DEBUG_ENV) == "1"


class _Diverter(logging.Filter):
    """A filter on the `absl` logger (orbax logs through absl) and a sys.unraisablehook: what
    comes from the libraries is appended to `path` instead of reaching stderr."""

    def __init__(self) -> None:
        super().__init__()
        self.path: Path | None = None
        self.diverted = 0  # records and unraisable exceptions kept off stderr
        self.previous_hook = sys.unraisablehook
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if debugging() or not _from_library(record.pathname):
            return True
        text = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s").format(record)
        self._write(text)
        return False

    def unraisable(self, info: Any) -> None:
        if debugging() or not _unraisable_from_library(info):
            self.previous_hook(info)
            return
        lines = traceback.format_exception(info.exc_type, info.exc_value, info.exc_traceback)
        self._write(f"unraisable exception in {info.object!r}: {info.err_msg or ''}\n{''.join(lines)}")

    def _write(self, text: str) -> None:
        with self._lock:
            self.diverted += 1
            if self.path is None:
                return
            try:
                with open(self.path, "a") as f:
                    f.write(text.rstrip() + "\n")
            except OSError:  # a full disk or a vanished directory: the trace is dropped, not raised
                pass


_diverter: _Diverter | None = None


def divert(path: Path | None) -> None:
    """From now on, the libraries' log records and leftover tracebacks go to `path` (None: dropped),
    not stderr. Installed once per process; a later call only changes the file."""
    install().path = None if path is None else Path(path)


def install() -> _Diverter:
    """The diverter, installed once per process (to the file last given to `divert`, or none)."""
    global _diverter
    if _diverter is None:
        _diverter = _Diverter()
        logging.getLogger("absl").addFilter(_diverter)
    if sys.unraisablehook != _diverter.unraisable:  # first time, or another hook was put in since (pytest does)
        _diverter.previous_hook = sys.unraisablehook
        sys.unraisablehook = _diverter.unraisable
    return _diverter


def diverted() -> int:
    """How many records and tracebacks were kept off stderr so far."""
    return 0 if _diverter is None else _diverter.diverted


def _from_library(filename: str | None) -> bool:
    parts = Path(filename or "").parts
    return any(name in parts for name in LIBRARIES)


def _unraisable_from_library(info: Any) -> bool:
    """An unraisable exception raised in, or left by a coroutine of, one of the libraries."""
    tb: TracebackType | None = info.exc_traceback
    while tb is not None:
        if _from_library(tb.tb_frame.f_code.co_filename):
            return True
        tb = tb.tb_next
    code = getattr(info.object, "cr_code", None)
    return code is not None and _from_library(code.co_filename)


def release_waiting_threads() -> int:
    """End orbax's background threads that wait for a signal of a failed save (the directory it
    never created, a commit that failed): each is cancelled and its signals are set, so it wakes,
    sees the cancel and returns. One process only (with several, the signals are shared through
    JAX's coordination service; those threads time out there). Returns how many were released."""
    import jax

    try:
        from orbax.checkpoint._src.futures import future as orbax_future
    except ImportError:  # another orbax layout: nothing to release here
        return 0
    thread_type = getattr(orbax_future, "_SignalingThread", None)
    if thread_type is None or jax.process_count() > 1:
        return 0
    released = 0
    for thread in threading.enumerate():
        if isinstance(thread, thread_type) and thread.is_alive():
            thread.cancel()
            with warnings.catch_warnings():  # closed, it (and those it holds) will never run: nothing to warn of
                warnings.simplefilter("ignore", RuntimeWarning)
                for coro in _coroutines_in(getattr(thread, "_target", None)):
                    coro.close()
            orbax_future.set_signals(thread._receive_signals, operation_id=thread._operation_id)
            released += 1
    return released


def _coroutines_in(fn: Any, depth: int = 3) -> list[Any]:
    """The not yet started coroutines a thread's target holds in its closure (orbax wraps the
    coroutine of the commit in two lambdas)."""
    found: list[Any] = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if inspect.iscoroutine(value) and inspect.getcoroutinestate(value) == inspect.CORO_CREATED:
            found.append(value)
        elif depth > 1 and callable(value):
            found += _coroutines_in(value, depth - 1)
    return found
