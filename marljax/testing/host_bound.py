"""A host-bound environment for measuring the async mode: MPE_simple_spread_v3 plus a fixed host cost.

    env=marljax.testing.host_bound:make_env env_kwargs.step_cost_s=0.002

Every (vectorised) step calls back to the host, which sleeps `step_cost_s` seconds, the way
a Python simulator stepping a batch of env copies would. `time.sleep` releases the GIL, so
other threads (the learner) run meanwhile. The callback receives the whole batch once per
step (`vmap_method="broadcast_all"`): the cost is per vectorised step, not per env copy.
The dynamics are MPE's; only the wall-clock cost differs.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from marljax.envs.registry import make_env as _make_jaxmarl_env


class HostBoundSpread:
    def __init__(self, step_cost_s: float = 0.002, **kwargs):
        if step_cost_s < 0:
            raise ValueError(f"env_kwargs.step_cost_s must be >= 0 seconds, got {step_cost_s}")
        self._env = _make_jaxmarl_env("MPE_simple_spread_v3", kwargs)
        self.step_cost_s = float(step_cost_s)

    def __getattr__(self, name):
        return getattr(self._env, name)

    def _host_step(self, token: np.ndarray) -> np.ndarray:
        time.sleep(self.step_cost_s)
        return np.zeros(np.shape(token), np.float32)

    def step(self, key, state, actions):
        obs, state, reward, done, info = self._env.step(key, state, actions)
        # the host call depends on the step's inputs, so it runs once per step, in order
        token = jnp.sum(jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key)
        delay = jax.pure_callback(
            self._host_step,
            jax.ShapeDtypeStruct(jnp.shape(token), jnp.float32),
            token.astype(jnp.float32),
            vmap_method="broadcast_all",
        )
        reward = {a: r + delay for a, r in reward.items()}  # + 0: keeps the call in the program
        return obs, state, reward, done, info


def make_env(**kwargs) -> HostBoundSpread:
    return HostBoundSpread(**kwargs)
