"""reward_shaping.*: the annealed factor, the reward it adds to the training rollout (the logged
returns stay the env's own), and the config errors. Learning with it: test_learns.py (overcooked)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.algos.acting import VecEnv, shaping_schedule
from marljax.config import ConfigError, load_config
from marljax.parallel.layouts import Layout
from marljax.train.wiring import make_adapter
from marljax.types import EpisodeStats

SMALL = ["env=tests.bonus_env:make_env", "num_envs=4", "num_steps=8", "total_timesteps=3200"]  # 100 updates


def test_factor_falls_linearly_over_the_horizon_in_env_steps():
    config = load_config(None, [*SMALL, "reward_shaping.info_key=bonus", "reward_shaping.horizon=1600"])  # 50 updates
    factor = jax.jit(shaping_schedule(config))
    got = [float(factor(jnp.int32(u))) for u in (0, 10, 25, 50, 99)]
    np.testing.assert_allclose(got, [1.0, 0.8, 0.5, 0.0, 0.0], atol=1e-7)
    constant = shaping_schedule(load_config(None, [*SMALL, "reward_shaping.info_key=bonus"]))  # horizon 0
    assert float(constant(jnp.int32(99))) == 1.0
    assert shaping_schedule(load_config(None, SMALL)) is None  # off by default


def test_rollout_step_records_reward_plus_factor_times_bonus_and_counts_the_envs_own():
    """One step of 4 environments: the recorded (training) reward exceeds the env's own, which the
    running episode returns count, by factor * info["bonus"] (agent i: i + 1)."""
    config = load_config(None, [*SMALL, "reward_shaping.info_key=bonus", "reward_shaping.horizon=1600"])
    env = make_adapter(config)
    vec = VecEnv(env, config.num_envs, Layout(), shaping_schedule(config))
    g = env.groups[0]

    def policy(actors, masks, keys):  # every agent takes action 0
        return {g.name: jnp.zeros((config.num_envs, g.size), jnp.int32)}, {}, None

    actors = vec.init_actors(jax.random.PRNGKey(0), None)
    factor = vec.shaping(jnp.int32(20))  # 640 of 1600 env steps: 0.6
    step = jax.jit(partial(vec.step, policy, lambda before, res: res.reward[g.name], factor=factor))
    (actors, _), trained = step((actors, EpisodeStats.zero(env.num_agents)), jax.random.PRNGKey(1))
    added = np.asarray(trained) - np.asarray(actors.ep_return)  # [E, A]
    np.testing.assert_allclose(added, np.broadcast_to(0.6 * np.arange(1, 4), added.shape), rtol=1e-5)


@pytest.mark.parametrize("overrides, field, words", [
    (["reward_shaping.horizon=-1"], "reward_shaping.horizon", ">= 0"),
    (["reward_shaping.info_key=bonus", "mode=async"], "reward_shaping.info_key", "mode=anakin"),
])  # fmt: skip
def test_bad_settings_name_the_field(overrides, field, words):
    with pytest.raises(ConfigError) as info:
        load_config(None, [*SMALL, *overrides])
    assert info.value.field == field and words in str(info.value)


def test_info_key_the_env_lacks_is_refused_before_compiling():
    config = load_config(None, [*SMALL, "reward_shaping.info_key=shaped_reward"])
    with pytest.raises(ConfigError) as info:
        make_adapter(config)
    assert info.value.field == "reward_shaping.info_key"
    assert "no key 'shaped_reward'" in str(info.value) and "its keys: bonus" in str(info.value)
