"""marljax: JAX-first, purely functional multi-agent reinforcement learning."""

__version__ = "0.1.0"
