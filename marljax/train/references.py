"""Reference returns a run's summary quotes beside its own: what a uniformly random policy and one
that always takes action 0 (standing still, on MPE) score per agent on the same fresh episodes.

Each entry is the JSON line `python experiments/references.py [key=value ...]` printed (on the
project's 2-core CPU, jax 0.10.2); an env without an entry gets no reference line. An entry holds
for the env as built with those env_kwargs only.
"""

from __future__ import annotations

from marljax.config import Config

COMMAND = "python experiments/references.py"
REFERENCES: list[dict] = [
    # python experiments/references.py
    {"env": "MPE_simple_spread_v3", "env_kwargs": {}, "episodes": 1024, "random": -27.47, "noop": -25.35},
]


def reference_for(config: Config) -> dict | None:
    """The measured entry for the run's env and env_kwargs, with the command that measured it; else None."""
    for entry in REFERENCES:
        if entry["env"] == config.env and entry["env_kwargs"] == dict(config.env_kwargs):
            args = " ".join(
                [
                    *([] if entry["env"] == "MPE_simple_spread_v3" else [f"env={entry['env']}"]),
                    *(f"env_kwargs.{k}={v}" for k, v in entry["env_kwargs"].items()),
                ]
            )
            return {**entry, "command": f"{COMMAND} {args}".strip()}
    return None


__all__ = ["REFERENCES", "reference_for"]
