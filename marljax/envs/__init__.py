"""Environments: construction (registry) and the group-major adapter used by every algorithm."""

from marljax.envs.adapter import AgentGroup, EnvAdapter
from marljax.envs.registry import make_env, registered_env_ids

__all__ = ["AgentGroup", "EnvAdapter", "make_env", "registered_env_ids"]
