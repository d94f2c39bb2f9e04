"""Calling a user's env factory: one clear ConfigError for a factory that raises or returns the wrong thing."""

from __future__ import annotations

import importlib
from collections.abc import Callable
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


def build_env(make: Callable[[], Any], label: str, kind: str, required: tuple[str, ...]) -> Any:
    """`make()`, or ConfigError("env") saying that building the env failed (naming `label`, the
    factory and its arguments) or that what it returned is no `kind` (it lacks one of `required`)."""
    try:
        env = make()
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
