"""MAPPO: the central critic's input per env family and parameter layout (that it learns:
tests/test_defaults_learn.py)."""

import jax
import numpy as np
import pytest

from marljax.algos import mappo
from marljax.algos.ippo import CRITIC_KEY
from marljax.config import load_config
from marljax.envs import EnvAdapter, make_env
from marljax.train.wiring import make_adapter

TINY = [
    "num_envs=2",
    "num_steps=4",
    "ppo.num_minibatches=2",
    "ppo.update_epochs=1",
    "total_timesteps=16",
    "hidden_size=8",
]


@pytest.mark.parametrize(
    "name,kwargs,width,env_fn",
    [
        ("MPE_simple_spread_v3", {}, 3 * 18, False),  # 3 agents x 18 obs, concatenated
        ("MPE_simple_speaker_listener_v4", {}, 3 + 11, False),  # heterogeneous obs, concatenated
        ("overcooked", {}, 2 * 4 * 5 * 26, False),  # image observations, raveled
        ("HeuristicEnemySMAX", {"scenario": "3m"}, None, True),  # SMAX's get_world_state
        ("MPE_simple_facmac_v1", {}, None, True),  # facmac's get_world_state
    ],
)
def test_critic_input_per_env_family(name, kwargs, width, env_fn):
    env = EnvAdapter(make_env(name, kwargs), name)
    assert env.has_world_state == env_fn
    w = mappo.world_state_size(env)
    if width is not None:
        assert w == width
    else:
        _, state = jax.eval_shape(env.env.reset, jax.random.PRNGKey(0))
        leaves = jax.tree.leaves(jax.eval_shape(env.env.get_world_state, state))
        assert w == sum(int(np.prod(x.shape)) for x in leaves)
    cfg = load_config(None, TINY + ["algo=mappo", f"env={name}"])
    trainer = mappo.SPEC.make_train(cfg, env)
    params = jax.eval_shape(trainer.init, jax.random.PRNGKey(0)).learner.params
    # one critic for every agent: input = world state + one-hot over all agents
    assert params[CRITIC_KEY]["params"]["MLP_0"]["Dense_0"]["kernel"].shape == (w + env.num_agents, 8)
    # actors carry no value head of their own
    for g in env.groups:
        assert "critic" not in params[g.name]["params"]


@pytest.mark.parametrize("extra", [[], ["recurrent=true", "gru_hidden_size=8"], ["param_sharing=independent"]])
def test_mappo_trains_with_every_actor_kind(extra):
    cfg = load_config(None, TINY + ["algo=mappo", "env=HeuristicEnemySMAX", "env_kwargs.scenario=3m"] + extra)
    trainer = mappo.SPEC.make_train(cfg, make_adapter(cfg))
    state, metrics = jax.jit(trainer.train)(jax.random.PRNGKey(0))
    assert np.all(np.isfinite(np.asarray(metrics["loss_value"])))
    assert np.asarray(metrics["loss_value"]).max() > 0  # the central critic is trained
