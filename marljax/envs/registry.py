"""Environment construction: a JaxMARL id or a user's `module:callable`, with clear errors.

This module decides *whether* an environment can be built here and says why
not; `adapter.py` decides how its agents, observations and actions are laid
out for the algorithms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from marljax.envs.factory import (
    BUILD_TIMEOUT_S,
    LIMIT_NOTE,
    BuildExited,
    BuildTimedOut,
    build_env,
    build_guard,
    import_env_module,
)
from marljax.envs.jaxmarl_modules import JAXMARL_IDS, env_class, import_all, import_module
from marljax.envs.jumanji import check_id as check_jumanji_id
from marljax.envs.jumanji import is_jumanji, make_jumanji
from marljax.schema import ConfigError, first_line, listed

# Ids that import from the PyPI package but need something it does not install.
_NEEDS = {
    "ant_4x2": "brax (pip install 'jaxmarl[mabrax]')",
    "halfcheetah_6x1": "brax (pip install 'jaxmarl[mabrax]')",
    "hopper_3x1": "brax (pip install 'jaxmarl[mabrax]')",
    "humanoid_9|8": "brax (pip install 'jaxmarl[mabrax]')",
    "walker2d_2x3": "brax (pip install 'jaxmarl[mabrax]')",
}
_ROBOTARIUM_PREFIX = "JaxRobotarium"


def registered_env_ids() -> list[str]:
    return list(JAXMARL_IDS)


def _smax_kwargs(kwargs: dict) -> dict:
    """`scenario=3m` (a map name) becomes the Scenario object SMAX expects."""
    scenario = kwargs.get("scenario")
    if isinstance(scenario, str):
        smax_env = import_module("jaxmarl.environments.smax.smax_env")
        try:
            kwargs = {**kwargs, "scenario": smax_env.map_name_to_scenario(scenario)}
        except KeyError:
            raise ConfigError(
                "env_kwargs.scenario",
                f"unknown SMAX map {scenario!r}; allowed: {', '.join(sorted(smax_env.MAP_NAME_TO_SCENARIO))}",
            ) from None
    return kwargs


# Overcooked envs whose `layout` JaxMARL's scripts give by name: env id -> (module, its dict of layouts)
_LAYOUTS = {
    "overcooked": ("jaxmarl.environments.overcooked.layouts", "overcooked_layouts"),
    "overcooked_v2": ("jaxmarl.environments.overcooked_v2.layouts", "overcooked_v2_layouts"),
}


def _layout_kwargs(name: str, kwargs: dict) -> dict:
    """`layout=coord_ring` (a name) becomes the layout it names, as JaxMARL's scripts look it up;
    an unknown name is refused listing the known ones."""
    layout = kwargs.get("layout")
    if name not in _LAYOUTS or not isinstance(layout, str):
        return kwargs
    module, attr = _LAYOUTS[name]
    layouts = getattr(import_module(module), attr)
    if layout not in layouts:
        raise ConfigError("env_kwargs.layout", f"unknown {name} layout {layout!r}; allowed: {', '.join(layouts)}")
    return {**kwargs, "layout": layouts[layout]}


def _from_import_path(spec: str, kwargs: Mapping[str, Any], timeout_s: float):
    module_name, _, attr = spec.partition(":")
    factory = getattr(import_env_module(module_name, spec), attr, None)
    if not callable(factory):
        raise ConfigError("env", f"{spec!r}: {module_name} has no callable named {attr!r}")
    try:
        return build_env(
            lambda: factory(**kwargs),
            f"{spec}({listed(kwargs)})",
            "JaxMARL MultiAgentEnv",
            ("agents", "reset", "step", "observation_space", "action_space"),
            timeout_s,
        )
    except ConfigError as err:  # a TypeError: usually env_kwargs that its signature does not take
        if isinstance(err.__cause__, TypeError):
            raise ConfigError("env_kwargs", f"{spec}({listed(kwargs)}) failed: {first_line(err.__cause__)}") from None
        raise


def is_import_path(name: str) -> bool:
    """Whether `env=name` imports and runs code to build the env (`module:callable`,
    `pettingzoo:module:callable`), as a JaxMARL id and a Jumanji id (`jumanji:<id>`) do not."""
    return ":" in name and not is_jumanji(name)


def check_env_name(name: str) -> None:
    """Raise ConfigError (before any compile) when `name` cannot be built here."""
    if is_jumanji(name):
        check_jumanji_id(name)
        return
    if ":" in name:
        return
    ids = registered_env_ids()
    if name not in ids:
        import difflib

        close = difflib.get_close_matches(name, ids, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(
            "env",
            f"unknown environment {name!r}{hint}; allowed: a JaxMARL id ({', '.join(ids)}) "
            "a Jumanji id (jumanji:RobotWarehouse-v0, ...) or an import path module:callable",
        )
    if name in _NEEDS:
        try:
            import brax  # noqa: F401
        except ImportError:
            raise ConfigError("env", f"{name} needs {_NEEDS[name]}, which is not installed") from None
    if name.startswith(_ROBOTARIUM_PREFIX):
        raise ConfigError(
            "env",
            f"{name} needs the jaxrobotarium package, which is not installed and is not on PyPI "
            "(install it from its source repository)",
        )


def make_env(name: str, env_kwargs: Mapping[str, Any] | None = None, timeout_s: float = BUILD_TIMEOUT_S):
    """Build the raw JaxMARL-API environment named by `name` (`jumanji:<id>`: a Jumanji env behind
    that API); a user's factory or JaxMARL's constructor that has not returned after `timeout_s`
    (0: no limit) is a ConfigError naming it."""
    kwargs = dict(env_kwargs or {})
    check_env_name(name)
    if is_jumanji(name):
        return make_jumanji(name, kwargs)
    if ":" in name:
        return _from_import_path(name, kwargs, timeout_s)
    if "SMAX" in name:
        kwargs = _smax_kwargs(kwargs)
    kwargs = _layout_kwargs(name, kwargs)
    if name == "LearnedPolicyEnemySMAX" and not {"policy", "params"} <= kwargs.keys():
        raise ConfigError(
            "env",
            "LearnedPolicyEnemySMAX needs env_kwargs.policy and env_kwargs.params (a trained "
            "enemy policy); use HeuristicEnemySMAX for a scripted enemy",
        )
    make = env_class(name) or _jaxmarl_make(name)
    try:
        with build_guard(f"{name}({listed(kwargs)})", timeout_s):
            env = make(**kwargs)
    except BuildTimedOut:
        raise ConfigError(
            "env_kwargs",
            f"building {name}({listed(kwargs)}) did not return in {timeout_s:g} s: env_kwargs ask for an env far "
            f"too large ({LIMIT_NOTE})",
        ) from None
    except BuildExited as exc:
        raise ConfigError(
            "env_kwargs",
            f"building the env failed: {name}({listed(kwargs)}) called os._exit({exc.code!r}); check env_kwargs",
        ) from None
    except ConfigError:
        raise
    except TypeError as exc:
        raise ConfigError("env_kwargs", f"{name} rejected env_kwargs {listed(kwargs)}: {first_line(exc)}") from exc
    except Exception as exc:  # noqa: BLE001 - e.g. a value the env cannot take
        raise ConfigError(
            "env_kwargs",
            f"building the env failed: {name}({listed(kwargs)}) raised "
            f"{type(exc).__name__}: {first_line(exc)}; check env_kwargs",
        ) from exc
    _refuse_ignored_kwargs(name, env, kwargs)
    _refuse_kinds_unlike_the_defaults(name, env, kwargs)
    return env


def _jaxmarl_make(name: str):
    """jaxmarl.make for `name`, with JaxMARL imported whole (the ids it builds another way)."""
    import_all()
    import jaxmarl

    return lambda **kwargs: jaxmarl.make(name, **kwargs)


def _defaults(cls: type) -> dict[str, Any]:
    """Each named parameter's default along the __init__s of cls's MRO (the first one found wins)."""
    import inspect

    found: dict[str, Any] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        try:
            params = inspect.signature(init).parameters.values() if init is not None else ()
        except (TypeError, ValueError):
            continue
        for p in params:
            if p.default is not inspect.Parameter.empty:
                found.setdefault(p.name, p.default)
    return found


def _refuse_kinds_unlike_the_defaults(name: str, env, kwargs: Mapping[str, Any]) -> None:
    """A word where the constructor's default is a number (`env_kwargs.max_steps=abc`), or not a
    switch where it is one: the env stores it and the run fails inside a traced step, far from the cause."""
    defaults = _defaults(type(env))
    for key, value in kwargs.items():
        default = defaults.get(key)
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if isinstance(default, bool):
            ok, kind = isinstance(value, bool) or value in (0, 1), "true or false"
        elif isinstance(default, (int, float)):  # (an int default may stand for a float, e.g. a weight of 0)
            ok, kind = number and abs(value) <= 2**31 - 1, "a number of at most 2**31 - 1"
        else:
            continue  # None, a string, an object: no kind to hold the value to
        if not ok:
            raise ConfigError(f"env_kwargs.{key}", f"{name} takes {kind} (its default is {default!r}), got {value!r}")


def _refuse_ignored_kwargs(name: str, env, kwargs: Mapping[str, Any]) -> None:
    """An env whose constructor takes **kwargs accepts any key; refuse the ones it never reads."""
    from marljax.envs.kwargs_used import accepted_kwargs

    accepted = accepted_kwargs(type(env))  # (the SMAX wrappers pass **env_kwargs to SMAX, which rejects unknown keys)
    if accepted is None:
        return  # its source does not say which keys it reads: nothing to check
    ignored = sorted(k for k in kwargs if k not in accepted)
    if ignored:
        raise ConfigError(
            f"env_kwargs.{ignored[0]}",
            f"{name} does not use {listed(ignored)} (it would be silently ignored); it takes: {listed(sorted(accepted), 40)}",
        )
