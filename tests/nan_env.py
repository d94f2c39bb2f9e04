"""A test environment that turns a reward into NaN now and then (forces the NaN guard to act)."""

import jax
import jax.numpy as jnp
from jaxmarl import make


class NanRewards:
    """MPE_simple_spread_v3 whose rewards are NaN with probability `p` per step (from the step key)."""

    def __init__(self, p: float = 1e-3, **kwargs):
        self._env = make("MPE_simple_spread_v3", **kwargs)
        self.p = p

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, key, state, actions):
        obs, state, reward, done, info = self._env.step(key, state, actions)
        bad = jax.random.uniform(jax.random.fold_in(key, 7)) < self.p
        reward = {a: jnp.where(bad, jnp.nan, r) for a, r in reward.items()}
        return obs, state, reward, done, info


def make_env(**kwargs):
    return NanRewards(**kwargs)
