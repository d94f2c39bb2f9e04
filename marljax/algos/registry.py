"""The algorithm registry: name -> its config schema (sections, defaults, supports), its pieces'
builder and its declared losses (`AlgorithmSpec`; `spec.make_train` derives its `Trainer`).

Every part of marljax that needs an algorithm (the CLI's help, config validation, the host loop,
sweeps, benchmarks, policy export) looks it up here instead of testing `algo == ...`. Adding an
algorithm is one new module under `marljax/algos/` that defines an `AlgorithmSpec`, plus one
`register(...)` line in `marljax/algos/__init__.py`.
"""

from __future__ import annotations

from marljax.algos.api import AlgorithmSpec
from marljax.families import FAMILY_NAMES
from marljax.schema import register_schema

_SPECS: dict[str, AlgorithmSpec] = {}


def register(spec: AlgorithmSpec) -> None:
    """Make `algo=spec.name` available to every command (its config schema included)."""
    unknown = set(spec.schema.family_defaults) - set(FAMILY_NAMES)
    if unknown:  # a typo here would silently apply nothing
        raise ValueError(
            f"algo={spec.name} declares defaults for unknown env families {sorted(unknown)}; "
            f"the families: {', '.join(FAMILY_NAMES)}"
        )
    register_schema(spec.schema)
    _SPECS[spec.name] = spec


def get(name: str) -> AlgorithmSpec:
    """The registered algorithm `name` (config validation has already refused unknown names)."""
    return _SPECS[name]


def names() -> tuple[str, ...]:
    return tuple(_SPECS)
