"""Environment families: which family an env id belongs to, for the per-family defaults.

An algorithm tuned on one family can be slow on another (IPPO's shorter rollouts and larger
learning rate reach MPE spread's target 1.6x sooner and SMAX 3m's 2.4x later; docs/performance.md
section 3), so an algorithm's schema may declare defaults per family
(`AlgorithmSchema.family_defaults`); the config applies those of the env's family under every
setting given explicitly. This module only reads the env's name: it imports no env and no JAX.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple


class Family(NamedTuple):
    name: str  # what `family_defaults=` and `AlgorithmSchema.family_defaults` call it
    label: str  # what the docs and --help call it
    claims: Callable[[str], bool]  # does this env id belong to it?


_MABRAX = ("ant_4x2", "halfcheetah_6x1", "hopper_3x1", "humanoid_9|8", "walker2d_2x3")

# In order: the first family that claims an id is its family.
FAMILIES: tuple[Family, ...] = (
    Family("jumanji", "Jumanji", lambda env: env.startswith("jumanji:")),
    Family("host", "PettingZoo envs stepped on the host", lambda env: env.startswith("pettingzoo:")),
    Family("custom", "your own env (module:callable)", lambda env: ":" in env),
    Family("mpe", "MPE", lambda env: env.startswith("MPE_")),
    Family("smax", "SMAX", lambda env: env.endswith("SMAX")),
    Family("overcooked", "Overcooked", lambda env: env.startswith("overcooked")),
    Family("hanabi", "Hanabi", lambda env: env == "hanabi"),
    Family("storm", "STORM", lambda env: env.startswith("storm")),
    Family("coin_game", "Coin Game", lambda env: env == "coin_game"),
    Family("switch_riddle", "Switch Riddle", lambda env: env == "switch_riddle"),
    Family("jaxnav", "JaxNav", lambda env: env == "jaxnav"),
    Family("mabrax", "MABrax", lambda env: env in _MABRAX),
    Family("robotarium", "JaxRobotarium", lambda env: env.startswith("JaxRobotarium")),
)
FAMILY_NAMES: tuple[str, ...] = tuple(f.name for f in FAMILIES)
OTHER = "other"  # an id no family claims (a JaxMARL env added after this list)


def family_of(env: str) -> str:
    """The family of env id `env`: 'mpe' for MPE_simple_spread_v3, 'smax' for HeuristicEnemySMAX,
    'jumanji' for jumanji:Connector-v3, ..., 'other' where none claims it."""
    return next((f.name for f in FAMILIES if f.claims(env)), OTHER)


__all__ = ["Family", "FAMILIES", "FAMILY_NAMES", "OTHER", "family_of"]
