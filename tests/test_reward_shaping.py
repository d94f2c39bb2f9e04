"""reward_shaping.*: the annealed factor, the reward it adds to the training rollout (the logged
returns stay the env's own), and the config errors. Learning with it: test_learns.py (overcooked)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.algos.acting import shaping_schedule
from marljax.config import ConfigError, load_config
from marljax.train.wiring import make_adapter, make_trainer

SMALL = ["env=tests.bonus_env:make_env", "num_envs=4", "num_steps=8", "total_timesteps=3200"]  # 100 updates


def test_factor_falls_linearly_over_the_horizon_in_env_steps():
    config = load_config(None, [*SMALL, "reward_shaping.info_key=bonus", "reward_shaping.horizon=1600"])  # 50 updates
    factor = jax.jit(shaping_schedule(config))
    got = [float(factor(jnp.int32(u))) for u in (0, 10, 25, 50, 99)]
    np.testing.assert_allclose(got, [1.0, 0.8, 0.5, 0.0, 0.0], atol=1e-7)
    constant = shaping_schedule(load_config(None, [*SMALL, "reward_shaping.info_key=bonus"]))  # horizon 0
    assert float(constant(jnp.int32(99))) == 1.0
    assert shaping_schedule(load_config(None, SMALL)) is None  # off by default


def test_rollout_reward_is_env_reward_plus_factor_times_bonus():
    """Same parameters, actors and key with and without shaping: the recorded rewards differ by
    factor * info["bonus"] (agent i: i + 1), the episode statistics not at all."""
    on = load_config(None, [*SMALL, "reward_shaping.info_key=bonus", "reward_shaping.horizon=1600"])
    off = load_config(None, SMALL)
    trainers = [make_trainer(c, make_adapter(c)) for c in (on, off)]
    state = trainers[1].init(jax.random.PRNGKey(0))
    update = jnp.int32(20)  # 640 of 1600 env steps: factor 0.6
    (_, shaped), (_, plain) = [
        jax.jit(t.collect)(state.learner.params, state.actors, jax.random.PRNGKey(1), update) for t in trainers
    ]
    group = trainers[0].env.groups[0].name
    bonus = np.arange(1, 4, dtype=np.float32)  # [A]
    added = np.asarray(shaped.batch[group].reward) - np.asarray(plain.batch[group].reward)  # [T, E, A]
    np.testing.assert_allclose(added, np.broadcast_to(0.6 * bonus, added.shape), rtol=1e-5)
    jax.tree.map(np.testing.assert_array_equal, shaped.stats, plain.stats)


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
