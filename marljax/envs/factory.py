"""Calling a user's env factory: one clear ConfigError for a factory that raises, hangs, calls
os._exit or returns the wrong thing, and one line of marljax's after a factory that kills the process."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from marljax.schema import ConfigError, first_line


def import_env_module(module_name: str, spec: str) -> ModuleType:
    """The module of an env's import path `spec`; ConfigError("env") naming it when it cannot be
    imported or its own code fails as it loads (a SyntaxError, a NameError at its top level)."""
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError("env", f"cannot import module {module_name!r} from {spec!r}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - the user's module: its own code failed on import
        failed = f"{type(exc).__name__}: {first_line(exc)}"
        raise ConfigError("env", f"importing module {module_name!r} for {spec!r} failed: {failed}; fix it") from exc


# the default limit on building one env: async.actor_timeout_s's default, the watchdog of env steps
BUILD_TIMEOUT_S = 300.0
# where the limit comes from, for the messages of an env that did not finish building
LIMIT_NOTE = (
    f"async.actor_timeout_s sets this limit where the algorithm has it, else {BUILD_TIMEOUT_S:g} s; 0 waits forever"
)


class BuildTimedOut(BaseException):  # a BaseException: a factory's own `except Exception` cannot swallow it
    pass


@contextlib.contextmanager
def build_watchdog(timeout_s: float) -> Iterator[None]:
    """Raise BuildTimedOut in the block after `timeout_s` (SIGALRM: it interrupts a Python loop and a
    sleep alike). A timer already running (pytest-timeout's, a user's) keeps its deadline and its
    handler: it fires as it would have, and runs on after the block. Off the main thread, and where
    the platform has no interval timer, there is no limit."""
    if timeout_s <= 0 or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    theirs, interval = signal.getitimer(signal.ITIMER_REAL)
    ours = not theirs or timeout_s < theirs  # whose deadline comes first

    def expire(signum, frame):
        if ours:
            raise BuildTimedOut
        if callable(previous):
            previous(signum, frame)

    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s if ours else theirs)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if theirs:
            signal.setitimer(signal.ITIMER_REAL, max(theirs - (time.monotonic() - started), 1e-3), interval)


class BuildExited(BaseException):  # raised in place of os._exit on the building thread
    def __init__(self, code: Any):
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def os_exit_raises() -> Iterator[None]:
    """In the block, `os._exit(n)` on this thread of this process raises BuildExited instead of
    ending the process unsaid (other threads, and processes the block forks, exit as they asked)."""
    real, me, pid = os._exit, threading.get_ident(), os.getpid()

    def intercepted(code):
        if threading.get_ident() == me and os.getpid() == pid:
            raise BuildExited(code)
        real(code)

    os._exit = intercepted
    try:
        yield
    finally:
        os._exit = real


# The watcher of one build: a small process that prints `argv[1]` when the builder's end of its
# pipe closes without a word, i.e. the builder died while building (stdlib only: -I -S).
_WATCHER = "import os, sys\nif not sys.stdin.readline():\n    os.write(2, sys.argv[1].encode())"


@contextlib.contextmanager
def death_named(line: str) -> Iterator[None]:
    """If this process dies in the block (a segmentation fault, an abort, an exit from native code,
    a kill such as the out-of-memory killer's), `line` is printed on its stderr after it: a watcher
    process holds the other end of a pipe. About 0.4 ms to start here; where no process can be
    started, nothing is watched."""
    try:
        watcher = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCHER, line + "\n"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
        )
    except OSError:
        yield
        return
    try:
        yield
    finally:
        try:
            assert watcher.stdin is not None
            watcher.stdin.write(b"built\n")
            watcher.stdin.close()
        except OSError:  # the watcher is gone already: nothing to tell it
            pass
        threading.Thread(target=watcher.wait, name="marljax-build-watcher", daemon=True).start()  # reaped, unawaited


@contextlib.contextmanager
def build_guard(label: str, timeout_s: float) -> Iterator[None]:
    """Around a factory's call: a limit on its time (build_watchdog), os._exit raising (BuildExited),
    and a line naming `label` if the process dies inside it anyway."""
    died = (
        f"marljax: env: this process ended while {label} was building the env: it crashed (a segmentation fault, "
        "an abort), exited from native code, or was killed (the out-of-memory killer?); fix the factory or env_kwargs"
    )
    with death_named(died), build_watchdog(timeout_s), os_exit_raises():
        yield


def build_env(
    make: Callable[[], Any], label: str, kind: str, required: tuple[str, ...], timeout_s: float = BUILD_TIMEOUT_S
) -> Any:
    """`make()`, or ConfigError("env") saying that building the env failed (naming `label`, the
    factory and its arguments), did not return within `timeout_s` (0: no limit), or that what it
    returned is no `kind` (it lacks one of `required`)."""
    try:
        with build_guard(label, timeout_s):
            env = make()
    except BuildExited as exc:
        raise ConfigError(
            "env",
            f"building the env failed: {label} called os._exit({exc.code!r}), which would have ended the process "
            "with nothing said; fix the factory or env_kwargs",
        ) from None
    except BuildTimedOut:
        raise ConfigError(
            "env",
            f"building the env did not return in {timeout_s:g} s: {label} hangs, or builds "
            f"something far too large for env_kwargs; fix the factory or env_kwargs ({LIMIT_NOTE})",
        ) from None
    except (ConfigError, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - the user's factory, even a BaseException of its own or sys.exit
        raise ConfigError(
            "env",
            f"building the env failed: {label} raised {type(exc).__name__}: "
            f"{first_line(exc)}; fix the factory or env_kwargs",
        ) from exc
    missing = [name for name in required if not hasattr(env, name)]
    if missing:
        raise ConfigError(
            "env", f"{label} returned a {type(env).__name__}, not a {kind} (it has no {', '.join(missing)})"
        )
    return env
