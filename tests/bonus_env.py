"""A test environment whose step info carries a per-agent dense reward (reward shaping's input)."""

import jax.numpy as jnp
from jaxmarl import make


class InfoBonus:
    """MPE_simple_spread_v3 whose step info holds `bonus`: agent i is paid i + 1 every step."""

    def __init__(self, **kwargs):
        self._env = make("MPE_simple_spread_v3", **kwargs)

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, key, state, actions):
        obs, state, reward, done, info = self._env.step(key, state, actions)
        info = {**info, "bonus": {a: jnp.float32(i + 1) for i, a in enumerate(self._env.agents)}}
        return obs, state, reward, done, info


def make_env(**kwargs):
    return InfoBonus(**kwargs)
