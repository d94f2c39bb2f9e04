"""marljax: JAX-first, purely functional multi-agent reinforcement learning."""

import marljax.jaxmarl_config  # noqa: F401  (load_config reads JaxMARL's baseline YAML through it)
from marljax import schema as _schema
from marljax.version import __version__  # noqa: F401  (marljax.__version__)

# every algorithm registers its config schema as marljax.algos is imported, which imports JAX: at
# the first lookup of an algorithm, so that the schema engine and the settings load without JAX
_schema.register_provider("marljax.algos")


def load_policy(path, trust_code: bool = False):
    """A policy exported with `marljax export` (see `marljax.train.policy`); imported lazily.
    trust_code=True: allow a policy whose env is an import path (loading it runs that code)."""
    from marljax.train.policy import load_policy as _load

    return _load(path, trust_code=trust_code)
