"""marljax: JAX-first, purely functional multi-agent reinforcement learning."""

__version__ = "0.1.0"

import marljax.algos  # noqa: E402,F401  (every algorithm registers its config schema)


def load_policy(path):
    """A policy exported with `marljax export` (see `marljax.train.policy`); imported lazily."""
    from marljax.train.policy import load_policy as _load

    return _load(path)
