"""MAPPO: the central critic's input per env family and parameter layout (that it learns:
tests/test_defaults_learn.py)."""

import jax
import numpy as np
import pytest

from marljax.algos import mappo
from marljax.algos.ippo import CRITIC_KEY
from marljax.config import ConfigError, load_config
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
    # one critic for every agent: input = world state (+ the elapsed fraction: critic.time, MPE's family default)
    # + one-hot over all agents
    clock = cfg.section(mappo.CriticConfig).time
    assert clock is name.startswith("MPE_")
    assert params[CRITIC_KEY]["params"]["MLP_0"]["Dense_0"]["kernel"].shape == (w + clock + env.num_agents, 8)
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


def test_with_critic_time_the_critic_sees_each_episode_s_elapsed_fraction_last():
    """critic.time: the world state of each env, then steps / the env's time limit (25 on spread); off (the
    default outside MPE) the critic names no view of its own, so IPPO's build gives it the world state alone."""
    widths = {}
    for on in (False, True):
        cfg = load_config(None, TINY + ["algo=mappo", f"critic.time={str(on).lower()}"])
        env = make_adapter(cfg)
        critic = mappo.central_critic(cfg, env)
        params = jax.eval_shape(critic.init, jax.random.PRNGKey(0))["params"]
        widths[on] = params["MLP_0"]["Dense_0"]["kernel"].shape[0]
    assert widths == {False: 3 * 18 + env.num_agents, True: 3 * 18 + 1 + env.num_agents}
    assert mappo.central_critic(load_config(None, TINY + ["algo=mappo", "critic.time=false"]), env).world is None
    actors = mappo.SPEC.make_train(cfg, env).init(jax.random.PRNGKey(0)).actors
    actors = actors.replace(ep_length=jax.numpy.array([0, 17], jax.numpy.int32))
    assert critic.world is not None
    seen = np.asarray(critic.world(actors))  # [E=2, W + 1]
    np.testing.assert_array_equal(seen[:, :-1], np.asarray(jax.vmap(env.world_state)(actors.env_state, actors.obs)))
    np.testing.assert_allclose(seen[:, -1], [0.0, 17 / 25])


def test_critic_time_on_an_env_without_a_time_limit_is_refused_in_one_line():
    cfg = load_config(None, TINY + ["algo=mappo", "env=hanabi", "critic.time=true"])
    with pytest.raises(
        ConfigError, match=r"^critic.time: hanabi declares no time limit \(max_steps\).*allowed: false$"
    ):
        mappo.central_critic(cfg, make_adapter(cfg))
