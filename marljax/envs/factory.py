"""Calling a user's env factory: one clear ConfigError for a factory that raises, hangs or returns
the wrong thing."""

from __future__ import annotations

import contextlib
import importlib
import signal
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


def build_env(
    make: Callable[[], Any], label: str, kind: str, required: tuple[str, ...], timeout_s: float = BUILD_TIMEOUT_S
) -> Any:
    """`make()`, or ConfigError("env") saying that building the env failed (naming `label`, the
    factory and its arguments), did not return within `timeout_s` (0: no limit), or that what it
    returned is no `kind` (it lacks one of `required`)."""
    try:
        with build_watchdog(timeout_s):
            env = make()
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
